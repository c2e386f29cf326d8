//! The [`Callback`] hooks of [`Trainer::fit`](super::Trainer::fit), what they see
//! ([`Context`], [`TrainerState`]), and Lightning's stock callbacks: [`ModelCheckpoint`],
//! [`EarlyStopping`], [`LearningRateMonitor`].
//!
//! A callback can be unit-tested without a trainer: build a [`TrainerState`], wrap it in
//! [`Context::new`], call the hook and read what it asked for.
//!
//! ```
//! use ferrograd_runtime::train::{Callback, Context, EarlyStopping, Mode, TrainerState};
//! let mut stop = EarlyStopping::new("val_loss", Mode::Min, 2);
//! let mut state = TrainerState::default();
//! for loss in [1.0, 0.9, 0.95, 0.93] {
//!     state.metrics.insert("val_loss".into(), loss);
//!     let mut ctx = Context::new(&mut state, std::path::Path::new("runs/test"));
//!     stop.on_validation_end(&mut ctx);
//!     assert!(ctx.failure().is_none());
//! }
//! assert!(state.should_stop);
//! assert_eq!(stop.best_score(), Some(0.9));
//! ```

use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the run is, as the callbacks see it.
#[derive(Clone, Debug, Default)]
pub struct TrainerState {
    /// Epochs finished.
    pub epoch: usize,
    /// The epoch running, from 0 (Lightning's `current_epoch`): in an epoch's hooks,
    /// its end included, the one it is. Checkpoint names' `{epoch}` and
    /// [`EarlyStopping::stopped_epoch`] use it, as Lightning's do.
    pub current_epoch: usize,
    /// Validation runs inside epochs (a [`ValCheckInterval`](super::ValCheckInterval)
    /// other than the whole epoch): [`ModelCheckpoint`] then saves after each
    /// validation instead of at the epoch's end, as Lightning's does.
    pub validates_within_epoch: bool,
    /// Optimizer steps taken.
    pub global_step: u64,
    /// The latest value of every logged quantity (`train_loss`, `val_loss`,
    /// `val_accuracy`, `lr`, ...).
    pub metrics: BTreeMap<String, f64>,
    /// Set by a callback to end training after this epoch.
    pub should_stop: bool,
}

/// What a callback can see and ask for.
#[derive(Debug)]
pub struct Context<'a> {
    /// The run's state.
    pub state: &'a mut TrainerState,
    root: &'a Path,
    pub(crate) saves: Vec<PathBuf>,
    pub(crate) removes: Vec<PathBuf>,
    pub(crate) logs: Vec<(String, f64)>,
    pub(crate) failure: Option<String>,
}

impl<'a> Context<'a> {
    /// A context over `state` for a run in `root`: what the trainer hands each hook, and
    /// what a test of a callback builds.
    pub fn new(state: &'a mut TrainerState, root: &'a Path) -> Context<'a> {
        Context {
            state,
            root,
            saves: Vec::new(),
            removes: Vec::new(),
            logs: Vec::new(),
            failure: None,
        }
    }
    /// The run's directory.
    pub fn root_dir(&self) -> &Path {
        self.root
    }
    /// Writes the whole training checkpoint (model, optimizer, schedule, scaler, data
    /// position, RNG, every callback's state) to `path` when the callbacks are done.
    pub fn save_checkpoint(&mut self, path: impl Into<PathBuf>) {
        self.saves.push(path.into());
    }
    /// Deletes `path` (an older checkpoint) after the saves.
    pub fn remove_file(&mut self, path: impl Into<PathBuf>) {
        self.removes.push(path.into());
    }
    /// Logs a value at the current step (TensorBoard, and `state.metrics`).
    pub fn log(&mut self, name: impl Into<String>, value: f64) {
        let name = name.into();
        self.state.metrics.insert(name.clone(), value);
        self.logs.push((name, value));
    }
    /// Ends the fit with [`TrainError::Callback`](super::TrainError::Callback) once the
    /// hooks of this point have run (a misconfiguration: a monitored name that is never
    /// logged, say).
    pub fn fail(&mut self, reason: impl Into<String>) {
        self.failure.get_or_insert(reason.into());
    }
    /// The checkpoints asked for so far.
    pub fn saves(&self) -> &[PathBuf] {
        &self.saves
    }
    /// The files to delete asked for so far.
    pub fn removes(&self) -> &[PathBuf] {
        &self.removes
    }
    /// The values logged so far.
    pub fn logs(&self) -> &[(String, f64)] {
        &self.logs
    }
    /// Why a callback failed the fit, if one did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

