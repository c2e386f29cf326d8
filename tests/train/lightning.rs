//! What a Lightning user checks first, each as the scenario that found it wrong:
//!
//! - the per-step loss and the epoch mean have their own TensorBoard series
//!   (`train/loss_step`, `train/loss_epoch`), `lr` has one value per step, and values a
//!   step logs get `_step`/`_epoch` series as Lightning's `self.log(on_step, on_epoch)`;
//! - a NaN first value never becomes `EarlyStopping`'s best (`check_finite` stops at
//!   once, as Lightning's default does);
//! - a run stopped by `max_steps` inside an epoch resumes that epoch and ends where an
//!   unstopped run does;
//! - resuming from an earlier checkpoint leaves each step's values once: the run's
//!   TensorBoard view equals an uninterrupted run's;
//! - a mistyped monitor fails the fit (`strict`);
//! - the TensorBoard file is flushed during an epoch (`max_queue`).

use ferrograd::data::DataLoader;
use ferrograd::nn::{Forward, Module, functional as F};
use ferrograd::optim::{Sgd, SgdConfig};
use ferrograd::prelude::*;
use ferrograd::train::metrics::Accuracy;
use ferrograd::train::tensorboard::read_scalars;
use ferrograd::train::{
    Callback, Context, EarlyStopping, LearningRateMonitor, LogOptions, Mode, ModelCheckpoint,
    StepOutput, TrainError, TrainStep, Trainer, TrainerConfig,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::trainer::{Data, Mlp, data, dir, mlp, rng_lock};

fn step(m: &mut Mlp, b: Vec<Tensor>) -> StepOutput {
    let logits = m.forward(&b[0]);
    let acc = logits
        .argmax(1, false)
        .eq(&b[1])
        .to_dtype(DType::F64)
        .mean_all()
        .item::<f64>();
    StepOutput::new(F::cross_entropy(&logits, &b[1]))
        .with_predictions(logits, b[1].clone())
        .log_with("train/acc", acc, LogOptions::BOTH)
}

fn loaders(seed: u64) -> (DataLoader<Data>, DataLoader<Data>) {
    let (train_ds, val_ds) = {
        let _g = rng_lock();
        manual_seed(seed);
        data()
    };
    (
        DataLoader::builder(train_ds)
            .batch_size(16)
            .shuffle(true)
            .seed(5)
            .build(),
        DataLoader::builder(val_ds).batch_size(32).build(),
    )
}

fn config(root: &Path, epochs: usize) -> TrainerConfig {
    TrainerConfig {
        max_epochs: epochs,
        root_dir: root.to_path_buf(),
        progress: false,
        log_every: 1,
        ..Default::default()
    }
}

fn steps_of(series: &[(i64, f64)]) -> Vec<i64> {
    series.iter().map(|s| s.0).collect()
}

fn assert_each_step_once(scalars: &BTreeMap<String, Vec<(i64, f64)>>) {
    for (tag, series) in scalars {
        let steps = steps_of(series);
        let mut unique = steps.clone();
        unique.dedup();
        assert_eq!(steps, unique, "{tag} has a step twice");
    }
}

#[test]
fn step_and_epoch_values_have_their_own_series() {
    let init = {
        let _g = rng_lock();
        manual_seed(1);
        mlp().state_dict()
    };
    let mut m = mlp();
    m.load_state_dict(&init, true).unwrap();
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.1));
    let (mut train, mut val) = loaders(2);
    let root = dir("series");
    Trainer::new(config(&root, 3))
        .callback(LearningRateMonitor::new())
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut step,
        )
        .unwrap();
    let s = read_scalars(root.join("tensorboard")).unwrap();
    assert_each_step_once(&s);
    // 4 batches an epoch, 3 epochs, logged every step; as Lightning, a step's values at
    // its index from 0, the epoch's and the validation's at its last step's.
    assert_eq!(steps_of(&s["train/loss_step"]), (0..12).collect::<Vec<_>>());
    assert_eq!(steps_of(&s["train/loss_epoch"]), vec![3, 7, 11]);
    assert_eq!(steps_of(&s["train/acc_step"]), (0..12).collect::<Vec<_>>());
    assert_eq!(steps_of(&s["train/acc_epoch"]), vec![3, 7, 11]);
    assert_eq!(steps_of(&s["val/loss"]), vec![3, 7, 11]);
    // The monitor's values at each epoch start, and not the trainer's own as well.
    assert_eq!(steps_of(&s["lr"]), vec![0, 4, 8]);
    assert!(!s.contains_key("train/loss"), "{:?}", s.keys());
    // The epoch mean is the mean of the epoch's step values (equal batches).
    let first: f64 = s["train/loss_step"][..4].iter().map(|v| v.1).sum::<f64>() / 4.0;
    assert!((s["train/loss_epoch"][0].1 - first).abs() < 1e-6);
    std::fs::remove_dir_all(&root).ok();
}

/// A step whose validation logs `val_score` from a fixed sequence, one a validation.
struct Scored {
    scores: Vec<f64>,
    calls: usize,
}

