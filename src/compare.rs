//! `mars compare` and `mars bench`: target-only, strict and MARS decoding of the same prompts
//! with the same drafter and seed, measured in one process, printed side by side.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use mars_engine::{
    AnyDrafter, DecodeConfig, Decoder, LayerSpec, ModelDrafter, NgramDrafter, Prefill, RunSummary,
    check_same_tokenizer,
};
use mars_formats::Tokenizer;
use mars_model::Llama;
use mars_verify::{DEFAULT_THETA, Mode, Sampling, VerifyConfig};
use serde::Serialize;

use crate::generate::{DeviceArg, Loaded, ModelArgs, SamplingArgs, load, prompt_ids};

/// The layer subset the layer-skip drafter uses by default on SmolLM2-135M (30 layers), chosen
/// by measuring `mars compare` over Spec-Bench prompts (see the README).
pub const DEFAULT_DRAFT_LAYERS: &str = "first:24";

/// The default model's file name in the model cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// `mars compare` options.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// Target GGUF model (default: SmolLM2-135M-Instruct in the model cache).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Draft model: a GGUF path, or `ngram` for prompt lookup.
    #[arg(long, conflicts_with = "draft_layers")]
    pub draft: Option<String>,
    /// Layer-skip self-drafter: `first:N`, `every:S`, or a list such as `0-7,29` (the default
    /// drafter, with the default layers).
    #[arg(long)]
    pub draft_layers: Option<String>,
    /// Draft tokens per step.
    #[arg(long, default_value_t = 4)]
    pub k: usize,
    /// MARS paper mode threshold (default 0.9).
    #[arg(long, conflicts_with = "rho")]
    pub theta: Option<f32>,
    /// MARS margin mode threshold on p2/p1 instead of the paper's logit ratio.
    #[arg(long)]
    pub rho: Option<f32>,
    /// Sampling, the same for every method.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Backend.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// One prompt.
    #[arg(long, conflicts_with = "prompts")]
    pub prompt: Option<String>,
    /// JSONL prompts: Spec-Bench lines (`turns`, `category`; the first turn is used) or
    /// `{"prompt": ...}` lines.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Only prompts of this category.
    #[arg(long)]
    pub category: Option<String>,
    /// At most this many prompts (per category with `mars bench`).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Wrap each prompt as a user turn with the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Most tokens generated per prompt and method.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// `mars bench` options: `compare` per category, written as markdown, JSON and SVG.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub compare: CompareArgs,
    /// Directory for bench.md, bench.json and bench.svg.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

/// Where the model cache lives: `$MARS_MODEL_DIR`, else `~/.cache/mars/models`.
pub fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MARS_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("mars").join("models")
}

fn default_model() -> Result<PathBuf> {
    let path = model_dir().join(DEFAULT_MODEL_FILE);
    if path.is_file() {
        return Ok(path);
    }
    bail!(
        "the default model is not in the cache: {} is missing.\n\
         Fetch it with the README's setup command (bash tests/fetch-model.sh fetches just the \
         model), or pass --model PATH.",
        path.display()
    )
}

#[derive(Debug, Clone, Serialize)]
struct Prompt {
    text: String,
    category: Option<String>,
}

