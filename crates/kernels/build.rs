//! A fingerprint of the GPU kernels' sources, compiled in as `MARS_KERNELS_FINGERPRINT`, so that
//! a tuning table timed by another build of the kernels is set aside and timed anew
//! (`gpu::TABLE_HEADER`): a changed kernel runs at another speed, and a new form was never
//! timed. Without it the header was bumped by hand and was missed (the matrix units' tall and
//! wide tiles became forms after the last bump, so a card tuned before never timed them).

use std::io;
use std::path::{Path, PathBuf};

/// Every source that decides what a form computes and how fast: the WGSL, the Rust that builds
/// and launches it, and the tiles' shapes and splits.
const SOURCES: [&str; 2] = ["src/gpu", "src/units.rs"];

/// An unreadable source fails the build with the file named.
fn main() -> io::Result<()> {
    let mut files = Vec::new();
    for source in SOURCES {
        // A folder: cargo looks at every file in it.
        println!("cargo:rerun-if-changed={source}");
        collect(Path::new(source), &mut files)?;
    }
    files.sort();
    // FNV-1a over each file's path and bytes: stable across builds, compilers and machines
    // (std's hasher promises none of that).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| named(file, e))?;
        let name = file.to_string_lossy().replace('\\', "/");
        for &b in name.as_bytes().iter().chain([0u8].iter()).chain(&bytes) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=MARS_KERNELS_FINGERPRINT={hash:016x}");
    Ok(())
}

/// `e` with the path it happened on.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `path`'s files, its folders' files recursively.
fn collect(path: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).map_err(|e| named(path, e))? {
            collect(&entry.map_err(|e| named(path, e))?.path(), files)?;
        }
    } else {
        files.push(path.to_path_buf());
    }
    Ok(())
}