/// Hooks into [`Trainer::fit`](super::Trainer::fit). Every hook has an empty default; a
/// callback whose state must survive a resume writes it in
/// [`state_dict`](Self::state_dict) (kept in the checkpoint's metadata) and reads it back
/// in [`load_state_dict`](Self::load_state_dict). A trainer's callbacks can be read back
/// by type after the fit ([`Trainer::callback`](super::Trainer::callback)).
pub trait Callback: Any + Send {
    /// The name its state is saved under (unique among a trainer's callbacks).
    fn name(&self) -> String;
    /// Before the first epoch (after a resume's restore).
    fn on_fit_start(&mut self, _ctx: &mut Context) {}
    /// Before each training epoch.
    fn on_train_epoch_start(&mut self, _ctx: &mut Context) {}
    /// Before each training batch, with its index in the epoch.
    fn on_train_batch_start(&mut self, _ctx: &mut Context, _batch_idx: usize) {}
    /// After each training batch, with its loss.
    fn on_train_batch_end(&mut self, _ctx: &mut Context, _loss: f64) {}
    /// Before validation (the model in eval mode).
    fn on_validation_start(&mut self, _ctx: &mut Context) {}
    /// After validation; `ctx.state.metrics` holds the `val_*` values.
    fn on_validation_end(&mut self, _ctx: &mut Context) {}
    /// After each epoch (after validation), and when `max_steps`/`max_time` ends the fit
    /// inside an epoch (the epoch is then unfinished: `ctx.state.epoch` still counts it
    /// as running, and a resume finishes it).
    fn on_train_epoch_end(&mut self, _ctx: &mut Context) {}
    /// After the last epoch.
    fn on_fit_end(&mut self, _ctx: &mut Context) {}
    /// The state to keep in checkpoints.
    fn state_dict(&self) -> String {
        String::new()
    }
    /// Restores [`state_dict`](Self::state_dict)'s output.
    fn load_state_dict(&mut self, _state: &str) -> Result<(), String> {
        Ok(())
    }
}

/// Whether smaller or larger is better for a monitored metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Smaller is better (a loss).
    Min,
    /// Larger is better (an accuracy).
    Max,
}

impl Mode {
    /// Whether `a` improves on `b` by more than `min_delta` (false when either is NaN).
    fn better(self, a: f64, b: f64, min_delta: f64) -> bool {
        match self {
            Mode::Min => a < b - min_delta,
            Mode::Max => a > b + min_delta,
        }
    }

    /// The score nothing is worse than: Lightning's initial best (`inf` for min).
    fn worst(self) -> f64 {
        match self {
            Mode::Min => f64::INFINITY,
            Mode::Max => f64::NEG_INFINITY,
        }
    }
}

/// A float in JSON, non-finite values spelled out (JSON has no NaN or infinity).
fn float_json(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else if v.is_nan() {
        serde_json::json!("nan")
    } else if v > 0.0 {
        serde_json::json!("inf")
    } else {
        serde_json::json!("-inf")
    }
}

fn float_of_json(v: &serde_json::Value) -> Option<f64> {
    match v.as_str() {
        Some("nan") => Some(f64::NAN),
        Some("inf") => Some(f64::INFINITY),
        Some("-inf") => Some(f64::NEG_INFINITY),
        _ => v.as_f64(),
    }
}