fn read_prompts(args: &CompareArgs, per_category: bool) -> Result<Vec<Prompt>> {
    if let Some(text) = &args.prompt {
        return Ok(vec![Prompt {
            text: text.clone(),
            category: None,
        }]);
    }
    let Some(path) = &args.prompts else {
        // The default job: three short chat prompts of different kinds.
        return Ok([
            "Write a short poem about the sea.",
            "Explain in two sentences why the sky is blue.",
            "List three tips for writing clean Python code.",
        ]
        .iter()
        .map(|t| Prompt {
            text: (*t).to_string(),
            category: None,
        })
        .collect());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .or_else(|| {
                v.get("turns")
                    .and_then(|t| t.get(0))
                    .and_then(|t| t.as_str())
            })
            .with_context(|| {
                format!(
                    "{}:{}: needs \"prompt\" or \"turns\": [first, ...]",
                    path.display(),
                    i + 1
                )
            })?;
        let category = v
            .get("category")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        if let Some(want) = &args.category
            && category.as_deref() != Some(want.as_str())
        {
            continue;
        }
        if let Some(limit) = args.limit {
            let key = if per_category {
                category.clone().unwrap_or_default()
            } else {
                String::new()
            };
            let n = per.entry(key).or_default();
            if *n >= limit {
                continue;
            }
            *n += 1;
        }
        out.push(Prompt {
            text: prompt.to_string(),
            category,
        });
    }
    ensure!(
        !out.is_empty(),
        "no prompts selected from {}",
        path.display()
    );
    Ok(out)
}

/// The drafter, built fresh for every run (its cache starts empty).
enum DraftSource {
    Layers(LayerSpec, Vec<usize>),
    Model(Box<Llama>, String),
    Ngram,
}

impl DraftSource {
    fn from_args(args: &CompareArgs, target: &Loaded) -> Result<Self> {
        match (&args.draft, &args.draft_layers) {
            (Some(d), _) if d == "ngram" => Ok(Self::Ngram),
            (Some(path), _) => {
                let draft = load(&ModelArgs {
                    model: PathBuf::from(path),
                    device: args.device,
                })?;
                check_same_tokenizer(&target.tokenizer, &draft.tokenizer)?;
                Ok(Self::Model(
                    Box::new(draft.model),
                    format!("draft model {path}"),
                ))
            }
            (None, spec) => {
                let spec: LayerSpec = spec.as_deref().unwrap_or(DEFAULT_DRAFT_LAYERS).parse()?;
                let layers = spec.layers(target.model.config().n_layers)?;
                Ok(Self::Layers(spec, layers))
            }
        }
    }

    fn build(&self, target: &Llama, capacity: usize, sampling: Sampling) -> Result<AnyDrafter> {
        let vocab = target.config().vocab_size;
        Ok(match self {
            Self::Layers(spec, layers) => AnyDrafter::Model(Box::new(ModelDrafter::new(
                target.with_layers(layers)?,
                capacity,
                sampling,
                vocab,
                format!("layer skip {spec}"),
            )?)),
            Self::Model(model, label) => AnyDrafter::Model(Box::new(ModelDrafter::new(
                (**model).clone(),
                capacity,
                sampling,
                vocab,
                label.clone(),
            )?)),
            Self::Ngram => AnyDrafter::Ngram(NgramDrafter::default()),
        })
    }

    fn label(&self) -> String {
        match self {
            Self::Layers(spec, _) => format!("layer skip {spec}"),
            Self::Model(_, label) => label.clone(),
            Self::Ngram => "prompt lookup".into(),
        }
    }
}

/// One method's output on one prompt.
#[derive(Debug, Clone, Serialize)]
struct MethodRun {
    tokens: Vec<u32>,
    text: String,
    tokens_per_second: f64,
    tau: f64,
    relaxed: usize,
    relaxed_share: f64,
    nll: f64,
    agreement: f64,
    summary: RunSummary,
}

#[derive(Debug, Clone, Serialize)]
struct PromptResult {
    prompt: String,
    category: Option<String>,
    prompt_tokens: usize,
    target: MethodRun,
    strict: MethodRun,
    mars: MethodRun,
}

