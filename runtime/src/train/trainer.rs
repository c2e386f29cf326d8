//! [`Trainer`]: the training loop every example writes by hand — epochs, gradient
//! accumulation and clipping, mixed precision, validation with metrics, checkpoints with
//! exact resume, early stopping, a progress bar, a CSV log with its plot and TensorBoard
//! — around a step the user writes ([`TrainStep`]).

pub use super::callbacks::{
    Callback, Context, EarlyStopping, LearningRateMonitor, Mode, ModelCheckpoint, TrainerState,
};
use super::metrics::{Mean, Metric, MetricsError, MetricsLog};
use super::progress::{EpochProgress, correct_predictions};
use super::run_log::{RunLog, StepLogs, step_tag};
use super::tensorboard::TensorBoardError;
use crate::amp::{GradScaler, autocast};
use crate::autograd::no_grad;
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::data::{Collate, DataError, DataLoader, Dataset};
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::optim::lr_scheduler::LrScheduler;
use crate::profiler::record_function;
use crate::{DType, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Why [`Trainer::fit`] stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A batch could not be loaded.
    #[error("loading a batch: {0}")]
    Data(#[from] DataError),
    /// A checkpoint could not be written or restored.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The CSV log or its plot failed.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The TensorBoard log failed.
    #[error(transparent)]
    TensorBoard(#[from] TensorBoardError),
    /// A file operation of a callback (removing an old checkpoint, say).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A callback's saved state did not load.
    #[error("callback {name}: {reason}")]
    Callback {
        /// The callback.
        name: String,
        /// What was wrong.
        reason: String,
    },
    /// A collective of the process group failed.
    #[error(transparent)]
    Distributed(#[from] crate::distributed::DistError),
    /// The loss went NaN or infinite.
    #[error("the training loss is {value} at step {step}")]
    NonFiniteLoss {
        /// The optimizer step.
        step: u64,
        /// The loss.
        value: f64,
    },
}

/// The arithmetic of the forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// Everything in the parameters' dtype.
    #[default]
    F32,
    /// `autocast` to bfloat16 (no loss scaling needed).
    Bf16,
    /// `autocast` to float16 with a [`GradScaler`].
    F16,
}

/// When the learning-rate schedule steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Interval {
    /// After every epoch (Lightning's default).
    #[default]
    Epoch,
    /// After every optimizer step.
    Step,
}

/// When validation runs within a training epoch (Lightning's `val_check_interval`).
///
/// Validation runs after each training batch whose count in the epoch is a multiple of
/// the *check batch*: `⌊batches × f⌋` (at least 1) for `Fraction(f)`, `n` for
/// `Batches(n)`. As in Lightning, the epoch's end is a check point only when it falls on
/// one: 10 batches with `Fraction(0.3)` validate after batches 3, 6 and 9.
///
/// ```
/// use ferrograd_runtime::train::ValCheckInterval;
/// assert_eq!(ValCheckInterval::Fraction(0.5).check_batch(4), 2);
/// assert_eq!(ValCheckInterval::Batches(3).check_batch(4), 3);
/// assert_eq!(ValCheckInterval::default().check_batch(7), 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValCheckInterval {
    /// A fraction of the epoch's batches, in (0, 1] (1.0: once, at the end).
    Fraction(f64),
    /// Every this many training batches.
    Batches(usize),
}

impl Default for ValCheckInterval {
    fn default() -> Self {
        ValCheckInterval::Fraction(1.0)
    }
}

impl ValCheckInterval {
    /// The batches between validations in an epoch of `batches`.
    pub fn check_batch(&self, batches: usize) -> usize {
        match *self {
            ValCheckInterval::Fraction(f) => ((batches as f64 * f.clamp(0.0, 1.0)) as usize).max(1),
            ValCheckInterval::Batches(n) => n.max(1),
        }
    }

    /// Whether validation runs once an epoch, at its end.
    pub fn is_whole_epoch(&self) -> bool {
        *self == ValCheckInterval::Fraction(1.0)
    }
}

/// The options of a [`Trainer`], with Lightning's defaults where it has them.
#[derive(Clone, Debug)]
pub struct TrainerConfig {
    /// Epochs to train, counting those before a resume.
    pub max_epochs: usize,
    /// Stop after this many optimizer steps.
    pub max_steps: Option<u64>,
    /// Stop after this much wall time (checked after each batch).
    pub max_time: Option<Duration>,
    /// Validate every this many epochs (1).
    pub val_every: usize,
    /// How often validation runs inside an epoch (Lightning's `val_check_interval`):
    /// once at its end by default; [`ValCheckInterval::Fraction`]`(0.25)` four times an
    /// epoch, [`ValCheckInterval::Batches`]`(n)` after every `n`th training batch. With
    /// validation inside the epoch, [`ModelCheckpoint`] saves after each validation.
    pub val_check_interval: ValCheckInterval,
    /// Log the training loss to TensorBoard every this many optimizer steps (50).
    pub log_every: u64,
    /// Batches whose gradients add up before each optimizer step (1).
    pub accumulate_grad_batches: usize,
    /// Clip the gradients' global 2-norm to this.
    pub grad_clip: Option<f64>,
    /// Log the gradients' global norm before clipping (`train/grad_norm`).
    pub log_grad_norm: bool,
    /// Mixed precision.
    pub precision: Precision,
    /// When the schedule steps.
    pub scheduler_interval: Interval,
    /// Seed of the global generator for a fresh run (a resumed run restores its own).
    pub seed: Option<u64>,
    /// Deterministic algorithms during the fit
    /// ([`use_deterministic_algorithms`](crate::use_deterministic_algorithms); the
    /// previous setting comes back after): with `seed`, a run repeats bit for bit on
    /// any device (Lightning's `deterministic=True`).
    pub deterministic: bool,
    /// One training and one validation batch, one epoch, no files written: a smoke test.
    pub fast_dev_run: bool,
    /// Training batches per epoch at most.
    pub limit_train_batches: Option<usize>,
    /// Validation batches at most.
    pub limit_val_batches: Option<usize>,
    /// Where the checkpoints (`checkpoints/`), `metrics.csv` (and its plot) and the
    /// TensorBoard run (`tensorboard/`) go.
    pub root_dir: PathBuf,
    /// Write TensorBoard event files.
    pub tensorboard: bool,
    /// Show a progress bar per epoch (only drawn on a terminal).
    pub progress: bool,
    /// Show the live terminal dashboard ([`dashboard`](super::dashboard), feature
    /// `dashboard`) instead of the progress bar: loss and metric curves, learning rate,
    /// throughput, time left and memory; `q` stops after the current batch. Only when
    /// standard error is a terminal: anywhere else (or without the feature) the
    /// progress bar is drawn as with `progress`.
    pub dashboard: bool,
    /// Resume from this training checkpoint (`root_dir/checkpoints/last.safetensors`
    /// after [`ModelCheckpoint`] with `save_last`).
    pub resume_from: Option<PathBuf>,
    /// Data-parallel training over this group (the model a
    /// [`DistributedDataParallel`](crate::distributed::DistributedDataParallel), each
    /// rank's loaders with a `DistributedSampler`): every rank runs the loop; the losses
    /// and metrics are reduced over the ranks, so every rank sees the same values and
    /// its callbacks decide alike; rank 0 alone shows the progress bar and writes the
    /// CSV, plot and TensorBoard files; checkpoints are saved collectively with every
    /// rank's random state and data position, and a resume gives each rank its own.
    pub process_group: Option<crate::distributed::ProcessGroup>,
    /// Flush the TensorBoard file at least this often while training, so a live
    /// TensorBoard sees a long epoch as it runs (`torch.utils.tensorboard`'s `flush_secs`,
    /// 120 s).
    pub tensorboard_flush_secs: u64,
    /// Flush the TensorBoard file once this many values are waiting (`max_queue`, 10).
    pub tensorboard_max_queue: usize,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        TrainerConfig {
            max_epochs: 1,
            max_steps: None,
            max_time: None,
            val_every: 1,
            val_check_interval: ValCheckInterval::default(),
            log_every: 50,
            accumulate_grad_batches: 1,
            grad_clip: None,
            log_grad_norm: false,
            precision: Precision::F32,
            scheduler_interval: Interval::Epoch,
            seed: None,
            deterministic: false,
            fast_dev_run: false,
            limit_train_batches: None,
            limit_val_batches: None,
            root_dir: PathBuf::from("runs/trainer"),
            tensorboard: true,
            progress: true,
            dashboard: false,
            resume_from: None,
            process_group: None,
            tensorboard_flush_secs: 120,
            tensorboard_max_queue: 10,
        }
    }
}

