//! `mars`: the native command line.
//!
//! `mars generate` decodes with a real model; `mars speed` measures prefill and decode;
//! `mars verify` runs one verification step on numbers given as JSON, which makes the verifier
//! inspectable on its own: paste a target's logits and a draft, and see what strict and MARS
//! decide and why.

mod args;
mod compare;
mod eval;
mod generate;
mod load;
mod tune;

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, Subcommand};
use mars_verify::{DraftProbs, Mode, Verdict, Verifier, VerifyConfig, VerifyInput};
use rand_core::SeedableRng;
use serde::Deserialize;

/// See the dependency's comment in Cargo.toml: resident memory after loading.
#[cfg(all(unix, not(target_arch = "wasm32")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "mars",
    version,
    about = "Speculative decoding with strict and MARS verification"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Target-only vs strict vs MARS speculative decoding on the same prompts, side by side.
    Compare(compare::CompareArgs),
    /// `compare` over a prompt file per category: markdown table, JSON and SVG plot.
    Bench(compare::BenchArgs),
    /// Task accuracy of target-only, strict and MARS decoding: `mars eval humaneval`.
    #[command(subcommand)]
    Eval(eval::EvalTask),
    /// Generate text from a GGUF model, streaming it: target-only (the default), or
    /// speculative with strict or MARS verification (`--method`, `--draft`, `--k`, `--tree`).
    Generate(generate::GenerateArgs),
    /// Measure target-only prefill and decode speed.
    Speed(generate::SpeedArgs),
    /// Write the project's tiny random-weight test model (2 layers, byte vocabulary) as GGUF.
    #[command(hide = true)]
    TinyModel {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
        /// Seed of the random weights.
        #[arg(long, default_value_t = 5)]
        seed: u64,
    },
    /// Write a layer subset of a GGUF model as its own GGUF (a draft model file).
    ExtractLayers(ExtractArgs),
    /// Time a model's matrix groups on the GPU in every form and record the fastest for this
    /// adapter (later loads on it use them; a GPU's first load does this for what is missing).
    Tune(tune::TuneArgs),
    /// Verify one speculative step given as JSON and print the verdict.
    ///
    /// Input: {"target_logits": [[...k+1 rows...]], "draft_tokens": [...k ids...],
    /// "draft_probs": [[...k rows...]] (optional; omitted = one-hot)}. A null logit is −inf
    /// (a masked token), since JSON has no infinities.
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
struct ExtractArgs {
    /// Source GGUF model.
    #[arg(long)]
    model: PathBuf,
    /// Layers to keep: `first:N`, `every:S`, or a list such as `0-7,29`.
    #[arg(long)]
    layers: String,
    /// Output GGUF file.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// JSON file with the step, or - for standard input.
    #[arg(long, short)]
    input: PathBuf,
    /// The rule: strict unless --theta or --rho is given.
    #[command(flatten)]
    rule: args::RuleArgs,
    #[command(flatten)]
    sampling: args::SamplingArgs,
    /// Print the verdict as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    target_logits: Vec<Vec<Option<f32>>>,
    draft_tokens: Vec<u32>,
    #[serde(default)]
    draft_probs: Option<Vec<Vec<f32>>>,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        // No arguments: the main job, the comparison on the default model.
        None => run_default(),
        Some(Command::Compare(args)) => compare::run_compare(&args),
        Some(Command::Bench(args)) => compare::run_bench(&args),
        Some(Command::Eval(task)) => eval::run_eval(&task),
        Some(Command::Generate(args)) => generate::run_generate(&args),
        Some(Command::Speed(args)) => generate::run_speed(&args),
        Some(Command::Tune(args)) => tune::run_tune(&args),
        Some(Command::Verify(args)) => run_verify(&args),
        Some(Command::ExtractLayers(args)) => run_extract(&args),
        Some(Command::TinyModel { out, seed }) => {
            std::fs::write(&out, mars_model::tiny::tiny_gguf(seed)?)
                .with_context(|| format!("writing {}", out.display()))
        }
    }
}