/// Totals of one method over many prompts.
#[derive(Debug, Clone, Default, Serialize)]
struct MethodTotal {
    tokens: usize,
    tokens_per_second: f64,
    speedup: f64,
    tau: f64,
    relaxed: usize,
    relaxed_share: f64,
    nll: f64,
    agreement: f64,
    ledger_distance: f64,
    seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Totals {
    prompts: usize,
    target: MethodTotal,
    strict: MethodTotal,
    mars: MethodTotal,
}

#[derive(Debug, Clone, Serialize)]
struct Settings {
    model: String,
    drafter: String,
    k: usize,
    mars: Mode,
    sampling: Sampling,
    seed: u64,
    max_tokens: usize,
    chat: bool,
}

/// Share of positions, over the longer output, where both outputs have the same token.
fn agreement(a: &[u32], b: &[u32]) -> f64 {
    let longer = a.len().max(b.len());
    if longer == 0 {
        return 1.0;
    }
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / longer as f64
}

struct Runner<'a> {
    loaded: &'a Loaded,
    tokenizer: Arc<Tokenizer>,
    draft: DraftSource,
    sampling: Sampling,
    mars: Mode,
    args: &'a CompareArgs,
}

impl Runner<'_> {
    fn run_method(
        &self,
        prefill: &Prefill,
        capacity: usize,
        mode: Option<Mode>,
    ) -> Result<(Vec<u32>, RunSummary)> {
        let target = &self.loaded.model;
        let (drafter, k, mode) = match mode {
            None => (None, 0, Mode::Strict),
            Some(mode) => (
                Some(self.draft.build(target, capacity, self.sampling)?),
                self.args.k,
                mode,
            ),
        };
        let config = DecodeConfig {
            k,
            verify: VerifyConfig {
                sampling: self.sampling,
                mode,
            },
            max_tokens: self.args.max_tokens,
            seed: self.args.sampling.seed,
            capacity: Some(capacity),
        };
        pollster::block_on(async {
            let mut dec = Decoder::from_prefill(
                target,
                self.tokenizer.clone(),
                drafter,
                &config,
                prefill.clone(),
            )
            .await?;
            let summary = dec.run(|_| {}).await?;
            Ok((dec.generated().to_vec(), summary))
        })
    }

    fn run_prompt(&self, prompt: &Prompt) -> Result<PromptResult> {
        let ids = prompt_ids(self.loaded, &prompt.text, self.args.chat)?;
        ensure!(!ids.is_empty(), "the prompt tokenizes to nothing");
        let capacity = ids
            .len()
            .checked_add(self.args.max_tokens)
            .context("--max-tokens overflows")?
            .min(self.loaded.model.config().context_length);
        let prefill = pollster::block_on(Prefill::new(&self.loaded.model, &ids, capacity))?;
        let mut runs = Vec::with_capacity(3);
        for mode in [None, Some(Mode::Strict), Some(self.mars)] {
            let (tokens, summary) = self.run_method(&prefill, capacity, mode)?;
            let visible: Vec<u32> = tokens
                .iter()
                .copied()
                .filter(|t| !self.tokenizer.stop_ids.contains(t))
                .collect();
            runs.push(MethodRun {
                text: self.tokenizer.decode(&visible)?,
                tokens_per_second: summary.tokens_per_second,
                tau: summary.tau,
                relaxed: summary.relaxed,
                relaxed_share: summary.relaxed_share,
                nll: summary.nll,
                agreement: 1.0,
                tokens,
                summary,
            });
        }
        let reference = runs[0].tokens.clone();
        for r in &mut runs[1..] {
            r.agreement = agreement(&reference, &r.tokens);
        }
        let mut runs = runs.into_iter();
        let (Some(target), Some(strict), Some(mars)) = (runs.next(), runs.next(), runs.next())
        else {
            bail!("internal: three runs expected");
        };
        Ok(PromptResult {
            prompt: prompt.text.clone(),
            category: prompt.category.clone(),
            prompt_tokens: ids.len(),
            target,
            strict,
            mars,
        })
    }

    /// A short untimed run so that first-use allocation is not charged to the first method.
    fn warm_up(&self) -> Result<()> {
        let ids = self.loaded.tokenizer.encode("Hello", false)?;
        let prefill = pollster::block_on(Prefill::new(&self.loaded.model, &ids, ids.len() + 8))?;
        self.run_method(&prefill, ids.len() + 8, Some(Mode::Strict))?;
        Ok(())
    }
}