/// What a step returns: the loss, and optionally the batch's scores and targets, which
/// feed the progress bar's accuracy and the validation [`Metric`]s.
#[derive(Clone, Debug)]
pub struct StepOutput {
    /// The loss to minimise (a scalar tensor).
    pub loss: Tensor,
    /// `(scores [N, C], targets [N])`.
    pub predictions: Option<(Tensor, Tensor)>,
    /// Samples in the batch (the targets' count when predictions are given, else 1).
    pub batch_size: usize,
    /// Values the step logs ([`StepOutput::log`]), in order.
    pub logs: Vec<(String, f64, LogOptions)>,
}

/// When a value a step logs is recorded (Lightning's `self.log(on_step=…, on_epoch=…)`).
///
/// A value logged both per step and per epoch gets two series, `{name}_step` and
/// `{name}_epoch` (the epoch's mean weighted by batch size); logged one way only, it keeps
/// its name. The epoch value (or the last step's) is in `state.metrics` under the name
/// itself, for the monitoring callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// Record each step's value (at the optimizer step it belongs to).
    pub on_step: bool,
    /// Record the epoch's mean.
    pub on_epoch: bool,
}

impl LogOptions {
    /// Lightning's default in `training_step`: per step only.
    pub const TRAINING: LogOptions = LogOptions {
        on_step: true,
        on_epoch: false,
    };
    /// Lightning's default in `validation_step`: the epoch's mean only.
    pub const VALIDATION: LogOptions = LogOptions {
        on_step: false,
        on_epoch: true,
    };
    /// Both series.
    pub const BOTH: LogOptions = LogOptions {
        on_step: true,
        on_epoch: true,
    };
}

impl StepOutput {
    /// A step's loss alone.
    pub fn new(loss: Tensor) -> StepOutput {
        StepOutput {
            loss,
            predictions: None,
            batch_size: 1,
            logs: Vec::new(),
        }
    }

    /// Logs `value` under `name` with Lightning's defaults: per step in training, the
    /// epoch's mean in validation.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::train::{LogOptions, StepOutput};
    /// let out = StepOutput::new(Tensor::scalar(0.5, DType::F32))
    ///     .log("train/perplexity", 1.65)
    ///     .log_with("train/tokens", 512.0, LogOptions::BOTH);
    /// assert_eq!(out.logs.len(), 2);
    /// ```
    pub fn log(mut self, name: impl Into<String>, value: f64) -> StepOutput {
        self.logs.push((name.into(), value, LogOptions::TRAINING));
        self
    }

    /// Logs `value` under `name` per step and/or per epoch as `options` say (in
    /// validation, per-step values are not recorded: there are no optimizer steps).
    pub fn log_with(
        mut self,
        name: impl Into<String>,
        value: f64,
        options: LogOptions,
    ) -> StepOutput {
        self.logs.push((name.into(), value, options));
        self
    }
    /// With the batch's scores and targets.
    pub fn with_predictions(mut self, scores: Tensor, targets: Tensor) -> StepOutput {
        self.batch_size = targets.shape().first().copied().unwrap_or(1);
        self.predictions = Some((scores, targets));
        self
    }
}

/// The user's step: how a batch becomes a loss. A closure `FnMut(&mut M, B) ->
/// StepOutput` is one, and validates with the same code under `no_grad`.
pub trait TrainStep<M, B> {
    /// The training step (its loss is backpropagated).
    fn training_step(&mut self, model: &mut M, batch: B) -> StepOutput;
    /// The validation step (run under `no_grad` in eval mode); the training step by
    /// default.
    fn validation_step(&mut self, model: &mut M, batch: B) -> StepOutput {
        self.training_step(model, batch)
    }
}

impl<M, B, F: FnMut(&mut M, B) -> StepOutput> TrainStep<M, B> for F {
    fn training_step(&mut self, model: &mut M, batch: B) -> StepOutput {
        self(model, batch)
    }
}

/// What [`Trainer::fit`] did.
#[derive(Clone, Debug)]
pub struct FitReport {
    /// Epochs finished, counting those before a resume.
    pub epochs: usize,
    /// Optimizer steps taken in all.
    pub global_step: u64,
    /// The latest value of every logged quantity.
    pub metrics: BTreeMap<String, f64>,
    /// Whether a callback stopped training before `max_epochs`.
    pub stopped_early: bool,
}

