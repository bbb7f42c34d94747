//! Prompt files: Spec-Bench lines (`turns`, `category`; the first turn is used) or
//! `{"prompt": ...}` lines, filtered by category and limited overall or per category.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use mars_engine::Message;
use serde::Serialize;

/// One prompt and its category, if the file gives one; or a conversation (`--messages`),
/// whose `text` is its last user turn.
#[derive(Debug, Clone, Serialize)]
pub struct Prompt {
    pub text: String,
    pub category: Option<String>,
    #[serde(skip)]
    pub messages: Option<Vec<Message>>,
}

impl Prompt {
    pub fn plain(text: &str) -> Self {
        Self {
            text: text.to_string(),
            category: None,
            messages: None,
        }
    }

    /// A conversation, named in reports by its last message (the user's turn).
    pub fn conversation(messages: Vec<Message>) -> Self {
        Self {
            text: messages
                .last()
                .map(|m| m.content.clone())
                .unwrap_or_default(),
            category: None,
            messages: Some(messages),
        }
    }
}

/// The default job's prompts: three short chat prompts of different kinds.
pub fn default_prompts() -> Vec<Prompt> {
    plain(mars_engine::CHAT_PROMPTS)
}

/// Prompts without categories, from their texts (a preset's).
pub fn plain(texts: &[&str]) -> Vec<Prompt> {
    texts.iter().map(|t| Prompt::plain(t)).collect()
}

/// Which prompts of a file to take.
#[derive(Debug, Clone, Default)]
pub struct Selection<'a> {
    /// Only this category.
    pub category: Option<&'a str>,
    /// At most this many (overall, or per category with `per_category`).
    pub limit: Option<usize>,
    pub per_category: bool,
}

/// Reads the prompts of a JSONL file.
///
/// # Errors
/// An unreadable file, a line that is not JSON or has neither field (line named), or nothing
/// selected.
pub fn read(path: &Path, select: &Selection<'_>) -> Result<Vec<Prompt>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let where_ = || format!("{}:{}", path.display(), i + 1);
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not JSON", where_()))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .or_else(|| {
                v.get("turns")
                    .and_then(|t| t.get(0))
                    .and_then(|t| t.as_str())
            })
            .with_context(|| {
                format!("{}: needs \"prompt\" or \"turns\": [first, ...]", where_())
            })?;
        let category = v
            .get("category")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        if let Some(want) = select.category
            && category.as_deref() != Some(want)
        {
            continue;
        }
        if let Some(limit) = select.limit {
            let key = match (&category, select.per_category) {
                (Some(c), true) => c.clone(),
                _ => String::new(),
            };
            let n = taken.entry(key).or_default();
            if *n >= limit {
                continue;
            }
            *n += 1;
        }
        out.push(Prompt {
            text: prompt.to_string(),
            category,
            messages: None,
        });
    }
    ensure!(
        !out.is_empty(),
        "no prompts selected from {}",
        path.display()
    );
    Ok(out)
}
