//! The Trainer against PyTorch Lightning, scenario by scenario: each scenario of
//! `tests/fixtures/lightning/make_lightning_fixtures.py` (run there by Lightning, its
//! record committed as `expected.json`) is run here by our Trainer on the same data,
//! initial weights and optimizer, and compared: every value logged with its step, the
//! epochs and optimizer steps run, where `EarlyStopping` stopped, which checkpoint files
//! exist (ours end in `.safetensors`, Lightning's in `.ckpt`), the best-k table and the
//! final weights.
//!
//! Our TensorBoard tags map onto Lightning's names: `train/loss_step` ↔
//! `train_loss_step`, `train/loss_epoch` ↔ `train_loss_epoch`, `val/loss` ↔ `val_loss`,
//! `lr` ↔ `lr-SGD`. The trainer's own `lr` series (logged at each epoch's end when no
//! `LearningRateMonitor` is there) has no Lightning counterpart and is not compared.
//!
//! One deliberate difference: a `max_steps` stop inside an epoch leaves that epoch
//! unfinished (a resume finishes it), so no `train_loss_epoch` is logged for the part
//! run and the epochs count the finished ones; Lightning logs the part's mean and counts
//! the epoch as begun (`current_epoch` 2 after six steps of four-batch epochs).

use ferrograd::checkpoint::read_state_dict;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{Linear, Module, StateDict, functional as F};
use ferrograd::optim::lr_scheduler::{Schedule, Scheduler};
use ferrograd::optim::{Sgd, SgdConfig};
use ferrograd::prelude::*;
use ferrograd::train::tensorboard::read_scalars;
use ferrograd::train::{
    EarlyStopping, Interval, LearningRateMonitor, Mode, ModelCheckpoint, StepOutput, TrainStep,
    Trainer, TrainerConfig, ValCheckInterval,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lightning")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn tensors() -> StateDict {
    read_state_dict(fixtures().join("lightning.safetensors")).unwrap()
}

/// The validation steps' scripted `val_score`: the `n`th validation logs `scores[n]`.
struct Scripted {
    scores: Vec<f64>,
    val_batches: usize,
    val_calls: usize,
}

impl TrainStep<Linear, Vec<Tensor>> for Scripted {
    fn training_step(&mut self, m: &mut Linear, b: Vec<Tensor>) -> StepOutput {
        StepOutput::new(F::mse_loss(&m.forward(&b[0]), &b[1], F::Reduction::Mean))
    }
    fn validation_step(&mut self, m: &mut Linear, b: Vec<Tensor>) -> StepOutput {
        let score = self.scores[self.val_calls / self.val_batches];
        self.val_calls += 1;
        StepOutput::new(F::mse_loss(&m.forward(&b[0]), &b[1], F::Reduction::Mean))
            .log("val_score", score)
    }
}

/// What a scenario changes of the defaults.
#[derive(Default)]
struct Scenario {
    lr: Option<f64>,
    step_lr: Option<u64>,
    callbacks: Vec<Box<dyn FnOnce(Trainer) -> Trainer>>,
    config: Option<Box<dyn FnOnce(TrainerConfig) -> TrainerConfig>>,
}

struct Ran {
    scalars: BTreeMap<String, Vec<(i64, f64)>>,
    epochs: usize,
    global_step: u64,
    files: Vec<String>,
    weights: Vec<f32>,
    trainer: Trainer,
}

