//! `ui-gallery`: the book's diagnostics page, every compile-fail case of
//! `ui-tests/tests/ui` — its source and the error rustc prints for it (the `.stderr` that
//! `trybuild` checks on every test run) — included into `docs/src/diagnostics.md` from
//! the case files themselves, titled by each case's leading comment.

use std::path::Path;

/// The page's title and the words before the cases.
const HEAD: &str = "# Diagnostics gallery

Every compile-fail case of the `trybuild` suite (`ui-tests/tests/ui`): what a user wrote,
and the error `cargo build` prints for it, on the token to change. The code and the
messages are included from the case files, which `cargo test` checks against the
compiler on every run, and this page lists every case (`cargo run -p xtask -- ui-gallery`
writes it; CI fails when a case is missing here). The [DSL chapter](dsl.md) explains the
rules these messages enforce.
";

/// A case's title: its leading `//` comment, else its file name in words.
fn title(stem: &str, source: &str) -> String {
    let comment: Vec<&str> = source
        .lines()
        .take_while(|l| l.starts_with("//") && !l.starts_with("//!"))
        .map(|l| l.trim_start_matches('/').trim())
        .collect();
    let text = if comment.is_empty() {
        stem.replace('_', " ")
    } else {
        comment.join(" ")
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c
            .to_uppercase()
            .chain(chars)
            .collect::<String>()
            .trim_end_matches('.')
            .to_string(),
        None => stem.to_string(),
    }
}

/// The page for the cases under `root/ui-tests/tests/ui`.
fn render(root: &Path) -> Result<String, String> {
    let dir = root.join("ui-tests/tests/ui");
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    cases.sort();
    let mut out = vec![HEAD.to_string()];
    for stem in &cases {
        if !dir.join(format!("{stem}.stderr")).exists() {
            return Err(format!("{stem}.rs has no {stem}.stderr"));
        }
        let source = std::fs::read_to_string(dir.join(format!("{stem}.rs")))
            .map_err(|e| format!("{stem}.rs: {e}"))?;
        out.push(format!(
            "## {}\n\n`{stem}.rs`\n\n```rust,ignore\n{{{{#include ../../ui-tests/tests/ui/{stem}.rs}}}}\n```\n\n```text\n{{{{#include ../../ui-tests/tests/ui/{stem}.stderr}}}}\n```\n",
            title(stem, &source)
        ));
    }
    Ok(out.join("\n"))
}

/// Rewrites (or, with `check`, compares) `docs/src/diagnostics.md`.
pub fn run(root: &Path, check: bool) -> Result<(), String> {
    let page = root.join("docs/src/diagnostics.md");
    let old = std::fs::read_to_string(&page).unwrap_or_default();
    let new = render(root)?;
    crate::write_or_check(&page, &old, &new, check, "cargo run -p xtask -- ui-gallery")
}