fn totals(results: &[PromptResult]) -> Totals {
    let total = |pick: &dyn Fn(&PromptResult) -> &MethodRun| {
        let mut t = MethodTotal::default();
        let (mut forwards, mut nll_sum, mut ms) = (0usize, 0.0, 0.0);
        for r in results {
            let m = pick(r);
            t.tokens += m.summary.tokens;
            t.relaxed += m.summary.relaxed;
            forwards += m.summary.target_forwards;
            nll_sum += m.summary.nll * m.summary.tokens as f64;
            ms += m.summary.draft_ms + m.summary.verify_ms;
            t.agreement += m.agreement / results.len() as f64;
            t.ledger_distance += m.summary.ledger.distance;
        }
        t.seconds = ms / 1e3;
        t.tokens_per_second = if ms > 0.0 {
            t.tokens as f64 / t.seconds
        } else {
            0.0
        };
        t.tau = t.tokens as f64 / forwards.max(1) as f64;
        t.relaxed_share = t.relaxed as f64 / t.tokens.max(1) as f64;
        t.nll = nll_sum / t.tokens.max(1) as f64;
        t
    };
    let mut target = total(&|r| &r.target);
    let mut strict = total(&|r| &r.strict);
    let mut mars = total(&|r| &r.mars);
    let base = target.tokens_per_second;
    for t in [&mut target, &mut strict, &mut mars] {
        t.speedup = if base > 0.0 {
            t.tokens_per_second / base
        } else {
            0.0
        };
    }
    Totals {
        prompts: results.len(),
        target,
        strict,
        mars,
    }
}

struct Setup {
    loaded: Loaded,
    draft: DraftSource,
    sampling: Sampling,
    mars: Mode,
    model: PathBuf,
}

fn setup(args: &CompareArgs) -> Result<Setup> {
    let model = match &args.model {
        Some(p) => p.clone(),
        None => default_model()?,
    };
    let sampling = args.sampling.sampling();
    sampling.validate()?;
    let mars = match args.rho {
        Some(rho) => Mode::Margin { rho },
        None => Mode::Paper {
            theta: args.theta.unwrap_or(DEFAULT_THETA),
        },
    };
    mars.validate()?;
    ensure!(args.k >= 1, "--k must be at least 1, got {}", args.k);
    ensure!(args.max_tokens >= 1, "--max-tokens must be at least 1");
    let loaded = load(&ModelArgs {
        model: model.clone(),
        device: args.device,
    })?;
    let draft = DraftSource::from_args(args, &loaded)?;
    Ok(Setup {
        loaded,
        draft,
        sampling,
        mars,
        model,
    })
}

fn run_all(
    s: Setup,
    args: &CompareArgs,
    prompts: &[Prompt],
) -> Result<(Settings, Vec<PromptResult>)> {
    let settings = Settings {
        model: s.model.display().to_string(),
        drafter: s.draft.label(),
        k: args.k,
        mars: s.mars,
        sampling: s.sampling,
        seed: args.sampling.seed,
        max_tokens: args.max_tokens,
        chat: args.chat,
    };
    let runner = Runner {
        tokenizer: Arc::new(s.loaded.tokenizer.clone()),
        loaded: &s.loaded,
        draft: s.draft,
        sampling: s.sampling,
        mars: s.mars,
        args,
    };
    runner.warm_up()?;
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
        results.push(runner.run_prompt(p)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((settings, results))
}

fn mode_label(m: Mode) -> String {
    match m {
        Mode::Strict => "strict".into(),
        Mode::Paper { theta } => format!("MARS θ={theta}"),
        Mode::Margin { rho } => format!("MARS ρ={rho}"),
    }
}

fn table(settings: &Settings, t: &Totals) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} prompts · drafter {} · k={} · T={} · {} · max {} tokens · seed {}",
        t.prompts,
        settings.drafter,
        settings.k,
        settings.sampling.temperature,
        mode_label(settings.mars),
        settings.max_tokens,
        settings.seed
    );
    let _ = writeln!(
        out,
        "| method | tokens | tok/s | speedup | τ | relaxed | NLL | agreement |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, m) in [
        ("target only", &t.target),
        ("strict", &t.strict),
        (mode_label(settings.mars).as_str(), &t.mars),
    ] {
        let _ = writeln!(
            out,
            "| {name} | {} | {:.1} | {:.2}× | {:.2} | {:.1} % | {:.3} | {:.1} % |",
            m.tokens,
            m.tokens_per_second,
            m.speedup,
            m.tau,
            100.0 * m.relaxed_share,
            m.nll,
            100.0 * m.agreement
        );
    }
    out
}

