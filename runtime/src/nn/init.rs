//! Parameter initialisation (`torch.nn.init`): each function overwrites a tensor in place
//! (under `no_grad`, so it works on leaves that require grad) from the global generator
//! ([`manual_seed`](crate::manual_seed)), and returns it for chaining.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::nn::init::{self, FanMode, Nonlinearity};
//! let w = Tensor::zeros(&[64, 32, 3, 3], DType::F32, &Device::Cpu).requires_grad(true);
//! init::kaiming_normal_(&w, 0.0, FanMode::FanOut, Nonlinearity::ReLU);
//! let std = w.std(&[0, 1, 2, 3], true, false).item::<f32>();
//! assert!((std - (2.0f32 / (64.0 * 9.0)).sqrt()).abs() < 0.005);
//! ```

use crate::autograd::no_grad;
use crate::random::with_global;
use crate::{DType, Device, Tensor};
use ferrograd_kernels::Real;

/// The non-linearity a gain is computed for ([`calculate_gain`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nonlinearity {
    /// `linear` and the `conv*`/`conv_transpose*` names: gain 1.
    Linear,
    /// `sigmoid`: gain 1.
    Sigmoid,
    /// `tanh`: gain 5/3.
    Tanh,
    /// `relu`: gain √2.
    ReLU,
    /// `leaky_relu` with this negative slope: gain √(2 / (1 + slope²)).
    LeakyReLU(f64),
    /// `selu`: gain 3/4.
    SELU,
}

/// Which fan the kaiming initialisers preserve the variance of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FanMode {
    /// Weights' variance in the forward pass (`mode='fan_in'`, the default).
    #[default]
    FanIn,
    /// Gradients' variance in the backward pass (`mode='fan_out'`).
    FanOut,
}

/// The recommended gain for `nonlinearity` (`nn.init.calculate_gain`).
///
/// ```
/// use ferrograd_runtime::nn::init::{calculate_gain, Nonlinearity};
/// assert_eq!(calculate_gain(Nonlinearity::ReLU), 2f64.sqrt());
/// assert_eq!(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
/// ```
pub fn calculate_gain(nonlinearity: Nonlinearity) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::ReLU => 2f64.sqrt(),
        Nonlinearity::LeakyReLU(slope) => (2.0 / (1.0 + slope * slope)).sqrt(),
        Nonlinearity::SELU => 0.75,
    }
}

/// `(fan_in, fan_out)` of a weight of at least two dims: `size(1)` and `size(0)` times the
/// receptive field (the product of the remaining dims), as PyTorch computes them.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::init::fan_in_and_fan_out;
/// let w = Tensor::zeros(&[16, 6, 5, 5], DType::F32, &Device::Cpu);
/// assert_eq!(fan_in_and_fan_out(&w), (150, 400));
/// ```
#[track_caller]
pub fn fan_in_and_fan_out(tensor: &Tensor) -> (usize, usize) {
    let shape = tensor.shape();
    assert!(
        shape.len() >= 2,
        "init: fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (shape {shape:?})"
    );
    let receptive: usize = shape[2..].iter().product();
    (shape[1] * receptive, shape[0] * receptive)
}

/// Overwrites `tensor` with host values `f(i)` in f64, converted to its dtype and device.
fn write(tensor: &Tensor, values: Vec<f64>) -> &Tensor {
    let src = Tensor::from_vec(values, tensor.shape())
        .to_dtype(tensor.dtype())
        .to_device(&tensor.device())
        .expect("the tensor's own device is usable");
    no_grad(|| tensor.copy_(&src));
    tensor
}

fn samples(tensor: &Tensor, mut f: impl FnMut(&mut crate::Generator) -> f64) -> Vec<f64> {
    with_global(|g| (0..tensor.numel()).map(|_| f(g)).collect())
}

/// Fills `tensor` with samples of `U(a, b)` (`nn.init.uniform_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[1000], DType::F32, &Device::Cpu);
/// ferrograd_runtime::nn::init::uniform_(&t, -0.5, 0.5);
/// assert!(t.max_all().item::<f32>() < 0.5 && t.min_all().item::<f32>() >= -0.5);
/// ```
#[track_caller]
pub fn uniform_(tensor: &Tensor, a: f64, b: f64) -> &Tensor {
    assert!(
        a <= b,
        "init.uniform_: expects a <= b, got a = {a}, b = {b}"
    );
    write(tensor, samples(tensor, |g| a + (b - a) * g.uniform()))
}

