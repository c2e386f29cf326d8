//! The profiler on a LeNet-style training step: every op of the forward, the backward's
//! ops under one `backward` range, self times that add up, a table and a Chrome trace.

use ferrograd::nn::functional as F;
use ferrograd::prelude::*;
use ferrograd::profiler::{self, ProfilerOptions, SortBy};

fn step(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let h = F::conv2d(x, &p[0], Some(&p[1]), &Default::default()).relu();
    let h = F::max_pool2d(&h, 2).flatten(1, -1);
    let loss = F::cross_entropy(&F::linear(&h, &p[2], Some(&p[3])), y);
    loss.backward();
    loss
}

#[test]
fn a_training_step_is_profiled_op_by_op() {
    let x = Tensor::randn(&[8, 1, 12, 12], DType::F32, &Device::Cpu);
    let y = Tensor::from_vec((0..8).map(|i| i % 10).collect::<Vec<i64>>(), &[8]);
    let p: Vec<Tensor> = [&[4usize, 1, 3, 3][..], &[4], &[10, 100], &[10]]
        .iter()
        .map(|s| Tensor::randn(s, DType::F32, &Device::Cpu).requires_grad(true))
        .collect();
    let (loss, profile) = profiler::profile(ProfilerOptions::default(), || step(&p, &x, &y));
    assert!(loss.item::<f32>().is_finite());
    let names: Vec<&str> = profile.events().iter().map(|e| e.name.as_str()).collect();
    for op in ["conv2d", "relu", "max_pool2d", "linear", "backward"] {
        assert!(names.contains(&op), "{op} missing from {names:?}");
    }
    let conv = profile
        .events()
        .iter()
        .find(|e| e.name == "conv2d")
        .unwrap();
    assert_eq!(conv.depth, 0);
    assert_eq!(conv.input_shapes[0], vec![8, 1, 12, 12]);
    // The backward range holds the gradient ops; its self time is what they leave.
    let backward = profile
        .events()
        .iter()
        .find(|e| e.name == "backward")
        .unwrap();
    let inside: Vec<_> = profile
        .events()
        .iter()
        .filter(|e| {
            e.depth == backward.depth + 1
                && e.start_us >= backward.start_us
                && e.start_us <= backward.start_us + backward.duration_us
        })
        .collect();
    assert!(!inside.is_empty(), "no op recorded inside backward");
    let children: f64 = inside.iter().map(|e| e.duration_us).sum();
    assert!((backward.self_us - (backward.duration_us - children)).abs() < 1e-6);
    for e in profile.events() {
        assert!(
            e.self_us >= 0.0 && e.self_us <= e.duration_us + 1e-9,
            "{e:?}"
        );
    }
    // Host memory is the process's (other threads' allocations count too), so only its
    // absence is exact: without profile_memory every op reports 0.
    let (_, quiet) = profiler::profile(
        ProfilerOptions {
            profile_memory: false,
            record_shapes: false,
            ..ProfilerOptions::default()
        },
        || x.relu().sum_all(),
    );
    assert!(
        quiet
            .events()
            .iter()
            .all(|e| e.self_memory_bytes == 0 && e.input_shapes.is_empty())
    );

    let stats = profile.key_averages(false);
    let relu = stats.iter().find(|s| s.name == "relu").unwrap();
    assert_eq!(relu.calls, 1);
    let table = profile.table(SortBy::Total, 20);
    assert!(
        table.contains("Self CPU %") && table.contains("conv2d"),
        "{table}"
    );
    let path = std::env::temp_dir().join(format!("ferrograd-trace-{}.json", std::process::id()));
    profile.export_chrome_trace(&path).unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let all = trace["traceEvents"].as_array().unwrap();
    // The ops and the other threads' spans as "X" events; the rows' names as "M".
    let events: Vec<&serde_json::Value> = all.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(
        events.len(),
        profile.events().len() + profile.thread_spans().len()
    );
    assert!(events.iter().all(|e| e["dur"].as_f64().unwrap() >= 0.0));
    assert!(all.iter().all(|e| e["ph"] == "X" || e["ph"] == "M"));
    std::fs::remove_file(&path).ok();

    // Off again: nothing is recorded, and a profile on another thread sees only its own.
    assert!(!profiler::is_profiling());
    let other = std::thread::spawn(move || {
        profiler::profile(ProfilerOptions::default(), || {
            Tensor::ones(&[2], DType::F32, &Device::Cpu).exp()
        })
        .1
    });
    let _ = step(&p, &x, &y);
    let other = other.join().unwrap();
    let theirs: Vec<&str> = other.events().iter().map(|e| e.name.as_str()).collect();
    assert!(theirs.contains(&"exp"), "{theirs:?}");
    assert!(!theirs.contains(&"conv2d"), "{theirs:?}");
}