/// Wraps `text` to `width` columns (characters), keeping line breaks.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        for word in para.split(' ') {
            let need = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
            if need > width && !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
            while line.chars().count() > width {
                let head: String = line.chars().take(width).collect();
                line = line.chars().skip(width).collect();
                lines.push(head);
            }
        }
        lines.push(line);
    }
    lines
}

fn side_by_side(r: &PromptResult, mars: Mode) -> String {
    const W: usize = 38;
    let cols = [
        ("target only".to_string(), &r.target),
        ("strict".to_string(), &r.strict),
        (mode_label(mars), &r.mars),
    ];
    let wrapped: Vec<Vec<String>> = cols.iter().map(|(_, m)| wrap(&m.text, W)).collect();
    let rows = wrapped.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "prompt: {}", r.prompt.replace('\n', " "));
    let header: Vec<String> = cols
        .iter()
        .map(|(name, m)| {
            format!(
                "{name} · {:.1} tok/s · τ {:.2} · {} relaxed",
                m.tokens_per_second, m.tau, m.relaxed
            )
        })
        .collect();
    let _ = writeln!(out, "{}", pad_row(&header, W));
    let _ = writeln!(out, "{}", pad_row(&vec!["-".repeat(W); 3], W));
    for i in 0..rows {
        let row: Vec<String> = wrapped
            .iter()
            .map(|w| w.get(i).cloned().unwrap_or_default())
            .collect();
        let _ = writeln!(out, "{}", pad_row(&row, W));
    }
    out
}

fn pad_row(cells: &[String], width: usize) -> String {
    cells
        .iter()
        .map(|c| {
            let c: String = c.chars().take(width).collect();
            let pad = width.saturating_sub(c.chars().count());
            format!("{c}{}", " ".repeat(pad))
        })
        .collect::<Vec<_>>()
        .join(" │ ")
}