fn run(root: &Path, s: Scenario, resume: Option<PathBuf>) -> Ran {
    let t = tensors();
    let mut model = Linear::new(4, 2, &Device::Cpu);
    let init: StateDict = [
        ("weight".to_string(), t["weight"].clone()),
        ("bias".to_string(), t["bias"].clone()),
    ]
    .into();
    model.load_state_dict(&init, true).unwrap();
    let mut train = DataLoader::builder(TensorDataset::new(vec![
        t["x_train"].clone(),
        t["y_train"].clone(),
    ]))
    .batch_size(8)
    .build();
    let mut val = DataLoader::builder(TensorDataset::new(vec![
        t["x_val"].clone(),
        t["y_val"].clone(),
    ]))
    .batch_size(8)
    .build();
    let mut opt = Sgd::new(model.parameters(), SgdConfig::new(s.lr.unwrap_or(0.1)));
    let mut sched = s.step_lr.map(|step_size| {
        Scheduler::new(
            &mut opt,
            Schedule::Step {
                step_size,
                gamma: 0.5,
            },
        )
    });
    // A resumed run's scripted scores go on from the validations already run.
    let validated = resume.as_ref().map_or(0, |p| {
        ferrograd::checkpoint::Checkpoint::load(p).unwrap().epoch as usize
    });
    let mut config = TrainerConfig {
        max_epochs: 1,
        root_dir: root.to_path_buf(),
        progress: false,
        log_every: 1,
        resume_from: resume,
        ..Default::default()
    };
    if let Some(f) = s.config {
        config = f(config);
    }
    let mut trainer = Trainer::new(config);
    for add in s.callbacks {
        trainer = add(trainer);
    }
    let scores: Vec<f64> = expected()["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let mut step = Scripted {
        scores,
        val_batches: 2,
        val_calls: 2 * validated,
    };
    let report = trainer
        .fit(
            &mut model,
            &mut opt,
            sched
                .as_mut()
                .map(|s| s as &mut dyn ferrograd::optim::lr_scheduler::LrScheduler),
            &mut train,
            Some(&mut val),
            &mut step,
        )
        .unwrap();
    let scalars = read_scalars(root.join("tensorboard")).unwrap_or_default();
    let mut files: Vec<String> = std::fs::read_dir(root.join("checkpoints"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.trim_end_matches(".safetensors").to_string()
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut weights = model.weight.to_vec::<f32>();
    weights.extend(model.bias.as_ref().unwrap().to_vec::<f32>());
    Ran {
        scalars,
        epochs: report.epochs,
        global_step: report.global_step,
        files,
        weights,
        trainer,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * b.abs().max(1.0)
}

/// Lightning's logged values by name, in order, as `(step, value)`.
fn lightning_series(values: &Value) -> BTreeMap<String, Vec<(i64, f64)>> {
    let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for v in values.as_array().unwrap() {
        let name = v[0].as_str().unwrap().to_string();
        out.entry(name)
            .or_default()
            .push((v[1].as_i64().unwrap(), v[2].as_f64().unwrap()));
    }
    out
}

/// Ours, under Lightning's names (the trainer's own `lr` left out when Lightning logs
/// none).
fn our_series(
    scalars: &BTreeMap<String, Vec<(i64, f64)>>,
    lr_monitored: bool,
) -> BTreeMap<String, Vec<(i64, f64)>> {
    scalars
        .iter()
        .filter_map(|(tag, series)| {
            let name = match tag.as_str() {
                "train/loss_step" => "train_loss_step",
                "train/loss_epoch" => "train_loss_epoch",
                "val/loss" => "val_loss",
                "lr" if lr_monitored => "lr-SGD",
                "lr" => return None,
                other => other,
            };
            Some((name.to_string(), series.clone()))
        })
        .collect()
}

fn assert_series_eq(
    name: &str,
    ours: &BTreeMap<String, Vec<(i64, f64)>>,
    theirs: &BTreeMap<String, Vec<(i64, f64)>>,
) {
    let keys = |m: &BTreeMap<String, Vec<(i64, f64)>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(ours), keys(theirs), "{name}: the logged names");
    for (tag, want) in theirs {
        let got = &ours[tag];
        let steps = |s: &[(i64, f64)]| s.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(steps(got), steps(want), "{name}: the steps of {tag}");
        for ((step, a), (_, b)) in got.iter().zip(want) {
            assert!(close(*a, *b), "{name}: {tag} at step {step}: {a} vs {b}");
        }
    }
}

fn assert_weights(name: &str, ours: &[f32], theirs: &Value) {
    let want: Vec<f64> = theirs["weight"]
        .as_array()
        .unwrap()
        .iter()
        .chain(theirs["bias"].as_array().unwrap())
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(ours.len(), want.len());
    for (a, b) in ours.iter().zip(&want) {
        assert!(close(*a as f64, *b), "{name}: weights {ours:?} vs {want:?}");
    }
}

fn stems(files: &Value) -> Vec<String> {
    files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().trim_end_matches(".ckpt").to_string())
        .collect()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrograd-lightning-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

/// Runs `name` and compares everything Lightning recorded.
fn check(name: &str, scenario: Scenario, lr_monitored: bool) -> Ran {
    let all = expected();
    let want = &all["scenarios"][name];
    assert!(want.is_object(), "no Lightning record for {name}");
    let root = dir(name);
    let ran = run(&root, scenario, None);
    assert_series_eq(
        name,
        &our_series(&ran.scalars, lr_monitored),
        &lightning_series(&want["values"]),
    );
    assert_eq!(
        ran.epochs as i64,
        want["epochs"].as_i64().unwrap(),
        "{name}: epochs"
    );
    assert_eq!(
        ran.global_step as i64,
        want["global_step"].as_i64().unwrap(),
        "{name}: optimizer steps"
    );
    assert_eq!(ran.files, stems(&want["files"]), "{name}: checkpoint files");
    assert_weights(name, &ran.weights, want);
    if let Some(stopped) = want.get("stopped_epoch") {
        let es = ran.trainer.find_callback::<EarlyStopping>().unwrap();
        assert_eq!(
            es.stopped_epoch().map(|e| e as i64),
            Some(stopped.as_i64().unwrap()),
            "{name}: stopped epoch"
        );
        assert!(close(
            es.best_score().unwrap(),
            want["best_score"].as_f64().unwrap()
        ));
    }
    if let Some(best) = want.get("best_k") {
        let ours: Vec<(String, f64)> = ran
            .trainer
            .find_callback::<ModelCheckpoint>()
            .unwrap()
            .best()
            .iter()
            .map(|(v, p)| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                (n.replace(".safetensors", ".ckpt"), *v)
            })
            .collect();
        let mut ours = ours;
        ours.sort_by(|a, b| a.0.cmp(&b.0));
        let theirs: Vec<(String, f64)> = best
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e[0].as_str().unwrap().to_string(), e[1].as_f64().unwrap()))
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{name}: best k {ours:?}");
        for ((a, va), (b, vb)) in ours.iter().zip(&theirs) {
            assert_eq!(a, b, "{name}: best k");
            assert!((va - vb).abs() < 1e-6, "{name}: best k values");
        }
    }
    std::fs::remove_dir_all(&root).ok();
    ran
}