/// Fills `tensor` with samples of `N(mean, std²)` (`nn.init.normal_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[10000], DType::F64, &Device::Cpu);
/// ferrograd_runtime::nn::init::normal_(&t, 3.0, 0.1);
/// assert!((t.mean_all().item::<f64>() - 3.0).abs() < 0.01);
/// ```
#[track_caller]
pub fn normal_(tensor: &Tensor, mean: f64, std: f64) -> &Tensor {
    assert!(
        std >= 0.0,
        "init.normal_: std must be non-negative, got {std}"
    );
    write(tensor, samples(tensor, |g| mean + std * g.normal()))
}

/// Fills `tensor` with `value` (`nn.init.constant_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
/// assert_eq!(ferrograd_runtime::nn::init::constant_(&t, 0.5).to_vec::<f32>(), vec![0.5, 0.5]);
/// ```
pub fn constant_(tensor: &Tensor, value: f64) -> &Tensor {
    no_grad(|| tensor.fill_(value));
    tensor
}

/// Fills `tensor` with zeros (`nn.init.zeros_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::ones(&[2], DType::F32, &Device::Cpu);
/// assert_eq!(ferrograd_runtime::nn::init::zeros_(&t).to_vec::<f32>(), vec![0.0, 0.0]);
/// ```
pub fn zeros_(tensor: &Tensor) -> &Tensor {
    constant_(tensor, 0.0)
}

/// Fills `tensor` with ones (`nn.init.ones_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
/// assert_eq!(ferrograd_runtime::nn::init::ones_(&t).to_vec::<f32>(), vec![1.0, 1.0]);
/// ```
pub fn ones_(tensor: &Tensor) -> &Tensor {
    constant_(tensor, 1.0)
}

/// Glorot uniform: `U(-a, a)` with `a = gain · √(6 / (fan_in + fan_out))`
/// (`nn.init.xavier_uniform_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[30, 20], DType::F32, &Device::Cpu);
/// ferrograd_runtime::nn::init::xavier_uniform_(&t, 1.0);
/// assert!(t.abs().max_all().item::<f32>() <= (6.0f32 / 50.0).sqrt());
/// ```
#[track_caller]
pub fn xavier_uniform_(tensor: &Tensor, gain: f64) -> &Tensor {
    let (fan_in, fan_out) = fan_in_and_fan_out(tensor);
    let a = gain * (6.0 / (fan_in + fan_out) as f64).sqrt();
    uniform_(tensor, -a, a)
}

/// Glorot normal: `N(0, std²)` with `std = gain · √(2 / (fan_in + fan_out))`
/// (`nn.init.xavier_normal_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[200, 200], DType::F64, &Device::Cpu);
/// ferrograd_runtime::nn::init::xavier_normal_(&t, 1.0);
/// assert!((t.std(&[0, 1], true, false).item::<f64>() - 0.005f64.sqrt()).abs() < 0.002);
/// ```
#[track_caller]
pub fn xavier_normal_(tensor: &Tensor, gain: f64) -> &Tensor {
    let (fan_in, fan_out) = fan_in_and_fan_out(tensor);
    normal_(tensor, 0.0, gain * (2.0 / (fan_in + fan_out) as f64).sqrt())
}

/// The standard deviation kaiming initialisation aims for.
#[track_caller]
fn kaiming_std(tensor: &Tensor, a: f64, mode: FanMode, nonlinearity: Nonlinearity) -> f64 {
    let (fan_in, fan_out) = fan_in_and_fan_out(tensor);
    let fan = match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    };
    let nonlinearity = match nonlinearity {
        // PyTorch's `a` is the negative slope of leaky_relu.
        Nonlinearity::LeakyReLU(_) => Nonlinearity::LeakyReLU(a),
        other => other,
    };
    calculate_gain(nonlinearity) / (fan.max(1) as f64).sqrt()
}

/// He uniform: `U(-b, b)` with `b = gain · √(3 / fan)` (`nn.init.kaiming_uniform_`); `a`
/// is the negative slope used when `nonlinearity` is [`Nonlinearity::LeakyReLU`] (PyTorch's
/// layers use `a = √5` with leaky_relu, which gives their `U(±1/√fan_in)`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::init::{self, FanMode, Nonlinearity};
/// let w = Tensor::zeros(&[10, 25], DType::F32, &Device::Cpu);
/// init::kaiming_uniform_(&w, 5f64.sqrt(), FanMode::FanIn, Nonlinearity::LeakyReLU(0.0));
/// assert!(w.abs().max_all().item::<f32>() <= 0.2);
/// ```
#[track_caller]
pub fn kaiming_uniform_(
    tensor: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: Nonlinearity,
) -> &Tensor {
    let bound = 3f64.sqrt() * kaiming_std(tensor, a, mode, nonlinearity);
    uniform_(tensor, -bound, bound)
}

