//! `mars compare` and `mars bench`: target-only, strict and MARS decoding of the same prompts
//! with the same drafter and seed, measured in one process, printed side by side.
//!
//! This file runs them; `prompts` reads prompt files, `report` lays out tables and text,
//! `plot` draws bench.svg.

mod plot;
pub(crate) mod prompts;
pub(crate) mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use mars_engine::{
    Backend, Choices, DEFAULTS, Method, MethodOutput, Race, Resolved, RunSummary, Target,
};
use mars_model::{Llama, WeightPath};
use mars_verify::{Mode, Sampling};
use serde::Serialize;

use crate::args::{self, DrafterArgs, RuleArgs, SamplingArgs};
use crate::load;
use prompts::{Prompt, Selection};

/// Settings shared by `compare` and `bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Target GGUF model (default: SmolLM2-135M-Instruct in the model cache).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Where the model runs: auto takes a GPU adapter where there is one (the run's first
    /// lines say which and why), else the CPU.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub device: Backend,
    #[command(flatten)]
    pub kernels: args::KernelArgs,
    #[command(flatten)]
    pub drafter: DrafterArgs,
    #[command(flatten)]
    pub rule: RuleArgs,
    /// Sampling, the same for every method.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Only prompts of this category.
    #[arg(long)]
    pub category: Option<String>,
    /// At most this many prompts (per category with `mars bench`).
    #[arg(long)]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub chat: args::ChatArgs,
    /// Most tokens generated per prompt and method.
    #[arg(long, default_value_t = DEFAULTS.max_tokens)]
    pub max_tokens: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// `mars compare` options.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// One prompt.
    #[arg(long, conflicts_with = "prompts")]
    pub prompt: Option<String>,
    /// JSONL prompts: Spec-Bench lines (`turns`, `category`; the first turn is used) or
    /// `{"prompt": ...}` lines. Without this or --prompt: three built-in chat prompts.
    #[arg(long, conflicts_with = "messages")]
    pub prompts: Option<PathBuf>,
    #[command(flatten)]
    pub messages: args::MessagesArgs,
}

/// `mars bench` options: `compare` per category, written as markdown, JSON and SVG.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// JSONL prompts with categories (default: Spec-Bench in the data cache, written by
    /// `bash tests/fetch-spec-bench.sh`).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Directory for bench.md, bench.json and bench.svg.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

/// One method's output on one prompt (the ids, the visible text, the run's totals) and how
/// much of it equals target-only's.
#[derive(Debug, Clone, Serialize)]
pub struct MethodRun {
    #[serde(flatten)]
    output: MethodOutput,
    /// Share of positions equal to target-only's output.
    agreement: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptResult {
    prompt: String,
    category: Option<String>,
    prompt_tokens: usize,
    target: MethodRun,
    strict: MethodRun,
    mars: MethodRun,
}

/// Totals of one method over many prompts: the merged run summaries, the speedup over
/// target-only, and the mean agreement.
#[derive(Debug, Clone, Serialize)]
pub struct MethodTotal {
    #[serde(flatten)]
    summary: RunSummary,
    speedup: f64,
    agreement: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    prompts: usize,
    target: MethodTotal,
    strict: MethodTotal,
    mars: MethodTotal,
}

/// What the run used, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    model: String,
    drafter: String,
    k: usize,
    mars: Mode,
    sampling: Sampling,
    seed: u64,
    max_tokens: usize,
    chat: bool,
    /// The system message before each user turn, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    /// Where the target ran, and why where `--device auto` chose it.
    device: Backend,
    device_chosen: Option<String>,
}

/// Share of positions, over the longer output, where both outputs have the same token.
fn agreement(a: &[u32], b: &[u32]) -> f64 {
    let longer = a.len().max(b.len());
    if longer == 0 {
        return 1.0;
    }
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / longer as f64
}

/// The loaded target, the draft model if the drafter names one, and the resolved settings.
pub(crate) struct Runner {
    pub(crate) target: Target,
    draft_model: Option<Llama>,
    pub(crate) run: Resolved,
    /// The device and matrix path the target runs on.
    pub(crate) backend: Backend,
    pub(crate) weights: WeightPath,
    settings: Settings,
}