/// `cargo run --release` with no arguments: a preset of the engine's where it beats plain
/// decoding on the device `--device auto` picks. The Qwen2.5-Coder pair (the draft model, k and
/// vocabulary limit its benchmark measured fastest) where it is in the cache and the packed
/// kernels run AVX-512 VNNI, where a 4-row pass costs little more than one row (1.56× plain
/// decoding on coding); else SmolLM2-135M with prompt lookup over copy-and-edit prompts
/// (1.16–1.53×): on an AVX2 CPU the pair's 4-row pass costs 2.3× one row and its race came out
/// 0.76–0.95× plain decoding, on an H200 it projects to 0.67× (docs/performance.md).
fn run_default() -> Result<()> {
    let (device, _) = pollster::block_on(mars_engine::Backend::auto());
    let isa = mars_kernels::Isa::detect();
    let pair = args::pair_in_cache();
    let pays = device == mars_engine::Backend::Cpu && isa == mars_kernels::Isa::Avx512;
    let smollm = args::model_dir().join(args::DEFAULT_MODEL_FILE);
    let pair = match pair {
        Some((target, draft)) if !pays && smollm.is_file() => {
            eprintln!(
                "the pair is in the cache, but its draft model is slower than plain decoding on \
                 this device ({} kernels on {}): racing prompt lookup on SmolLM2 instead; the \
                 pair races with `mars compare --model {} --draft model:{} --k 3 --draft-vocab \
                 32768 --chat --prompt ...`",
                isa.name(),
                device.name(),
                target.display(),
                draft.display()
            );
            None
        }
        pair => pair,
    };
    let (preset_id, model, draft) = match pair {
        Some((target, draft)) => {
            eprintln!(
                "comparing on the pair in the cache: target {}, draft {}",
                target.display(),
                draft.display()
            );
            ("qwen-coder", target, Some(draft.display().to_string()))
        }
        None => ("smollm-lookup", args::model_or_default(None)?, None),
    };
    let preset = mars_engine::Preset::by_id(preset_id)
        .with_context(|| format!("internal: no preset {preset_id}"))?;
    eprintln!("preset: {} ({})", preset.name, preset.what);
    let run = preset.choices(draft.as_deref())?.resolve()?;
    let runner = compare::Runner::new(
        model,
        mars_engine::Backend::Auto,
        &args::KernelArgs::default(),
        run,
    )?;
    // The preset's own prompts: the pair on coding, where it was measured (on open chat strict
    // came out below plain decoding in two runs of three; `--prompt` takes any other).
    let prompts = compare::prompts::plain(preset.prompts);
    compare::compare(&runner, &prompts, false)
}

fn run_extract(args: &ExtractArgs) -> Result<()> {
    let bytes =
        std::fs::read(&args.model).with_context(|| format!("reading {}", args.model.display()))?;
    let g = mars_formats::Gguf::parse(&bytes)
        .with_context(|| format!("parsing {}", args.model.display()))?;
    let n_layers = mars_model::LlamaConfig::from_gguf(&g)?.n_layers;
    let spec: mars_formats::LayerSpec = args.layers.parse()?;
    let layers = spec.layers(n_layers)?;
    let out = g.with_layers(&layers)?;
    std::fs::write(&args.out, &out).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!(
        "wrote {} ({} of {n_layers} layers: {layers:?}, {} bytes)",
        args.out.display(),
        layers.len(),
        out.len()
    );
    Ok(())
}

fn run_verify(args: &VerifyArgs) -> Result<()> {
    let text = if args.input.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the step from stdin")?;
        text
    } else {
        std::fs::read_to_string(&args.input)
            .with_context(|| format!("reading {}", args.input.display()))?
    };
    let step: StepFile = serde_json::from_str(&text).context("parsing the step JSON")?;
    let Some(vocab) = step.target_logits.first().map(Vec::len) else {
        bail!("target_logits is empty: it needs k + 1 rows");
    };
    for (row, values) in step.target_logits.iter().enumerate() {
        ensure!(
            values.len() == vocab,
            "target_logits[{row}] has {} values, target_logits[0] has {vocab}",
            values.len()
        );
    }
    let logits: Vec<f32> = step
        .target_logits
        .iter()
        .flatten()
        .map(|v| v.unwrap_or(f32::NEG_INFINITY))
        .collect();
    let q: Option<Vec<f32>> = step.draft_probs.map(|rows| rows.concat());
    let input = VerifyInput {
        target_logits: &logits,
        vocab,
        draft_tokens: &step.draft_tokens,
        draft_probs: q.as_deref().map_or(DraftProbs::OneHot, DraftProbs::Full),
    };
    let config = VerifyConfig {
        sampling: args.sampling.sampling(),
        mode: Mode::resolve(args.rule.theta, args.rule.rho, Mode::Strict)?,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.sampling.seed);
    let verdict = Verifier::new(config)?.verify(&input, &mut rng)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdict)?);
    } else {
        print_verdict(&config, &verdict, step.draft_tokens.len());
    }
    Ok(())
}

fn print_verdict(config: &VerifyConfig, verdict: &Verdict, k: usize) {
    println!("rule: {:?}, sampling: {:?}", config.mode, config.sampling);
    println!(
        "pos  draft  decision          relaxed  top1 (p)          top2 (p)          z2/z1    p2/p1"
    );
    for (i, r) in verdict.positions.iter().enumerate() {
        let m = &r.margin;
        let top2 = m
            .top2
            .map_or("-".to_string(), |c| format!("{} ({:.4})", c.token, c.prob));
        let ratio = m.logit_ratio.map_or("-".to_string(), |x| format!("{x:.4}"));
        println!(
            "{i:<4} {:<6} {:<17} {:<8} {:<17} {:<17} {ratio:<8} {:.4}",
            r.draft_token,
            format!("{:?}", r.decision),
            r.relaxed,
            format!("{} ({:.4})", m.top1.token, m.top1.prob),
            top2,
            m.prob_ratio,
        );
    }
    println!(
        "accepted {} of {k}; next token {} ({:?})",
        verdict.accepted, verdict.next.token, verdict.next.kind
    );
    let l = &verdict.ledger;
    println!(
        "ledger: {} relaxed positions, {} relaxed accepts, distance {:.6}",
        l.relaxed_positions, l.relaxed_accepts, l.distance
    );
}
