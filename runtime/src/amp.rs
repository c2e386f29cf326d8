//! Automatic mixed precision, as `torch.autocast` and `torch.amp.GradScaler`.
//!
//! Inside [`autocast`], matrix products and convolutions (`matmul`, `bmm`, `linear`,
//! `conv1d`, `conv2d`) cast their f32 inputs to the chosen low-precision dtype, where
//! tensor cores (and the bandwidth saved) pay off, while ops that lose accuracy in low
//! precision — softmax, log-softmax, logsumexp, sums, products, norms, `exp`, `log`,
//! `pow`, `rsqrt`, layer norm and the losses — cast f16/bf16 inputs up to f32. Other ops
//! run in the widest dtype of their inputs (ordinary promotion). f64 and integer tensors
//! are never cast. One table at the op seam lists the ops and their policy
//! ([`autocast_policy`]). The casts are ordinary differentiable ops, so parameters stay f32 and
//! so do their gradients. The scope is per thread, as PyTorch's.
//!
//! ```
//! # use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::amp::autocast;
//! let x = Tensor::randn(&[8, 16], DType::F32, &Device::Cpu);
//! let w = Tensor::randn(&[16, 4], DType::F32, &Device::Cpu).requires_grad(true);
//! let loss = autocast(DType::BF16, || {
//!     let y = x.matmul(&w); // bf16
//!     assert_eq!(y.dtype(), DType::BF16);
//!     y.log_softmax(-1).mean_all() // log_softmax runs in f32
//! });
//! assert_eq!(loss.dtype(), DType::F32);
//! loss.backward();
//! assert_eq!(w.grad().unwrap().dtype(), DType::F32);
//! ```

use crate::{DType, Tensor};

pub use crate::autocast_state::{autocast, autocast_disabled, autocast_dtype};
pub use crate::dispatch::{CastPolicy, autocast_ops, autocast_policy};

/// Loss scaling for f16 training (`torch.amp.GradScaler`): multiplies the loss so that
/// small gradients do not flush to zero in f16, divides the gradients back before the
/// optimizer step, skips steps whose gradients overflowed, and adapts the scale: halved
/// after an overflow, doubled after `growth_interval` clean steps.
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::amp::{autocast, GradScaler};
/// let w = Tensor::randn(&[4, 2], DType::F32, &Device::Cpu).requires_grad(true);
/// let x = Tensor::full(&[3, 4], 0.1, DType::F32, &Device::Cpu);
/// let mut scaler = GradScaler::new();
/// let params = [w.clone()];
/// let mut skipped = 0;
/// for _ in 0..3 {
///     let loss = autocast(DType::F16, || x.matmul(&w).sum_all());
///     scaler.scale(&loss).backward();
///     let stepped = scaler.step(&params, || {
///         // the optimizer step: gradients are already unscaled here
///         let g = w.grad().unwrap();
///         ferrograd_runtime::autograd::no_grad(|| w.add_scaled_(&g, -0.1));
///     });
///     skipped += stepped.is_none() as usize;
///     scaler.update();
///     w.zero_grad();
/// }
/// // The default scale 65536 is past f16's largest value (65504): the first step
/// // overflows, is skipped and the scale halves, as in PyTorch; then steps proceed.
/// assert_eq!((skipped, scaler.get_scale()), (1, 32768.0));
/// ```
#[derive(Clone, Debug)]
pub struct GradScaler {
    scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u32,
    enabled: bool,
    growth_tracker: u32,
    /// `Some(found_inf)` once this iteration's gradients were unscaled.
    unscaled: Option<bool>,
}

impl Default for GradScaler {
    fn default() -> Self {
        Self::new()
    }
}

impl GradScaler {
    /// PyTorch's defaults: scale 65536, growth ×2 every 2000 clean steps, backoff ×0.5.
    pub fn new() -> Self {
        GradScaler {
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
            growth_tracker: 0,
            unscaled: None,
        }
    }

    /// Sets the starting scale.
    ///
    /// ```
    /// let s = ferrograd_runtime::amp::GradScaler::new().init_scale(1024.0);
    /// assert_eq!(s.get_scale(), 1024.0);
    /// ```
    #[track_caller]
    pub fn init_scale(mut self, scale: f64) -> Self {
        assert!(
            scale.is_finite() && scale > 0.0,
            "GradScaler: init_scale must be positive and finite, got {scale}"
        );
        self.scale = scale;
        self
    }

    /// Sets how the scale grows: by `factor` (> 1) after `interval` steps without overflow.
    ///
    /// ```
    /// let s = ferrograd_runtime::amp::GradScaler::new().growth(4.0, 10);
    /// ```
    #[track_caller]
    pub fn growth(mut self, factor: f64, interval: u32) -> Self {
        assert!(
            factor > 1.0 && interval > 0,
            "GradScaler: growth factor must be > 1 and interval > 0, got {factor} and {interval}"
        );
        self.growth_factor = factor;
        self.growth_interval = interval;
        self
    }

