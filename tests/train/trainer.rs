//! The Trainer: the same updates as the explicit loop it replaces, exact resume,
//! gradient accumulation, clipping, early stopping, best-k checkpoints and the budgets.
//! Tests that seed the global generator hold one lock (the generator is process-wide).

use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{Forward, Linear, Module, functional as F};
use ferrograd::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
use ferrograd::optim::{Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use ferrograd::train::metrics::Accuracy;
use ferrograd::train::tensorboard::EventReader;
use ferrograd::train::{
    Callback, Context, EarlyStopping, Mode, ModelCheckpoint, StepOutput, Trainer, TrainerConfig,
};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

static RNG: Mutex<()> = Mutex::new(());
pub(crate) fn rng_lock() -> MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Module)]
pub(crate) struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl<'a> Forward<&'a Tensor> for Mlp {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        self.fc2.forward(&self.fc1.forward(x).relu())
    }
}

pub(crate) fn mlp() -> Mlp {
    Mlp {
        fc1: Linear::new(4, 16, &Device::Cpu),
        fc2: Linear::new(16, 3, &Device::Cpu),
    }
}

pub(crate) type Data = TensorDataset<Vec<Tensor>>;

/// 96 samples of 4 features in 3 classes, separable by the first two features.
pub(crate) fn data() -> (Data, Data) {
    let x = Tensor::randn(&[96, 4], DType::F32, &Device::Cpu);
    let s = x.narrow(1, 0, 1).add(&x.narrow(1, 1, 1));
    let y = s
        .gt_scalar(0.5)
        .to_dtype(DType::I64)
        .add(&s.gt_scalar(-0.5).to_dtype(DType::I64))
        .reshape(&[96]);
    (
        TensorDataset::new(vec![x.narrow(0, 0, 64), y.narrow(0, 0, 64)]),
        TensorDataset::new(vec![x.narrow(0, 64, 32), y.narrow(0, 64, 32)]),
    )
}

fn step(m: &mut Mlp, b: Vec<Tensor>) -> StepOutput {
    let logits = m.forward(&b[0]);
    StepOutput::new(F::cross_entropy(&logits, &b[1])).with_predictions(logits, b[1].clone())
}

pub(crate) fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrograd-trainer-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

fn config(root: PathBuf, epochs: usize) -> TrainerConfig {
    TrainerConfig {
        max_epochs: epochs,
        root_dir: root,
        progress: false,
        ..Default::default()
    }
}

/// SGD with momentum 0.9, and a schedule halving its rate every `step_size` epochs.
fn sgd_with_schedule(m: &Mlp, lr: f64, step_size: u64) -> (Sgd, Scheduler) {
    let mut opt = Sgd::new(
        m.parameters(),
        SgdConfig {
            momentum: 0.9,
            ..SgdConfig::new(lr)
        },
    );
    let sched = Scheduler::new(
        &mut opt,
        Schedule::Step {
            step_size,
            gamma: 0.5,
        },
    );
    (opt, sched)
}

fn params(m: &Mlp) -> Vec<Vec<f32>> {
    m.parameters().iter().map(|p| p.to_vec::<f32>()).collect()
}

/// The Trainer's updates equal the hand-written loop's, batch for batch.
#[test]
fn the_trainer_takes_the_explicit_loops_steps() {
    let _g = rng_lock();
    manual_seed(1);
    let (train_ds, _) = data();
    let init = mlp();
    let state = init.state_dict();
    let make = || {
        let mut m = mlp();
        m.load_state_dict(&state, true).unwrap();
        m
    };

    // The explicit loop.
    let m1 = make();
    let (mut opt1, mut sched1) = sgd_with_schedule(&m1, 0.2, 1);
    let mut loader1 = DataLoader::builder(train_ds.clone())
        .batch_size(16)
        .shuffle(true)
        .seed(3)
        .build();
    for _ in 0..3 {
        for b in loader1.iter() {
            let b = b.unwrap();
            let loss = F::cross_entropy(&m1.forward(&b[0]), &b[1]);
            loss.backward();
            opt1.step();
            opt1.zero_grad();
        }
        sched1.step(&mut opt1);
    }

    // The Trainer.
    let mut m2 = make();
    let (mut opt2, mut sched2) = sgd_with_schedule(&m2, 0.2, 1);
    let mut loader2 = DataLoader::builder(train_ds)
        .batch_size(16)
        .shuffle(true)
        .seed(3)
        .build();
    let root = dir("explicit");
    let report = Trainer::new(TrainerConfig {
        tensorboard: false,
        ..config(root.clone(), 3)
    })
    .fit(
        &mut m2,
        &mut opt2,
        Some(&mut sched2),
        &mut loader2,
        None::<&mut DataLoader<Data>>,
        &mut step,
    )
    .unwrap();
    assert_eq!((report.epochs, report.global_step), (3, 12));
    assert_eq!(params(&m1), params(&m2));
    assert_eq!(opt2.group_lr(0), opt1.group_lr(0));
    std::fs::remove_dir_all(&root).ok();
}

