//! Every public op reports the user's line: a shape mistake panics there, and an export
//! error names it as the op's call site. This scans the runtime's source: each `pub fn`
//! in `ops/` and `nn/functional/` that takes or returns a `Tensor`, and each public
//! function anywhere that goes through the dispatch seam (`dispatch::enter`), must
//! carry `#[track_caller]` (without it, `Location::caller()` is the framework's own file).

use std::path::Path;

mod common;
use common::rust_files;

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_fn(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("pub fn ") || t.starts_with("fn ") || t.starts_with("pub(crate) fn ")
}

/// The public functions of `source` that need `#[track_caller]` and lack it.
fn missing(path: &Path, source: &str, op_folder: bool) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.trim_start().starts_with("pub fn ") {
            continue;
        }
        let end = (i + 1..lines.len())
            .find(|&k| is_fn(lines[k]) && indent(lines[k]) <= indent(line))
            .unwrap_or(lines.len());
        let body = lines[i..end].join("\n");
        let signature = body.split('{').next().unwrap_or("");
        let traced = body.contains("dispatch::enter") || body.contains("dispatch::opaque");
        if !(traced || (op_folder && signature.contains("Tensor"))) {
            continue;
        }
        let has = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("#[") || t.starts_with("//")
            })
            .any(|l| l.trim() == "#[track_caller]");
        if !has {
            let name = line.trim_start()["pub fn ".len()..]
                .split(['(', '<'])
                .next()
                .unwrap_or("");
            out.push(format!("{}:{}: {name}", path.display(), i + 1));
        }
    }
    out
}

#[test]
fn every_public_op_reports_the_callers_line() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut checked = 0;
    let mut lacking = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src");
        let op_folder = rel.starts_with("ops") || rel.starts_with("nn/functional");
        let source = std::fs::read_to_string(&path).expect("read a source file");
        if op_folder || source.contains("dispatch::enter") || source.contains("dispatch::opaque") {
            checked += 1;
            lacking.extend(missing(&path, &source, op_folder));
        }
    }
    assert!(checked > 20, "only {checked} files scanned: wrong folder?");
    assert!(
        lacking.is_empty(),
        "public ops without #[track_caller]:\n{}",
        lacking.join("\n")
    );
}

/// The scan itself finds a missing attribute (it would pass vacuously otherwise).
#[test]
fn the_scan_finds_a_public_op_without_the_attribute() {
    let source = "impl Tensor {\n    /// Doc.\n    pub fn relu(&self) -> Tensor {\n        let e = crate::dispatch::enter();\n    }\n\n    /// Doc.\n    #[track_caller]\n    pub fn exp(&self) -> Tensor {\n        todo!()\n    }\n}\n";
    let found = missing(Path::new("x.rs"), source, true);
    assert_eq!(found, vec!["x.rs:3: relu".to_string()]);
}

/// A shape mistake in a traced op that had no `#[track_caller]` (`add_scalar` on a
/// strided-view mismatch is hard to reach, so: `sum_all` of a tensor through a bad
/// `matmul`) points at this file.
#[test]
fn a_shape_mistake_points_at_the_users_line() {
    use ferrograd::prelude::*;
    let a = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
    let b = Tensor::ones(&[4, 5], DType::F32, &Device::Cpu);
    let hook = std::panic::take_hook();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let s2 = seen.clone();
    std::panic::set_hook(Box::new(move |info| {
        if let Some(l) = info.location() {
            *s2.lock().unwrap() = format!("{}:{}", l.file(), l.line());
        }
    }));
    let r = std::panic::catch_unwind(|| a.matmul(&b));
    std::panic::set_hook(hook);
    assert!(r.is_err());
    let at = seen.lock().unwrap().clone();
    assert!(at.contains("tests/track_caller.rs"), "reported at {at}");
}
