//! `mars generate` and `mars speed`: one answer from a real model, streamed, by target-only,
//! strict or MARS decoding through the engine's one decoding loop (a
//! [`Decoder`](mars_engine::Decoder); no drafter for target-only).

use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail, ensure};
use mars_engine::{Choices, DEFAULTS, Method, MethodOutput, Resolved, StopReason, Target};
use mars_model::Llama;
use serde::Serialize;

use crate::args::{self, ChatArgs, DrafterArgs, MessagesArgs, ModelArgs, RuleArgs, SamplingArgs};
use crate::load;

/// How `mars generate` decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MethodArg {
    /// The target alone, one token per forward pass.
    Target,
    /// Speculative decoding, lossless verification (greedy: exactly the target's own tokens).
    Strict,
    /// Speculative decoding, MARS verification (--theta / --rho; default θ = 0.95).
    Mars,
}

impl From<MethodArg> for Method {
    fn from(m: MethodArg) -> Self {
        match m {
            MethodArg::Target => Method::Target,
            MethodArg::Strict => Method::Strict,
            MethodArg::Mars => Method::Mars,
        }
    }
}

/// `mars generate` options.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt.
    #[arg(long, required_unless_present = "messages")]
    pub prompt: Option<String>,
    #[command(flatten)]
    pub chat: ChatArgs,
    #[command(flatten)]
    pub messages: MessagesArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = DEFAULTS.generate_max_tokens)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Decoding: the target alone, or speculative with the drafter below.
    #[arg(long, value_enum, default_value_t = MethodArg::Target)]
    pub method: MethodArg,
    #[command(flatten)]
    pub drafter: DrafterArgs,
    #[command(flatten)]
    pub rule: RuleArgs,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

/// `mars speed` options.
#[derive(Debug, clap::Args)]
pub struct SpeedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt length for the prefill measurement.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens decoded one at a time for the decode measurement.
    #[arg(long, default_value_t = 64)]
    pub decode_tokens: usize,
}

/// Median milliseconds of one forward pass over m = 1, 2, 4, 5, 8, 16 tokens after the prompt
/// (the cache rolled back after each): what a verification pass of k + 1 rows costs.
fn rows_cost(target: &Target, ids: &[u32]) -> Result<Vec<(usize, f64)>> {
    let model = target.model();
    let mut cache = model.new_cache(ids.len() + 16)?;
    model.forward_last(ids, &mut cache)?.read()?;
    let base = cache.len();
    let mut out = Vec::new();
    for m in [1usize, 2, 4, 5, 8, 16] {
        let tokens = &ids[..m];
        let mut ms: Vec<f64> = (0..7)
            .map(|_| -> Result<f64> {
                let start = Instant::now();
                model.forward(tokens, &mut cache)?.read()?;
                let elapsed = start.elapsed().as_secs_f64() * 1e3;
                cache.truncate(base)?;
                Ok(elapsed)
            })
            .collect::<Result<_>>()?;
        ms.sort_by(f64::total_cmp);
        out.push((m, ms[3]));
    }
    Ok(out)
}

/// What one forward pass of one row after `ids` asks of the GPU (the GPU path; `None`
/// elsewhere): launches in all and by kernel kind, and per layer those the layers make (all
/// but the embedding lookup, the final norm and the head).
fn gpu_forward(target: &Target, ids: &[u32]) -> Result<Option<serde_json::Value>> {
    let model = target.model();
    if !matches!(
        model.weight_path(),
        mars_model::WeightPath::GpuBlocks { .. }
    ) {
        return Ok(None);
    }
    let mut cache = model.new_cache(ids.len() + 1)?;
    model
        .forward_last(&ids[..ids.len() - 1], &mut cache)?
        .read()?;
    let before = mars_model::gpu_counts();
    let logits = model.forward(&ids[ids.len() - 1..], &mut cache)?;
    let after = mars_model::gpu_counts();
    logits.read()?;
    let d = after.since(&before);
    let by_kind: serde_json::Map<String, serde_json::Value> = mars_model::GpuKernelKind::ALL
        .iter()
        .map(|k| (k.name().to_string(), d.by_kind[*k as usize].into()))
        .collect();
    let layers = model.config().n_layers;
    // The embedding lookup, the final norm and the head's launches (one per part).
    let outside = d.by_kind[mars_model::GpuKernelKind::Embed as usize]
        + 1
        + model.gpu_head_launches().unwrap_or(1) as u64;
    Ok(Some(serde_json::json!({
        "launches": d.launches,
        "by_kind": by_kind,
        "launches_per_layer": d.launches.saturating_sub(outside) as f64 / layers.max(1) as f64,
        "uploads": d.uploads,
        "upload_bytes": d.upload_bytes,
        // Launches CubeCL made where the launches go direct (a pipeline wgpu refused).
        "left_to_cubecl": d.fallbacks,
    })))
}

