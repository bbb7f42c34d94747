//! What a run reads back from a model's logits, decided in one place from the run's sampling
//! and what the model's back-end can read ([`mars_model::Reads`]): the target's verification
//! rows, a draft model's chain, a tree drafter's children and the rows a drafter samples from
//! on the host. The decoder and every drafter ask their [`Readback`] instead of testing the
//! sampling settings themselves.

use mars_model::Reads;
use mars_verify::Sampling;

/// One model's readback policy for a run (the target's: the verifier's sampling; a drafter's:
/// its sampler's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Readback {
    sampling: Sampling,
    reads: Reads,
}

/// How rows come back to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowRead {
    /// Each row's `RowSummary` (top-2, and a sampling row's Gumbel-max draw): 40 bytes a row.
    Summaries,
    /// Each row's best k values (`Logits::top_k_rows_async`): all top-k, and top-p after it,
    /// keep, so the verdict is the whole row's.
    TopK(usize),
    /// The rows whole.
    Whole,
}

impl Readback {
    pub(crate) fn new(sampling: Sampling, reads: Reads) -> Self {
        Self { sampling, reads }
    }

    /// The target's rows for verification: summaries where the back-end summarises and a
    /// summary holds what the verdict needs — greedy, or sampling without top-k / top-p over
    /// deterministic drafts (`deterministic_drafts`: prompt lookup, a greedy or GPU-drawn
    /// draft; a sampled draft read to the host needs p(x) / q(x) and the residual over the
    /// whole row); else as [`Readback::host_rows`].
    pub(crate) fn verify_rows(&self, deterministic_drafts: bool) -> RowRead {
        let s = &self.sampling;
        if self.reads.summaries && s.summaries_suffice() && (s.is_greedy() || deterministic_drafts)
        {
            RowRead::Summaries
        } else {
            self.host_rows()
        }
    }

    /// Rows a sampler reads on the host: each row's best k where top-k is set and the back-end
    /// reduces rows (top-p alone needs the row's sorted mass), else whole.
    pub(crate) fn host_rows(&self) -> RowRead {
        match self.sampling.top_k {
            Some(k) if self.reads.top => RowRead::TopK(k as usize),
            _ => RowRead::Whole,
        }
    }

    /// Whether a tree drafter ranks each row's children where the logits are (`2 × branch + 3`
    /// words a row read back): where the back-end reduces rows and no top-k / top-p needs the
    /// rows on the host.
    pub(crate) fn children_on_device(&self) -> bool {
        self.reads.top && self.sampling.summaries_suffice()
    }

    /// Whether a draft model's chain stays on the device, each draft fed to its next forward
    /// there: greedy (top-k / top-p never move an argmax) or drawn by the Gumbel-max rule
    /// where no filter needs the row's sorted mass.
    pub(crate) fn chain_on_device(&self) -> bool {
        self.reads.chain && (self.sampling.is_greedy() || self.sampling.summaries_suffice())
    }

    /// Over a chained draft, the target: `None` where its back-end cannot take the drafts on
    /// the device (the drafts are read and the step runs as any other); `Some(true)` where its
    /// rows are summarised into the same chain (one read for both), `Some(false)` where they
    /// are read after it.
    pub(crate) fn over_chain(&self) -> Option<bool> {
        self.reads.chain.then(|| self.sampling.summaries_suffice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: Reads = Reads {
        summaries: true,
        top: true,
        chain: true,
    };
    const CPU: Reads = Reads {
        summaries: false,
        top: false,
        chain: false,
    };

    fn sampling(temperature: f32, top_k: Option<u32>, top_p: f32) -> Sampling {
        Sampling {
            temperature,
            top_k,
            top_p,
        }
    }

    #[test]
    fn each_read_follows_the_sampling_and_the_back_end() {
        let greedy = sampling(0.0, None, 1.0);
        let drawn = sampling(1.0, None, 1.0);
        let top_k = sampling(1.0, Some(40), 1.0);
        let top_p = sampling(1.0, None, 0.9);
        let gpu = |s| Readback::new(s, GPU);
        // Verification: summaries where they hold the verdict, top-k rows, else whole rows.
        assert_eq!(gpu(greedy).verify_rows(false), RowRead::Summaries);
        assert_eq!(gpu(drawn).verify_rows(true), RowRead::Summaries);
        assert_eq!(gpu(drawn).verify_rows(false), RowRead::Whole);
        assert_eq!(gpu(top_k).verify_rows(true), RowRead::TopK(40));
        assert_eq!(gpu(top_p).verify_rows(true), RowRead::Whole);
        // Greedy with top-k: summaries do not suffice for the settings, the rows are reduced.
        assert_eq!(
            gpu(sampling(0.0, Some(5), 1.0)).verify_rows(true),
            RowRead::TopK(5)
        );
        // Drafters on the device.
        assert!(gpu(greedy).chain_on_device() && gpu(drawn).chain_on_device());
        assert!(gpu(sampling(0.0, Some(5), 1.0)).chain_on_device());
        assert!(!gpu(top_p).chain_on_device());
        assert!(gpu(drawn).children_on_device() && !gpu(top_k).children_on_device());
        assert_eq!(gpu(drawn).over_chain(), Some(true));
        assert_eq!(gpu(top_k).over_chain(), Some(false));
        // Off the GPU every read is of whole rows.
        for s in [greedy, drawn, top_k, top_p] {
            let cpu = Readback::new(s, CPU);
            assert_eq!(cpu.verify_rows(true), RowRead::Whole);
            assert_eq!(cpu.host_rows(), RowRead::Whole);
            assert!(!cpu.chain_on_device() && !cpu.children_on_device());
            assert_eq!(cpu.over_chain(), None);
        }
    }
}