    /// Sets the factor (in (0, 1)) the scale shrinks by after an overflow.
    ///
    /// ```
    /// let s = ferrograd_runtime::amp::GradScaler::new().backoff(0.25);
    /// ```
    #[track_caller]
    pub fn backoff(mut self, factor: f64) -> Self {
        assert!(
            factor > 0.0 && factor < 1.0,
            "GradScaler: backoff factor must be in (0, 1), got {factor}"
        );
        self.backoff_factor = factor;
        self
    }

    /// Turns scaling off (every method becomes a pass-through), as `enabled=False`.
    ///
    /// ```
    /// let s = ferrograd_runtime::amp::GradScaler::new().enabled(false);
    /// assert!(!s.is_enabled());
    /// ```
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Whether scaling is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The current scale (1 when disabled).
    pub fn get_scale(&self) -> f64 {
        if self.enabled { self.scale } else { 1.0 }
    }

    /// `loss * scale`, to call `backward` on.
    pub fn scale(&self, loss: &Tensor) -> Tensor {
        if self.enabled {
            loss.mul_scalar(self.scale)
        } else {
            loss.clone()
        }
    }

    /// Divides the gradients of `params` by the scale in place and records whether any
    /// is infinite or NaN; returns that flag. Called by [`GradScaler::step`] when not
    /// called before (call it yourself to clip gradients between). Once per iteration.
    ///
    /// # Panics
    /// When called twice before [`GradScaler::update`].
    #[track_caller]
    pub fn unscale_(&mut self, params: &[Tensor]) -> bool {
        assert!(
            self.unscaled.is_none(),
            "GradScaler::unscale_: already called since the last update()"
        );
        if !self.enabled {
            self.unscaled = Some(false);
            return false;
        }
        let inv = 1.0 / self.scale;
        let found_inf = crate::autograd::no_grad(|| {
            // 0 * x is 0 for finite x and NaN for inf/NaN, so the sum of these over all
            // gradients is 0 exactly when every one is finite: one host read in all.
            let mut nonfinite: Option<Tensor> = None;
            for g in params.iter().filter_map(Tensor::grad) {
                let check = g.mul_scalar(0.0).sum_all().to_dtype(DType::F32);
                nonfinite = Some(match nonfinite {
                    Some(acc) => acc.add(&check),
                    None => check,
                });
                g.mul_scalar_(inv);
            }
            nonfinite.is_some_and(|n| n.item::<f32>() != 0.0)
        });
        self.unscaled = Some(found_inf);
        found_inf
    }

    /// Unscales the gradients of `params` (unless [`GradScaler::unscale_`] already did),
    /// then runs `optimizer_step` unless a gradient overflowed. Returns its result, or
    /// `None` for a skipped step.
    pub fn step<R>(&mut self, params: &[Tensor], optimizer_step: impl FnOnce() -> R) -> Option<R> {
        let found_inf = match self.unscaled {
            Some(f) => f,
            None => self.unscale_(params),
        };
        (!found_inf).then(optimizer_step)
    }

    /// Adapts the scale for the next iteration: backoff after an overflow, growth after
    /// `growth_interval` clean steps in a row.
    ///
    /// # Panics
    /// When neither [`GradScaler::step`] nor [`GradScaler::unscale_`] ran this iteration.
    #[track_caller]
    pub fn update(&mut self) {
        let found_inf = self
            .unscaled
            .take()
            .expect("GradScaler::update: call step() (or unscale_()) first in each iteration");
        if !self.enabled {
            return;
        }
        if found_inf {
            self.scale *= self.backoff_factor;
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker == self.growth_interval {
                self.scale *= self.growth_factor;
                self.growth_tracker = 0;
            }
        }
    }

    /// The scaler's state (`scale`, `growth_factor`, `backoff_factor`,
    /// `growth_interval`, `_growth_tracker`, as PyTorch's `state_dict`), for a checkpoint.
    ///
    /// ```
    /// use ferrograd_runtime::amp::GradScaler;
    /// let s = GradScaler::new().init_scale(512.0);
    /// let mut t = GradScaler::new();
    /// t.load_state_dict(&s.state_dict());
    /// assert_eq!(t.get_scale(), 512.0);
    /// ```
    pub fn state_dict(&self) -> std::collections::BTreeMap<String, f64> {
        std::collections::BTreeMap::from([
            ("scale".to_string(), self.scale),
            ("growth_factor".to_string(), self.growth_factor),
            ("backoff_factor".to_string(), self.backoff_factor),
            ("growth_interval".to_string(), self.growth_interval as f64),
            ("_growth_tracker".to_string(), self.growth_tracker as f64),
        ])
    }

    /// Restores [`GradScaler::state_dict`] (keys it lacks keep their values).
    pub fn load_state_dict(&mut self, state: &std::collections::BTreeMap<String, f64>) {
        let get = |k: &str| state.get(k).copied().filter(|v| v.is_finite());
        if let Some(v) = get("scale") {
            self.scale = v;
        }
        if let Some(v) = get("growth_factor") {
            self.growth_factor = v;
        }
        if let Some(v) = get("backoff_factor") {
            self.backoff_factor = v;
        }
        if let Some(v) = get("growth_interval").filter(|v| *v >= 1.0) {
            self.growth_interval = v as u32;
        }
        if let Some(v) = get("_growth_tracker").filter(|v| *v >= 0.0) {
            self.growth_tracker = v as u32;
        }
    }
}