#[test]
fn an_op_that_panics_leaves_the_profile_usable() {
    let (_, profile) = profiler::profile(ProfilerOptions::default(), || {
        let a = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
        let bad = std::panic::catch_unwind(|| a.matmul(&a));
        assert!(bad.is_err());
        a.sum_all()
    });
    // After the panic the stack is back at the top: the sum is recorded at depth 0.
    let top: Vec<&str> = profile
        .events()
        .iter()
        .filter(|e| e.depth == 0)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(top.last(), Some(&"sum"), "{:?}", profile.events());
}

/// `cross_entropy`'s forward is one fused kernel: it shows in the profile under its own
/// name (it once showed only as `cross_entropy_backward`), with the input shapes, and so
/// does every other functional made of other ops, each once.
#[test]
fn every_functional_is_recorded_under_its_name() {
    let x = Tensor::randn(&[4, 5], DType::F32, &Device::Cpu);
    let t = Tensor::rand(&[4, 5], DType::F32, &Device::Cpu);
    let y = Tensor::from_vec(vec![0i64, 3, 1, 4], &[4]);
    let sign = Tensor::from_vec(vec![1.0f32, -1.0, 1.0, -1.0], &[4]);
    let img = Tensor::randn(&[2, 4, 6, 6], DType::F32, &Device::Cpu);
    let seq = Tensor::randn(&[2, 3, 8], DType::F32, &Device::Cpu);
    let w = Tensor::randn(&[3, 5, 5], DType::F32, &Device::Cpu);
    let b = Tensor::randn(&[5], DType::F32, &Device::Cpu);
    use F::Reduction::Mean;
    type Case<'a> = (&'static str, Box<dyn Fn() -> Tensor + 'a>);
    let cases: Vec<Case> = vec![
        ("cross_entropy", Box::new(|| F::cross_entropy(&x, &y))),
        ("nll_loss", Box::new(|| F::nll_loss(&x.log_softmax(1), &y))),
        ("mse_loss", Box::new(|| F::mse_loss(&x, &t, Mean))),
        ("l1_loss", Box::new(|| F::l1_loss(&x, &t, Mean))),
        (
            "smooth_l1_loss",
            Box::new(|| F::smooth_l1_loss(&x, &t, Mean, 1.0)),
        ),
        ("huber_loss", Box::new(|| F::huber_loss(&x, &t, Mean, 1.0))),
        (
            "binary_cross_entropy",
            Box::new(|| F::binary_cross_entropy(&x.sigmoid(), &t, None, Mean)),
        ),
        (
            "binary_cross_entropy_with_logits",
            Box::new(|| F::binary_cross_entropy_with_logits(&x, &t, Mean)),
        ),
        (
            "kl_div",
            Box::new(|| F::kl_div(&x.log_softmax(1), &t, F::KlReduction::BatchMean, false)),
        ),
        (
            "margin_ranking_loss",
            Box::new(|| {
                F::margin_ranking_loss(
                    &x.narrow(1, 0, 1).reshape(&[4]),
                    &b.narrow(0, 0, 4),
                    &sign,
                    0.1,
                    Mean,
                )
            }),
        ),
        (
            "cosine_similarity",
            Box::new(|| F::cosine_similarity(&x, &t, 1, 1e-8)),
        ),
        (
            "pairwise_distance",
            Box::new(|| F::pairwise_distance(&x, &t, 2.0, 1e-6)),
        ),
        ("bias_gelu", Box::new(|| F::bias_gelu(&x, &b))),
        ("bilinear", Box::new(|| F::bilinear(&x, &x, &w, None))),
        ("pixel_shuffle", Box::new(|| F::pixel_shuffle(&img, 2))),
        ("pixel_unshuffle", Box::new(|| F::pixel_unshuffle(&img, 2))),
        (
            "adaptive_max_pool1d",
            Box::new(|| F::adaptive_max_pool1d(&seq, 2)),
        ),
    ];
    for (name, f) in &cases {
        let (_, profile) = profiler::profile(ProfilerOptions::default(), f);
        let top: Vec<&str> = profile
            .events()
            .iter()
            .filter(|e| e.depth == 0)
            .map(|e| e.name.as_str())
            .collect();
        assert!(top.contains(name), "{name} is not in the profile: {top:?}");
        let own: Vec<_> = profile
            .events()
            .iter()
            .filter(|e| e.name == *name)
            .collect();
        assert_eq!(own.len(), 1, "{name} recorded {} times", own.len());
        assert!(
            !own[0].input_shapes.is_empty(),
            "{name} without its input shapes"
        );
    }
}