/// He normal: `N(0, std²)` with `std = gain / √fan` (`nn.init.kaiming_normal_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::init::{self, FanMode, Nonlinearity};
/// let w = Tensor::zeros(&[100, 200], DType::F64, &Device::Cpu);
/// init::kaiming_normal_(&w, 0.0, FanMode::FanIn, Nonlinearity::ReLU);
/// assert!((w.std(&[0, 1], true, false).item::<f64>() - 0.1).abs() < 0.005);
/// ```
#[track_caller]
pub fn kaiming_normal_(
    tensor: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: Nonlinearity,
) -> &Tensor {
    normal_(tensor, 0.0, kaiming_std(tensor, a, mode, nonlinearity))
}

/// A normal `N(mean, std²)` truncated to `[a, b]`, drawn by inverting the CDF as PyTorch
/// does (`nn.init.trunc_normal_`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let t = Tensor::zeros(&[1000], DType::F32, &Device::Cpu);
/// ferrograd_runtime::nn::init::trunc_normal_(&t, 0.0, 1.0, -0.5, 0.5);
/// assert!(t.abs().max_all().item::<f32>() <= 0.5);
/// ```
#[track_caller]
pub fn trunc_normal_(tensor: &Tensor, mean: f64, std: f64, a: f64, b: f64) -> &Tensor {
    assert!(
        a < b && std > 0.0,
        "init.trunc_normal_: expects a < b and std > 0, got a = {a}, b = {b}, std = {std}"
    );
    let cdf = |x: f64| 0.5 * (1.0 + Real::erf((x - mean) / (std * 2f64.sqrt())));
    let (lo, hi) = (cdf(a), cdf(b));
    let values = samples(tensor, |g| {
        let u = 2.0 * (lo + (hi - lo) * g.uniform()) - 1.0;
        (mean + std * 2f64.sqrt() * erfinv(u)).clamp(a, b)
    });
    write(tensor, values)
}

/// The inverse error function on (-1, 1): an initial guess refined by Newton's method on
/// `erf` to f64 precision.
fn erfinv(y: f64) -> f64 {
    if y <= -1.0 {
        return f64::NEG_INFINITY;
    }
    if y >= 1.0 {
        return f64::INFINITY;
    }
    // Winitzki's approximation (relative error below 2e-3) as the starting point.
    let a = 0.147;
    let ln = (1.0 - y * y).ln();
    let t = 2.0 / (std::f64::consts::PI * a) + ln / 2.0;
    let mut x = y.signum() * ((t * t - ln / a).sqrt() - t).sqrt();
    for _ in 0..4 {
        let err = Real::erf(x) - y;
        x -= err / (2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp());
    }
    x
}

