//! The run's journal: `settings.json` and one JSON line per finished problem, so that an
//! interrupted run of an hour or more keeps what it measured and `--resume` goes on from it.

use std::path::Path;

use anyhow::{Context, Result, bail};
use mars_engine::Backend;
use mars_model::WeightPath;

use super::ProblemRecord;

/// The device, matrix path, thread count and KV cache type as settings.json records them: a problem's speed
/// figures depend on each, so a resumed run must match them all, and one table never mixes
/// devices, matrix paths or thread counts.
pub(super) fn path_settings(
    backend: Backend,
    weights: WeightPath,
) -> serde_json::Map<String, serde_json::Value> {
    let (path, threads) = (weights.name(), weights.threads());
    let mut m = serde_json::Map::new();
    m.insert(
        "device".into(),
        format!("{backend:?}").to_lowercase().into(),
    );
    m.insert("matrices".into(), path.into());
    m.insert("threads".into(), threads.into());
    m.insert("kv_cache".into(), weights.kv().map(|kv| kv.name()).into());
    m
}

/// The records journaled in `dir` by a run with these `settings` (an error naming the first
/// setting that differs). A last line cut short by an interrupted run is dropped; the journal is
/// rewritten with the records kept, so that the resumed run appends after whole lines.
pub(super) fn resume(dir: &Path, settings: &serde_json::Value) -> Result<Vec<ProblemRecord>> {
    let path = dir.join("settings.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("--resume: reading {}", path.display()))?;
    let before: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if let (Some(old), Some(new)) = (before.as_object(), settings.as_object()) {
        for (key, value) in new {
            let was = old.get(key).unwrap_or(&serde_json::Value::Null);
            if was != value {
                bail!(
                    "--resume: {} was made with {key} = {was}, this run has {key} = {value}",
                    dir.display()
                );
            }
        }
    }
    let path = dir.join("records.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let records = parse_journal(&text).with_context(|| format!("reading {}", path.display()))?;
    let mut clean = String::new();
    for r in &records {
        clean += &serde_json::to_string(r)?;
        clean.push('\n');
    }
    std::fs::write(&path, clean)?;
    Ok(records)
}

/// The journal's records, one JSON line each; a malformed last line (a write cut short) is
/// dropped, a malformed line before it is an error naming it.
pub(super) fn parse_journal(text: &str) -> Result<Vec<ProblemRecord>> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<ProblemRecord>(line) {
            Ok(r) => records.push(r),
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => bail!("line {}: {e}", i + 1),
        }
    }
    Ok(records)
}