/// Every public functional goes through the dispatch seam: with its schema
/// (`dispatch::enter`), marked as having none (`dispatch::opaque`), or by only calling
/// another functional that does.
#[test]
fn every_public_functional_opens_a_profiler_frame() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/src/nn/functional");
    let (seen, missing) = unprofiled(&[dir], "");
    assert!(seen > 50, "only {seen} functionals found");
    assert!(missing.is_empty(), "not profiled:\n{}", missing.join("\n"));
}

/// The public functions (`pub fn` after `indent`) of the sources in `dirs` that neither
/// reach the dispatch seam (`dispatch::enter` or `dispatch::opaque`) nor only call
/// another function: how
/// many were seen, and those.
fn unprofiled(dirs: &[std::path::PathBuf], indent: &str) -> (usize, Vec<String>) {
    let mut missing = Vec::new();
    let mut seen = 0;
    let (start, close) = (format!("{indent}pub fn "), format!("{indent}}}"));
    for dir in dirs {
        for entry in std::fs::read_dir(dir).expect("sources") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).expect("read");
            let lines: Vec<&str> = source.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let Some(rest) = line.strip_prefix(start.as_str()) else {
                    continue;
                };
                seen += 1;
                // The function ends at its closing brace at its own indentation.
                let end = (i..lines.len())
                    .find(|&k| lines[k] == close)
                    .map_or(lines.len(), |k| k + 1);
                let body = lines[i..end].join("\n");
                let delegates = body
                    .split_once('{')
                    .map(|(_, b)| b.trim().trim_end_matches('}').trim())
                    .is_some_and(|b| !b.contains(';') && !b.contains('{'));
                if !(body.contains("dispatch::enter")
                    || body.contains("dispatch::opaque")
                    || delegates)
                {
                    let name = rest.split(['(', '<']).next().unwrap_or("");
                    missing.push(format!("{}: {name}", path.display()));
                }
            }
        }
    }
    (seen, missing)
}

/// `torch.profiler.schedule`'s actions, step by step, as torch 2.15.0 gives them
/// (`[schedule(wait=w, warmup=u, active=a, repeat=r, skip_first=s)(i) for i in range(16)]`).
#[test]
fn the_schedule_is_torchs() {
    use ferrograd::profiler::Schedule;
    let cases = [
        ((1, 1, 2, 1, 1), "NNWRSNNNNNNNNNNN"),
        ((0, 0, 1, 0, 0), "SSSSSSSSSSSSSSSS"),
        ((2, 1, 3, 2, 0), "NNWRRSNNWRRSNNNN"),
        ((1, 0, 1, 3, 2), "NNNSNSNSNNNNNNNN"),
    ];
    for ((wait, warmup, active, repeat, skip_first), want) in cases {
        let s = Schedule {
            wait,
            warmup,
            active,
            repeat,
            skip_first,
        };
        let got: String = (0..16)
            .map(|i| match s.action(i) {
                profiler::ProfilerAction::None => 'N',
                profiler::ProfilerAction::Warmup => 'W',
                profiler::ProfilerAction::Record => 'R',
                profiler::ProfilerAction::RecordAndSave => 'S',
            })
            .collect();
        assert_eq!(got, want, "{s:?}");
    }
}

/// Each cycle's active steps reach `on_trace_ready` with a `ProfilerStep#N` range each
/// and their ops; the waiting and warm-up steps' ops do not; a cycle cut short by `stop`
/// is handed over too.
#[test]
fn a_scheduled_profile_hands_over_each_cycle() {
    use ferrograd::profiler::{Profile, Schedule, ScheduledProfiler};
    use std::sync::{Arc, Mutex};
    let traces: Arc<Mutex<Vec<Profile>>> = Arc::default();
    let sink = traces.clone();
    let schedule = Schedule {
        wait: 1,
        warmup: 1,
        active: 2,
        repeat: 0,
        skip_first: 1,
    };
    let mut prof = ScheduledProfiler::new(
        ProfilerOptions::default(),
        schedule,
        Box::new(move |p| {
            sink.lock().unwrap().push(p.clone());
            Ok(())
        }),
    );
    let x = Tensor::randn(&[4, 4], DType::F32, &Device::Cpu);
    // Steps 0..11: skip 0; cycles 1-4, 5-8 and 9-10 (cut short after its first active
    // step, 11 being the last step run).
    for _ in 0..11 {
        x.relu();
        prof.step().unwrap();
    }
    x.relu();
    prof.stop().unwrap();
    let traces = traces.lock().unwrap();
    assert_eq!(traces.len(), 3);
    for (trace, steps) in traces.iter().zip([&[3usize, 4][..], &[7, 8], &[11]]) {
        let ranges: Vec<String> = trace
            .events()
            .iter()
            .filter(|e| e.name.starts_with("ProfilerStep#"))
            .map(|e| e.name.clone())
            .collect();
        let want: Vec<String> = steps.iter().map(|s| format!("ProfilerStep#{s}")).collect();
        assert_eq!(ranges, want);
        let relus = trace.events().iter().filter(|e| e.name == "relu").count();
        assert_eq!(relus, steps.len());
        // Each op sits inside its step's range.
        assert!(
            trace
                .events()
                .iter()
                .filter(|e| e.name == "relu")
                .all(|e| e.depth == 1)
        );
    }
}

