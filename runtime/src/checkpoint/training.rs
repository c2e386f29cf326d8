//! A training checkpoint: everything needed to stop a run and resume it bit for bit in
//! a fresh process (model, optimizer, schedule, gradient scaler, epoch and step, the
//! global and data-loader random states, and the user's own notes), in one safetensors
//! file written atomically.

use super::{CheckpointError, read_file, save_state_dict};
use crate::amp::GradScaler;
use crate::data::LoaderState;
use crate::nn::{LoadReport, Module, StateDict};
use crate::optim::lr_scheduler::LrScheduler;
use crate::optim::{Optimizer, OptimizerState};
use crate::{DType, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The `format` metadata of a checkpoint file.
const FORMAT: &str = "ferrograd.checkpoint.v1";

/// A training checkpoint (what `torch.save({"model": …, "optimizer": …, …})` holds in a
/// typical training script), saved as one safetensors file: tensors under `model.`,
/// `optimizer.` and `rng.`, the rest as JSON metadata, so any safetensors reader can open
/// it (`model.*` is the model's state dict).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::Checkpoint;
/// use ferrograd_runtime::nn::Linear;
/// use ferrograd_runtime::optim::{AdamConfig, AdamW, Optimizer};
/// let path = std::env::temp_dir().join("ferrograd-doc-checkpoint.safetensors");
/// let model = Linear::new(3, 1, &Device::Cpu);
/// let mut opt = AdamW::named(ferrograd_runtime::nn::Module::named_parameters(&model), AdamConfig::default());
/// Checkpoint::new(&model)
///     .optimizer(&opt)
///     .epoch(3)
///     .meta("note", "after warm-up")
///     .save(&path)
///     .unwrap();
///
/// let ckpt = Checkpoint::load(&path).unwrap();
/// let mut fresh = Linear::new(3, 1, &Device::Cpu);
/// ckpt.restore_model(&mut fresh, true).unwrap();
/// ckpt.restore_optimizer(&mut opt).unwrap();
/// assert_eq!((ckpt.epoch, ckpt.metadata["note"].as_str()), (3, "after warm-up"));
/// assert_eq!(fresh.weight.to_vec::<f32>(), model.weight.to_vec::<f32>());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Checkpoint {
    /// The model's state dict.
    pub model: StateDict,
    /// The optimizer's state dict.
    pub optimizer: Option<OptimizerState>,
    /// The learning-rate schedule's state.
    pub scheduler: Option<BTreeMap<String, f64>>,
    /// The gradient scaler's state (mixed precision).
    pub scaler: Option<BTreeMap<String, f64>>,
    /// Epochs completed (or the current epoch: the training loop's convention).
    pub epoch: u64,
    /// Optimizer steps taken.
    pub step: u64,
    /// The global generator's state (`torch.get_rng_state()`): dropout, `randn`, …
    pub rng: Option<Vec<u8>>,
    /// The data loader's position.
    pub loader: Option<LoaderState>,
    /// The user's notes (hyper-parameters, metrics, a git hash).
    pub metadata: BTreeMap<String, String>,
    /// In a checkpoint of a distributed run, every rank's own random state and data
    /// position, by rank (see `distributed::save_checkpoint`); empty otherwise.
    pub ranks: Vec<RankState>,
}

/// One rank's own part of a distributed run's checkpoint: what differs between ranks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankState {
    /// The rank's global generator state.
    pub rng: Option<Vec<u8>>,
    /// The rank's data-loader position.
    pub loader: Option<LoaderState>,
}

fn loader_json(l: &LoaderState) -> String {
    serde_json::json!({"seed": l.seed.to_string(), "epoch": l.epoch, "batch": l.batch}).to_string()
}

fn parse_loader(l: &str) -> Option<LoaderState> {
    let v: serde_json::Value = serde_json::from_str(l).ok()?;
    let seed = v.get("seed")?.as_str()?.parse().ok()?;
    let epoch = v.get("epoch")?.as_u64()?;
    let batch = usize::try_from(v.get("batch")?.as_u64()?).ok()?;
    Some(LoaderState { seed, epoch, batch })
}

impl Checkpoint {
    /// A checkpoint of `model` and of the global random state now; add the rest with
    /// the builder methods.
    pub fn new(model: &impl Module) -> Self {
        Checkpoint {
            model: model
                .state_dict()
                .into_iter()
                .map(|(k, v)| (k, v.deep_copy()))
                .collect(),
            rng: Some(crate::get_rng_state()),
            ..Checkpoint::default()
        }
    }

    /// Adds the optimizer's state dict.
    pub fn optimizer(mut self, optimizer: &dyn Optimizer) -> Self {
        self.optimizer = Some(optimizer.state_dict());
        self
    }

    /// Adds the schedule's state.
    pub fn scheduler(mut self, scheduler: &dyn LrScheduler) -> Self {
        self.scheduler = Some(scheduler.state_dict());
        self
    }

    /// Adds the gradient scaler's state.
    pub fn scaler(mut self, scaler: &GradScaler) -> Self {
        self.scaler = Some(scaler.state_dict());
        self
    }