/// The error a `strict` callback raises for a monitor that is not logged.
fn missing_monitor(who: &str, monitor: &str, metrics: &BTreeMap<String, f64>) -> String {
    let known: Vec<&str> = metrics.keys().map(String::as_str).collect();
    format!(
        "{who}(monitor={monitor:?}) could not find the monitored key in the logged metrics: {known:?} (set strict = false to ignore)"
    )
}

/// Saves checkpoints after each epoch (after each validation when validation runs
/// inside epochs): `last.safetensors` (with `save_last`), and the best `save_top_k` by
/// `monitor`, named as Lightning names them (`epoch=E-step=S.safetensors`, `E` from 0
/// and `S` the optimizer steps taken; older ones deleted), like Lightning's
/// `ModelCheckpoint`. With `strict` (the default), a monitor that is not among the
/// logged metrics once validation has run fails the fit.
#[derive(Clone, Debug)]
pub struct ModelCheckpoint {
    /// The directory (default `root_dir/checkpoints`).
    pub dir: Option<PathBuf>,
    /// The metric ranking checkpoints (`val_loss`); `None` keeps only `last`.
    pub monitor: Option<String>,
    /// Whether smaller or larger is better.
    pub mode: Mode,
    /// How many of the best to keep.
    pub save_top_k: usize,
    /// Also keep `last.safetensors`, the checkpoint to resume from.
    pub save_last: bool,
    /// A monitor that is never logged is an error (Lightning raises too).
    pub strict: bool,
    /// The best checkpoints' file name without extension, Lightning's template:
    /// `{epoch}`, `{step}` and any logged metric, with an optional `:.Nf` (or `:0Nd`)
    /// format; each becomes `name=value` (`auto_insert_metric_name`), so
    /// `"{epoch}-{val_loss:.2f}"` gives `epoch=3-val_loss=0.41.safetensors` (`epoch`
    /// counts from 0, as Lightning's). By default `"{epoch}-{step}"`, Lightning's.
    pub filename: Option<String>,
    /// Consider a best checkpoint every this many epochs (1; 0: never); `last` is
    /// written at every epoch end regardless, as the point to resume from.
    pub every_n_epochs: usize,
    best: Vec<(f64, PathBuf)>,
}

