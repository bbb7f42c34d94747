//! Each crate's modules form layers: no module reaches, through `crate::` paths, a module that
//! reaches it back. A cycle is how "one model, three back-ends" decays into one knot (the model
//! crate's front and back-ends imported each other before they were split), so it is checked
//! here for every crate rather than left to review.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate-level module a file belongs to (`src/gpu/layer.rs` → `gpu`); `None` for the crate
/// root, which declares every module.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// The crate-level modules a source text names through `crate::` (single paths and groups),
/// comments left out.
fn named_modules(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first name of each item at depth one.
            let (mut depth, mut item_start) = (1usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if item_start && depth == 1 && !c.is_whitespace() => {
                        found.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(after));
        }
        rest = after;
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A cycle in `edges`, as the modules along it, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(at.to_string(), 1);
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = path.iter().position(|m| m == next).unwrap();
                    let mut cycle = path[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(at.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for start in edges.keys() {
        if !state.contains_key(start.as_str())
            && let Some(c) = visit(start, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_crate_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            sources.push(src);
        }
    }
    assert!(
        sources.len() >= 7,
        "the CLI and six crates, found {sources:?}"
    );
    let mut edges_seen = 0;
    for src in &sources {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(src, f)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let Some(from) = module_of(src, file) else {
                continue;
            };
            let text = std::fs::read_to_string(file).unwrap();
            for to in named_modules(&text) {
                if to != from && modules.contains(&to) {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        edges_seen += edges.values().map(BTreeSet::len).sum::<usize>();
        if let Some(cycle) = find_cycle(&edges) {
            panic!(
                "{}: modules import each other: {}",
                src.display(),
                cycle.join(" → ")
            );
        }
    }
    // The reader finds the imports it checks (a parser that saw none would pass anything).
    assert!(
        edges_seen > 50,
        "only {edges_seen} imports between modules found"
    );
}

#[test]
fn the_reader_finds_grouped_and_nested_imports() {
    let text = "use crate::a::B;\n// use crate::comment;\nuse crate::{c, d::E, f::{g, h}};\nlet x = crate::i::j();";
    let names: Vec<String> = named_modules(text).into_iter().collect();
    assert_eq!(names, ["a", "c", "d", "f", "i"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    assert_eq!(find_cycle(&edges), None);
    edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
}
