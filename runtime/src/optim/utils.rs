//! Training utilities beside the optimizers: gradient clipping
//! (`torch.nn.utils.clip_grad_norm_` / `clip_grad_value_`) and weight averaging
//! (`torch.optim.swa_utils.AveragedModel`: SWA and EMA).

use crate::autograd::no_grad;
use crate::nn::{Module, StateDict, StateDictError};
use crate::{DType, Tensor};

/// The total gradient norm was NaN or infinite and `error_if_nonfinite` was set.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "clip_grad_norm_: the total norm of order {norm_type} of the gradients is {total}, so they cannot be clipped"
)]
pub struct NonFiniteNorm {
    /// The order of the norm.
    pub norm_type: f64,
    /// The norm found.
    pub total: f64,
}

/// Rescales the gradients of `params` so that their joint `norm_type`-norm is at most
/// `max_norm` (`clip_grad_norm_`): each gradient is multiplied by
/// `min(1, max_norm / (total + 1e-6))`. Returns the total norm before clipping (a 0-d
/// f32/f64 tensor on the gradients' device, as PyTorch's). Parameters without gradient
/// are skipped; `norm_type` is any `p > 0` or `f64::INFINITY`.
///
/// # Errors
/// With `error_if_nonfinite`, a NaN or infinite total norm leaves the gradients unchanged
/// and returns [`NonFiniteNorm`].
///
/// # Panics
/// On `norm_type <= 0` or NaN, and on gradients on different devices.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::utils::clip_grad_norm_;
/// let w = Tensor::zeros(&[2], DType::F32, &Device::Cpu).requires_grad(true);
/// w.set_grad(Some(Tensor::from_vec(vec![3.0f32, 4.0], &[2])));
/// let total = clip_grad_norm_(&[w.clone()], 1.0, 2.0, false).unwrap();
/// assert_eq!(total.item::<f32>(), 5.0);
/// let g = w.grad().unwrap().to_vec::<f32>();
/// assert!((g[0] - 0.6).abs() < 1e-5 && (g[1] - 0.8).abs() < 1e-5);
/// ```
#[track_caller]
pub fn clip_grad_norm_(
    params: &[Tensor],
    max_norm: f64,
    norm_type: f64,
    error_if_nonfinite: bool,
) -> Result<Tensor, NonFiniteNorm> {
    assert!(
        norm_type > 0.0,
        "clip_grad_norm_: norm_type must be positive or inf, got {norm_type}"
    );
    let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
    let Some(first) = grads.first() else {
        return Ok(Tensor::scalar(0.0, DType::F32));
    };
    let device = first.device();
    for g in &grads {
        assert!(
            g.device() == device,
            "clip_grad_norm_: gradients on {} and {} (shapes {:?} and {:?})",
            device,
            g.device(),
            first.shape(),
            g.shape()
        );
    }
    no_grad(|| {
        // Per-gradient norms, then the norm of the norms (PyTorch's order), in the widest
        // float dtype among the gradients.
        let dtype = if grads.iter().any(|g| g.dtype() == DType::F64) {
            DType::F64
        } else {
            DType::F32
        };
        let norms: Vec<Tensor> = grads
            .iter()
            .map(|g| g.detach().to_dtype(dtype).norm(norm_type, &[], false))
            .collect();
        let total = Tensor::stack(&norms.iter().collect::<Vec<_>>(), 0).norm(norm_type, &[], false);
        if error_if_nonfinite {
            let t = total.to_dtype(DType::F64).item::<f64>();
            if !t.is_finite() {
                return Err(NonFiniteNorm {
                    norm_type,
                    total: t,
                });
            }
        }
        // max_norm / (total + 1e-6), at most 1, as PyTorch computes it (on the device).
        let limit = Tensor::full(&[], max_norm, dtype, &device);
        let coef = limit.div(&(&total + 1e-6)).clamp(f64::NEG_INFINITY, 1.0);
        for p in params {
            if let Some(g) = p.grad() {
                let scaled = g.detach().mul(&coef.to_dtype(g.dtype()));
                p.set_grad(Some(scaled));
            }
        }
        Ok(total)
    })
}

/// Clamps every gradient of `params` to `[-clip_value, clip_value]` (`clip_grad_value_`).
///
/// # Panics
/// On a negative or NaN `clip_value`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::utils::clip_grad_value_;
/// let w = Tensor::zeros(&[3], DType::F32, &Device::Cpu).requires_grad(true);
/// w.set_grad(Some(Tensor::from_vec(vec![-5.0f32, 0.5, 2.0], &[3])));
/// clip_grad_value_(&[w.clone()], 1.0);
/// assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![-1.0, 0.5, 1.0]);
/// ```
#[track_caller]
pub fn clip_grad_value_(params: &[Tensor], clip_value: f64) {
    assert!(
        clip_value >= 0.0,
        "clip_grad_value_: clip_value must be non-negative, got {clip_value}"
    );
    no_grad(|| {
        for p in params {
            if let Some(g) = p.grad() {
                p.set_grad(Some(g.detach().clamp(-clip_value, clip_value)));
            }
        }
    });
}