impl ModelCheckpoint {
    /// Keeps `last.safetensors` and the best checkpoint by `monitor`.
    pub fn new(monitor: impl Into<String>, mode: Mode) -> ModelCheckpoint {
        ModelCheckpoint {
            dir: None,
            monitor: Some(monitor.into()),
            mode,
            save_top_k: 1,
            save_last: true,
            strict: true,
            filename: None,
            every_n_epochs: 1,
            best: Vec::new(),
        }
    }
    /// Only `last.safetensors`.
    pub fn last_only() -> ModelCheckpoint {
        ModelCheckpoint {
            monitor: None,
            save_top_k: 0,
            ..ModelCheckpoint::new("", Mode::Min)
        }
    }
    /// No monitor: the latest `save_top_k` checkpoints are kept (one by default;
    /// `top_k(usize::MAX)` keeps every one), and no `last` unless asked for — Lightning's
    /// `ModelCheckpoint()` without `monitor`.
    ///
    /// ```
    /// use ferrograd_runtime::train::{Callback, Context, ModelCheckpoint, TrainerState};
    /// let mut ckpt = ModelCheckpoint::latest();
    /// let mut state = TrainerState::default();
    /// let mut ctx = Context::new(&mut state, std::path::Path::new("run"));
    /// ckpt.on_train_epoch_end(&mut ctx);
    /// ctx.state.current_epoch = 1;
    /// ctx.state.global_step = 8;
    /// ckpt.on_train_epoch_end(&mut ctx);
    /// assert!(ctx.removes()[0].ends_with("epoch=0-step=0.safetensors"));
    /// assert!(ckpt.best()[0].1.ends_with("epoch=1-step=8.safetensors"));
    /// ```
    pub fn latest() -> ModelCheckpoint {
        ModelCheckpoint {
            monitor: None,
            save_last: false,
            ..ModelCheckpoint::new("", Mode::Min)
        }
    }
    /// Whether `last.safetensors` is written too (default true, but for
    /// [`latest`](Self::latest)).
    pub fn save_last(mut self, save: bool) -> ModelCheckpoint {
        self.save_last = save;
        self
    }
    /// Keeps the best `k`.
    pub fn top_k(mut self, k: usize) -> ModelCheckpoint {
        self.save_top_k = k;
        self
    }
    /// Whether a monitor that is never logged fails the fit (default true).
    pub fn strict(mut self, strict: bool) -> ModelCheckpoint {
        self.strict = strict;
        self
    }
    /// Names the best checkpoints by `template` (see [`ModelCheckpoint::filename`]).
    ///
    /// ```
    /// use ferrograd_runtime::train::{Callback, Context, Mode, ModelCheckpoint, TrainerState};
    /// let mut ckpt = ModelCheckpoint::new("val_loss", Mode::Min)
    ///     .filename("{epoch}-{step}-{val_loss:.2f}")
    ///     .every_n_epochs(2);
    /// let mut state = TrainerState::default();
    /// let mut saved = Vec::new();
    /// for (epoch, loss) in [(0, 0.9), (1, 0.7), (2, 0.5), (3, 0.6)] {
    ///     state.current_epoch = epoch;
    ///     state.epoch = epoch + 1;
    ///     state.global_step = 10 * (epoch as u64 + 1);
    ///     state.metrics.insert("val_loss".into(), loss);
    ///     let mut ctx = Context::new(&mut state, std::path::Path::new("run"));
    ///     ckpt.on_train_epoch_end(&mut ctx);
    ///     saved.extend(ctx.saves().iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()));
    /// }
    /// // The second and fourth epochs are considered (the third's 0.5 is not); 0.6
    /// // beats 0.7.
    /// let best: Vec<&String> = saved.iter().filter(|n| *n != "last.safetensors").collect();
    /// assert_eq!(best, ["epoch=1-step=20-val_loss=0.70.safetensors", "epoch=3-step=40-val_loss=0.60.safetensors"]);
    /// assert_eq!(ckpt.best().len(), 1);
    /// assert!(ckpt.best()[0].1.ends_with("epoch=3-step=40-val_loss=0.60.safetensors"));
    /// ```
    pub fn filename(mut self, template: impl Into<String>) -> ModelCheckpoint {
        self.filename = Some(template.into());
        self
    }
    /// Considers a best checkpoint every `n` epochs.
    pub fn every_n_epochs(mut self, n: usize) -> ModelCheckpoint {
        self.every_n_epochs = n;
        self
    }
    /// The kept checkpoints, best first, with their monitored values (newest first, and
    /// NaN for the value, without a monitor).
    pub fn best(&self) -> &[(f64, PathBuf)] {
        &self.best
    }
}

