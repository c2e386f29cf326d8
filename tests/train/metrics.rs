//! The incremental metrics against scikit-learn and torchmetrics
//! (`tests/fixtures/make_metric_fixtures.py`): the fixture's 97 samples are fed in
//! uneven batches, and each metric must equal the reference on the whole set.

use ferrograd::prelude::*;
use ferrograd::train::metrics::{
    Accuracy, Auroc, Average, ConfusionMatrix, Metric, Perplexity, PrecisionRecallF1, Score,
};
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics/classification.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

fn floats(v: &Value) -> Vec<f32> {
    fn walk(v: &Value, out: &mut Vec<f32>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            x => out.push(x.as_f64().expect("number") as f32),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    out
}

fn ints(v: &Value) -> Vec<i64> {
    floats(v).into_iter().map(|x| x as i64).collect()
}

/// Feeds `(preds, target)` row blocks of sizes 1, 7, 30, ... to the metric.
fn feed(metric: &mut dyn Metric, preds: &Tensor, target: &Tensor) {
    let n = preds.shape()[0];
    let mut start = 0;
    for size in [1usize, 7, 30, 13, 100].iter().cycle() {
        if start == n {
            break;
        }
        let len = (*size).min(n - start);
        metric.update(&preds.narrow(0, start, len), &target.narrow(0, start, len));
        start += len;
    }
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: ferrograd {got}, reference {want}"
    );
}

