//! Loops of the kernels' WGSL unrolled before it is compiled.
//!
//! A loop written `for (var k = 0u; k < N; k++) { // unroll`, with N a literal (`8u`) or a
//! `const NAME: u32 = 8u;` of the same source, becomes N copies of its body, each in a block of
//! its own that starts `let k = 0u;`, `let k = 1u;`, …: the same operations in the same order, so
//! the same bits. Why: CPU adapters (lavapipe, SwiftShader) run a workgroup's lanes as vectors
//! and keep a private array indexed by a loop counter in memory, one lane at a time; with the
//! index a constant the array is registers and the loop's mask bookkeeping is gone
//! (docs/lab/journal-2026-11.md counts it). GPU drivers unroll such loops themselves.
//!
//! A body holding `break` or `continue` cannot be copied: such a loop, or one whose header does
//! not read as above, is left as written, marker and all, and `tests/shaders.rs` finds the
//! marker in the compiled text.

/// What marks a loop to unroll, at the end of its header line.
pub const MARKER: &str = "// unroll";

/// `src` with every marked loop unrolled (inner loops too, outermost first).
pub fn unroll(src: &str) -> String {
    let consts = constants(src);
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    // Each pass expands one loop; a loop that cannot be expanded is skipped by index.
    let mut from = 0;
    while let Some(at) = (from..lines.len()).find(|&i| lines[i].trim_end().ends_with(MARKER)) {
        match expand(&lines, at, &consts) {
            Some((end, copies)) => {
                lines.splice(at..=end, copies);
            }
            None => from = at + 1,
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The `const NAME: u32 = Nu;` declarations of `src`.
fn constants(src: &str) -> Vec<(String, u32)> {
    src.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("const ")?;
            let (name, value) = rest.split_once(": u32 = ")?;
            let value = value.strip_suffix("u;")?.parse().ok()?;
            Some((name.trim().to_string(), value))
        })
        .collect()
}

/// The loop whose header is line `at`: the index of its closing line and its copies, or `None`
/// where it cannot be unrolled.
fn expand(lines: &[String], at: usize, consts: &[(String, u32)]) -> Option<(usize, Vec<String>)> {
    let header = lines[at].trim().strip_suffix(MARKER)?.trim_end();
    let (var, limit) = parse_header(header)?;
    let count = match limit.strip_suffix('u').and_then(|n| n.parse::<u32>().ok()) {
        Some(n) => n,
        None => consts.iter().find(|(name, _)| name == limit)?.1,
    };
    // The body runs to the brace that closes the header's.
    let mut depth = 1usize;
    let mut end = None;
    for (i, line) in lines.iter().enumerate().skip(at + 1) {
        let code = line.split("//").next().unwrap_or("");
        for c in code.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
        }
        if depth == 0 {
            end = Some(i);
            break;
        }
    }
    let end = end?;
    // The closing line holds only the brace.
    if lines[end].trim() != "}" {
        return None;
    }
    let body = &lines[at + 1..end];
    let words = |line: &String| {
        let code = line.split("//").next().unwrap_or("").to_string();
        code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "break" || w == "continue")
    };
    if body.iter().any(words) {
        return None;
    }
    let indent: String = lines[at]
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect();
    let mut copies = Vec::new();
    for i in 0..count {
        copies.push(format!("{indent}{{"));
        copies.push(format!("{indent}    let {var} = {i}u;"));
        copies.extend(body.iter().cloned());
        copies.push(format!("{indent}}}"));
    }
    Some((end, copies))
}

/// `for (var k = 0u; k < LIMIT; k++) {` → (`k`, `LIMIT`).
fn parse_header(header: &str) -> Option<(&str, &str)> {
    let inner = header.strip_prefix("for (var ")?.strip_suffix(") {")?;
    let mut parts = inner.split(';').map(str::trim);
    let (var, start) = parts.next()?.split_once(" = ")?;
    let cond = parts.next()?;
    let step = parts.next()?;
    if start != "0u" || parts.next().is_some() || step != format!("{var}++") {
        return None;
    }
    let limit = cond
        .strip_prefix(var)?
        .trim_start()
        .strip_prefix("<")?
        .trim();
    Some((var, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_the_body_with_the_counter_bound() {
        let src = "const N: u32 = 2u;\nfn f() {\n    for (var k = 0u; k < N; k++) { // unroll\n        a[k] = k;\n    }\n}\n";
        let out = unroll(src);
        assert_eq!(
            out,
            "const N: u32 = 2u;\nfn f() {\n    {\n        let k = 0u;\n        a[k] = k;\n    }\n    {\n        let k = 1u;\n        a[k] = k;\n    }\n}\n"
        );
    }

    #[test]
    fn nested_loops_unroll_inside_out() {
        let src = "for (var i = 0u; i < 2u; i++) { // unroll\n    for (var j = 0u; j < 3u; j++) { // unroll\n        if c { s += i * j; }\n    }\n}\n";
        let out = unroll(src);
        assert!(!out.contains(MARKER));
        assert_eq!(out.matches("let i = ").count(), 2);
        assert_eq!(out.matches("let j = ").count(), 6);
        assert_eq!(out.matches("s += i * j").count(), 6);
    }

    #[test]
    fn leaves_what_it_cannot_copy() {
        for src in [
            "for (var k = 0u; k < 4u; k++) { // unroll\n    if x { break; }\n}\n",
            "for (var k = 0u; k < 4u; k++) { // unroll\n    continue;\n}\n",
            "for (var k = 1u; k < 4u; k++) { // unroll\n    a[k] = 0.0;\n}\n",
            "for (var k = 0u; k < n; k++) { // unroll\n    a[k] = 0.0;\n}\n",
            "for (var k = 0u; k < 4u; k += 2u) { // unroll\n    a[k] = 0.0;\n}\n",
            "for (var k = 0u; k < 4u; k++) { // unroll\n    a[k] = 0.0; }\n",
        ] {
            assert_eq!(unroll(src), src, "{src}");
        }
    }

    #[test]
    fn braces_in_comments_do_not_count() {
        let src = "for (var k = 0u; k < 2u; k++) { // unroll\n    a[k] = 0.0; // {\n}\nb = 1.0;\n";
        let out = unroll(src);
        assert_eq!(out.matches("a[k] = 0.0").count(), 2);
        assert!(out.ends_with("b = 1.0;\n"));
    }
}