    /// Sets the epoch.
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// Sets the step.
    pub fn step(mut self, step: u64) -> Self {
        self.step = step;
        self
    }

    /// Adds a data loader's position ([`crate::data::DataLoader::state`]).
    pub fn loader(mut self, state: LoaderState) -> Self {
        self.loader = Some(state);
        self
    }

    /// Adds a note.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Writes the checkpoint to `path` atomically (temporary file, fsync, rename: a crash
    /// mid-save leaves the previous file intact).
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CheckpointError> {
        let mut tensors = StateDict::new();
        for (k, v) in &self.model {
            tensors.insert(format!("model.{k}"), v.clone());
        }
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        if let Some(opt) = &self.optimizer {
            let (flat, groups) = opt.to_flat();
            for (k, v) in flat {
                tensors.insert(format!("optimizer.{k}"), v);
            }
            meta.insert("optimizer.param_groups".into(), groups);
        }
        if let Some(rng) = &self.rng {
            tensors.insert(
                "rng.global".into(),
                Tensor::from_vec(rng.clone(), &[rng.len()]),
            );
        }
        let json_map = |m: &BTreeMap<String, f64>| serde_json::json!(m).to_string();
        if let Some(s) = &self.scheduler {
            meta.insert("scheduler".into(), json_map(s));
        }
        if let Some(s) = &self.scaler {
            meta.insert("scaler".into(), json_map(s));
        }
        meta.insert("epoch".into(), self.epoch.to_string());
        meta.insert("step".into(), self.step.to_string());
        if let Some(l) = &self.loader {
            meta.insert(
                "loader".into(),
                serde_json::json!({"seed": l.seed.to_string(), "epoch": l.epoch, "batch": l.batch})
                    .to_string(),
            );
        }
        for (k, v) in &self.metadata {
            meta.insert(format!("user.{k}"), v.clone());
        }
        if !self.ranks.is_empty() {
            meta.insert("ranks".into(), self.ranks.len().to_string());
        }
        for (r, state) in self.ranks.iter().enumerate() {
            if let Some(rng) = &state.rng {
                tensors.insert(
                    format!("rng.rank{r}"),
                    Tensor::from_vec(rng.clone(), &[rng.len()]),
                );
            }
            if let Some(l) = &state.loader {
                meta.insert(format!("loader.rank{r}"), loader_json(l));
            }
        }
        save_state_dict(&tensors, path, Some(meta))
    }

    /// Reads a checkpoint written by [`Checkpoint::save`].
    ///
    /// # Errors
    /// [`CheckpointError::Io`] for an unreadable file, [`CheckpointError::Format`] for one
    /// that is not a valid checkpoint (not safetensors, not this format, malformed
    /// metadata, tensors outside `model.`/`optimizer.`/`rng.`).
    pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint, CheckpointError> {
        let path = path.as_ref();
        let (tensors, meta) = read_file(path, |k| Some(k.to_string()))?;
        let bad = |reason: String| CheckpointError::Format {
            path: path.to_path_buf(),
            reason,
        };
        if meta.get("format").map(String::as_str) != Some(FORMAT) {
            return Err(bad(format!(
                "not a ferrograd training checkpoint (format {:?}; a bare state dict loads with read_state_dict)",
                meta.get("format")
            )));
        }
        let mut ckpt = Checkpoint::default();
        let ranks: usize = meta.get("ranks").map_or(Ok(0), |s| {
            s.parse::<usize>().map_err(|e| bad(format!("ranks: {e}")))
        })?;
        if ranks > 1 << 20 {
            return Err(bad(format!("ranks: {ranks} is not a plausible world size")));
        }
        ckpt.ranks = vec![RankState::default(); ranks];
        let mut opt_tensors = BTreeMap::new();
        for (k, v) in tensors {
            if let Some(rest) = k.strip_prefix("model.") {
                ckpt.model.insert(rest.to_string(), v);
            } else if let Some(rest) = k.strip_prefix("optimizer.") {
                opt_tensors.insert(rest.to_string(), v);
            } else if k == "rng.global" {
                if v.dtype() != DType::U8 || v.dim() != 1 {
                    return Err(bad("rng.global is not a byte vector".into()));
                }
                ckpt.rng = Some(v.to_vec::<u8>());
            } else if let Some(r) = k
                .strip_prefix("rng.rank")
                .and_then(|r| r.parse::<usize>().ok())
                && r < ranks
            {
                if v.dtype() != DType::U8 || v.dim() != 1 {
                    return Err(bad(format!("{k} is not a byte vector")));
                }
                ckpt.ranks[r].rng = Some(v.to_vec::<u8>());
            } else {
                return Err(bad(format!("unexpected tensor {k:?}")));
            }
        }
        if let Some(groups) = meta.get("optimizer.param_groups") {
            ckpt.optimizer = Some(
                OptimizerState::from_flat(&opt_tensors, groups).map_err(|e| bad(e.to_string()))?,
            );
        } else if !opt_tensors.is_empty() {
            return Err(bad("optimizer state without its param_groups".into()));
        }
        let json_map = |key: &str| -> Result<Option<BTreeMap<String, f64>>, CheckpointError> {
            meta.get(key)
                .map(|s| {
                    serde_json::from_str::<BTreeMap<String, f64>>(s)
                        .map_err(|e| bad(format!("{key}: {e}")))
                })
                .transpose()
        };
        ckpt.scheduler = json_map("scheduler")?;
        ckpt.scaler = json_map("scaler")?;
        let count = |key: &str| -> Result<u64, CheckpointError> {
            meta.get(key)
                .map_or(Ok(0), |s| s.parse().map_err(|e| bad(format!("{key}: {e}"))))
        };
        ckpt.epoch = count("epoch")?;
        ckpt.step = count("step")?;
        if let Some(l) = meta.get("loader") {
            let v: serde_json::Value =
                serde_json::from_str(l).map_err(|e| bad(format!("loader: {e}")))?;
            let seed = v
                .get("seed")
                .and_then(|s| s.as_str())
                .and_then(|s| s.parse().ok());
            let epoch = v.get("epoch").and_then(|e| e.as_u64());
            let batch = v
                .get("batch")
                .and_then(|b| b.as_u64())
                .and_then(|b| usize::try_from(b).ok());
            let (Some(seed), Some(epoch), Some(batch)) = (seed, epoch, batch) else {
                return Err(bad(format!("loader: malformed position {l}")));
            };
            ckpt.loader = Some(LoaderState { seed, epoch, batch });
        }
        for (k, v) in meta {
            if let Some(rest) = k.strip_prefix("user.") {
                ckpt.metadata.insert(rest.to_string(), v);
            } else if let Some(r) = k
                .strip_prefix("loader.rank")
                .and_then(|r| r.parse::<usize>().ok())
            {
                let state = ckpt
                    .ranks
                    .get_mut(r)
                    .ok_or_else(|| bad(format!("{k} beyond {ranks} ranks")))?;
                state.loader = Some(
                    parse_loader(&v).ok_or_else(|| bad(format!("{k}: malformed position {v}")))?,
                );
            }
        }
        Ok(ckpt)
    }