fn epochs(n: usize) -> Option<Box<dyn FnOnce(TrainerConfig) -> TrainerConfig>> {
    Some(Box::new(move |c| TrainerConfig { max_epochs: n, ..c }))
}

fn with(cb: impl FnOnce(Trainer) -> Trainer + 'static) -> Vec<Box<dyn FnOnce(Trainer) -> Trainer>> {
    vec![Box::new(cb)]
}

#[test]
fn plain_epochs() {
    check(
        "plain",
        Scenario {
            config: epochs(3),
            ..Default::default()
        },
        false,
    );
}

#[test]
fn early_stopping() {
    check(
        "early_stopping",
        Scenario {
            config: epochs(12),
            callbacks: with(|t| t.callback(EarlyStopping::new("val_score", Mode::Min, 2))),
            ..Default::default()
        },
        false,
    );
    check(
        "early_stopping_patience3_delta",
        Scenario {
            config: epochs(12),
            callbacks: with(|t| {
                t.callback(EarlyStopping::new("val_score", Mode::Min, 3).min_delta(0.02))
            }),
            ..Default::default()
        },
        false,
    );
}

#[test]
fn model_checkpoint() {
    check(
        "checkpoint_top_k",
        Scenario {
            config: epochs(8),
            callbacks: with(|t| {
                t.callback(
                    ModelCheckpoint::new("val_score", Mode::Min)
                        .top_k(2)
                        .filename("{epoch}-{val_score:.2f}"),
                )
            }),
            ..Default::default()
        },
        false,
    );
    check(
        "checkpoint_every_n_epochs",
        Scenario {
            config: epochs(5),
            callbacks: with(|t| {
                t.callback(
                    ModelCheckpoint::latest()
                        .every_n_epochs(2)
                        .top_k(usize::MAX)
                        .filename("{epoch}-{step}"),
                )
            }),
            ..Default::default()
        },
        false,
    );
    check(
        "checkpoint_max_mode",
        Scenario {
            config: epochs(6),
            callbacks: with(|t| {
                t.callback(
                    ModelCheckpoint::new("val_score", Mode::Max)
                        .top_k(3)
                        .save_last(false)
                        .filename("best-{epoch:02d}"),
                )
            }),
            ..Default::default()
        },
        false,
    );
}

#[test]
fn learning_rate_monitor() {
    check(
        "lr_monitor_step",
        Scenario {
            config: epochs(4),
            step_lr: Some(2),
            callbacks: with(|t| {
                t.callback(LearningRateMonitor::new().logging_interval(Interval::Step))
            }),
            ..Default::default()
        },
        true,
    );
    check(
        "lr_monitor_epoch",
        Scenario {
            config: epochs(3),
            step_lr: Some(1),
            callbacks: with(|t| t.callback(LearningRateMonitor::new())),
            ..Default::default()
        },
        true,
    );
}

#[test]
fn gradient_clipping_and_accumulation() {
    check(
        "gradient_clipping",
        Scenario {
            lr: Some(0.2),
            config: Some(Box::new(|c| TrainerConfig {
                max_epochs: 2,
                grad_clip: Some(0.5),
                ..c
            })),
            ..Default::default()
        },
        false,
    );
    check(
        "accumulation",
        Scenario {
            config: Some(Box::new(|c| TrainerConfig {
                max_epochs: 2,
                accumulate_grad_batches: 3,
                ..c
            })),
            ..Default::default()
        },
        false,
    );
}