/// How [`AveragedModel`] averages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Averaging {
    /// The running mean of every update (stochastic weight averaging).
    Swa,
    /// An exponential moving average: `avg = decay * avg + (1 - decay) * value`
    /// (`get_ema_multi_avg_fn(decay)`).
    Ema {
        /// The weight of the old average (0.999 is common).
        decay: f64,
    },
}

/// A running average of a model's weights (`torch.optim.swa_utils.AveragedModel`): SWA
/// or EMA over the parameters (and with `use_buffers`, the buffers; otherwise buffers
/// stay as copied at creation, as PyTorch). Evaluate with the averages by loading
/// [`AveragedModel::state_dict`] into a second instance of the model, or with
/// [`AveragedModel::copy_to`].
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module};
/// use ferrograd_runtime::optim::utils::{AveragedModel, Averaging};
/// let model = Linear::new(2, 1, &Device::Cpu);
/// let mut ema = AveragedModel::new(&model, Averaging::Ema { decay: 0.9 }, false);
/// let before = model.weight.to_vec::<f32>();
/// model.weight.detach().copy_(&Tensor::zeros(&[1, 2], DType::F32, &Device::Cpu));
/// ema.update_parameters(&model); // the first update copies: n_averaged was 0
/// ema.update_parameters(&model);
/// assert_eq!(ema.n_averaged(), 2);
/// assert!(ema.state_dict()["weight"].to_vec::<f32>().iter().all(|v| *v == 0.0));
/// # let _ = before;
/// ```
#[derive(Clone, Debug)]
pub struct AveragedModel {
    averages: StateDict,
    averaged_keys: Vec<String>,
    kind: Averaging,
    n_averaged: u64,
}

impl AveragedModel {
    /// Averages of `model`'s weights, starting from copies of them.
    ///
    /// # Panics
    /// On an EMA decay outside `[0, 1]`.
    #[track_caller]
    pub fn new(model: &impl Module, kind: Averaging, use_buffers: bool) -> Self {
        if let Averaging::Ema { decay } = kind {
            assert!(
                (0.0..=1.0).contains(&decay),
                "AveragedModel: EMA decay must be in [0, 1], got {decay}"
            );
        }
        let averages: StateDict = model
            .state_dict()
            .into_iter()
            .map(|(k, v)| (k, v.deep_copy()))
            .collect();
        let mut averaged_keys: Vec<String> = model
            .named_parameters()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        if use_buffers {
            averaged_keys.extend(model.named_buffers().into_iter().map(|(k, _)| k));
        }
        AveragedModel {
            averages,
            averaged_keys,
            kind,
            n_averaged: 0,
        }
    }

    /// Folds `model`'s current weights into the averages (`update_parameters`).
    ///
    /// # Panics
    /// If `model` lacks a weight the average was made from, or its shape changed.
    #[track_caller]
    pub fn update_parameters(&mut self, model: &impl Module) {
        let current = model.state_dict();
        no_grad(|| {
            for key in &self.averaged_keys {
                let avg = &self.averages[key];
                let value = current.get(key).unwrap_or_else(|| {
                    panic!("AveragedModel.update_parameters: the model has no {key:?}")
                });
                assert!(
                    value.shape() == avg.shape(),
                    "AveragedModel.update_parameters: {key:?} has shape {:?}, the average {:?}",
                    value.shape(),
                    avg.shape()
                );
                let value = value.to_dtype(avg.dtype());
                let next = if self.n_averaged == 0 || !avg.dtype().is_float() {
                    value
                } else {
                    match self.kind {
                        Averaging::Swa => {
                            avg + (&value - avg) * (1.0 / (self.n_averaged as f64 + 1.0))
                        }
                        Averaging::Ema { decay } => avg.lerp_scalar(&value, 1.0 - decay),
                    }
                };
                avg.copy_(&next);
            }
        });
        self.n_averaged += 1;
    }

    /// How many updates have been averaged.
    pub fn n_averaged(&self) -> u64 {
        self.n_averaged
    }

    /// The averaged weights (and the buffers), keyed as the model's state dict.
    pub fn state_dict(&self) -> StateDict {
        self.averages.clone()
    }

    /// Loads the averages into `model` (a second instance of the averaged architecture).
    ///
    /// # Errors
    /// When `model`'s keys or shapes differ.
    pub fn copy_to(&self, model: &mut impl Module) -> Result<(), StateDictError> {
        model.load_state_dict(&self.averages, true).map(|_| ())
    }
}
