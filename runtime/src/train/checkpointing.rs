//! What a training checkpoint holds beyond the model and optimizer (each callback's
//! state, the metrics, the values logged at its step, an unfinished epoch's position
//! and sums), and how the [`Trainer`] writes it (collectively under DDP) and removes
//! the files its callbacks let go.

use super::config::TrainError;
use super::run_log::{RunLog, StepLogs};
use super::sync::all_reduce_sums;
use super::trainer::Trainer;
use crate::amp::GradScaler;
use crate::checkpoint::Checkpoint;
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::optim::lr_scheduler::LrScheduler;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the training checkpoint holds beyond `Checkpoint`'s own fields.
pub(super) const META_CALLBACK: &str = "trainer.callback.";
pub(super) const META_METRICS: &str = "trainer.metrics";
/// A validation's own values (`val_loss`, the metrics) and what its step logged.
pub(super) type Validated = (BTreeMap<String, f64>, Vec<(String, f64)>);

/// The TensorBoard values logged at the checkpoint's step before it was taken.
pub(super) const META_LOGGED_AT_STEP: &str = "trainer.logged_at_step";
/// The sums and position of an epoch a `max_steps`/`max_time` stop left unfinished.
pub(super) const META_PARTIAL_EPOCH: &str = "trainer.partial_epoch";

/// An epoch's running sums (and, for one a stop left unfinished, how far it got).
#[derive(Default)]
pub(super) struct PartialEpoch {
    pub(super) done: usize,
    pub(super) loss_sum: f64,
    pub(super) loss_weight: f64,
    pub(super) correct: f64,
    pub(super) counted: f64,
    pub(super) samples: f64,
    pub(super) step_logs: StepLogs,
}

impl PartialEpoch {
    pub(super) fn to_json(&self) -> String {
        serde_json::json!({
            "done": self.done,
            "sums": [self.loss_sum, self.loss_weight, self.correct, self.counted, self.samples],
            "step_logs": self.step_logs.to_json(),
        })
        .to_string()
    }

    pub(super) fn from_json(text: &str) -> Result<PartialEpoch, String> {
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
    pub(super) fn clear_sums(&mut self) {
        let done = self.done;
        *self = PartialEpoch {
            done,
            ..PartialEpoch::default()
        };
    }

    /// The sums of every rank, added up.
    pub(super) fn all_reduce(
        &mut self,
        g: &crate::distributed::ProcessGroup,
    ) -> Result<(), TrainError> {
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
    /// The checkpoint metadata naming what TensorBoard got at the current step so far.
    pub(super) fn logged_at_step(&self, writer: &Option<RunLog>) -> Vec<(String, String)> {
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
    pub(super) fn write_checkpoints<M: Module>(
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
}