#[test]
fn classification_metrics_equal_scikit_learn() {
    let f = fixture();
    let c = f["num_classes"].as_u64().unwrap() as usize;
    let target_v = ints(&f["target"]);
    let n = target_v.len();
    let logits = Tensor::from_vec(floats(&f["logits"]), &[n, c]);
    let target = Tensor::from_vec(target_v, &[n]);
    let want = |k: &str| f[k].as_f64().unwrap();
    let mut cases: Vec<(Box<dyn Metric>, String)> = vec![
        (Box::new(Accuracy::new()), "accuracy".into()),
        (Box::new(Accuracy::top_k(2)), "top2".into()),
        (Box::new(Accuracy::top_k(3)), "top3".into()),
    ];
    for (avg, a) in [
        (Average::Macro, "macro"),
        (Average::Micro, "micro"),
        (Average::Weighted, "weighted"),
    ] {
        for (score, s) in [
            (Score::Precision, "precision"),
            (Score::Recall, "recall"),
            (Score::F1, "f1"),
        ] {
            cases.push((
                Box::new(PrecisionRecallF1::new(score, avg, c)),
                format!("{s}_{a}"),
            ));
        }
    }
    // Softmax probabilities for AUROC, as the reference used.
    cases.push((Box::new(Auroc::new()), "auroc_ovr_macro_present".into()));
    for (mut metric, key) in cases {
        let key = key.as_str();
        let preds = if key.starts_with("auroc") {
            logits.softmax(1)
        } else {
            logits.clone()
        };
        feed(metric.as_mut(), &preds, &target);
        close(metric.compute(), want(key), key);
        // reset forgets everything; a second pass gives the same value.
        metric.reset();
        feed(metric.as_mut(), &preds, &target);
        close(metric.compute(), want(key), key);
    }
    let mut cm = ConfusionMatrix::new(c);
    feed(&mut cm, &logits, &target);
    let want_cm: Vec<Vec<u64>> = f["confusion"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(cm.matrix(), want_cm);
    close(cm.compute(), want("accuracy"), "confusion matrix trace");
}

/// The metrics as data-parallel ranks hold them: the 97 samples split over three ranks
/// (one with none), each rank's counts summed (`sync_state`) or its scores gathered
/// (`gather_state`) as the Trainer does under DDP, and loaded into one metric, which
/// must equal the reference on the whole set.
#[test]
fn metrics_split_over_ranks_and_joined_equal_scikit_learn() {
    let f = fixture();
    let c = 5;
    let target_v = ints(&f["target"]);
    let n = target_v.len();
    let logits = Tensor::from_vec(floats(&f["logits"]), &[n, c]);
    let target = Tensor::from_vec(target_v, &[n]);
    let probs = logits.softmax(1);
    type Make = Box<dyn Fn() -> Box<dyn Metric>>;
    let cases: Vec<(Make, &str, &Tensor)> = vec![
        (Box::new(|| Box::new(Accuracy::new())), "accuracy", &logits),
        (Box::new(|| Box::new(Accuracy::top_k(2))), "top2", &logits),
        (
            Box::new(move || Box::new(PrecisionRecallF1::new(Score::F1, Average::Macro, c))),
            "f1_macro",
            &logits,
        ),
        (
            Box::new(move || {
                Box::new(PrecisionRecallF1::new(
                    Score::Precision,
                    Average::Weighted,
                    c,
                ))
            }),
            "precision_weighted",
            &logits,
        ),
        (
            Box::new(|| Box::new(Auroc::new())),
            "auroc_ovr_macro_present",
            &probs,
        ),
    ];
    let shards = [(0, 40), (40, 0), (40, n - 40)];
    for (make, key, preds) in cases {
        let mut ranks: Vec<Box<dyn Metric>> = shards
            .iter()
            .map(|&(start, len)| {
                let mut m = make();
                if len > 0 {
                    feed(
                        m.as_mut(),
                        &preds.narrow(0, start, len),
                        &target.narrow(0, start, len),
                    );
                }
                m
            })
            .collect();
        let sums = ranks
            .iter()
            .map(|m| m.sync_state())
            .fold(Vec::<f64>::new(), |mut acc, s| {
                acc.resize(acc.len().max(s.len()), 0.0);
                acc.iter_mut().zip(&s).for_each(|(a, x)| *a += x);
                acc
            });
        let gathered: Option<Vec<Vec<f64>>> = ranks.iter().map(|m| m.gather_state()).collect();
        assert!(
            !sums.is_empty() || gathered.is_some(),
            "{key}: nothing to reduce over ranks"
        );
        for m in &mut ranks {
            if !sums.is_empty() {
                m.load_sync_state(&sums);
            }
            if let Some(parts) = &gathered {
                m.load_gathered_state(parts);
            }
            close(m.compute(), f[key].as_f64().unwrap(), key);
        }
    }
}

#[test]
fn binary_auroc_with_ties_equals_scikit_learn() {
    let f = fixture();
    let scores = floats(&f["binary_scores"]);
    let n = scores.len();
    let mut auc = Auroc::new();
    feed(
        &mut auc,
        &Tensor::from_vec(scores, &[n]).to_dtype(DType::F64),
        &Tensor::from_vec(ints(&f["binary_labels"]), &[n]),
    );
    // The scores are rounded to one decimal in f64; through f32 they keep their ties.
    close(
        auc.compute(),
        f["auroc_binary"].as_f64().unwrap(),
        "binary AUROC",
    );
}

#[test]
fn perplexity_equals_torchmetrics() {
    let f = fixture();
    let logits = Tensor::from_vec(floats(&f["lm_logits"]), &[2, 9, 6]);
    let target = Tensor::from_vec(ints(&f["lm_target"]), &[2, 9]);
    let mut ppl = Perplexity::new(Some(-100));
    ppl.update(&logits.narrow(0, 0, 1), &target.narrow(0, 0, 1));
    ppl.update(&logits.narrow(0, 1, 1), &target.narrow(0, 1, 1));
    // torchmetrics computes in f32.
    let want = f["perplexity"].as_f64().unwrap();
    assert!(
        (ppl.compute() - want).abs() < 1e-5 * want,
        "{} vs {want}",
        ppl.compute()
    );
}

#[test]
#[should_panic(expected = "target class 7 is outside 0..3")]
fn a_target_outside_the_classes_panics_naming_it() {
    Accuracy::new().update(
        &Tensor::zeros(&[1, 3], DType::F32, &Device::Cpu),
        &Tensor::from_vec(vec![7i64], &[1]),
    );
}

/// Top-k accuracy on tied scores follows the documented rule, lower class index first
/// (`argmax`'s): equal to scikit-learn's `top_k_accuracy_score` on the classes reversed
/// (its rule is the higher index first), to torchmetrics at k = 1 and on untied scores,
/// and to the accuracy of `argmax` predictions. Degenerate sets: one class with all
/// scores equal, a single sample.
#[test]
fn top_k_accuracy_with_ties_follows_the_documented_rule() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics/ties.json"
    );
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let c = case["num_classes"].as_u64().unwrap() as usize;
        let scores_v = floats(&case["scores"]);
        let n = scores_v.len() / c;
        let scores = Tensor::from_vec(scores_v, &[n, c]);
        let target = Tensor::from_vec(ints(&case["target"]), &[n]);
        for k in 1..c {
            let mut acc = Accuracy::top_k(k);
            feed(&mut acc, &scores, &target);
            let got = acc.compute();
            let want = case[format!("sklearn_reversed_top{k}")].as_f64().unwrap();
            close(
                got,
                want,
                &format!("{name} top-{k} against scikit-learn reversed"),
            );
            let untied = name == "untied";
            if untied {
                let sk = case[format!("sklearn_top{k}")].as_f64().unwrap();
                close(got, sk, &format!("{name} top-{k} against scikit-learn"));
            }
            if untied || k == 1 {
                let tm = case[format!("torchmetrics_top{k}")].as_f64().unwrap();
                assert!(
                    (got - tm).abs() < 1e-6,
                    "{name} top-{k}: {got} vs torchmetrics {tm}"
                );
            }
        }
        let mut top1 = Accuracy::new();
        feed(&mut top1, &scores, &target);
        close(
            top1.compute(),
            case["argmax_accuracy"].as_f64().unwrap(),
            &format!("{name} top-1 against argmax predictions"),
        );
    }
}