/// The thread team's helpers and the data loader's workers appear on rows of their own:
/// a helper's share of a matmul is named after it; each worker's batch is a span.
#[test]
fn other_threads_have_their_own_rows() {
    use ferrograd::data::{DataLoader, TensorDataset};
    let before = ferrograd::get_num_threads();
    if before < 2 {
        ferrograd::set_num_threads(2);
    }
    let a = Tensor::randn(&[384, 384], DType::F32, &Device::Cpu);
    let ds = TensorDataset::new(vec![Tensor::randn(&[64, 8], DType::F32, &Device::Cpu)]);
    let mut loader = DataLoader::builder(ds)
        .batch_size(16)
        .num_workers(2)
        .build();
    let (_, profile) = profiler::profile(ProfilerOptions::default(), || {
        for _ in 0..20 {
            a.matmul(&a);
        }
        loader.iter().filter(|b| b.is_ok()).count()
    });
    if before < 2 {
        ferrograd::set_num_threads(0);
    }
    let spans = profile.thread_spans();
    assert!(
        spans
            .iter()
            .any(|s| s.thread.starts_with("ferrograd-cpu-") && s.name == "matmul"),
        "{spans:?}"
    );
    let batches: Vec<&str> = spans
        .iter()
        .filter(|s| s.thread.starts_with("ferrograd-data-"))
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(batches.len(), 4, "{spans:?}");
    for i in 0..4 {
        assert!(batches.contains(&format!("DataLoader batch {i}").as_str()));
    }
    // The Chrome trace names each row after its thread.
    let path = std::env::temp_dir().join(format!("ferrograd-rows-{}.json", std::process::id()));
    profile.export_chrome_trace(&path).unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    let rows: Vec<String> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        rows.iter().any(|r| r.starts_with("ferrograd-cpu-")),
        "{rows:?}"
    );
    assert!(rows.iter().any(|r| r == "ferrograd-data-0"), "{rows:?}");
    assert!(rows.iter().any(|r| r == "ferrograd-data-1"), "{rows:?}");
}

/// Every public tensor op goes through the dispatch seam: with its schema
/// (`dispatch::enter`), marked as having none (`dispatch::opaque`), or by only calling
/// another op that does.
#[test]
fn every_public_op_opens_a_profiler_frame() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/src/ops");
    let (seen, missing) = unprofiled(&[root.clone(), root.join("elementwise")], "    ");
    assert!(seen > 100, "only {seen} ops found");
    assert!(missing.is_empty(), "not profiled:\n{}", missing.join("\n"));
}

/// Ops made of other ops, and ops with kernels of their own that the tracer does not
/// see, appear under their own names, their parts beneath them (as `aten::flip` above
/// `aten::index_select`).
#[test]
fn composite_ops_are_recorded_under_their_names() {
    let x = Tensor::randn(&[4, 5], DType::F32, &Device::Cpu);
    let idx = Tensor::from_vec(vec![0i64, 2], &[2]);
    type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let cases: Vec<Case> = vec![
        ("index_select", Box::new(|| drop(x.index_select(0, &idx)))),
        ("flip", Box::new(|| drop(x.flip(&[1])))),
        ("var", Box::new(|| drop(x.var(&[1], true, false)))),
        ("sort", Box::new(|| drop(x.sort(1, false)))),
        ("topk", Box::new(|| drop(x.topk(2, 1, true)))),
        (
            "einsum",
            Box::new(|| drop(Tensor::einsum("ij,kj->ik", &[&x, &x]))),
        ),
        ("cumsum", Box::new(|| drop(x.cumsum(1)))),
        ("norm", Box::new(|| drop(x.norm(2.0, &[1], false)))),
    ];
    for (name, f) in &cases {
        let (_, profile) = profiler::profile(ProfilerOptions::default(), f);
        let own: Vec<_> = profile
            .events()
            .iter()
            .filter(|e| e.name == *name)
            .collect();
        assert_eq!(own.len(), 1, "{name}: {:?}", profile.events());
        assert_eq!(own[0].depth, 0, "{name} is not the outermost");
        assert_eq!(own[0].input_shapes.first(), Some(&vec![4, 5]), "{name}");
    }
}