/// A (semi-)orthogonal matrix scaled by `gain`, from the QR decomposition of a normal
/// sample with the signs of `R`'s diagonal folded into `Q`, as PyTorch does
/// (`nn.init.orthogonal_`); dims past the first are flattened.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let w = Tensor::zeros(&[3, 5], DType::F64, &Device::Cpu);
/// ferrograd_runtime::nn::init::orthogonal_(&w, 1.0);
/// let gram = w.matmul(&w.t());
/// assert!(gram.allclose(&Tensor::eye(3, DType::F64, &Device::Cpu), 1e-9, 1e-9));
/// ```
#[track_caller]
pub fn orthogonal_(tensor: &Tensor, gain: f64) -> &Tensor {
    assert!(
        tensor.dim() >= 2,
        "init.orthogonal_: only tensors with 2 or more dimensions are supported, got shape {:?}",
        tensor.shape()
    );
    let rows = tensor.shape()[0];
    let cols = tensor.numel() / rows.max(1);
    if tensor.numel() == 0 {
        return tensor;
    }
    // QR of the tall orientation: m x n with m >= n.
    let (m, n) = if rows < cols {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let a: Vec<f64> = with_global(|g| (0..m * n).map(|_| g.normal()).collect());
    let q = householder_q(a, m, n);
    let mut out = vec![0.0; rows * cols];
    for i in 0..m {
        for j in 0..n {
            let v = gain * q[i * n + j];
            if rows < cols {
                out[j * cols + i] = v; // Q transposed
            } else {
                out[i * n + j] = v;
            }
        }
    }
    write(tensor, out)
}

/// The `m x n` (m >= n) factor `Q` of `A = QR` (row-major), with each column's sign
/// chosen so that `R`'s diagonal is non-negative.
fn householder_q(mut a: Vec<f64>, m: usize, n: usize) -> Vec<f64> {
    let mut reflectors: Vec<Vec<f64>> = Vec::with_capacity(n);
    let mut diag_sign = vec![1.0; n];
    for k in 0..n {
        let norm = (k..m).map(|i| a[i * n + k].powi(2)).sum::<f64>().sqrt();
        let alpha = if a[k * n + k] > 0.0 { -norm } else { norm };
        let mut v: Vec<f64> = (k..m).map(|i| a[i * n + k]).collect();
        v[0] -= alpha;
        let vnorm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if vnorm > 0.0 {
            v.iter_mut().for_each(|x| *x /= vnorm);
            for j in k..n {
                let dot: f64 = (k..m).map(|i| v[i - k] * a[i * n + j]).sum();
                for i in k..m {
                    a[i * n + j] -= 2.0 * v[i - k] * dot;
                }
            }
        }
        // R[k][k] = a[k][k] after the reflection; fold its sign into Q's column k.
        diag_sign[k] = if a[k * n + k] < 0.0 { -1.0 } else { 1.0 };
        reflectors.push(v);
    }
    // Q = H_0 H_1 ... H_{n-1} applied to the first n columns of the identity.
    let mut q = vec![0.0; m * n];
    for j in 0..n {
        q[j * n + j] = 1.0;
    }
    for (k, v) in reflectors.iter().enumerate().rev() {
        for j in 0..n {
            let dot: f64 = (k..m).map(|i| v[i - k] * q[i * n + j]).sum();
            for i in k..m {
                q[i * n + j] -= 2.0 * v[i - k] * dot;
            }
        }
    }
    for i in 0..m {
        for (j, s) in diag_sign.iter().enumerate() {
            q[i * n + j] *= s;
        }
    }
    q
}

/// `U(-1/√fan_in, 1/√fan_in)` as a new leaf that requires grad on `device`: PyTorch's
/// default for the weights and biases of Linear and convolutions (`kaiming_uniform_` with
/// `a = √5`).
pub(crate) fn default_uniform(shape: &[usize], fan_in: usize, device: &Device) -> Tensor {
    if init_skipped() {
        return on(Tensor::zeros(shape, DType::F32, &Device::Cpu), device).requires_grad(true);
    }
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    let t = Tensor::rand(shape, DType::F32, &Device::Cpu)
        .mul_scalar(2.0 * bound)
        .sub_scalar(bound);
    on(t, device).requires_grad(true)
}

/// A new f32 leaf of `shape` filled with `value`, on `device`, requiring grad.
pub(crate) fn filled_param(shape: &[usize], value: f64, device: &Device) -> Tensor {
    on(Tensor::full(shape, value, DType::F32, &Device::Cpu), device).requires_grad(true)
}

/// `t` moved to `device`; a layer cannot be built on a device that does not work.
pub(crate) fn on(t: Tensor, device: &Device) -> Tensor {
    t.to_device(device)
        .unwrap_or_else(|e| panic!("cannot create a layer on {device}: {e}"))
}

thread_local! {
    static SKIP_INIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the random initialisation of new layers skipped
/// (`torch.nn.utils.skip_init`): a layer built inside gets zero weights where it would
/// draw random ones, in memory fresh from the system that is not written (so not
/// resident) until used. For weights a checkpoint overwrites right after: loading a
/// model then costs the checkpoint's size, not twice it. The global generator is not
/// advanced. Nests; restored when `f` panics.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, init};
/// let fc = init::skip_init(|| Linear::new(4, 3, &Device::Cpu));
/// assert!(fc.weight.to_vec::<f32>().iter().all(|&w| w == 0.0));
/// assert!(!init::init_skipped());
/// ```
pub fn skip_init<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SKIP_INIT.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SKIP_INIT.with(|s| s.replace(true)));
    f()
}

/// Whether this thread is inside [`skip_init`] (a custom layer's constructor can check
/// it before drawing its own random weights).
///
/// ```
/// use ferrograd_runtime::nn::init;
/// assert!(init::skip_init(init::init_skipped));
/// ```
pub fn init_skipped() -> bool {
    SKIP_INIT.with(|s| s.get())
}