fn cases() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics/cases.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

/// A reference's value: `Some(x)`, `Some(NaN)` where it said NaN, `None` where it
/// raised.
fn reference(v: &Value) -> Option<f64> {
    match v {
        Value::Null => Some(f64::NAN),
        Value::String(s) if s == "error" => None,
        x => Some(x.as_f64().expect("a number")),
    }
}

/// `got` against a reference computed in `f32` (torchmetrics) or `f64` (scikit-learn):
/// equal within 1e-6, NaN for NaN.
fn agrees(got: f64, want: f64, what: &str) {
    if want.is_nan() {
        assert!(got.is_nan(), "{what}: ferrograd {got}, reference NaN");
    } else {
        assert!(
            (got - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{what}: ferrograd {got}, reference {want}"
        );
    }
}

/// Every metric on random, tied and degenerate inputs (one class present, one sample, no
/// samples), against scikit-learn and torchmetrics (`make_metric_cases.py`). The rules
/// where the references part ways:
/// - top-k on tied scores: the lower index first, which is scikit-learn's answer on the
///   reversed classes; torchmetrics' order among ties (`torch.topk`'s) is unspecified;
/// - multiclass AUROC: the mean over the classes that have both positive and negative
///   samples (scikit-learn's per-class AUROC, averaged); torchmetrics counts a class
///   without positives as 0. NaN when no class has both (scikit-learn: undefined);
/// - no samples: both references raise; ours give NaN for the ratios of nothing
///   (accuracy, top-k, AUROC, perplexity), 0 for precision/recall/F1 (the
///   `zero_division=0` rule) and an all-zero confusion matrix.
#[test]
fn every_metric_on_every_case() {
    let all = cases();
    for case in all["classification"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let c = case["num_classes"].as_u64().unwrap() as usize;
        let t = ints(&case["target"]);
        let n = t.len();
        let scores = Tensor::from_vec(floats(&case["scores"]), &[n, c]);
        let target = Tensor::from_vec(t, &[n]);
        let (sk, tm) = (&case["sklearn"], &case["torchmetrics"]);
        let empty = n == 0;
        let run = |metric: &mut dyn Metric, preds: &Tensor| {
            feed(metric, preds, &target);
            metric.compute()
        };
        let check = |key: &str, got: f64, with_tm: bool| {
            let what = format!("{name}: {key}");
            match reference(&sk[key]) {
                Some(want) => agrees(got, want, &format!("{what} (scikit-learn)")),
                None => assert!(empty, "{what}: scikit-learn raised"),
            }
            if with_tm && let Some(want) = reference(&tm[key]) {
                agrees(got, want, &format!("{what} (torchmetrics)"));
            }
        };
        let acc = run(&mut Accuracy::new(), &scores);
        if empty {
            assert!(acc.is_nan(), "{name}: accuracy of nothing is NaN");
        }
        check("accuracy", acc, true);
        for k in 2..c {
            let got = run(&mut Accuracy::top_k(k), &scores);
            if empty {
                assert!(got.is_nan());
            }
            check(&format!("top{k}_accuracy"), got, name != "tied");
        }
        for (avg, a) in [
            (Average::Macro, "macro"),
            (Average::Micro, "micro"),
            (Average::Weighted, "weighted"),
        ] {
            for (score, s) in [
                (Score::Precision, "precision"),
                (Score::Recall, "recall"),
                (Score::F1, "f1"),
            ] {
                let got = run(&mut PrecisionRecallF1::new(score, avg, c), &scores);
                if empty {
                    assert_eq!(got, 0.0, "{name}: {s}_{a} of nothing");
                }
                check(&format!("{s}_{a}"), got, true);
            }
        }
        let mut cm = ConfusionMatrix::new(c);
        feed(&mut cm, &scores, &target);
        for (who, v) in [
            ("scikit-learn", &sk["confusion"]),
            ("torchmetrics", &tm["confusion"]),
        ] {
            if let Some(rows) = v.as_array() {
                let want: Vec<Vec<u64>> = rows
                    .iter()
                    .map(|r| {
                        r.as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap())
                            .collect()
                    })
                    .collect();
                assert_eq!(cm.matrix(), want, "{name}: confusion ({who})");
            }
        }
        if empty {
            assert_eq!(cm.matrix(), vec![vec![0u64; c]; c]);
        }
        let probs = scores.softmax(1);
        let auc = run(&mut Auroc::new(), &probs);
        agrees(
            auc,
            reference(&sk["auroc_ovr_present"]).unwrap(),
            &format!("{name}: AUROC (scikit-learn per class)"),
        );
        // torchmetrics' macro mean equals ours when every class has both kinds.
        if ["random", "tied"].contains(&name) {
            agrees(
                auc,
                reference(&tm["auroc_ovr_macro"]).unwrap(),
                &format!("{name}: AUROC (torchmetrics)"),
            );
        }
    }
    for case in all["binary"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let s = floats(&case["scores"]);
        let n = s.len();
        let mut auc = Auroc::new();
        feed(
            &mut auc,
            &Tensor::from_vec(s, &[n]),
            &Tensor::from_vec(ints(&case["target"]), &[n]),
        );
        let got = auc.compute();
        match reference(&case["sklearn"]["auroc"]) {
            Some(want) => agrees(got, want, &format!("binary {name} (scikit-learn)")),
            None => assert!(got.is_nan(), "binary {name}: AUROC of nothing is NaN"),
        }
        // torchmetrics gives 0 where scikit-learn's is undefined (one class).
        if name != "one_class"
            && let Some(want) = reference(&case["torchmetrics"]["auroc"])
        {
            agrees(got, want, &format!("binary {name} (torchmetrics)"));
        }
    }
    for case in all["perplexity"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let shape: Vec<usize> = case["logits_shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let logits = Tensor::from_vec(floats(&case["logits"]), &shape);
        let target = Tensor::from_vec(ints(&case["target"]), &shape[..2]);
        let mut ppl = Perplexity::new(Some(-100));
        ppl.update(&logits, &target);
        let want = reference(&case["torchmetrics"]["perplexity"]).unwrap();
        // torchmetrics computes in f32.
        if want.is_nan() {
            assert!(ppl.compute().is_nan(), "perplexity {name}");
        } else {
            assert!(
                (ppl.compute() - want).abs() < 1e-5 * want,
                "perplexity {name}: {} vs {want}",
                ppl.compute()
            );
        }
    }
    for case in all["mean"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut m = ferrograd::train::metrics::Mean::new("m");
        for (v, w) in case["values"]
            .as_array()
            .unwrap()
            .iter()
            .zip(case["weights"].as_array().unwrap())
        {
            m.add(v.as_f64().unwrap(), w.as_f64().unwrap());
        }
        agrees(m.value(), case["numpy"]["mean"].as_f64().unwrap(), name);
        let tm = case["torchmetrics"]["mean"].as_f64().unwrap();
        assert!((m.value() - tm).abs() < 1e-6, "mean {name} (torchmetrics)");
    }
}