pub fn run_compare(args: &CompareArgs) -> Result<()> {
    let prompts = read_prompts(args, false)?;
    let s = setup(args)?;
    let mars = s.mars;
    let (settings, results) = run_all(s, args, &prompts)?;
    let t = totals(&results);
    if args.json {
        let json = serde_json::json!({ "settings": settings, "prompts": results, "total": t });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    if results.len() <= 3 {
        for r in &results {
            println!("{}", side_by_side(r, mars));
        }
    }
    print!("{}", table(&settings, &t));
    println!(
        "tok/s counts decoding only (prompt processing excluded), one process, methods run one \
         after another on each prompt; agreement = share of tokens identical to target-only."
    );
    Ok(())
}

pub fn run_bench(args: &BenchArgs) -> Result<()> {
    let c = &args.compare;
    ensure!(
        c.prompts.is_some() || c.prompt.is_none(),
        "bench needs --prompts FILE"
    );
    let mut c2 = c.clone();
    if c2.prompts.is_none() {
        c2.prompts = Some(PathBuf::from("../shared/bench/spec_bench.jsonl"));
    }
    let prompts = read_prompts(&c2, true)?;
    let s = setup(&c2)?;
    let (settings, results) = run_all(s, &c2, &prompts)?;
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

    let mut md = String::new();
    let _ = writeln!(
        md,
        "Drafter {} · k={} · T={} · {} · {} tokens max · seed {} · chat {}\n",
        settings.drafter,
        settings.k,
        settings.sampling.temperature,
        mode_label(settings.mars),
        settings.max_tokens,
        settings.seed,
        settings.chat
    );
    let _ = writeln!(
        md,
        "| category | n | target tok/s | strict speedup | strict τ | MARS speedup | MARS τ | MARS relaxed | NLL target / strict / MARS | MARS agreement | strict agreement |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (name, t) in cats
        .iter()
        .chain(std::iter::once(&("all".to_string(), all.clone())))
    {
        let _ = writeln!(
            md,
            "| {name} | {} | {:.1} | {:.2}× | {:.2} | {:.2}× | {:.2} | {:.1} % | {:.3} / {:.3} / {:.3} | {:.1} % | {:.1} % |",
            t.prompts,
            t.target.tokens_per_second,
            t.strict.speedup,
            t.strict.tau,
            t.mars.speedup,
            t.mars.tau,
            100.0 * t.mars.relaxed_share,
            t.target.nll,
            t.strict.nll,
            t.mars.nll,
            100.0 * t.mars.agreement,
            100.0 * t.strict.agreement,
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let write = |name: &str, text: &str| -> Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("bench.md", &md)?;
    let json = serde_json::json!({
        "settings": settings,
        "categories": cats.iter().map(|(c, t)| (c.clone(), t.clone())).collect::<BTreeMap<_, _>>(),
        "total": all,
        "prompts": results,
    });
    write("bench.json", &serde_json::to_string_pretty(&json)?)?;
    plot(&args.out.join("bench.svg"), &cats, &settings)?;
    print!("{md}");
    println!(
        "wrote {}/bench.md, bench.json, bench.svg",
        args.out.display()
    );
    Ok(())
}

/// Two panels: speedup over target-only and τ, per category, strict and MARS side by side.
fn plot(path: &Path, cats: &[(String, Totals)], settings: &Settings) -> Result<()> {
    use plotters::prelude::*;
    let n = cats.len();
    let root = SVGBackend::new(path, (120 + 70 * n as u32, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(360);
    let title = format!(
        "{} · k={} · T={} · {}",
        settings.drafter,
        settings.k,
        settings.sampling.temperature,
        mode_label(settings.mars)
    );
    for (area, metric, label) in [
        (&top, 0, "speedup vs target-only"),
        (&bottom, 1, "τ (tokens per target pass)"),
    ] {
        let value = |t: &Totals, mars: bool| {
            let m = if mars { &t.mars } else { &t.strict };
            if metric == 0 { m.speedup } else { m.tau }
        };
        let max = cats
            .iter()
            .flat_map(|(_, t)| [value(t, false), value(t, true)])
            .fold(1.0f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                if metric == 0 { title.as_str() } else { "" },
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(70)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..n as f64, 0f64..max)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                cats.get(i).map(|(c, _)| c.clone()).unwrap_or_default()
            })
            .y_desc(label)
            .draw()
            .map_err(plot_err)?;
        for (mars, color) in [(false, BLUE), (true, RED)] {
            let bars = cats.iter().enumerate().map(|(i, (_, t))| {
                let x0 = i as f64 + if mars { 0.5 } else { 0.1 };
                Rectangle::new([(x0, 0.0), (x0 + 0.4, value(t, mars))], color.filled())
            });
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(if mars {
                    mode_label(settings.mars)
                } else {
                    "strict".into()
                })
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        if metric == 0 {
            chart
                .draw_series(LineSeries::new([(0.0, 1.0), (n as f64, 1.0)], BLACK))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn plot_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}
