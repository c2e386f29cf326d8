//! The dispatch seam: every op is described once and runs through one place, where the
//! tracer, the profiler and user hooks attach.
//!
//! - No op names the tracer or the profiler (they attach at the seam), or reads the
//!   autocast state: it asks the seam (`dispatch::cast`), whose one table is the policy.
//! - Every schema variant has an exporter mapping (the exporter's match names each and
//!   has no catch-all), and an op without one says so (`dispatch::opaque`); that every
//!   public op reaches the seam one way or the other is `tests/train/profiler.rs`'s scan.
//! - A user's hook sees the ops the code calls, with shapes and the caller's line.

use ferrograd::dispatch::{DispatchHook, OpEvent, with_hook};
use ferrograd::prelude::*;
use std::path::{Path, PathBuf};

mod common;
use common::rust_files;

fn runtime_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/src")
}

#[test]
fn no_op_names_the_tracer_or_the_profiler() {
    let src = runtime_src();
    let mut files = Vec::new();
    for dir in ["ops", "nn", "tensor"] {
        rust_files(&src.join(dir), &mut files);
    }
    assert!(
        files.len() > 40,
        "only {} files: wrong folder?",
        files.len()
    );
    let mut offenders = Vec::new();
    for path in files {
        let source = std::fs::read_to_string(&path).expect("read a source file");
        for (i, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("onnx::trace")
                || code.contains("OpRecord")
                || code.contains("autocast_dtype")
                || code.contains("autocast_state")
            {
                offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "ops that name the tracer or the profiler instead of the seam:\n{}",
        offenders.join("\n")
    );
}

/// The op names the ops pass to `dispatch::cast` / `dispatch::cast_with_bias`.
fn names_asking_autocast() -> std::collections::BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&runtime_src(), &mut files);
    let mut names = std::collections::BTreeSet::new();
    for path in files {
        if path.ends_with("dispatch/autocast.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("read a source file");
        for marker in ["dispatch::cast(", "dispatch::cast_with_bias("] {
            for (at, _) in source.match_indices(marker) {
                let rest = source[at + marker.len()..].trim_start();
                let name = rest
                    .strip_prefix('"')
                    .and_then(|r| r.split('"').next())
                    .unwrap_or_else(|| panic!("{}: a cast without a literal name", path.display()));
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn the_autocast_table_and_the_ops_that_ask_it_agree() {
    let asked = names_asking_autocast();
    let table: std::collections::BTreeSet<String> = ferrograd::amp::autocast_ops()
        .map(|(n, _)| n.to_string())
        .collect();
    assert!(
        asked.len() > 20,
        "only {} ops ask: wrong scan?",
        asked.len()
    );
    assert_eq!(
        asked, table,
        "every op that asks the seam to cast has a policy, and every policy an op"
    );
}

#[test]
fn autocast_follows_the_table() {
    let x = Tensor::randn(&[4, 8], DType::F32, &Device::Cpu);
    let w = Tensor::randn(&[8, 3], DType::F32, &Device::Cpu);
    ferrograd::amp::autocast(DType::BF16, || {
        let y = x.matmul(&w); // lower precision
        assert_eq!(y.dtype(), DType::BF16);
        assert_eq!(y.softmax(-1).dtype(), DType::F32); // f32
        assert_eq!(y.relu().dtype(), DType::BF16); // not in the table: as it is
    });
}

/// The variant names of `enum Op` in the schema.
fn schema_variants() -> Vec<String> {
    let schema = std::fs::read_to_string(runtime_src().join("dispatch/schema.rs")).unwrap();
    let body = schema
        .split("pub(crate) enum Op {")
        .nth(1)
        .expect("the schema's enum Op");
    let body = &body[..body.find("\n}").expect("its end")];
    body.lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_alphanumeric())
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn every_schema_has_an_exporter_mapping() {
    let variants = schema_variants();
    assert!(variants.len() > 30, "only {variants:?}");
    let export = std::fs::read_to_string(runtime_src().join("onnx/export/records.rs")).unwrap();
    let at = export
        .find("match &rec.op {")
        .expect("the exporter's match over the schema");
    // The match's arms, to its closing brace at the same indentation.
    let arms = &export[at..];
    let arms = &arms[..arms.find("\n        }\n").expect("the match's end")];
    let missing: Vec<&String> = variants
        .iter()
        .filter(|v| !arms.contains(&format!("Op::{v}")))
        .collect();
    assert!(
        missing.is_empty(),
        "schemas without an exporter mapping: {missing:?}"
    );
    assert!(
        !arms.contains("\n            _ =>"),
        "the exporter's match has a catch-all: a new schema would pass unmapped"
    );
}

#[test]
fn a_hook_sees_each_op_the_code_calls_with_shapes_and_line() {
    #[derive(Default)]
    struct Log(Vec<(String, Vec<Vec<usize>>, u32, bool)>);
    impl DispatchHook for Log {
        fn on_op(&mut self, op: &OpEvent<'_>) {
            self.0.push((
                op.name().into_owned(),
                op.input_shapes(),
                op.location().line(),
                op.is_exportable(),
            ));
        }
    }
    let x = Tensor::randn(&[3, 4], DType::F32, &Device::Cpu);
    let w = Tensor::randn(&[5, 4], DType::F32, &Device::Cpu);
    let line = line!() + 3;
    let (y, log) = with_hook(Log::default(), || {
        // F::linear runs matmul inside: the hook sees linear only.
        let h = F::linear(&x, &w, None);
        let s = h.sort(1, false).0;
        F::mse_loss(&s, &Tensor::zeros_like(&s), F::Reduction::Mean)
    });
    assert!(y.item::<f32>() >= 0.0);
    let names: Vec<&str> = log.0.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["linear", "sort", "fill", "mse_loss"], "{:?}", log.0);
    assert_eq!(log.0[0].1, [vec![3, 4], vec![5, 4]]);
    assert_eq!(log.0[0].2, line);
    assert!(log.0[0].3, "linear has an exporter mapping");
    assert!(!log.0[1].3, "sort has none");
}

#[test]
fn a_hook_nests_with_a_profile() {
    struct Count(usize);
    impl DispatchHook for Count {
        fn on_op(&mut self, _: &OpEvent<'_>) {
            self.0 += 1;
        }
    }
    let x = Tensor::randn(&[2, 3], DType::F32, &Device::Cpu);
    let (((), profile), count) = with_hook(Count(0), || {
        ferrograd::profiler::profile(Default::default(), || {
            x.relu().exp().sum_all();
        })
    });
    assert_eq!(count.0, 3);
    let names: Vec<&str> = profile
        .events()
        .iter()
        .filter(|e| e.depth == 0)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["relu", "exp", "sum"]);
}