    /// Loads the model's weights into `model` (see `Module::load_state_dict`).
    ///
    /// # Errors
    /// [`CheckpointError::StateDict`] when keys (with `strict`) or shapes differ; the
    /// model is then unchanged.
    pub fn restore_model(
        &self,
        model: &mut impl Module,
        strict: bool,
    ) -> Result<LoadReport, CheckpointError> {
        model
            .load_state_dict(&self.model, strict)
            .map_err(|source| CheckpointError::StateDict {
                path: PathBuf::from("<checkpoint model>"),
                source,
            })
    }

    /// Restores the optimizer's state and options.
    ///
    /// # Errors
    /// [`CheckpointError::Format`] when the checkpoint has no optimizer state or it does
    /// not fit `optimizer`.
    pub fn restore_optimizer(&self, optimizer: &mut dyn Optimizer) -> Result<(), CheckpointError> {
        let state = self
            .optimizer
            .as_ref()
            .ok_or_else(|| missing("optimizer"))?;
        optimizer
            .load_state_dict(state)
            .map_err(|e| CheckpointError::Format {
                path: PathBuf::from("<checkpoint optimizer>"),
                reason: e.to_string(),
            })
    }

    /// Restores the schedule's position.
    ///
    /// # Errors
    /// [`CheckpointError::Format`] when the checkpoint has no schedule state.
    pub fn restore_scheduler(
        &self,
        scheduler: &mut dyn LrScheduler,
    ) -> Result<(), CheckpointError> {
        let state = self
            .scheduler
            .as_ref()
            .ok_or_else(|| missing("scheduler"))?;
        scheduler.load_state_dict(state);
        Ok(())
    }

    /// Restores the gradient scaler.
    ///
    /// # Errors
    /// [`CheckpointError::Format`] when the checkpoint has no scaler state.
    pub fn restore_scaler(&self, scaler: &mut GradScaler) -> Result<(), CheckpointError> {
        let state = self.scaler.as_ref().ok_or_else(|| missing("scaler"))?;
        scaler.load_state_dict(state);
        Ok(())
    }

    /// Restores the global random state (so dropout and `randn` continue as they would
    /// have).
    ///
    /// # Errors
    /// [`CheckpointError::Format`] when the checkpoint has no or a malformed random state.
    pub fn restore_rng(&self) -> Result<(), CheckpointError> {
        let state = self.rng.as_ref().ok_or_else(|| missing("rng"))?;
        crate::set_rng_state(state).map_err(|e| CheckpointError::Format {
            path: PathBuf::from("<checkpoint rng>"),
            reason: e.to_string(),
        })
    }
}

fn missing(what: &str) -> CheckpointError {
    CheckpointError::Format {
        path: PathBuf::from(format!("<checkpoint {what}>")),
        reason: format!("the checkpoint holds no {what} state"),
    }
}
