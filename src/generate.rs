//! `mars generate` and `mars speed`: target-only decoding of a real model.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use mars_formats::{ChatTemplate, Gguf, Message, Tokenizer};
use mars_model::{Device, Llama, LoadOptions, Tensor, read_f32};
use mars_verify::{DraftProbs, Mode, Sampling, Verifier, VerifyConfig, VerifyInput};
use rand_core::SeedableRng;
use serde::Serialize;

/// Which burn backend runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// burn's flex backend on the CPU.
    Cpu,
    /// wgpu: Vulkan, Metal or DX12 (lavapipe where there is no GPU).
    Wgpu,
}

/// Where the model comes from and where it runs.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// GGUF model file.
    #[arg(long)]
    pub model: PathBuf,
    /// Backend.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
}

/// `mars generate` options.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt as a user turn with the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

/// Sampling settings shared by every decoding subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep only the k most likely tokens (unset: off).
    #[arg(long)]
    pub top_k: Option<u32>,
    /// Nucleus sampling mass (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed of the sampling generator (ChaCha8: the same stream on every platform).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    /// The verifier's sampling settings.
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
        }
    }
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

/// A loaded model with its tokenizer and chat template.
pub struct Loaded {
    pub model: Llama,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
}

fn device(arg: DeviceArg) -> Result<(Device, Option<u64>)> {
    match arg {
        DeviceArg::Cpu => Ok((Device::flex(), None)),
        DeviceArg::Wgpu => {
            let (device, setup) = Device::wgpu_options()
                .init_with_setup()
                .context("initialising wgpu")?;
            let limits = setup.adapter.limits();
            let info = setup.adapter.get_info();
            eprintln!("wgpu adapter: {} ({:?})", info.name, info.backend);
            let max = limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size);
            Ok((device, Some(max)))
        }
    }
}

/// Reads the file with a progress bar: a 100 MB model takes a visible moment on a slow disk.
fn read_with_progress(path: &Path) -> Result<Vec<u8>> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = ProgressBar::new(len).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("reading model");
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut chunk = vec![0u8; 1 << 22];
    loop {
        let n = file
            .read(&mut chunk)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(bytes)
}

/// `MemAvailable` from /proc/meminfo (Linux), the budget for f32 weights on the CPU backend;
/// `None` where it cannot be read (then nothing is checked up front).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Loads model, tokenizer and chat template from one GGUF file.
pub fn load(args: &ModelArgs) -> Result<Loaded> {
    let bytes = read_with_progress(&args.model)?;
    let g = Gguf::parse(&bytes).with_context(|| format!("parsing {}", args.model.display()))?;
    let tokenizer = Tokenizer::from_gguf(&g)?;
    let template = match g.get_str("tokenizer.chat_template") {
        Ok(source) => {
            let name = |id: Option<u32>| id.and_then(|i| tokenizer.token(i)).unwrap_or_default();
            Some(ChatTemplate::new(
                source,
                &name(tokenizer.bos),
                &name(tokenizer.eos),
            )?)
        }
        Err(_) => None,
    };
    let (device, max_buffer_bytes) = device(args.device)?;
    let spinner = ProgressBar::new_spinner().with_message("dequantizing weights to f32");
    spinner.enable_steady_tick(Duration::from_millis(120));
    let max_total_bytes = match args.device {
        DeviceArg::Cpu => available_memory(),
        // wgpu does not report device memory; the per-buffer limit is still checked.
        DeviceArg::Wgpu => None,
    };
    let model = Llama::from_gguf(
        &g,
        &device,
        LoadOptions {
            max_buffer_bytes,
            max_total_bytes,
        },
    )?;
    spinner.finish_and_clear();
    ensure!(
        tokenizer.vocab_size() <= model.config().vocab_size,
        "the tokenizer has {} tokens but the model's vocabulary is {}",
        tokenizer.vocab_size(),
        model.config().vocab_size
    );
    Ok(Loaded {
        model,
        tokenizer,
        template,
    })
}

/// The prompt's token ids: raw text (a BOS only if the model asks for one) or a chat turn.
pub fn prompt_ids(loaded: &Loaded, prompt: &str, chat: bool) -> Result<Vec<u32>> {
    if !chat {
        return Ok(loaded.tokenizer.encode(prompt, true)?);
    }
    let Some(template) = &loaded.template else {
        bail!("--chat: the model file has no tokenizer.chat_template");
    };
    let text = template.render(&[Message::new("user", prompt)], true)?;
    // The template writes any BOS itself.
    Ok(loaded.tokenizer.encode(&text, false)?)
}

/// The last row of `[1, t, vocab]` logits, read back.
fn last_row(logits: Tensor<3>) -> Result<Vec<f32>> {
    let [_, t, vocab] = logits.dims();
    Ok(read_f32(logits.slice([0..1, t - 1..t, 0..vocab]))?)
}