#[test]
fn val_check_interval() {
    check(
        "val_check_interval_half",
        Scenario {
            config: Some(Box::new(|c| TrainerConfig {
                max_epochs: 2,
                val_check_interval: ValCheckInterval::Fraction(0.5),
                ..c
            })),
            callbacks: with(|t| {
                t.callback(
                    ModelCheckpoint::new("val_score", Mode::Min)
                        .top_k(2)
                        .save_last(false)
                        .filename("{epoch}-{step}"),
                )
            }),
            ..Default::default()
        },
        false,
    );
    check(
        "val_check_interval_batches",
        Scenario {
            config: Some(Box::new(|c| TrainerConfig {
                max_epochs: 2,
                val_check_interval: ValCheckInterval::Batches(3),
                ..c
            })),
            ..Default::default()
        },
        false,
    );
}

#[test]
fn budgets() {
    check(
        "max_time_zero",
        Scenario {
            config: Some(Box::new(|c| TrainerConfig {
                max_epochs: 5,
                max_time: Some(Duration::ZERO),
                ..c
            })),
            ..Default::default()
        },
        false,
    );
    // max_steps inside an epoch: everything as Lightning but the part-epoch's mean and
    // the epoch count (see the module's note).
    let all = expected();
    let mut want = all["scenarios"]["max_steps"].clone();
    let values = want["values"].as_array_mut().unwrap();
    let before = values.len();
    values.retain(|v| !(v[0] == "train_loss_epoch" && v[1] == 5));
    assert_eq!(values.len(), before - 1, "Lightning's part-epoch mean");
    assert_eq!(want["epochs"], 2);
    let root = dir("max_steps");
    let ran = run(
        &root,
        Scenario {
            config: Some(Box::new(|c| TrainerConfig {
                max_epochs: 5,
                max_steps: Some(6),
                ..c
            })),
            ..Default::default()
        },
        None,
    );
    assert_series_eq(
        "max_steps",
        &our_series(&ran.scalars, false),
        &lightning_series(&want["values"]),
    );
    assert_eq!(ran.epochs, 1, "one finished epoch, the second unfinished");
    assert_eq!(ran.global_step, 6);
    assert_weights("max_steps", &ran.weights, &want);
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn resume_from_last() {
    let all = expected();
    let want = &all["scenarios"]["resume"];
    let root = dir("resume");
    let last = || with(|t| t.callback(ModelCheckpoint::latest().save_last(true)));
    let first = run(
        &root,
        Scenario {
            config: epochs(2),
            callbacks: last(),
            ..Default::default()
        },
        None,
    );
    assert_eq!(first.files, stems(&want["first"]["files"]));
    assert_weights("resume (first)", &first.weights, &want["first"]);
    let second = run(
        &root,
        Scenario {
            config: epochs(4),
            callbacks: last(),
            ..Default::default()
        },
        Some(root.join("checkpoints/last.safetensors")),
    );
    // The resumed run's log goes on where the first stopped: together, Lightning's two.
    let mut theirs = want["first"]["values"].as_array().unwrap().clone();
    theirs.extend(want["second"]["values"].as_array().unwrap().iter().cloned());
    assert_series_eq(
        "resume",
        &our_series(&second.scalars, false),
        &lightning_series(&Value::Array(theirs)),
    );
    assert_eq!(
        second.epochs as i64,
        want["second"]["epochs"].as_i64().unwrap()
    );
    assert_eq!(
        second.global_step as i64,
        want["second"]["global_step"].as_i64().unwrap()
    );
    assert_eq!(second.files, stems(&want["second"]["files"]));
    assert_weights("resume", &second.weights, &want["second"]);
    std::fs::remove_dir_all(&root).ok();
}

/// A checkpoint taken by a validation inside an epoch resumes that epoch from the next
/// batch: the resumed run ends with the weights and the log of an unstopped one.
#[test]
fn a_checkpoint_inside_an_epoch_resumes_there() {
    let scenario = || Scenario {
        config: Some(Box::new(|c| TrainerConfig {
            max_epochs: 2,
            val_check_interval: ValCheckInterval::Fraction(0.5),
            ..c
        })),
        callbacks: with(|t| {
            t.callback(
                ModelCheckpoint::latest()
                    .top_k(usize::MAX)
                    .filename("{epoch}-{step}"),
            )
        }),
        ..Default::default()
    };
    let root = dir("inside");
    let whole = run(&root, scenario(), None);
    assert_eq!(
        whole.files,
        [
            "epoch=0-step=2",
            "epoch=0-step=4",
            "epoch=1-step=6",
            "epoch=1-step=8"
        ]
    );
    let resumed = run(
        &root,
        scenario(),
        Some(root.join("checkpoints/epoch=0-step=2.safetensors")),
    );
    assert_eq!(resumed.weights, whole.weights);
    assert_eq!(resumed.global_step, 8);
    assert_eq!(resumed.epochs, 2);
    for tag in ["train/loss_step", "train/loss_epoch", "val/loss"] {
        assert_eq!(resumed.scalars[tag], whole.scalars[tag], "{tag}");
    }
    std::fs::remove_dir_all(&root).ok();
}
