//! Loading models from files for the CLI: the file read with a progress bar, then the engine's
//! session layer ([`Target`], [`Backend::open`]) does the rest, as it does for the page.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use mars_engine::{Backend, DrafterSpec, OpenDevice, Target};
use mars_formats::Gguf;
use mars_model::Llama;

use crate::args::Matrices;

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

/// Parses `path` and hands the GGUF to `build` under a spinner (uploading weights takes a while).
fn with_gguf<T>(path: &Path, build: impl FnOnce(&Gguf<'_>) -> Result<T>) -> Result<T> {
    let bytes = read_with_progress(path)?;
    let g = Gguf::parse(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let spinner = ProgressBar::new_spinner().with_message("loading weights");
    spinner.enable_steady_tick(Duration::from_millis(120));
    let built = build(&g);
    spinner.finish_and_clear();
    built.with_context(|| format!("loading {}", path.display()))
}

/// Opens the backend with the matrix path `matrices` and loads the target model from `path`
/// onto it.
///
/// # Errors
/// The device, the file or the model, with the path named; 0 threads.
pub fn target(path: &Path, backend: Backend, matrices: Matrices) -> Result<(Target, OpenDevice)> {
    let mut open = pollster::block_on(backend.open())?;
    match matrices {
        Matrices::CpuPacked(threads) => {
            let (with, note) = open.with_packed_kernels(threads)?;
            open = with;
            if let Some(note) = note {
                eprintln!("{note}");
            }
        }
        Matrices::GpuBlocks => {}
        Matrices::F32 => open = open.with_f32_weights(),
    }
    if let Some(adapter) = &open.adapter {
        match open.limits.gpu_subgroups {
            Some(lanes) if open.limits.gpu_blocks => eprintln!(
                "wgpu adapter: {adapter}; subgroups of at least {lanes} (the kernels' partial \
                 sums meet through shuffles)"
            ),
            _ => eprintln!("wgpu adapter: {adapter}"),
        }
    }
    if let Some(note) = &open.note {
        eprintln!("{note}");
    }
    let target = with_gguf(path, |g| {
        Ok(Target::from_gguf(g, &open.device, open.limits)?)
    })?;
    note_converted(target.model());
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
    let DrafterSpec::Model(path) = spec else {
        return Ok(None);
    };
    let model = with_gguf(Path::new(path), |g| {
        Ok(target.draft_model(g, &open.device, open.limits)?)
    })?;
    note_converted(&model);
    Ok(Some(model))
}
