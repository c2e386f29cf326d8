//! The [`Trainer`](super::Trainer)'s settings and errors: [`TrainerConfig`] with
//! Lightning's defaults, the precision, schedule interval and validation interval.

use super::metrics::MetricsError;
use super::tensorboard::TensorBoardError;
use crate::checkpoint::CheckpointError;
use crate::data::DataError;
use std::path::PathBuf;
use std::time::Duration;

/// Why [`Trainer::fit`](super::Trainer::fit) stopped with an error.
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
    /// `autocast` to float16 with a [`GradScaler`](crate::amp::GradScaler).
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

/// The options of a [`Trainer`](super::Trainer), with Lightning's defaults where it has them.
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
    /// validation inside the epoch, [`ModelCheckpoint`](super::ModelCheckpoint) saves after each validation.
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
    /// Show the live terminal dashboard (`train::dashboard`, feature
    /// `dashboard`) instead of the progress bar: loss and metric curves, learning rate,
    /// throughput, time left and memory; `q` stops after the current batch. Only when
    /// standard error is a terminal: anywhere else (or without the feature) the
    /// progress bar is drawn as with `progress`.
    pub dashboard: bool,
    /// Resume from this training checkpoint (`root_dir/checkpoints/last.safetensors`
    /// after [`ModelCheckpoint`](super::ModelCheckpoint) with `save_last`).
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
