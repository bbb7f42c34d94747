//! Loading models from files for the CLI: the file read a slice at a time through the same
//! `Gguf::parse_from` / [`ReadAt`] path as the page, with a progress bar; the engine's session
//! layer ([`Target`], [`Backend::open`]) does the rest, as it does for the page.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use mars_engine::{Backend, DrafterSpec, OpenDevice, Target};
use mars_formats::{FormatError, Gguf, ReadAt};
use mars_model::{Llama, WeightPath};

use crate::args::KernelArgs;

/// A model file on disk read a slice at a time, as the page reads a `Blob`: the loader pulls the
/// header, then each tensor once, so the file is never held whole in memory (peak resident
/// memory is the loaded model plus the largest tensor, not twice the file). The progress bar
/// counts the bytes read.
struct FileSource {
    file: std::fs::File,
    len: u64,
    bar: ProgressBar,
}

impl FileSource {
    fn open(path: &Path) -> Result<Self> {
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let len = file
            .metadata()
            .with_context(|| format!("reading the size of {}", path.display()))?
            .len();
        let bar = ProgressBar::new(len).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message("loading model");
        Ok(Self { file, len, bar })
    }
}

impl ReadAt for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FormatError> {
        let read = {
            #[cfg(unix)]
            {
                std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
            }
            #[cfg(windows)]
            {
                read_exact_at_windows(&self.file, buf, offset)
            }
        };
        read.map_err(|e| FormatError::Read {
            offset,
            len: buf.len() as u64,
            why: e.to_string(),
        })?;
        self.bar.inc(buf.len() as u64);
        Ok(())
    }
}

/// Windows has positioned reads that may return short: loop until `buf` is full.
#[cfg(windows)]
fn read_exact_at_windows(
    file: &std::fs::File,
    mut buf: &mut [u8],
    mut offset: u64,
) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// Parses `path` a slice at a time and hands the GGUF to `build`, which reads each tensor as it
/// loads it (the progress bar follows the bytes read).
fn with_gguf<T>(path: &Path, build: impl FnOnce(&Gguf<'_>) -> Result<T>) -> Result<T> {
    let source = FileSource::open(path)?;
    let built = Gguf::parse_from(&source)
        .with_context(|| format!("parsing {}", path.display()))
        .and_then(|g| build(&g));
    source.bar.finish_and_clear();
    built.with_context(|| format!("loading {}", path.display()))
}

/// Opens the backend, resolves the user's matrix choice on it (the engine's
/// [`OpenDevice::weights`], its notes on stderr) and loads the target model from `path`.
///
/// # Errors
/// The device, the file or the model, with the path named; a thread count the path refuses.
pub fn target(
    path: &Path,
    backend: Backend,
    kernels: &KernelArgs,
) -> Result<(Target, OpenDevice, WeightPath)> {
    target_timed(path, backend, kernels).map(|(target, open, path, _)| (target, open, path))
}

/// How long a load took: the device opened, the file read and the weights uploaded; then the
/// tuning table's step (a card times the shapes its table lacks and takes the table's forms;
/// next to nothing off a card).
#[derive(Clone, Copy, Debug)]
pub struct LoadTimes {
    /// The device opened, the file read and the weights uploaded.
    pub load: Duration,
    /// The tuning table's step after it.
    pub tune: Duration,
}

/// [`target`], with how long its parts took (`mars speed` reports them: a user's first load on
/// a card is the load and the tuning together).
///
/// # Errors
/// As [`target`].
pub fn target_timed(
    path: &Path,
    backend: Backend,
    kernels: &KernelArgs,
) -> Result<(Target, OpenDevice, WeightPath, LoadTimes)> {
    let started = Instant::now();
    let (target, open) = target_untuned(path, backend, kernels)?;
    let load = started.elapsed();
    let (target, tuned) = pollster::block_on(mars_engine::tune::target_at_load(target, &open))?;
    if let Some(note) = tuned {
        eprintln!("{note}");
    }
    let path = target.model().weight_path();
    let tune = started.elapsed().saturating_sub(load);
    Ok((target, open, path, LoadTimes { load, tune }))
}

/// [`target`] in the rules' forms, the tuning table neither read nor written (`mars tune`).
///
/// # Errors
/// As [`target`].
pub fn target_untuned(
    path: &Path,
    backend: Backend,
    kernels: &KernelArgs,
) -> Result<(Target, OpenDevice)> {
    // Threads name the CPU kernels: `auto` with them is the CPU.
    let backend = match (backend, kernels.threads) {
        (Backend::Auto, Some(_)) => Backend::Cpu,
        (b, _) => b,
    };
    let open = pollster::block_on(backend.open())?;
    if let Some(why) = &open.chosen {
        eprintln!("device: {} ({why})", open.backend.name());
    }
    let weights = open.weights(kernels.choice(), kernels.threads, kernels.cache.kv_cache)?;
    for note in &weights.notes {
        eprintln!("{note}");
    }
    if let Some(adapter) = &open.adapter {
        match weights.path {
            WeightPath::GpuBlocks {
                subgroups: Some(lanes),
                kv,
            } => eprintln!(
                "wgpu adapter: {adapter}; subgroups of at least {lanes} (the kernels' partial \
                 sums meet through shuffles); {} KV cache",
                kv.name()
            ),
            WeightPath::GpuBlocks { kv, .. } => {
                eprintln!("wgpu adapter: {adapter}; {} KV cache", kv.name())
            }
            _ => eprintln!("wgpu adapter: {adapter}"),
        }
    }
    let options = open.options(weights.path, Some(kernels.context()));
    let (target, needs) = with_gguf(path, |g| {
        let needs = Llama::memory_needs(g, options)?;
        Ok((Target::from_gguf(g, &open.device, options)?, needs))
    })?;
    note_converted(target.model());
    let mut open = open;
    // A draft model is checked against what the target leaves.
    open.reserve(needs.total());
    Ok((target, open))
}

/// Says on stderr which weights the packed path converted to Q8_0 (types it has no kernel for).
fn note_converted(model: &Llama) {
    let converted = model.converted();
    if let Some(first) = converted.first() {
        eprintln!(
            "note: {} weight matrices converted to Q8_0 at load (no kernel for their type), \
             e.g. {first}",
            converted.len()
        );
    }
}

/// The draft model a [`DrafterSpec::Model`] names, loaded from its path on the target's
/// device; `None` for the other drafters.
///
/// # Errors
/// The file or the model, or a tokenizer that is not the target's.
pub fn draft_model(
    target: &Target,
    spec: &DrafterSpec,
    open: &OpenDevice,
) -> Result<Option<Llama>> {
    // The draft model runs on the target's path (one kernel pool, one device).
    let context = target.info().context_length;
    let options = open.options(target.model().weight_path(), Some(context));
    let DrafterSpec::Model(path) = spec else {
        return Ok(None);
    };
    let model = with_gguf(Path::new(path), |g| {
        Ok(target.draft_model(g, &open.device, options)?)
    })?;
    note_converted(&model);
    let (model, tuned) = pollster::block_on(mars_engine::tune::at_load(model, open))?;
    if let Some(note) = tuned {
        eprintln!("{note}");
    }
    Ok(Some(model))
}