impl Runner {
    /// Resolves `compare` / `bench` flags and loads what they name; `needs_chat` where the
    /// prompts are a conversation.
    pub(crate) fn from_args(common: &CommonArgs, needs_chat: bool) -> Result<Self> {
        let model = args::model_or_default(common.model.as_ref())?;
        let run = args::resolve([
            common.drafter.choices(),
            common.rule.choices(),
            common.sampling.choices(),
            common.chat.choices(needs_chat),
            Choices {
                max_tokens: Some(common.max_tokens),
                ..Choices::NONE
            },
        ])?;
        Self::new(model, common.device, &common.kernels, run)
    }

    /// Loads `model` (and the draft model `run` names) on `backend` for runs with `run`.
    pub(crate) fn new(
        model: PathBuf,
        backend: Backend,
        kernels: &args::KernelArgs,
        run: Resolved,
    ) -> Result<Self> {
        let (target, open, weights) = load::target(&model, backend, kernels)?;
        let draft_model = load::draft_model(&target, &run.drafter, &open)?;
        let settings = Settings {
            model: model.display().to_string(),
            drafter: run.drafter_label(),
            k: run.shape.k,
            mars: run.mars,
            sampling: run.sampling,
            seed: run.seed,
            max_tokens: run.max_tokens,
            chat: run.chat,
            system: run.system.clone(),
            device: open.backend,
            device_chosen: open.chosen.clone(),
        };
        Ok(Self {
            target,
            draft_model,
            run,
            backend: open.backend,
            weights,
            settings,
        })
    }