impl ModelCheckpoint {
    /// Saves `last` and, when due and among the best, a best checkpoint.
    fn check(&mut self, ctx: &mut Context) {
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| ctx.root_dir().join("checkpoints"));
        if self.save_last {
            ctx.save_checkpoint(dir.join("last.safetensors"));
        }
        let value = match &self.monitor {
            None => None,
            Some(monitor) => match ctx.state.metrics.get(monitor) {
                Some(&v) => Some(v),
                None => {
                    // Before the first validation a `val_` monitor cannot be there yet.
                    let validated = ctx.state.metrics.keys().any(|k| k.starts_with("val_"));
                    if self.strict && (validated || !monitor.starts_with("val")) {
                        let reason =
                            missing_monitor("ModelCheckpoint", monitor, &ctx.state.metrics);
                        ctx.fail(reason);
                    }
                    return;
                }
            },
        };
        let due = self.every_n_epochs > 0
            && (ctx.state.current_epoch + 1).is_multiple_of(self.every_n_epochs);
        if self.save_top_k == 0 || !due || value.is_some_and(|v| !v.is_finite()) {
            return;
        }
        let qualifies = match value {
            // Without a monitor, the latest are the ones kept.
            None => true,
            Some(value) => {
                self.best.len() < self.save_top_k
                    || self
                        .best
                        .last()
                        .is_some_and(|(worst, _)| self.mode.better(value, *worst, 0.0))
            }
        };
        if !qualifies {
            return;
        }
        let template = self.filename.as_deref().unwrap_or("{epoch}-{step}");
        let name = match render_filename(template, ctx.state) {
            Ok(name) => name,
            Err(reason) => {
                ctx.fail(format!("ModelCheckpoint(filename={template:?}): {reason}"));
                return;
            }
        };
        let path = dir.join(format!("{name}.safetensors"));
        ctx.save_checkpoint(path.clone());
        // A name met again (a template without the epoch) replaces its older entry.
        self.best.retain(|(_, p)| *p != path);
        let Some(value) = value else {
            // Newest first; the oldest beyond `save_top_k` go.
            self.best.insert(0, (f64::NAN, path));
            while self.best.len() > self.save_top_k {
                let (_, old) = self.best.pop().expect("longer than k");
                ctx.remove_file(old);
            }
            return;
        };
        self.best.push((value, path));
        let mode = self.mode;
        self.best.sort_by(|a, b| match mode {
            Mode::Min => a.0.total_cmp(&b.0),
            Mode::Max => b.0.total_cmp(&a.0),
        });
        while self.best.len() > self.save_top_k {
            let (_, old) = self.best.pop().expect("longer than k");
            ctx.remove_file(old);
        }
    }
}