/// A field of this process's `/proc/self/status` in bytes (Linux), `None` where it cannot be
/// read: `VmRSS` (all resident memory, the binary's code pages included) or `RssAnon` (resident
/// heap and anonymous maps: the model's weights, caches and buffers, without the ~75 MB binary's
/// pages that a run touches).
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[derive(Debug, Serialize)]
struct GenerateReport {
    prompt_tokens: usize,
    tokens: Vec<u32>,
    text: String,
    tokens_per_second: f64,
    prefill_tokens_per_second: f64,
    stop_reason: &'static str,
    method: Method,
    /// The drafter, for strict and MARS.
    drafter: Option<String>,
    /// Tokens per target forward pass (1 for target-only).
    tau: f64,
    drafted: usize,
    accepted: usize,
    /// Share of the tokens MARS's relaxed rule accepted.
    relaxed_share: f64,
}

/// Decodes `ids` by `method` through the engine's [`Race`](mars_engine::Race), calling
/// `on_text` with each step's text; returns the run and the prefill's milliseconds.
fn decode(
    target: &Target,
    run: &Resolved,
    method: Method,
    draft_model: Option<&Llama>,
    ids: Vec<u32>,
    mut on_text: impl FnMut(&str) -> Result<()>,
) -> Result<(MethodOutput, f64)> {
    pollster::block_on(async {
        let race = target.race_ids(ids, run.max_tokens, draft_model).await?;
        // The first failed write ends the streaming; the run finishes and the error is returned.
        let mut failed = None;
        let out = race
            .run(run, method, |step| {
                if failed.is_none() {
                    failed = on_text(&step.text).err();
                }
            })
            .await?;
        match failed {
            Some(e) => Err(e),
            None => Ok((out, race.prefill_ms())),
        }
    })
}

pub fn run_generate(args: &GenerateArgs) -> Result<()> {
    let method = Method::from(args.method);
    let run = args::resolve([
        args.drafter.choices(),
        args.rule.choices(),
        args.sampling.choices(),
        args.chat.choices(args.messages.messages.is_some()),
        Choices {
            max_tokens: Some(args.max_tokens),
            ..Choices::NONE
        },
    ])?;
    let conversation = args.messages.read()?;
    let (target, open, _) =
        load::target(&args.model.model, args.model.device, &args.model.kernels)?;
    // Target-only never drafts: no draft model to load.
    let draft_model = match method {
        Method::Target => None,
        Method::Strict | Method::Mars => load::draft_model(&target, &run.drafter, &open)?,
    };
    let ids = match (&conversation, &args.prompt) {
        (Some(messages), _) => target.conversation_ids(messages)?,
        (None, Some(prompt)) => target.prompt_ids(prompt, &run)?,
        (None, None) => bail!("--prompt or --messages is required"),
    };
    let prompt_tokens = ids.len();
    let mut out = std::io::stdout().lock();
    let (output, prefill_ms) = decode(&target, &run, method, draft_model.as_ref(), ids, |text| {
        if !args.json {
            write!(out, "{text}")?;
            out.flush()?;
        }
        Ok(())
    })?;
    let summary = output.summary;
    // The first step feeds the prompt's last token, so the prefill ran the others.
    let prefilled = prompt_tokens.saturating_sub(1);
    let report = GenerateReport {
        prompt_tokens,
        text: output.text,
        tokens: output.ids,
        tokens_per_second: summary.tokens_per_second,
        prefill_tokens_per_second: prefilled as f64 / (prefill_ms / 1e3).max(1e-9),
        stop_reason: match summary.stop {
            Some(StopReason::Eos { .. }) => "eos",
            Some(StopReason::ContextLimit { .. }) => "context",
            Some(StopReason::Budget) | None => "max_tokens",
        },
        method,
        drafter: (method != Method::Target).then(|| run.drafter_label()),
        tau: summary.tau,
        drafted: summary.drafted,
        accepted: summary.accepted,
        relaxed_share: summary.relaxed_share,
    };
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        writeln!(out)?;
        let speculation = match &report.drafter {
            Some(drafter) => format!(", {:.2} tokens a target pass, {drafter}", report.tau),
            None => String::new(),
        };
        eprintln!(
            "{} prompt tokens ({:.1} tok/s prefill), {} generated {} ({:.1} tok/s{speculation}), stop: {}",
            report.prompt_tokens,
            report.prefill_tokens_per_second,
            report.tokens.len(),
            match method {
                Method::Target => "target-only",
                Method::Strict => "with strict speculation",
                Method::Mars => "with MARS speculation",
            },
            report.tokens_per_second,
            report.stop_reason
        );
    }
    Ok(())
}

