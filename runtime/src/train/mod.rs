//! What a training loop shows and records beside the model: a progress bar per epoch
//! (running loss, accuracy and samples per second), a CSV log of per-epoch metrics that
//! a resumed run appends to, and (feature `plot`, on by default) the log drawn as
//! loss/accuracy curves in PNG and SVG.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::train::{EpochProgress, MetricsLog};
//! let dir = std::env::temp_dir().join("ferrograd-doc-train");
//! std::fs::create_dir_all(&dir).unwrap();
//! let mut log = MetricsLog::create(dir.join("metrics.csv"), &["epoch", "train_loss", "test_accuracy"]).unwrap();
//! for epoch in 1..=2 {
//!     let mut bar = EpochProgress::new(epoch, 2, 10);
//!     for _ in 0..10 {
//!         bar.update(32, 0.5 / epoch as f64, Some(30));
//!     }
//!     let summary = bar.finish();
//!     log.append(&[epoch as f64, summary.loss, 0.9]).unwrap();
//! }
//! assert_eq!(log.rows().len(), 2);
//! ```

mod callbacks;
mod checkpointing;
mod config;
#[cfg(feature = "dashboard")]
pub mod dashboard;
mod display;
pub mod metrics;
mod progress;
mod run_log;
mod step;
mod sync;
pub mod tensorboard;
mod trainer;

pub use metrics::{MetricsError, MetricsLog};
pub use progress::{EpochProgress, EpochSummary, correct_predictions};
pub use trainer::{
    Callback, Context, EarlyStopping, FitReport, Interval, LearningRateMonitor, LogOptions, Mode,
    ModelCheckpoint, Precision, StepOutput, TrainError, TrainStep, Trainer, TrainerConfig,
    TrainerState, ValCheckInterval,
};