    /// The prompt's prefill, from which every method runs ([`Race::run`]).
    pub(crate) fn race(&self, prompt: &str) -> Result<Race<'_>> {
        Ok(pollster::block_on(self.target.race(
            prompt,
            &self.run,
            self.draft_model.as_ref(),
        ))?)
    }

    fn run_prompt(&self, prompt: &Prompt) -> Result<PromptResult> {
        let race = match &prompt.messages {
            Some(messages) => pollster::block_on(self.target.race_conversation(
                messages,
                &self.run,
                self.draft_model.as_ref(),
            ))?,
            None => self.race(&prompt.text)?,
        };
        let mut runs: Vec<MethodRun> = Vec::with_capacity(3);
        for method in [Method::Target, Method::Strict, Method::Mars] {
            let output = pollster::block_on(race.run(&self.run, method, |_| {}))?;
            let agreement = runs
                .first()
                .map_or(1.0, |target| agreement(&target.output.ids, &output.ids));
            runs.push(MethodRun { output, agreement });
        }
        let [target, strict, mars] = <[MethodRun; 3]>::try_from(runs)
            .map_err(|_| anyhow::anyhow!("internal: three runs expected"))?;
        Ok(PromptResult {
            prompt: prompt.text.clone(),
            category: prompt.category.clone(),
            prompt_tokens: race.prompt_ids().len(),
            target,
            strict,
            mars,
        })
    }

    /// A short untimed run so that first-use allocation is not charged to the first method.
    pub(crate) fn warm_up(&self) -> Result<()> {
        let ids = self.target.tokenizer().encode("Hello", false)?;
        let race = pollster::block_on(self.target.race_ids(ids, 8, self.draft_model.as_ref()))?;
        let run = self.run.with_max_tokens(8)?;
        pollster::block_on(race.run(&run, Method::Strict, |_| {}))?;
        Ok(())
    }

    fn run_all(&self, prompts: &[Prompt]) -> Result<Vec<PromptResult>> {
        self.warm_up()?;
        let bar = ProgressBar::new(prompts.len() as u64).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} prompts, eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message("target / strict / MARS");
        if prompts.len() == 1 {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let mut results = Vec::with_capacity(prompts.len());
        for p in prompts {
            results.push(self.run_prompt(p)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(results)
    }
}

/// Totals per method over `results`, through the engine's one [`RunSummary::merge`].
fn totals(results: &[PromptResult]) -> Totals {
    let total = |pick: fn(&PromptResult) -> &MethodRun| {
        let mut summary = RunSummary::empty(None);
        let mut agreement = 0.0;
        for r in results {
            summary.merge(&pick(r).output.summary);
            agreement += pick(r).agreement / results.len().max(1) as f64;
        }
        summary.drafter = results
            .first()
            .and_then(|r| pick(r).output.summary.drafter.clone());
        MethodTotal {
            summary,
            speedup: 0.0,
            agreement,
        }
    };
    let mut t = Totals {
        prompts: results.len(),
        target: total(|r| &r.target),
        strict: total(|r| &r.strict),
        mars: total(|r| &r.mars),
    };
    let base = t.target.summary.tokens_per_second;
    for m in [&mut t.target, &mut t.strict, &mut t.mars] {
        m.speedup = if base > 0.0 {
            m.summary.tokens_per_second / base
        } else {
            0.0
        };
    }
    t
}

pub fn run_compare(args: &CompareArgs) -> Result<()> {
    let c = &args.common;
    let conversation = args.messages.read()?;
    let needs_chat = conversation.is_some();
    let prompts = match (conversation, &args.prompt, &args.prompts) {
        (Some(messages), _, _) => vec![Prompt::conversation(messages)],
        (None, Some(text), _) => vec![Prompt::plain(text)],
        (None, None, Some(path)) => prompts::read(
            path,
            &Selection {
                category: c.category.as_deref(),
                limit: c.limit,
                per_category: false,
            },
        )?,
        (None, None, None) => prompts::default_prompts(),
    };
    let runner = Runner::from_args(c, needs_chat)?;
    compare(&runner, &prompts, c.json)
}

/// Runs every method on `prompts` and prints them side by side (three prompts or fewer) and
/// the totals' table, or JSON.
pub fn compare(runner: &Runner, prompts: &[Prompt], json: bool) -> Result<()> {
    let results = runner.run_all(prompts)?;
    let t = totals(&results);
    if json {
        let json =
            serde_json::json!({ "settings": runner.settings, "prompts": results, "total": t });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    if results.len() <= 3 {
        for r in &results {
            println!("{}", report::side_by_side(r, runner.run.mars));
        }
    }
    print!("{}", report::table(&runner.settings, &t));
    println!(
        "tok/s counts decoding only (prompt processing excluded), one process, methods run one \
         after another on each prompt; agreement = share of tokens identical to target-only."
    );
    Ok(())
}

pub fn run_bench(args: &BenchArgs) -> Result<()> {
    let c = &args.common;
    let path = args::prompts_or_spec_bench(args.prompts.as_ref())?;
    let prompts = prompts::read(
        &path,
        &Selection {
            category: c.category.as_deref(),
            limit: c.limit,
            per_category: true,
        },
    )?;
    let runner = Runner::from_args(c, false)?;
    let results = runner.run_all(&prompts)?;
    let mut by_cat: BTreeMap<String, Vec<PromptResult>> = BTreeMap::new();
    for r in &results {
        by_cat
            .entry(r.category.clone().unwrap_or_else(|| "-".into()))
            .or_default()
            .push(r.clone());
    }
    let cats: Vec<(String, Totals)> = by_cat
        .iter()
        .map(|(c, rs)| (c.clone(), totals(rs)))
        .collect();
    let all = totals(&results);
    let md = report::bench_markdown(&runner.settings, &cats, &all);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let write = |name: &str, text: &str| -> Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("bench.md", &md)?;
    let json = serde_json::json!({
        "settings": runner.settings,
        "categories": cats.iter().cloned().collect::<BTreeMap<_, _>>(),
        "total": all,
        "prompts": results,
    });
    write("bench.json", &serde_json::to_string_pretty(&json)?)?;
    plot::plot(&args.out.join("bench.svg"), &cats, &runner.settings)?;
    print!("{md}");
    println!(
        "wrote {}/bench.md, bench.json, bench.svg",
        args.out.display()
    );
    Ok(())
}