/// Notes whether deterministic algorithms were on during the fit.
struct SawDeterministic(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Callback for SawDeterministic {
    fn name(&self) -> String {
        "SawDeterministic".into()
    }
    fn on_train_epoch_start(&mut self, _ctx: &mut Context) {
        self.0.store(
            ferrograd::are_deterministic_algorithms_enabled(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// `deterministic` with a `seed`: two fits from the same start (shuffled batches, the
/// dropout-free model) end with the same bits; the setting is on during the fit and back
/// off after it.
#[test]
fn a_deterministic_seeded_fit_repeats_bit_for_bit() {
    let _g = rng_lock();
    let fit = || {
        manual_seed(4);
        let (train_ds, val_ds) = data();
        let mut m = mlp();
        let (mut opt, mut sched) = sgd_with_schedule(&m, 0.1, 1);
        let mut train = DataLoader::builder(train_ds)
            .batch_size(16)
            .shuffle(true)
            .build();
        let mut val = DataLoader::builder(val_ds).batch_size(32).build();
        let saw = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let root = dir("deterministic");
        let report = Trainer::new(TrainerConfig {
            deterministic: true,
            seed: Some(9),
            tensorboard: false,
            ..config(root.clone(), 2)
        })
        .callback(SawDeterministic(saw.clone()))
        .fit(
            &mut m,
            &mut opt,
            Some(&mut sched),
            &mut train,
            Some(&mut val),
            &mut step,
        )
        .unwrap();
        std::fs::remove_dir_all(&root).ok();
        assert!(
            saw.load(std::sync::atomic::Ordering::Relaxed),
            "not on during the fit"
        );
        assert!(
            !ferrograd::are_deterministic_algorithms_enabled(),
            "left on after the fit"
        );
        (params(&m), report.metrics["val_loss"])
    };
    let (a, b) = (fit(), fit());
    assert_eq!(a.0, b.0);
    assert_eq!(a.1.to_bits(), b.1.to_bits());
}

struct Run {
    params: Vec<Vec<f32>>,
    csv: String,
    metrics: std::collections::BTreeMap<String, f64>,
}

fn run(root: &Path, epochs: usize, resume: bool, init: &ferrograd::nn::StateDict) -> Run {
    let (train_ds, val_ds) = {
        let _g = rng_lock();
        manual_seed(2);
        data()
    };
    let mut m = mlp();
    m.load_state_dict(init, true).unwrap();
    let (mut opt, mut sched) = sgd_with_schedule(&m, 0.1, 2);
    let mut train = DataLoader::builder(train_ds)
        .batch_size(16)
        .shuffle(true)
        .seed(5)
        .build();
    let mut val = DataLoader::builder(val_ds).batch_size(32).build();
    let cfg = TrainerConfig {
        resume_from: resume.then(|| root.join("checkpoints/last.safetensors")),
        ..config(root.to_path_buf(), epochs)
    };
    let mut trainer = Trainer::new(cfg)
        .metric(Accuracy::new())
        .callback(ModelCheckpoint::new("val_loss", Mode::Min).top_k(2));
    let report = trainer
        .fit(
            &mut m,
            &mut opt,
            Some(&mut sched),
            &mut train,
            Some(&mut val),
            &mut step,
        )
        .unwrap();
    Run {
        params: params(&m),
        csv: std::fs::read_to_string(root.join("metrics.csv")).unwrap(),
        metrics: report.metrics,
    }
}

/// Stopped after 2 epochs and resumed to 4, the run ends where an unstopped one does.
#[test]
fn a_resumed_fit_ends_where_an_unstopped_one_does() {
    let init = {
        let _g = rng_lock();
        manual_seed(9);
        mlp().state_dict()
    };
    let whole = dir("whole");
    let a = run(&whole, 4, false, &init);
    let split = dir("split");
    run(&split, 2, false, &init);
    let b = run(&split, 4, true, &init);
    assert_eq!(a.params, b.params);
    assert_eq!(a.metrics["val_loss"], b.metrics["val_loss"]);
    assert_eq!(a.metrics["val_accuracy"], b.metrics["val_accuracy"]);
    // 16 steps on 64 samples: well above the 1/3 of chance.
    assert!(a.metrics["val_accuracy"] > 0.55, "{:?}", a.metrics);
    // The CSV has one row per epoch in both (the resumed run kept rows 1-2), equal except
    // for the throughput column.
    let strip = |csv: &str| -> Vec<String> {
        csv.lines()
            .map(|l| l.rsplit_once(',').map_or(l, |(a, _)| a).to_string())
            .collect()
    };
    assert_eq!(strip(&a.csv), strip(&b.csv));
    assert_eq!(a.csv.lines().count(), 5);
    // Two best checkpoints and last.
    let files = std::fs::read_dir(split.join("checkpoints"))
        .unwrap()
        .count();
    assert_eq!(files, 3);
    // TensorBoard: the resumed writer's file purges the steps from the checkpoint's (8)
    // on and goes on from there; the second epoch's values are at its last step (7, as
    // Lightning logs them), in the first file.
    let tb: Vec<PathBuf> = {
        let mut v: Vec<PathBuf> = std::fs::read_dir(split.join("tensorboard"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        v.sort();
        v
    };
    assert_eq!(tb.len(), 2);
    let scalars = EventReader::open(&tb[1]).unwrap().scalars().unwrap();
    assert_eq!(
        scalars["val/loss"].iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![11, 15]
    );
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&split).ok();
}

/// Two batches of 8 accumulated equal one batch of 16; clipping bounds the step.
#[test]
fn accumulation_and_clipping() {
    let _g = rng_lock();
    manual_seed(4);
    let (train_ds, _) = data();
    let state = mlp().state_dict();
    let train_with = |batch: usize, accumulate: usize, clip: Option<f64>| {
        let mut m = mlp();
        m.load_state_dict(&state, true).unwrap();
        let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.5));
        let mut loader = DataLoader::builder(train_ds.clone())
            .batch_size(batch)
            .build();
        let root = dir(&format!("acc{batch}-{accumulate}-{}", clip.is_some()));
        let report = Trainer::new(TrainerConfig {
            accumulate_grad_batches: accumulate,
            grad_clip: clip,
            log_grad_norm: true,
            tensorboard: false,
            ..config(root.clone(), 1)
        })
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut loader,
            None::<&mut DataLoader<Data>>,
            &mut step,
        )
        .unwrap();
        std::fs::remove_dir_all(&root).ok();
        (params(&m), report)
    };
    let (p16, r16) = train_with(16, 1, None);
    let (p8, r8) = train_with(8, 2, None);
    assert_eq!((r16.global_step, r8.global_step), (4, 4));
    for (a, b) in p16.iter().flatten().zip(p8.iter().flatten()) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    let (clipped, rc) = train_with(16, 1, Some(1e-3));
    let before: Vec<f32> = {
        let mut m = mlp();
        m.load_state_dict(&state, true).unwrap();
        params(&m).into_iter().flatten().collect()
    };
    let moved: f32 = clipped
        .iter()
        .flatten()
        .zip(&before)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f32>()
        .sqrt();
    // 4 steps of lr 0.5 on gradients of norm <= 1e-3: at most 2e-3.
    assert!(moved <= 2e-3 * 1.001, "moved {moved}");
    assert!(
        rc.metrics["grad_norm"] > 1e-3,
        "the logged norm is the one before clipping"
    );
}

/// A callback that records the hooks it sees.
#[derive(Default)]
struct Recorder(std::sync::Arc<Mutex<Vec<String>>>);

impl Callback for Recorder {
    fn name(&self) -> String {
        "Recorder".into()
    }
    fn on_fit_start(&mut self, _: &mut Context) {
        self.0.lock().unwrap().push("fit_start".into());
    }
    fn on_train_epoch_start(&mut self, ctx: &mut Context) {
        self.0
            .lock()
            .unwrap()
            .push(format!("epoch_start {}", ctx.state.epoch));
    }
    fn on_train_batch_start(&mut self, _: &mut Context, batch_idx: usize) {
        self.0
            .lock()
            .unwrap()
            .push(format!("batch_start {batch_idx}"));
    }
    fn on_train_batch_end(&mut self, _: &mut Context, loss: f64) {
        self.0
            .lock()
            .unwrap()
            .push(format!("batch_end {}", loss.is_finite()));
    }
    fn on_validation_start(&mut self, _: &mut Context) {
        self.0.lock().unwrap().push("validation_start".into());
    }
    fn on_validation_end(&mut self, ctx: &mut Context) {
        self.0.lock().unwrap().push(format!(
            "validated {}",
            ctx.state.metrics.contains_key("val_loss")
        ));
    }
    fn on_train_epoch_end(&mut self, ctx: &mut Context) {
        self.0
            .lock()
            .unwrap()
            .push(format!("epoch_end {}", ctx.state.epoch));
    }
    fn on_fit_end(&mut self, _: &mut Context) {
        self.0.lock().unwrap().push("fit_end".into());
    }
}

/// With a learning rate of 0 the loss never improves: early stopping ends the run after
/// `patience` more validations; the hooks come in order; budgets stop the loop.
#[test]
fn early_stopping_hooks_and_budgets() {
    let _g = rng_lock();
    manual_seed(6);
    let (train_ds, val_ds) = data();
    let mut m = mlp();
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.0));
    let mut train = DataLoader::builder(train_ds.clone()).batch_size(16).build();
    let mut val = DataLoader::builder(val_ds).batch_size(32).build();
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let root = dir("early");
    let report = Trainer::new(config(root.clone(), 20))
        .callback(EarlyStopping::new("val_loss", Mode::Min, 2))
        .callback(Recorder(seen.clone()))
        .fit(
            &mut m,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut step,
        )
        .unwrap();
    assert!(report.stopped_early);
    assert_eq!(
        report.epochs, 3,
        "the first validation sets the best, two more fail to improve"
    );
    let seen = seen.lock().unwrap().clone();
    // 4 batches per epoch.
    assert_eq!(
        seen[..14],
        [
            "fit_start",
            "epoch_start 0",
            "batch_start 0",
            "batch_end true",
            "batch_start 1",
            "batch_end true",
            "batch_start 2",
            "batch_end true",
            "batch_start 3",
            "batch_end true",
            "validation_start",
            "validated true",
            "epoch_end 1",
            "epoch_start 1"
        ]
    );
    assert_eq!(seen.last().unwrap(), "fit_end");

    // max_steps: 4 batches per epoch, stop after 6 steps, in the middle of epoch 2.
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.1));
    let report = Trainer::new(TrainerConfig {
        max_steps: Some(6),
        ..config(root.clone(), 10)
    })
    .fit(
        &mut m,
        &mut opt,
        None,
        &mut train,
        None::<&mut DataLoader<Data>>,
        &mut step,
    )
    .unwrap();
    // The second epoch is unfinished: one epoch done (Lightning resumes the second).
    assert_eq!((report.global_step, report.epochs), (6, 1));
    // fast_dev_run: one batch, one validation batch, nothing written.
    let quick = dir("quick");
    let report = Trainer::new(TrainerConfig {
        fast_dev_run: true,
        ..config(quick.clone(), 10)
    })
    .fit(
        &mut m,
        &mut opt,
        None,
        &mut train,
        None::<&mut DataLoader<Data>>,
        &mut step,
    )
    .unwrap();
    assert_eq!((report.global_step, report.epochs), (1, 1));
    assert!(!quick.exists());
    std::fs::remove_dir_all(&root).ok();
}
