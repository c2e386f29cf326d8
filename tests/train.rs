//! Training tools in one test binary: the incremental metrics against scikit-learn and
//! torchmetrics, TensorBoard event files, the Trainer, its dashboard in a terminal, and the
//! profiler.

#[cfg(feature = "dashboard")]
#[path = "train/dashboard.rs"]
mod dashboard;
#[path = "train/lightning.rs"]
mod lightning;
#[path = "train/lightning_parity.rs"]
mod lightning_parity;
#[path = "train/metrics.rs"]
mod metrics;
#[path = "train/profiler.rs"]
mod profiler;
#[path = "train/tensorboard.rs"]
mod tensorboard;
#[path = "train/trainer.rs"]
mod trainer;
