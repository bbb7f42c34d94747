//! Where the real-model tests find their files: one copy for every test file of every crate,
//! included with `#[path = "…/tests/support/models.rs"] mod models;`. The cache is the CLI's
//! (`$MARS_MODEL_DIR`, else `~/.cache/mars/models`); `MARS_SKIP_MODEL_TESTS` turns a missing
//! file into a skipped test instead of a failure.
#![allow(dead_code)]

use std::path::PathBuf;

/// SmolLM2-135M-Instruct, the default model (`tests/fetch-model.sh`).
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The pair's target (`tests/fetch-pair.sh`).
pub const QWEN_TARGET: &str = "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf";
/// The pair's draft model (`tests/fetch-pair.sh`).
pub const QWEN_DRAFT: &str = "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf";

/// The model cache directory.
pub fn dir() -> PathBuf {
    std::env::var_os("MARS_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // `mars_engine::cache_path`'s rule (this file is included by crates below the
            // engine).
            std::env::home_dir()
                .unwrap_or_default()
                .join(".cache/mars/models")
        })
}

/// `file`'s path in the cache; `None` where it is missing and `MARS_SKIP_MODEL_TESTS` is set.
///
/// # Panics
/// Where it is missing otherwise, saying how to fetch it.
pub fn path(file: &str) -> Option<PathBuf> {
    let path = dir().join(file);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("MARS_SKIP_MODEL_TESTS").is_some(),
        "{} is missing: run `bash tests/setup.sh` (tests/fetch-model.sh and tests/fetch-pair.sh \
         fetch the models alone)",
        path.display()
    );
    None
}

/// `file`'s bytes, as [`path`] finds it.
///
/// # Panics
/// As [`path`], and where the file cannot be read.
pub fn bytes(file: &str) -> Option<Vec<u8>> {
    let path = path(file)?;
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}
