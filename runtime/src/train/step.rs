//! What the user's step gives the [`Trainer`](super::Trainer) ([`StepOutput`], with
//! values logged per step or per epoch), the [`TrainStep`] trait, and what a fit
//! reports ([`FitReport`]).

use crate::Tensor;
use std::collections::BTreeMap;

/// What a step returns: the loss, and optionally the batch's scores and targets, which
/// feed the progress bar's accuracy and the validation [`Metric`](super::metrics::Metric)s.
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

/// What [`Trainer::fit`](super::Trainer::fit) did.
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