impl Callback for ModelCheckpoint {
    fn name(&self) -> String {
        "ModelCheckpoint".into()
    }
    fn on_validation_end(&mut self, ctx: &mut Context) {
        if ctx.state.validates_within_epoch {
            self.check(ctx);
        }
    }
    fn on_train_epoch_end(&mut self, ctx: &mut Context) {
        if !ctx.state.validates_within_epoch {
            self.check(ctx);
        }
    }
    fn state_dict(&self) -> String {
        serde_json::to_string(
            &self
                .best
                .iter()
                // No monitor: no value (NaN, which JSON cannot spell).
                .map(|(v, p)| ((!v.is_nan()).then_some(*v), p.to_string_lossy()))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default()
    }
    fn load_state_dict(&mut self, state: &str) -> Result<(), String> {
        let best: Vec<(Option<f64>, String)> =
            serde_json::from_str(state).map_err(|e| e.to_string())?;
        self.best = best
            .into_iter()
            .map(|(v, p)| (v.unwrap_or(f64::NAN), PathBuf::from(p)))
            .collect();
        Ok(())
    }
}

/// Lightning's checkpoint file name: each `{key}` or `{key:fmt}` of `template` becomes
/// `key=value` (`/` in a key written `_`), `epoch` and `step` from the state, any other
/// key from the logged metrics; `fmt` is `.Nf` (N decimals) or `0Nd`/`d` (an integer).
fn render_filename(template: &str, state: &TrainerState) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or("an unclosed `{`")?;
        let field = &rest[open + 1..close];
        let (key, fmt) = field.split_once(':').unwrap_or((field, ""));
        let value = match key {
            "epoch" => state.current_epoch as f64,
            "step" => state.global_step as f64,
            other => *state.metrics.get(other).ok_or_else(|| {
                format!(
                    "`{other}` is not a logged metric ({:?})",
                    state.metrics.keys().collect::<Vec<_>>()
                )
            })?,
        };
        let text = if let Some(decimals) = fmt.strip_prefix('.').and_then(|f| f.strip_suffix('f')) {
            let d: usize = decimals
                .parse()
                .map_err(|_| format!("format `{fmt}` of `{key}`"))?;
            format!("{value:.d$}")
        } else if let Some(width) = fmt.strip_suffix('d') {
            let w: usize = if width.is_empty() {
                0
            } else {
                width
                    .parse()
                    .map_err(|_| format!("format `{fmt}` of `{key}`"))?
            };
            format!("{:0w$}", value as i64)
        } else if fmt.is_empty() {
            if key == "epoch" || key == "step" {
                format!("{}", value as i64)
            } else {
                format!("{value}")
            }
        } else {
            return Err(format!("format `{fmt}` of `{key}` (use .Nf or 0Nd)"));
        };
        out.push_str(&format!("{}={text}", key.replace('/', "_")));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Stops training when `monitor` has not improved by more than `min_delta` for
/// `patience` validations (Lightning's `EarlyStopping`).
///
/// As in Lightning, the best starts at the worst possible score (`inf` for
/// [`Mode::Min`]), so a NaN never becomes the best; with `check_finite` (the default) a
/// NaN or infinite value stops the run at once, with the reason in
/// [`stopped_reason`](Self::stopped_reason). With `strict` (the default) a monitor that
/// is not among the validation's metrics fails the fit.
#[derive(Clone, Debug)]
pub struct EarlyStopping {
    /// The metric watched (`val_loss`).
    pub monitor: String,
    /// Validations without improvement before stopping.
    pub patience: usize,
    /// The least change that counts as an improvement.
    pub min_delta: f64,
    /// Whether smaller or larger is better.
    pub mode: Mode,
    /// Stop at once when the monitored value is NaN or infinite.
    pub check_finite: bool,
    /// A monitor that is not logged is an error.
    pub strict: bool,
    best: f64,
    wait: usize,
    stopped_epoch: Option<usize>,
    reason: Option<String>,
}

impl EarlyStopping {
    /// Watches `monitor` with `patience`, no minimum delta, `check_finite` and `strict`.
    pub fn new(monitor: impl Into<String>, mode: Mode, patience: usize) -> EarlyStopping {
        EarlyStopping {
            monitor: monitor.into(),
            patience,
            min_delta: 0.0,
            mode,
            check_finite: true,
            strict: true,
            best: mode.worst(),
            wait: 0,
            stopped_epoch: None,
            reason: None,
        }
    }
    /// Requires improvements larger than `delta`.
    pub fn min_delta(mut self, delta: f64) -> EarlyStopping {
        self.min_delta = delta.abs();
        self
    }
    /// Whether a NaN or infinite value stops the run at once (default true).
    pub fn check_finite(mut self, check: bool) -> EarlyStopping {
        self.check_finite = check;
        self
    }
    /// Whether a monitor that is not logged fails the fit (default true).
    pub fn strict(mut self, strict: bool) -> EarlyStopping {
        self.strict = strict;
        self
    }
    /// The best value seen, if any.
    pub fn best_score(&self) -> Option<f64> {
        (self.best != self.mode.worst()).then_some(self.best)
    }
    /// Validations since the last improvement.
    pub fn wait_count(&self) -> usize {
        self.wait
    }
    /// The epoch (from 0, Lightning's `stopped_epoch`) in which it stopped the run, if
    /// it did.
    pub fn stopped_epoch(&self) -> Option<usize> {
        self.stopped_epoch
    }
    /// Why it stopped the run, if it did.
    pub fn stopped_reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    fn stop(&mut self, ctx: &mut Context, reason: String) {
        ctx.state.should_stop = true;
        self.stopped_epoch = Some(ctx.state.current_epoch);
        self.reason = Some(reason);
    }
}

impl Callback for EarlyStopping {
    fn name(&self) -> String {
        format!("EarlyStopping[{}]", self.monitor)
    }
    fn on_validation_end(&mut self, ctx: &mut Context) {
        let Some(&value) = ctx.state.metrics.get(&self.monitor) else {
            if self.strict {
                let reason = missing_monitor("EarlyStopping", &self.monitor, &ctx.state.metrics);
                ctx.fail(reason);
            }
            return;
        };
        if self.check_finite && !value.is_finite() {
            let reason = format!(
                "Monitored metric {} = {value} is not finite. Previous best value was {:.3}. Signaling Trainer to stop.",
                self.monitor, self.best
            );
            self.stop(ctx, reason);
        } else if self.mode.better(value, self.best, self.min_delta) {
            self.best = value;
            self.wait = 0;
        } else {
            self.wait += 1;
            if self.wait >= self.patience {
                let reason = format!(
                    "Monitored metric {} did not improve in the last {} records. Best score: {:.3}. Signaling Trainer to stop.",
                    self.monitor, self.wait, self.best
                );
                self.stop(ctx, reason);
            }
        }
    }
    fn state_dict(&self) -> String {
        serde_json::json!({
            "best": float_json(self.best),
            "wait": self.wait,
            "stopped_epoch": self.stopped_epoch,
        })
        .to_string()
    }
    fn load_state_dict(&mut self, state: &str) -> Result<(), String> {
        let v: serde_json::Value = serde_json::from_str(state).map_err(|e| e.to_string())?;
        // A state from before non-finite values were spelled out has `null` for none.
        self.best = if v["best"].is_null() {
            self.mode.worst()
        } else {
            float_of_json(&v["best"]).ok_or("a best score that is not a number")?
        };
        self.wait = v["wait"].as_u64().ok_or("no wait count")? as usize;
        self.stopped_epoch = v["stopped_epoch"].as_u64().map(|e| e as usize);
        Ok(())
    }
}

/// Logs each parameter group's learning rate (`lr` for one group, `lr/group{i}` for
/// several) at every epoch start, or with [`Interval::Step`](super::Interval::Step) before
/// every optimizer step (Lightning's `logging_interval`). While it is there, the trainer
/// does not log `lr` itself (one value per step, never two).
///
/// ```
/// use ferrograd_runtime::train::{Callback, Context, Interval, LearningRateMonitor, TrainerState};
/// let mut monitor = LearningRateMonitor::new().logging_interval(Interval::Step);
/// let mut state = TrainerState::default();
/// state.metrics.insert("lr_group0".into(), 0.1);
/// let mut ctx = Context::new(&mut state, std::path::Path::new("run"));
/// monitor.on_train_batch_start(&mut ctx, 0);
/// assert_eq!(ctx.logs(), [("lr".to_string(), 0.1)]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct LearningRateMonitor {
    /// When it logs: each epoch's start (the default) or each step's.
    pub logging_interval: super::Interval,
    /// The step it last logged at (once a step, whatever the accumulation).
    last_step: Option<u64>,
}