impl TrainStep<Mlp, Vec<Tensor>> for Scored {
    fn training_step(&mut self, m: &mut Mlp, b: Vec<Tensor>) -> StepOutput {
        step(m, b)
    }
    fn validation_step(&mut self, m: &mut Mlp, b: Vec<Tensor>) -> StepOutput {
        let score = self.scores[self.calls.min(self.scores.len() - 1)];
        self.calls += 1;
        step(m, b).log("val_score", score)
    }
}

fn fit_scored(stopper: EarlyStopping, root: &Path) -> (Result<usize, TrainError>, Trainer) {
    let mut m = mlp();
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.1));
    let (mut train, mut val) = loaders(3);
    let mut trainer = Trainer::new(config(root, 6)).callback(stopper);
    let mut scored = Scored {
        scores: vec![f64::NAN, 1.0, 0.9, 0.8, 0.7, 0.6],
        calls: 0,
    };
    let r = trainer
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut scored,
        )
        .map(|r| r.epochs);
    (r, trainer)
}

#[test]
fn a_nan_first_value_never_becomes_the_best() {
    let root = dir("nan-best");
    // Lightning's default, check_finite: stop at once, saying why.
    let (epochs, trainer) = fit_scored(EarlyStopping::new("val_score", Mode::Min, 2), &root);
    assert_eq!(epochs.unwrap(), 1);
    let es = trainer.find_callback::<EarlyStopping>().unwrap();
    assert!(
        es.stopped_reason().unwrap().contains("is not finite"),
        "{:?}",
        es.stopped_reason()
    );
    // Without it, the NaN is no improvement and the improving run goes on to the end.
    let (epochs, trainer) = fit_scored(
        EarlyStopping::new("val_score", Mode::Min, 2).check_finite(false),
        &root,
    );
    assert_eq!(epochs.unwrap(), 6);
    let es = trainer.find_callback::<EarlyStopping>().unwrap();
    assert_eq!(es.best_score(), Some(0.6));
    assert_eq!(es.stopped_reason(), None);
    // Its state survives a resume, with no best yet as well.
    let fresh = EarlyStopping::new("val_score", Mode::Min, 2).check_finite(false);
    let mut copy = EarlyStopping::new("val_score", Mode::Min, 2);
    copy.load_state_dict(&fresh.state_dict()).unwrap();
    assert_eq!(copy.best_score(), None);
    copy.load_state_dict(&es.state_dict()).unwrap();
    assert_eq!(copy.best_score(), Some(0.6));
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn a_mistyped_monitor_fails_the_fit() {
    let root = dir("strict");
    let (r, _) = fit_scored(EarlyStopping::new("val_scor", Mode::Min, 2), &root);
    match r {
        Err(TrainError::Callback { name, reason }) => {
            assert!(name.contains("EarlyStopping"), "{name}");
            assert!(
                reason.contains("val_scor") && reason.contains("val_score"),
                "{reason}"
            );
        }
        other => panic!("expected a callback error, got {other:?}"),
    }
    let mut m = mlp();
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.1));
    let (mut train, mut val) = loaders(3);
    let r = Trainer::new(config(&root, 2))
        .callback(ModelCheckpoint::new("val_acc", Mode::Max))
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut step,
        );
    assert!(
        matches!(&r, Err(TrainError::Callback { reason, .. }) if reason.contains("val_acc")),
        "{r:?}"
    );
    // strict(false) lets it pass.
    let r = Trainer::new(config(&root, 1))
        .callback(ModelCheckpoint::new("val_acc", Mode::Max).strict(false))
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut step,
        );
    assert!(r.is_ok(), "{r:?}");
    std::fs::remove_dir_all(&root).ok();
}

struct Run {
    params: Vec<Vec<f32>>,
    csv: String,
    epochs: usize,
    steps: u64,
    val_loss: f64,
}

/// The resume test's run: 4 batches an epoch, StepLR-free SGD with momentum, the best
/// checkpoints by `val_loss` (all kept) and `last`.
fn run(root: &Path, cfg: TrainerConfig, init: &ferrograd::nn::StateDict) -> Run {
    let mut m = mlp();
    m.load_state_dict(init, true).unwrap();
    let mut opt = Sgd::new(
        m.parameters(),
        SgdConfig {
            momentum: 0.9,
            ..SgdConfig::new(0.05)
        },
    );
    let (mut train, mut val) = loaders(4);
    let report = Trainer::new(cfg)
        .metric(Accuracy::new())
        .callback(ModelCheckpoint::new("val_loss", Mode::Min).top_k(100))
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut step,
        )
        .unwrap();
    Run {
        params: m.parameters().iter().map(|p| p.to_vec::<f32>()).collect(),
        csv: std::fs::read_to_string(root.join("metrics.csv")).unwrap_or_default(),
        epochs: report.epochs,
        steps: report.global_step,
        val_loss: report.metrics["val_loss"],
    }
}

fn without_throughput(csv: &str) -> Vec<String> {
    csv.lines()
        .map(|l| l.rsplit_once(',').map_or(l, |(a, _)| a).to_string())
        .collect()
}