/// A training loop with callbacks, metrics and logs around a user's [`TrainStep`].
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{DataLoader, TensorDataset};
/// use ferrograd_runtime::nn::{Linear, Module, functional as F};
/// use ferrograd_runtime::optim::{Sgd, SgdConfig};
/// use ferrograd_runtime::train::metrics::Accuracy;
/// use ferrograd_runtime::train::{EarlyStopping, Mode, ModelCheckpoint, StepOutput, Trainer, TrainerConfig};
/// manual_seed(0);
/// let x = Tensor::randn(&[64, 2], DType::F32, &Device::Cpu);
/// let y = x.narrow(1, 0, 1).gt_scalar(0.0).to_dtype(DType::I64).reshape(&[64]);
/// let ds = || TensorDataset::new(vec![x.clone(), y.clone()]);
/// let mut train = DataLoader::builder(ds()).batch_size(16).shuffle(true).build();
/// let mut val = DataLoader::builder(ds()).batch_size(32).build();
/// let mut model = Linear::new(2, 2, &Device::Cpu);
/// let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.5));
/// let dir = std::env::temp_dir().join(format!("ferrograd-doc-trainer-{}", std::process::id()));
/// let mut trainer = Trainer::new(TrainerConfig { max_epochs: 5, root_dir: dir.clone(), progress: false, ..Default::default() })
///     .metric(Accuracy::new())
///     .callback(ModelCheckpoint::new("val_accuracy", Mode::Max))
///     .callback(EarlyStopping::new("val_loss", Mode::Min, 3));
/// let report = trainer
///     .fit(&mut model, &mut opt, None, &mut train, Some(&mut val), &mut |m: &mut Linear, b: Vec<Tensor>| {
///         let logits = m.forward(&b[0]);
///         StepOutput::new(F::cross_entropy(&logits, &b[1])).with_predictions(logits, b[1].clone())
///     })
///     .unwrap();
/// assert!(report.metrics["val_accuracy"] > 0.9);
/// assert!(dir.join("checkpoints/last.safetensors").exists());
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
pub struct Trainer {
    config: TrainerConfig,
    callbacks: Vec<Box<dyn Callback>>,
    metrics: Vec<Box<dyn Metric>>,
    state: TrainerState,
    /// Whether a callback logs the learning rate (then the trainer does not).
    callbacks_log_lr: bool,
    /// The step values are logged at, Lightning's: a batch's index among the optimizer
    /// steps (what its step, the validation after it and its epoch's end log at); at an
    /// epoch's or a batch's start, the next step's.
    log_step: u64,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("config", &self.config)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// What the training checkpoint holds beyond `Checkpoint`'s own fields.
const META_CALLBACK: &str = "trainer.callback.";
const META_METRICS: &str = "trainer.metrics";
/// A validation's own values (`val_loss`, the metrics) and what its step logged.
type Validated = (BTreeMap<String, f64>, Vec<(String, f64)>);

/// The TensorBoard values logged at the checkpoint's step before it was taken.
const META_LOGGED_AT_STEP: &str = "trainer.logged_at_step";
/// The sums and position of an epoch a `max_steps`/`max_time` stop left unfinished.
const META_PARTIAL_EPOCH: &str = "trainer.partial_epoch";

/// An epoch's running sums (and, for one a stop left unfinished, how far it got).
#[derive(Default)]
struct PartialEpoch {
    done: usize,
    loss_sum: f64,
    loss_weight: f64,
    correct: f64,
    counted: f64,
    samples: f64,
    step_logs: StepLogs,
}

impl PartialEpoch {
    fn to_json(&self) -> String {
        serde_json::json!({
            "done": self.done,
            "sums": [self.loss_sum, self.loss_weight, self.correct, self.counted, self.samples],
            "step_logs": self.step_logs.to_json(),
        })
        .to_string()
    }

    fn from_json(text: &str) -> Result<PartialEpoch, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let done = v["done"].as_u64().ok_or("no batch count")? as usize;
        let sums: Vec<f64> = v["sums"]
            .as_array()
            .ok_or("no sums")?
            .iter()
            .map(|x| x.as_f64().ok_or("a sum that is not a number"))
            .collect::<Result<_, _>>()?;
        let [loss_sum, loss_weight, correct, counted, samples] = sums[..] else {
            return Err(format!("{} sums, not 5", sums.len()));
        };
        Ok(PartialEpoch {
            done,
            loss_sum,
            loss_weight,
            correct,
            counted,
            samples,
            step_logs: StepLogs::from_json(&v["step_logs"])?,
        })
    }
    /// Zero sums (the position kept): what a rank other than 0 carries on with.
    fn clear_sums(&mut self) {
        let done = self.done;
        *self = PartialEpoch {
            done,
            ..PartialEpoch::default()
        };
    }

    /// The sums of every rank, added up.
    fn all_reduce(&mut self, g: &crate::distributed::ProcessGroup) -> Result<(), TrainError> {
        let [l, w, c, n, s] = all_reduce_sums(
            g,
            [
                self.loss_sum,
                self.loss_weight,
                self.correct,
                self.counted,
                self.samples,
            ],
        )?;
        (
            self.loss_sum,
            self.loss_weight,
            self.correct,
            self.counted,
            self.samples,
        ) = (l, w, c, n, s);
        Ok(())
    }
}

impl Trainer {
    /// A trainer with `config` and no callbacks or metrics.
    pub fn new(config: TrainerConfig) -> Trainer {
        Trainer {
            config,
            callbacks: Vec::new(),
            metrics: Vec::new(),
            state: TrainerState::default(),
            callbacks_log_lr: false,
            log_step: 0,
        }
    }

    /// Adds a callback (called in the order added).
    pub fn callback(mut self, callback: impl Callback + 'static) -> Trainer {
        self.callbacks.push(Box::new(callback));
        self
    }

    /// Adds a validation metric, logged as `val_{name}`.
    pub fn metric(mut self, metric: impl Metric + 'static) -> Trainer {
        self.metrics.push(Box::new(metric));
        self
    }

    /// The run's state (after `fit`: where it ended).
    pub fn state(&self) -> &TrainerState {
        &self.state
    }

    /// The callbacks, in the order added.
    pub fn callbacks(&self) -> &[Box<dyn Callback>] {
        &self.callbacks
    }

