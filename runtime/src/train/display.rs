//! What shows a fit's progress: the dashboard or the progress bar.

use super::config::TrainerConfig;
use super::progress::EpochProgress;
use std::collections::BTreeMap;

/// What shows a fit's progress on rank 0: the dashboard when asked for and standard
/// error is a terminal, else the per-epoch progress bar (if `progress`), else nothing.
pub(super) struct Display {
    progress: bool,
    bar: Option<EpochProgress>,
    #[cfg(feature = "dashboard")]
    dashboard: Option<super::dashboard::Dashboard>,
}

impl Display {
    pub(super) fn open(cfg: &TrainerConfig, max_epochs: usize, is_main: bool) -> Display {
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

    pub(super) fn epoch_start(&mut self, epoch: usize, max_epochs: usize, batches: usize) {
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
    pub(super) fn batch(
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

    pub(super) fn finish_bar(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }

    pub(super) fn epoch_end(&mut self, metrics: &BTreeMap<String, f64>, global_step: u64) {
        #[cfg(feature = "dashboard")]
        if let Some(d) = self.dashboard.as_mut() {
            d.epoch_end(metrics, global_step);
        }
        let _ = (metrics, global_step);
    }
}