fn init() -> ferrograd::nn::StateDict {
    let _g = rng_lock();
    manual_seed(7);
    mlp().state_dict()
}

#[test]
fn a_run_stopped_inside_an_epoch_resumes_that_epoch() {
    let init = init();
    let whole = dir("whole-steps");
    let a = run(&whole, config(&whole, 8), &init);
    assert_eq!((a.epochs, a.steps), (8, 32));
    let split = dir("split-steps");
    // max_steps = 6: two steps into the second epoch, which is not counted as done.
    let first = run(
        &split,
        TrainerConfig {
            max_steps: Some(6),
            ..config(&split, 8)
        },
        &init,
    );
    assert_eq!((first.epochs, first.steps), (1, 6));
    assert_eq!(
        first.csv.lines().count(),
        2,
        "one finished epoch: {}",
        first.csv
    );
    let b = run(
        &split,
        TrainerConfig {
            resume_from: Some(split.join("checkpoints/last.safetensors")),
            ..config(&split, 8)
        },
        &init,
    );
    assert_eq!((b.epochs, b.steps), (8, 32));
    assert_eq!(a.params, b.params);
    assert_eq!(a.val_loss.to_bits(), b.val_loss.to_bits());
    assert_eq!(without_throughput(&a.csv), without_throughput(&b.csv));
    // TensorBoard shows the same run.
    assert_eq!(
        read_scalars(whole.join("tensorboard")).unwrap(),
        read_scalars(split.join("tensorboard")).unwrap()
    );
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&split).ok();
}

#[test]
fn resuming_from_an_earlier_checkpoint_logs_each_step_once() {
    let init = init();
    let whole = dir("whole-tb");
    run(&whole, config(&whole, 4), &init);
    let split = dir("split-tb");
    run(&split, config(&split, 4), &init);
    // The user goes back to the second epoch's checkpoint and trains on from there.
    let earlier: PathBuf = std::fs::read_dir(split.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("epoch=1-")
        })
        .expect("the second epoch's checkpoint");
    run(
        &split,
        TrainerConfig {
            resume_from: Some(earlier),
            ..config(&split, 4)
        },
        &init,
    );
    let a = read_scalars(whole.join("tensorboard")).unwrap();
    let b = read_scalars(split.join("tensorboard")).unwrap();
    assert_each_step_once(&b);
    assert_eq!(a, b);
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&split).ok();
}

/// Reads the run's TensorBoard directory after the third batch.
struct Peek(Arc<Mutex<Option<usize>>>);

impl Callback for Peek {
    fn name(&self) -> String {
        "Peek".into()
    }
    fn on_train_batch_end(&mut self, ctx: &mut Context, _loss: f64) {
        if ctx.state.global_step == 3 {
            let points = read_scalars(ctx.root_dir().join("tensorboard"))
                .ok()
                .and_then(|s| s.get("train/loss_step").map(Vec::len))
                .unwrap_or(0);
            *self.0.lock().unwrap() = Some(points);
        }
    }
}

#[test]
fn tensorboard_sees_an_epoch_while_it_runs() {
    let seen = Arc::new(Mutex::new(None));
    let root = dir("flush");
    let mut m = mlp();
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.1));
    let (mut train, _) = loaders(5);
    Trainer::new(TrainerConfig {
        tensorboard_max_queue: 1,
        ..config(&root, 1)
    })
    .callback(Peek(seen.clone()))
    .fit(
        &mut m,
        &mut opt,
        None,
        &mut train,
        None::<&mut DataLoader<Data>>,
        &mut step,
    )
    .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(3));
    std::fs::remove_dir_all(&root).ok();
}

/// Lightning's filename templates: `auto_insert_metric_name`, formats, and a key that is
/// not logged failing the fit with its name.
#[test]
fn checkpoint_filename_templates() {
    use ferrograd::train::TrainerState;
    let mut state = TrainerState {
        epoch: 4,
        current_epoch: 3,
        global_step: 12,
        ..TrainerState::default()
    };
    state.metrics.insert("val/acc".into(), 0.8766);
    let root = Path::new("run");
    let mut ckpt =
        ModelCheckpoint::new("val/acc", Mode::Max).filename("best-{epoch:03d}-{val/acc:.3f}");
    let mut ctx = Context::new(&mut state, root);
    ckpt.on_train_epoch_end(&mut ctx);
    assert!(ctx.failure().is_none(), "{:?}", ctx.failure());
    let names: Vec<String> = ctx
        .saves()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "last.safetensors",
            "best-epoch=003-val_acc=0.877.safetensors"
        ]
    );
    let mut bad = ModelCheckpoint::new("val/acc", Mode::Max).filename("{epoch}-{val_loss:.2f}");
    let mut ctx = Context::new(&mut state, root);
    bad.on_train_epoch_end(&mut ctx);
    assert!(
        ctx.failure().is_some_and(|f| f.contains("val_loss")),
        "{:?}",
        ctx.failure()
    );
}
