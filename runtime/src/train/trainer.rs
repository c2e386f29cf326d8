//! [`Trainer`]: the training loop every example writes by hand — epochs, gradient
//! accumulation and clipping, mixed precision, validation with metrics, checkpoints with
//! exact resume, early stopping, a progress bar, a CSV log with its plot and TensorBoard
//! — around a step the user writes ([`TrainStep`]).

pub use super::callbacks::{
    Callback, Context, EarlyStopping, LearningRateMonitor, Mode, ModelCheckpoint, TrainerState,
};
use super::checkpointing::{
    META_CALLBACK, META_LOGGED_AT_STEP, META_METRICS, META_PARTIAL_EPOCH, PartialEpoch, Validated,
};
pub use super::config::{Interval, Precision, TrainError, TrainerConfig, ValCheckInterval};
use super::display::Display;
use super::metrics::{Mean, Metric, MetricsLog};
use super::progress::correct_predictions;
use super::run_log::{RunLog, StepLogs, step_tag};
pub use super::step::{FitReport, LogOptions, StepOutput, TrainStep};
use super::sync::{all_gather_varlen, all_reduce_sums, mean_sum};
use crate::amp::{GradScaler, autocast};
use crate::autograd::no_grad;
use crate::checkpoint::Checkpoint;
use crate::data::{Collate, DataLoader, Dataset};
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::optim::lr_scheduler::LrScheduler;
use crate::profiler::record_function;
use crate::{DType, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

mod validation;
use validation::write_validation;

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
    pub(super) config: TrainerConfig,
    pub(super) callbacks: Vec<Box<dyn Callback>>,
    metrics: Vec<Box<dyn Metric>>,
    pub(super) state: TrainerState,
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