impl LearningRateMonitor {
    /// Logs at each epoch's start.
    pub fn new() -> LearningRateMonitor {
        LearningRateMonitor::default()
    }
    /// Logs at each epoch's start ([`Interval::Epoch`](super::Interval::Epoch)) or before
    /// each optimizer step ([`Interval::Step`](super::Interval::Step)).
    pub fn logging_interval(mut self, interval: super::Interval) -> LearningRateMonitor {
        self.logging_interval = interval;
        self
    }

    fn log(&mut self, ctx: &mut Context) {
        if self.last_step == Some(ctx.state.global_step) {
            return;
        }
        self.last_step = Some(ctx.state.global_step);
        let lrs: Vec<(String, f64)> = ctx
            .state
            .metrics
            .iter()
            .filter(|(k, _)| k.starts_with("lr_group"))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if lrs.len() == 1 {
            ctx.log("lr", lrs[0].1);
        } else {
            for (k, v) in lrs {
                ctx.log(k.replace("lr_group", "lr/group"), v);
            }
        }
    }
}

impl Callback for LearningRateMonitor {
    fn name(&self) -> String {
        "LearningRateMonitor".into()
    }
    fn on_train_epoch_start(&mut self, ctx: &mut Context) {
        if self.logging_interval == super::Interval::Epoch {
            self.log(ctx);
        }
    }
    fn on_train_batch_start(&mut self, ctx: &mut Context, _batch_idx: usize) {
        if self.logging_interval == super::Interval::Step {
            self.log(ctx);
        }
    }
}