#[derive(Debug, Serialize)]
struct GenerateReport {
    prompt_tokens: usize,
    tokens: Vec<u32>,
    text: String,
    tokens_per_second: f64,
    prefill_tokens_per_second: f64,
    stop_reason: &'static str,
}

pub fn run_generate(args: &GenerateArgs) -> Result<()> {
    let sampling = args.sampling.sampling();
    // Sampling goes through the verifier: a step with no draft tokens emits the bonus token from
    // the processed p, the same code and random stream the speculative path uses.
    let mut verifier = Verifier::new(VerifyConfig {
        sampling,
        mode: Mode::Strict,
    })?;
    let loaded = load(&args.model)?;
    let model = &loaded.model;
    let prompt = prompt_ids(&loaded, &args.prompt, args.chat)?;
    ensure!(!prompt.is_empty(), "the prompt tokenizes to nothing");
    let capacity = prompt
        .len()
        .checked_add(args.max_tokens)
        .context("--max-tokens overflows")?;
    let mut cache = model.new_cache(capacity)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.sampling.seed);
    let vocab = model.config().vocab_size;

    let start = Instant::now();
    let mut row = last_row(model.forward(&prompt, &mut cache)?)?;
    let prefill = start.elapsed();
    let mut stream = loaded.tokenizer.stream();
    let mut tokens = Vec::with_capacity(args.max_tokens);
    let mut stop_reason = "max_tokens";
    let decode_start = Instant::now();
    let mut out = std::io::stdout().lock();
    while tokens.len() < args.max_tokens {
        let input = VerifyInput {
            target_logits: &row,
            vocab,
            draft_tokens: &[],
            draft_probs: DraftProbs::OneHot,
        };
        let token = verifier.verify(&input, &mut rng)?.next.token;
        tokens.push(token);
        if loaded.tokenizer.stop_ids.contains(&token) {
            stop_reason = "eos";
            break;
        }
        if !args.json
            && let Some(piece) = stream.push(token)?
        {
            write!(out, "{piece}")?;
            out.flush()?;
        }
        if tokens.len() == args.max_tokens {
            break;
        }
        row = last_row(model.forward(&[token], &mut cache)?)?;
    }
    let decode = decode_start.elapsed();
    if !args.json {
        if let Some(rest) = stream.finish()? {
            write!(out, "{rest}")?;
        }
        writeln!(out)?;
    }
    let text = loaded.tokenizer.decode(
        tokens
            .iter()
            .copied()
            .filter(|t| !loaded.tokenizer.stop_ids.contains(t))
            .collect::<Vec<_>>()
            .as_slice(),
    )?;
    let report = GenerateReport {
        prompt_tokens: prompt.len(),
        tokens_per_second: tokens.len() as f64 / decode.as_secs_f64().max(1e-9),
        prefill_tokens_per_second: prompt.len() as f64 / prefill.as_secs_f64().max(1e-9),
        tokens,
        text,
        stop_reason,
    };
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        eprintln!(
            "{} prompt tokens ({:.1} tok/s prefill), {} generated ({:.1} tok/s), stop: {}",
            report.prompt_tokens,
            report.prefill_tokens_per_second,
            report.tokens.len(),
            report.tokens_per_second,
            report.stop_reason
        );
    }
    Ok(())
}

pub fn run_speed(args: &SpeedArgs) -> Result<()> {
    ensure!(
        args.prompt_tokens > 0 && args.decode_tokens > 0,
        "token counts must be at least 1"
    );
    let loaded = load(&args.model)?;
    let model = &loaded.model;
    // A fixed, ordinary text, repeated to the requested length.
    let base = loaded
        .tokenizer
        .encode("The quick brown fox jumps over the lazy dog. ", false)?;
    let prompt: Vec<u32> = base
        .iter()
        .copied()
        .cycle()
        .take(args.prompt_tokens)
        .collect();
    let mut cache = model.new_cache(args.prompt_tokens + args.decode_tokens + 1)?;
    // One warm-up forward (first-use allocation and kernel compilation on wgpu).
    last_row(model.forward(&prompt[..1], &mut cache)?)?;
    cache.truncate(0)?;

    let start = Instant::now();
    let mut row = last_row(model.forward(&prompt, &mut cache)?)?;
    let prefill = start.elapsed();
    let start = Instant::now();
    for _ in 0..args.decode_tokens {
        let next = row
            .iter()
            .enumerate()
            .fold(0, |b, (i, &v)| if v > row[b] { i } else { b }) as u32;
        row = last_row(model.forward(&[next], &mut cache)?)?;
    }
    let decode = start.elapsed();
    println!(
        "{{\"prompt_tokens\": {}, \"prefill_tokens_per_second\": {:.1}, \"decode_tokens\": {}, \"decode_tokens_per_second\": {:.1}}}",
        args.prompt_tokens,
        args.prompt_tokens as f64 / prefill.as_secs_f64(),
        args.decode_tokens,
        args.decode_tokens as f64 / decode.as_secs_f64()
    );
    Ok(())
}