pub fn run_speed(args: &SpeedArgs) -> Result<()> {
    ensure!(
        args.prompt_tokens >= 16 && args.decode_tokens > 0,
        "--prompt-tokens must be at least 16 (the rows-cost measurement reuses the prompt) and \
         --decode-tokens at least 1"
    );
    let (target, open, weights, times) =
        load::target_timed(&args.model.model, args.model.device, &args.model.kernels)?;
    // Greedy (the defaults), no chat template.
    let run = Choices {
        max_tokens: Some(args.decode_tokens),
        chat: Some(false),
        ..Choices::NONE
    }
    .resolve()?;
    // A fixed, ordinary text, repeated to the requested length; one more token than measured,
    // since the loop's first step feeds the prompt's last token.
    let base = target
        .tokenizer()
        .encode("The quick brown fox jumps over the lazy dog. ", false)?;
    let ids: Vec<u32> = base
        .iter()
        .copied()
        .cycle()
        .take(args.prompt_tokens + 1)
        .collect();
    // One untimed run: first-use allocation and kernel compilation on wgpu. Its prompt of up to
    // 18 tokens prefills up to 17 rows, so the prefill's 16-row kernels are compiled here and
    // not inside the timed prefill (on lavapipe compiling them took seconds).
    let warm_up = run.with_max_tokens(2)?;
    let warming = Instant::now();
    decode(
        &target,
        &warm_up,
        Method::Target,
        None,
        ids[..ids.len().min(18)].to_vec(),
        |_| Ok(()),
    )?;
    let warm_up_seconds = warming.elapsed().as_secs_f64();
    let (output, prefill_ms) =
        decode(&target, &run, Method::Target, None, ids.clone(), |_| Ok(()))?;
    let summary = output.summary;
    let rows = rows_cost(&target, &ids)?;
    let forward = gpu_forward(&target, &ids)?;
    let report = serde_json::json!({
        "prompt_tokens": args.prompt_tokens,
        "prefill_tokens_per_second": args.prompt_tokens as f64 / (prefill_ms / 1e3).max(1e-9),
        "decode_tokens": summary.tokens,
        "decode_tokens_per_second": summary.tokens_per_second,
        "forward_ms_by_rows": rows.iter().map(|(m, ms)| (m.to_string(), serde_json::json!(ms))).collect::<serde_json::Map<_, _>>(),
        "matrix_bytes_per_forward": target.model().matrix_bytes(),
        // A first load as a user meets it: the file read and uploaded, then the tuning table's
        // step (a card's timing of the shapes its table lacks, and the forms taken), then the
        // first short run, which compiles the kernels' pipelines.
        "load_seconds": times.load.as_secs_f64(),
        "tune_seconds": times.tune.as_secs_f64(),
        "warm_up_seconds": warm_up_seconds,
        // Decode is bound by reading every weight once per token: the bandwidth it achieved.
        "decode_weight_gb_per_second": target.model().matrix_bytes() as f64 * summary.tokens_per_second / 1e9,
        "weights": weights.name(),
        "device": open.backend,
        "device_chosen": open.chosen,
        "adapter": open.adapter,
        // The adapter's smallest subgroup, where the GPU kernels' partial sums meet through
        // subgroup shuffles (null: workgroup memory, or the CPU).
        "gpu_subgroups": match weights {
            mars_model::WeightPath::GpuBlocks { subgroups, .. } => subgroups,
            _ => None,
        },
        "kv_cache": weights.kv().map(mars_model::KvType::name),
        "threads": weights.threads(),
        "resident_bytes": status_bytes("VmRSS:"),
        "anonymous_resident_bytes": status_bytes("RssAnon:"),
        // The decode's cache: prompt + generated tokens (+ the loop's one spare).
        "kv_cache_bytes": target.model().kv_bytes_per_token()
            .saturating_mul((args.prompt_tokens + args.decode_tokens + 1) as u64),
        // What a decoded token and one forward pass asked of the GPU, counted (GPU path only).
        "gpu": forward.map(|f| {
            let per_token = |v: u64| v as f64 / summary.tokens.max(1) as f64;
            let g = summary.gpu;
            serde_json::json!({
                "per_token": {
                    "launches": per_token(g.launches),
                    "uploads": per_token(g.uploads),
                    "upload_bytes": per_token(g.upload_bytes),
                    "reads": per_token(g.reads),
                    "read_bytes": per_token(g.read_bytes),
                },
                "pipelines_compiled_after_warm_up": g.pipelines,
                "forward_of_one_row": f,
            })
        }),
    });
    println!("{report}");
    let one = rows.first().map_or(1.0, |&(_, ms)| ms);
    let curve: Vec<String> = rows
        .iter()
        .map(|(m, ms)| format!("{m}: {:.2}×", ms / one))
        .collect();
    eprintln!(
        "forward cost by rows, relative to 1 row: {}",
        curve.join(", ")
    );
    eprintln!(
        "decode reads {:.1} MB of weights per token: {:.1} GB/s of weights at {:.1} tok/s",
        target.model().matrix_bytes() as f64 / 1e6,
        target.model().matrix_bytes() as f64 * summary.tokens_per_second / 1e9,
        summary.tokens_per_second
    );
    Ok(())
}