    /// The first callback of type `T`, to read an [`EarlyStopping`]'s reason or a
    /// [`ModelCheckpoint`]'s best paths after `fit` (Lightning's
    /// `trainer.early_stopping_callback`, `trainer.checkpoint_callback`).
    ///
    /// ```
    /// use ferrograd_runtime::train::{EarlyStopping, Mode, ModelCheckpoint, Trainer, TrainerConfig};
    /// let trainer = Trainer::new(TrainerConfig::default())
    ///     .callback(EarlyStopping::new("val_loss", Mode::Min, 3));
    /// assert_eq!(trainer.find_callback::<EarlyStopping>().unwrap().patience, 3);
    /// assert!(trainer.find_callback::<ModelCheckpoint>().is_none());
    /// ```
    pub fn find_callback<T: Callback>(&self) -> Option<&T> {
        self.callbacks
            .iter()
            .find_map(|cb| (cb.as_ref() as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// The first callback of type `T`, mutably (to change a setting between fits).
    pub fn find_callback_mut<T: Callback>(&mut self) -> Option<&mut T> {
        self.callbacks
            .iter_mut()
            .find_map(|cb| (cb.as_mut() as &mut dyn std::any::Any).downcast_mut::<T>())
    }

    fn hooks(
        &mut self,
        writer: &mut Option<RunLog>,
        f: impl Fn(&mut dyn Callback, &mut Context),
    ) -> Result<(Vec<PathBuf>, Vec<PathBuf>), TrainError> {
        let mut ctx = Context::new(&mut self.state, &self.config.root_dir);
        let mut failed = None;
        for cb in &mut self.callbacks {
            f(cb.as_mut(), &mut ctx);
            if failed.is_none()
                && let Some(reason) = ctx.failure()
            {
                failed = Some((cb.name(), reason.to_string()));
            }
        }
        if let Some((name, reason)) = failed {
            return Err(TrainError::Callback { name, reason });
        }
        let step = self.log_step;
        if ctx
            .logs
            .iter()
            .any(|(n, _)| n == "lr" || n.starts_with("lr/"))
        {
            self.callbacks_log_lr = true;
        }
        if let Some(w) = writer {
            for (name, value) in &ctx.logs {
                w.scalar(name, *value, step)?;
            }
        }
        Ok((ctx.saves, ctx.removes))
    }

    /// Trains `model` with `opt` (and `sched`) on `train`, validating on `val`, for
    /// `max_epochs` (or until `max_steps`, `max_time` or a callback stops it).
    ///
    /// Each epoch: the training batches (forward in the configured precision, the loss
    /// backpropagated, gradients accumulated, clipped and stepped), the schedule, then
    /// validation (the step under `no_grad` in eval mode, the metrics over the whole
    /// set), then the callbacks' checkpoints, the CSV row, the plot and the TensorBoard
    /// scalars. With `resume_from`, everything is restored first and the run continues
    /// exactly where the checkpoint was taken.
    #[allow(clippy::too_many_arguments)]
    pub fn fit<M, D, C, D2, C2, S>(
        &mut self,
        model: &mut M,
        opt: &mut dyn Optimizer,
        mut sched: Option<&mut dyn LrScheduler>,
        train: &mut DataLoader<D, C>,
        mut val: Option<&mut DataLoader<D2, C2>>,
        step: &mut S,
    ) -> Result<FitReport, TrainError>
    where
        M: Module,
        D: Dataset + 'static,
        C: Collate<D::Item>,
        D2: Dataset + 'static,
        C2: Collate<D2::Item, Batch = C::Batch>,
        S: TrainStep<M, C::Batch>,
    {
        let cfg = self.config.clone();
        let _deterministic = cfg.deterministic.then(DeterministicGuard::on);
        let dev_run = cfg.fast_dev_run;
        let max_epochs = if dev_run { 1 } else { cfg.max_epochs };
        let accumulate = cfg.accumulate_grad_batches.max(1);
        let mut scaler = GradScaler::new().enabled(cfg.precision == Precision::F16);
        self.state = TrainerState::default();
        self.callbacks_log_lr = false;
        let started = Instant::now();
        let mut resumed_at = None;
        let mut relog: Vec<(String, f64)> = Vec::new();
        let mut partial: Option<PartialEpoch> = None;
        let group = cfg.process_group.clone();
        let is_main = group.as_ref().is_none_or(|g| g.rank() == 0);
        if let Some(path) = &cfg.resume_from {
            let ckpt = match &group {
                None => Checkpoint::load(path)?,
                Some(g) => crate::distributed::load_checkpoint(g, path)?,
            };
            ckpt.restore_model(model, true)?;
            ckpt.restore_optimizer(opt)?;
            if let Some(s) = sched.as_deref_mut() {
                ckpt.restore_scheduler(s)?;
            }
            if ckpt.scaler.is_some() {
                ckpt.restore_scaler(&mut scaler)?;
            }
            ckpt.restore_rng()?;
            if let Some(position) = &ckpt.loader {
                train.load_state(position);
            }
            self.state.epoch = ckpt.epoch as usize;
            self.state.global_step = ckpt.step;
            if let Some(m) = ckpt.metadata.get(META_METRICS) {
                self.state.metrics = serde_json::from_str(m).unwrap_or_default();
            }
            if let Some(m) = ckpt.metadata.get(META_LOGGED_AT_STEP) {
                relog = serde_json::from_str(m).unwrap_or_default();
            }
            if let Some(m) = ckpt.metadata.get(META_PARTIAL_EPOCH) {
                let mut p = PartialEpoch::from_json(m).map_err(|e| TrainError::Callback {
                    name: "Trainer".into(),
                    reason: format!("the checkpoint's unfinished epoch: {e}"),
                })?;
                // The epoch's sums are the whole group's: one rank carries them on.
                if !is_main {
                    p.clear_sums();
                }
                partial = Some(p);
            }
            for cb in &mut self.callbacks {
                let name = cb.name();
                if let Some(s) = ckpt.metadata.get(&format!("{META_CALLBACK}{name}")) {
                    cb.load_state_dict(s)
                        .map_err(|reason| TrainError::Callback { name, reason })?;
                }
            }
            // TensorBoard drops the old files' events from the checkpoint's step on; what
            // was logged at that step before the checkpoint was taken is logged again.
            resumed_at = Some(ckpt.step);
        } else if let Some(seed) = cfg.seed {
            crate::manual_seed(seed);
        }
        // Checkpoints are written by every rank together; the logs by rank 0.
        let writes = !dev_run;
        let logs = writes && is_main;
        let mut writer = if logs && cfg.tensorboard {
            Some(RunLog::open(
                &cfg.root_dir.join("tensorboard"),
                resumed_at,
                &relog,
                cfg.tensorboard_flush_secs,
                cfg.tensorboard_max_queue,
            )?)
        } else {
            None
        };
        let metric_names: Vec<String> = self
            .metrics
            .iter()
            .map(|m| format!("val_{}", m.name()))
            .collect();
        let mut columns: Vec<String> = vec![
            "epoch".into(),
            "train_loss".into(),
            "train_accuracy".into(),
            "val_loss".into(),
        ];
        columns.extend(metric_names.iter().cloned());
        columns.push("lr".into());
        columns.push("samples_per_sec".into());
        let column_refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        let csv = cfg.root_dir.join("metrics.csv");
        let mut log = if !logs {
            None
        } else {
            std::fs::create_dir_all(&cfg.root_dir).map_err(|source| TrainError::Io {
                path: cfg.root_dir.clone(),
                source,
            })?;
            Some(if resumed_at.is_some() {
                MetricsLog::resume(&csv, &column_refs, self.state.epoch as f64)?
            } else {
                MetricsLog::create(&csv, &column_refs)?
            })
        };
        let record_lrs = |state: &mut TrainerState, opt: &dyn Optimizer| {
            for g in 0..opt.num_groups() {
                state
                    .metrics
                    .insert(format!("lr_group{g}"), opt.group_lr(g));
            }
        };
        record_lrs(&mut self.state, opt);
        self.state.validates_within_epoch =
            val.is_some() && !cfg.val_check_interval.is_whole_epoch();
        self.log_step = self.state.global_step;
        self.hooks(&mut writer, |cb, ctx| cb.on_fit_start(ctx))?;
        // The optimizer's parameters, for the scaler and clipping (fixed during a fit).
        let params = opt.params();
        let mut stopped_early = false;
        // A time budget already spent (`max_time` of zero) trains nothing, as Lightning.
        let mut out_of_budget = cfg.max_time.is_some_and(|t| started.elapsed() >= t);
        let mut display = Display::open(&cfg, max_epochs, is_main);
        while self.state.epoch < max_epochs && !out_of_budget {
            let epoch = self.state.epoch;
            self.state.current_epoch = epoch;
            self.log_step = self.state.global_step;
            model.train();
            // An epoch a `max_steps`/`max_time` stop left unfinished goes on where it was
            // (its start hooks ran before the stop).
            let resumed = partial.take();
            if resumed.is_none() {
                record_lrs(&mut self.state, opt);
                self.hooks(&mut writer, |cb, ctx| cb.on_train_epoch_start(ctx))?;
            }
            let mut limit = train.len();
            if let Some(l) = cfg.limit_train_batches {
                limit = limit.min(l);
            }
            if dev_run {
                limit = limit.min(1);
            }
            display.epoch_start(epoch, max_epochs, limit);
            let epoch_len = train.len();
            let mut acc = resumed.unwrap_or_default();
            let epoch_start = Instant::now();
            // Whether this epoch validates, and after which batches.
            let validate_epoch = dev_run
                || (epoch + 1).is_multiple_of(cfg.val_every.max(1))
                || epoch + 1 == max_epochs;
            let check_batch = cfg.val_check_interval.check_batch(limit);
            // Where the epoch's batches start, for a checkpoint taken inside it.
            let position = train.state();
            let mut yielded = 0usize;
            let mut batches = train.iter();
            let mut pending = 0usize;
            let mut unfinished = false;
            while acc.done < limit {
                let Some(batch) = batches.next() else { break };
                let batch = batch?;
                yielded += 1;
                self.log_step = self.state.global_step;
                record_lrs(&mut self.state, opt);
                self.hooks(&mut writer, |cb, ctx| {
                    cb.on_train_batch_start(ctx, acc.done)
                })?;
                let out = record_function("training_step", || match cfg.precision {
                    Precision::F32 => step.training_step(model, batch),
                    Precision::Bf16 => autocast(DType::BF16, || step.training_step(model, batch)),
                    Precision::F16 => autocast(DType::F16, || step.training_step(model, batch)),
                });
                let loss_value = out.loss.item_f64();
                if !loss_value.is_finite() && cfg.precision != Precision::F16 {
                    return Err(TrainError::NonFiniteLoss {
                        step: self.state.global_step,
                        value: loss_value,
                    });
                }
                let loss = if accumulate > 1 {
                    out.loss.div_scalar(accumulate as f64)
                } else {
                    out.loss.clone()
                };
                scaler.scale(&loss).backward();
                pending += 1;
                acc.done += 1;
                let batch_correct = out
                    .predictions
                    .as_ref()
                    .map(|(scores, targets)| correct_predictions(scores, targets));
                if let Some(c) = batch_correct {
                    acc.correct += c as f64;
                    acc.counted += out.batch_size as f64;
                }
                acc.samples += out.batch_size as f64;
                acc.loss_sum += loss_value * out.batch_size as f64;
                acc.loss_weight += out.batch_size as f64;
                acc.step_logs.add(&out.logs, out.batch_size as f64);
                self.state
                    .metrics
                    .insert("train_loss_step".into(), loss_value);
                for (name, value, o) in out.logs.iter().filter(|l| l.2.on_step) {
                    self.state.metrics.insert(step_tag(name, *o), *value);
                    if !o.on_epoch {
                        self.state.metrics.insert(name.clone(), *value);
                    }
                }
                let mut stop_requested = false;
                let stepped = pending == accumulate || acc.done == limit;
                if stepped {
                    pending = 0;
                    if cfg.grad_clip.is_some() || cfg.log_grad_norm {
                        scaler.unscale_(&params);
                        let max = cfg.grad_clip.unwrap_or(f64::INFINITY);
                        if let Ok(norm) =
                            crate::optim::utils::clip_grad_norm_(&params, max, 2.0, false)
                        {
                            self.state
                                .metrics
                                .insert("grad_norm".into(), norm.item_f64());
                        }
                    }
                    record_function("optimizer.step", || {
                        scaler.step(&params, || opt.step());
                        scaler.update();
                        opt.zero_grad();
                    });
                    self.state.global_step += 1;
                    if cfg.scheduler_interval == Interval::Step
                        && let Some(s) = sched.as_deref_mut()
                    {
                        s.step(opt);
                    }
                    let gs = self.state.global_step;
                    let at = self.log_step;
                    if let Some(w) = writer.as_mut()
                        && gs.is_multiple_of(cfg.log_every.max(1))
                    {
                        w.scalar("train/loss_step", loss_value, at)?;
                        if cfg.log_grad_norm
                            && let Some(n) = self.state.metrics.get("grad_norm")
                        {
                            w.scalar("train/grad_norm", *n, at)?;
                        }
                        for (name, value, o) in out.logs.iter().filter(|l| l.2.on_step) {
                            w.scalar(&step_tag(name, *o), *value, at)?;
                        }
                    }
                }
                stop_requested |= display.batch(
                    self.state.global_step,
                    out.batch_size,
                    loss_value,
                    batch_correct,
                    opt.group_lr(0),
                );
                self.hooks(&mut writer, |cb, ctx| {
                    cb.on_train_batch_end(ctx, loss_value)
                })?;
                if stop_requested {
                    // `q` on the dashboard: end this epoch as usual, then stop.
                    self.state.should_stop = true;
                    break;
                }
                // Validation inside the epoch (`val_check_interval`); the epoch's end has
                // its own below.
                if let (Some(v), true) = (
                    val.as_deref_mut(),
                    validate_epoch && acc.done < limit && acc.done.is_multiple_of(check_batch),
                ) {
                    self.hooks(&mut writer, |cb, ctx| cb.on_validation_start(ctx))?;
                    let (values, user) = self.run_validation(model, v, step)?;
                    self.state.metrics.extend(values);
                    for (name, value) in &user {
                        self.state.metrics.insert(name.clone(), *value);
                    }
                    if let Some(w) = writer.as_mut() {
                        write_validation(
                            w,
                            &self.state.metrics,
                            &metric_names,
                            &user,
                            self.log_step,
                        )?;
                    }
                    let (saves, removes) =
                        self.hooks(&mut writer, |cb, ctx| cb.on_validation_end(ctx))?;
                    if writes && !(saves.is_empty() && removes.is_empty()) {
                        // A checkpoint inside the epoch: a resume finishes the epoch from
                        // the next batch, with its sums so far.
                        let mut sums =
                            PartialEpoch::from_json(&acc.to_json()).expect("the sums read back");
                        if let Some(g) = &group {
                            sums.all_reduce(g)?;
                        }
                        let mut extra = self.logged_at_step(&writer);
                        extra.push((META_PARTIAL_EPOCH.to_string(), sums.to_json()));
                        let here = crate::data::LoaderState {
                            batch: position.batch + yielded,
                            ..position
                        };
                        self.write_checkpoints(
                            model,
                            opt,
                            sched.as_deref(),
                            &scaler,
                            here,
                            &saves,
                            &removes,
                            &extra,
                        )?;
                    }
                    if self.state.should_stop {
                        // Lightning stops at once when a callback asks inside an epoch.
                        out_of_budget = true;
                        unfinished = acc.done < epoch_len;
                        break;
                    }
                }
                // The budgets end the fit between optimizer steps (never with gradients
                // accumulated and not applied).
                let over_steps = cfg.max_steps.is_some_and(|m| self.state.global_step >= m);
                let over_time = cfg.max_time.is_some_and(|t| started.elapsed() >= t);
                if stepped && (over_steps || over_time) {
                    out_of_budget = true;
                    unfinished = acc.done < limit && acc.done < epoch_len;
                    break;
                }
            }
            drop(batches);
            display.finish_bar();
            let mut validation_saves = (Vec::new(), Vec::new());
            if unfinished {
                // Stopped inside the epoch: it is not counted as finished (no schedule
                // step, validation or CSV row); the checkpoint keeps its position and sums
                // so that a resume finishes it, as Lightning resumes an unfinished epoch.
                if let Some(g) = &group {
                    acc.all_reduce(g)?;
                    if !is_main {
                        acc.clear_sums();
                    }
                }
            } else {
                let seconds = epoch_start.elapsed().as_secs_f64();
                self.state.epoch = epoch + 1;
                if let Some(g) = &group {
                    // Every rank's batches: the loss's sums and the counts, added up.
                    acc.all_reduce(g)?;
                }
                let loss_mean = if acc.loss_weight > 0.0 {
                    acc.loss_sum / acc.loss_weight
                } else {
                    f64::NAN
                };
                self.state.metrics.insert("train_loss".into(), loss_mean);
                self.state
                    .metrics
                    .insert("train_loss_epoch".into(), loss_mean);
                if acc.counted > 0.0 {
                    self.state
                        .metrics
                        .insert("train_accuracy".into(), acc.correct / acc.counted);
                }
                let train_logged = acc.step_logs.epoch_values(false);
                for (tag, name, value) in &train_logged {
                    self.state.metrics.insert(name.clone(), *value);
                    self.state.metrics.insert(tag.clone(), *value);
                }
                self.state
                    .metrics
                    .insert("samples_per_sec".into(), acc.samples / seconds.max(1e-9));
                if cfg.scheduler_interval == Interval::Epoch
                    && let Some(s) = sched.as_deref_mut()
                {
                    s.step(opt);
                }
                // At the epoch's end when the last batch is a check point (always, once
                // an epoch, by default).
                let validate_now = validate_epoch
                    && (cfg.val_check_interval.is_whole_epoch()
                        || acc.done.is_multiple_of(check_batch));
                let mut val_logged = Vec::new();
                if let (Some(v), true) = (val.as_deref_mut(), validate_now) {
                    self.hooks(&mut writer, |cb, ctx| cb.on_validation_start(ctx))?;
                    let (values, user) = self.run_validation(model, v, step)?;
                    self.state.metrics.extend(values);
                    for (name, value) in &user {
                        self.state.metrics.insert(name.clone(), *value);
                    }
                    val_logged = user;
                    validation_saves =
                        self.hooks(&mut writer, |cb, ctx| cb.on_validation_end(ctx))?;
                }
                // The epoch's values go to TensorBoard before the checkpoint is taken, so the
                // checkpoint knows everything logged at its step.
                if let Some(w) = writer.as_mut() {
                    let at = self.log_step;
                    for (name, tag) in [
                        ("train_loss", "train/loss_epoch"),
                        ("train_accuracy", "train/accuracy"),
                    ] {
                        if let Some(v) = self.state.metrics.get(name) {
                            w.scalar(tag, *v, at)?;
                        }
                    }
                    for (tag, _, value) in &train_logged {
                        w.scalar(tag, *value, at)?;
                    }
                    let validated =
                        !val_logged.is_empty() || self.state.metrics.contains_key("val_loss");
                    if validate_now && validated {
                        write_validation(w, &self.state.metrics, &metric_names, &val_logged, at)?;
                    }
                    if !self.callbacks_log_lr {
                        w.scalar("lr", opt.group_lr(0), at)?;
                    }
                }
            }
            let (mut saves, mut removes) = validation_saves;
            let (s2, r2) = self.hooks(&mut writer, |cb, ctx| cb.on_train_epoch_end(ctx))?;
            saves.extend(s2);
            removes.extend(r2);
            if writes {
                let mut extra = self.logged_at_step(&writer);
                if unfinished {
                    extra.push((META_PARTIAL_EPOCH.to_string(), acc.to_json()));
                }
                self.write_checkpoints(
                    model,
                    opt,
                    sched.as_deref(),
                    &scaler,
                    train.state(),
                    &saves,
                    &removes,
                    &extra,
                )?;
            }
            if unfinished {
                stopped_early = self.state.should_stop;
                break;
            }
            if let Some(log) = log.as_mut() {
                let value = |k: &str| self.state.metrics.get(k).copied().unwrap_or(f64::NAN);
                let row: Vec<f64> = columns
                    .iter()
                    .map(|c| match c.as_str() {
                        "epoch" => self.state.epoch as f64,
                        "lr" => value("lr_group0"),
                        other => value(other),
                    })
                    .collect();
                log.append(&row)?;
                #[cfg(feature = "plot")]
                log.plot(
                    cfg.root_dir.join("metrics.png"),
                    cfg.root_dir.join("metrics.svg"),
                )?;
            }
            if let Some(w) = writer.as_mut() {
                w.flush()?;
            }
            display.epoch_end(&self.state.metrics, self.state.global_step);
            if self.state.should_stop {
                stopped_early = self.state.epoch < max_epochs;
                break;
            }
        }
        self.log_step = self.state.global_step.saturating_sub(1);
        self.hooks(&mut writer, |cb, ctx| cb.on_fit_end(ctx))?;
        if let Some(w) = writer.as_mut() {
            w.flush()?;
        }
        drop(display);
        Ok(FitReport {
            epochs: self.state.epoch,
            global_step: self.state.global_step,
            metrics: self.state.metrics.clone(),
            stopped_early,
        })
    }

    /// The checkpoint metadata naming what TensorBoard got at the current step so far.
    fn logged_at_step(&self, writer: &Option<RunLog>) -> Vec<(String, String)> {
        let logged = writer
            .as_ref()
            .map(|w| w.logged_at(self.state.global_step).to_vec())
            .unwrap_or_default();
        vec![(
            META_LOGGED_AT_STEP.to_string(),
            serde_json::to_string(&logged).unwrap_or_default(),
        )]
    }

    #[allow(clippy::too_many_arguments)]
    fn write_checkpoints<M: Module>(
        &self,
        model: &M,
        opt: &dyn Optimizer,
        sched: Option<&dyn LrScheduler>,
        scaler: &GradScaler,
        loader: crate::data::LoaderState,
        saves: &[PathBuf],
        removes: &[PathBuf],
        extra: &[(String, String)],
    ) -> Result<(), TrainError> {
        let group = self.config.process_group.as_ref();
        let is_main = group.is_none_or(|g| g.rank() == 0);
        if !saves.is_empty() {
            let mut ckpt = Checkpoint::new(model)
                .optimizer(opt)
                .loader(loader)
                .epoch(self.state.epoch as u64)
                .step(self.state.global_step)
                .meta(
                    META_METRICS,
                    serde_json::to_string(&self.state.metrics).unwrap_or_default(),
                );
            if let Some(s) = sched {
                ckpt = ckpt.scheduler(s);
            }
            if scaler.is_enabled() {
                ckpt = ckpt.scaler(scaler);
            }
            for cb in &self.callbacks {
                ckpt = ckpt.meta(format!("{META_CALLBACK}{}", cb.name()), cb.state_dict());
            }
            for (k, v) in extra {
                ckpt = ckpt.meta(k.clone(), v.clone());
            }
            for path in saves {
                if let Some(dir) = path.parent()
                    && is_main
                {
                    std::fs::create_dir_all(dir).map_err(|source| TrainError::Io {
                        path: dir.to_path_buf(),
                        source,
                    })?;
                }
                match group {
                    None => ckpt.save(path)?,
                    // Collective: rank 0 writes it with every rank's RNG and data position.
                    Some(g) => {
                        crate::distributed::save_checkpoint(g, ckpt.clone(), Some(loader), path)?
                    }
                }
            }
        }
        for path in removes.iter().filter(|_| is_main) {
            if !saves.contains(path) {
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => {
                        return Err(TrainError::Io {
                            path: path.clone(),
                            source,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn run_validation<M, D2, C2, S, B>(
        &mut self,
        model: &mut M,
        loader: &mut DataLoader<D2, C2>,
        step: &mut S,
    ) -> Result<Validated, TrainError>
    where
        M: Module,
        D2: Dataset + 'static,
        C2: Collate<D2::Item, Batch = B>,
        S: TrainStep<M, B>,
    {
        let mut limit = loader.len();
        if let Some(l) = self.config.limit_val_batches {
            limit = limit.min(l);
        }
        if self.config.fast_dev_run {
            limit = limit.min(1);
        }
        model.eval();
        for m in &mut self.metrics {
            m.reset();
        }
        let mut loss = Mean::new("val_loss");
        let mut user = StepLogs::default();
        let result = no_grad(|| -> Result<(), TrainError> {
            for batch in loader.iter().take(limit) {
                let out = step.validation_step(model, batch?);
                loss.add(out.loss.item_f64(), out.batch_size as f64);
                user.add(&out.logs, out.batch_size as f64);
                if let Some((scores, targets)) = &out.predictions {
                    for m in &mut self.metrics {
                        m.update(scores, targets);
                    }
                }
            }
            Ok(())
        });
        model.train();
        result?;
        if let Some(g) = &self.config.process_group {
            // Every rank's shard: the loss's sums and each metric's counts, added up.
            let [l, w] = all_reduce_sums(g, [mean_sum(&loss), loss.weight()])?;
            loss = Mean::new("val_loss");
            loss.add(l / w, w);
            user.all_reduce(g)?;
            for m in &mut self.metrics {
                let state = m.sync_state();
                if !state.is_empty() {
                    let n = state.len();
                    let t = Tensor::from_vec(state, &[n]);
                    g.all_reduce(&t, crate::distributed::ReduceOp::Sum)?;
                    m.load_sync_state(&t.to_vec::<f64>());
                }
                if let Some(mine) = m.gather_state() {
                    m.load_gathered_state(&all_gather_varlen(g, &mine)?);
                }
            }
        }
        let mut values = BTreeMap::new();
        values.insert("val_loss".to_string(), loss.value());
        for m in &self.metrics {
            values.insert(format!("val_{}", m.name()), m.compute());
        }
        let user = user
            .epoch_values(true)
            .into_iter()
            .map(|(tag, _, v)| (tag, v))
            .collect();
        Ok((values, user))
    }

    /// Runs the validation loop alone (no training): `val_loss` and the metrics.
    pub fn validate<M, D, C, S>(
        &mut self,
        model: &mut M,
        loader: &mut DataLoader<D, C>,
        step: &mut S,
    ) -> Result<BTreeMap<String, f64>, TrainError>
    where
        M: Module,
        D: Dataset + 'static,
        C: Collate<D::Item>,
        S: TrainStep<M, C::Batch>,
    {
        let (mut values, user) = self.run_validation(model, loader, step)?;
        values.extend(user);
        Ok(values)
    }

    /// [`validate`](Self::validate) on a test set, the names prefixed `test_`.
    pub fn test<M, D, C, S>(
        &mut self,
        model: &mut M,
        loader: &mut DataLoader<D, C>,
        step: &mut S,
    ) -> Result<BTreeMap<String, f64>, TrainError>
    where
        M: Module,
        D: Dataset + 'static,
        C: Collate<D::Item>,
        S: TrainStep<M, C::Batch>,
    {
        let (values, user) = self.run_validation(model, loader, step)?;
        Ok(values
            .into_iter()
            .map(|(k, v)| (k.replacen("val_", "test_", 1), v))
            .chain(user)
            .collect())
    }
}

/// Reduces `values` over the group's ranks with `op`.
fn all_reduce_values<const N: usize>(
    group: &crate::distributed::ProcessGroup,
    values: [f64; N],
    op: crate::distributed::ReduceOp,
) -> Result<[f64; N], TrainError> {
    let t = Tensor::from_vec(values.to_vec(), &[N]);
    group.all_reduce(&t, op)?;
    let v = t.to_vec::<f64>();
    Ok(std::array::from_fn(|i| v[i]))
}

/// Adds `values` up over the group's ranks.
/// A validation's values to TensorBoard at `step`: `val/loss`, the metrics
/// (`val_accuracy` as `val/accuracy`) and what the validation steps logged.
fn write_validation(
    w: &mut RunLog,
    metrics: &BTreeMap<String, f64>,
    metric_names: &[String],
    logged: &[(String, f64)],
    step: u64,
) -> Result<(), TrainError> {
    let own = std::iter::once(("val_loss", "val/loss".to_string())).chain(
        metric_names
            .iter()
            .map(|n| (n.as_str(), n.replacen('_', "/", 1))),
    );
    for (name, tag) in own {
        if let Some(v) = metrics.get(name) {
            w.scalar(&tag, *v, step)?;
        }
    }
    for (name, value) in logged {
        w.scalar(name, *value, step)?;
    }
    Ok(())
}

fn all_reduce_sums<const N: usize>(
    group: &crate::distributed::ProcessGroup,
    values: [f64; N],
) -> Result<[f64; N], TrainError> {
    all_reduce_values(group, values, crate::distributed::ReduceOp::Sum)
}

/// Every rank's `values` (of any length), in rank order: the lengths' maximum first,
/// then each rank's values behind their length, padded to it.
fn all_gather_varlen(
    group: &crate::distributed::ProcessGroup,
    values: &[f64],
) -> Result<Vec<Vec<f64>>, TrainError> {
    let [longest] = all_reduce_values(
        group,
        [values.len() as f64],
        crate::distributed::ReduceOp::Max,
    )?;
    let longest = longest as usize;
    let mut padded = Vec::with_capacity(longest + 1);
    padded.push(values.len() as f64);
    padded.extend_from_slice(values);
    padded.resize(longest + 1, 0.0);
    let parts = group.all_gather(&Tensor::from_vec(padded, &[longest + 1]))?;
    Ok(parts
        .iter()
        .map(|p| {
            let p = p.to_vec::<f64>();
            let n = (p[0] as usize).min(longest);
            p[1..1 + n].to_vec()
        })
        .collect())
}

/// A mean's weighted sum (0 when nothing was added).
fn mean_sum(m: &Mean) -> f64 {
    if m.weight() == 0.0 {
        0.0
    } else {
        m.value() * m.weight()
    }
}

/// What shows a fit's progress on rank 0: the dashboard when asked for and standard
/// error is a terminal, else the per-epoch progress bar (if `progress`), else nothing.
struct Display {
    progress: bool,
    bar: Option<EpochProgress>,
    #[cfg(feature = "dashboard")]
    dashboard: Option<super::dashboard::Dashboard>,
}

impl Display {
    fn open(cfg: &TrainerConfig, max_epochs: usize, is_main: bool) -> Display {
        #[cfg(feature = "dashboard")]
        let dashboard = if cfg.dashboard && is_main {
            // A terminal that cannot be set up falls back to the bar.
            super::dashboard::Dashboard::open(
                &cfg.root_dir.display().to_string(),
                max_epochs,
                cfg.max_steps,
                cfg.max_time,
            )
            .ok()
            .flatten()
        } else {
            None
        };
        #[cfg(not(feature = "dashboard"))]
        let _ = max_epochs;
        Display {
            progress: cfg.progress && is_main,
            bar: None,
            #[cfg(feature = "dashboard")]
            dashboard,
        }
    }

    fn epoch_start(&mut self, epoch: usize, max_epochs: usize, batches: usize) {
        #[cfg(feature = "dashboard")]
        if let Some(d) = self.dashboard.as_mut() {
            d.epoch_start(epoch, batches);
            return;
        }
        if self.progress {
            self.bar = Some(EpochProgress::new(epoch + 1, max_epochs, batches));
        }
    }

    /// Returns whether the user asked the dashboard to stop.
    fn batch(
        &mut self,
        global_step: u64,
        batch_size: usize,
        loss: f64,
        correct: Option<usize>,
        lr: f64,
    ) -> bool {
        #[cfg(feature = "dashboard")]
        if let Some(d) = self.dashboard.as_mut() {
            return d.batch(global_step, batch_size, loss, correct, lr);
        }
        let _ = (global_step, lr);
        if let Some(b) = self.bar.as_mut() {
            b.update(batch_size, loss, correct);
        }
        false
    }

    fn finish_bar(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }

    fn epoch_end(&mut self, metrics: &BTreeMap<String, f64>, global_step: u64) {
        #[cfg(feature = "dashboard")]
        if let Some(d) = self.dashboard.as_mut() {
            d.epoch_end(metrics, global_step);
        }
        let _ = (metrics, global_step);
    }
}

/// Deterministic algorithms on until dropped, then the previous setting back.
struct DeterministicGuard(bool);

impl DeterministicGuard {
    fn on() -> DeterministicGuard {
        let was = crate::are_deterministic_algorithms_enabled();
        crate::use_deterministic_algorithms(true);
        DeterministicGuard(was)
    }
}

impl Drop for DeterministicGuard {
    fn drop(&mut self) {
        crate::use_deterministic_algorithms(self.0);
    }
}
