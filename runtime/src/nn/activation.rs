//! Parameter-free activation modules, so that a [`Sequential`](super::Sequential) lines up
//! index for index with PyTorch's (a PyTorch `nn.ReLU()` at position 1 is a [`ReLU`] at
//! position 1, and `2.weight` stays `2.weight`).

use super::stateless::stateless;

stateless! {
    /// `max(x, 0)` (`nn.ReLU`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, ReLU};
    /// let y = ReLU.forward(&Tensor::from_vec(vec![-1.0f32, 2.0], &[2]));
    /// assert_eq!(y.to_vec::<f32>(), vec![0.0, 2.0]);
    /// ```
    ReLU => |_s, x| x.relu();
    /// `min(max(x, 0), 6)` (`nn.ReLU6`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, ReLU6};
    /// assert_eq!(ReLU6.forward(&Tensor::from_vec(vec![7.0f32], &[1])).to_vec::<f32>(), vec![6.0]);
    /// ```
    ReLU6 => |_s, x| x.relu6();
    /// `min(max(x, min_val), max_val)` (`nn.Hardtanh`; `Hardtanh::default()` is `[-1, 1]`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Hardtanh};
    /// let y = Hardtanh::default().forward(&Tensor::from_vec(vec![-3.0f32, 0.5], &[2]));
    /// assert_eq!(y.to_vec::<f32>(), vec![-1.0, 0.5]);
    /// ```
    Hardtanh {
        /// Lower bound.
        min_val: f64,
        /// Upper bound.
        max_val: f64,
    } => |s, x| x.hardtanh(s.min_val, s.max_val);
    /// GELU (`nn.GELU`): the exact erf form, or with `approximate_tanh` the tanh one
    /// (`approximate='tanh'`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, GELU};
    /// let x = Tensor::from_vec(vec![1.0f64], &[1]);
    /// assert!((GELU::default().forward(&x).item::<f64>() - 0.8413447460685429).abs() < 1e-12);
    /// ```
    #[derive(Default)]
    GELU {
        /// Use the tanh approximation.
        approximate_tanh: bool,
    } => |s, x| if s.approximate_tanh { x.gelu_tanh() } else { x.gelu() };
    /// `x > 0 ? x : negative_slope * x` (`nn.LeakyReLU`; the default slope is 0.01).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, LeakyReLU};
    /// let y = LeakyReLU::default().forward(&Tensor::from_vec(vec![-100.0f32], &[1]));
    /// assert_eq!(y.to_vec::<f32>(), vec![-1.0]);
    /// ```
    LeakyReLU {
        /// Slope for negative inputs.
        negative_slope: f64,
    } => |s, x| x.leaky_relu(s.negative_slope);
    /// `x > 0 ? x : alpha * (e^x - 1)` (`nn.ELU`; `alpha` defaults to 1).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ELU, Forward};
    /// assert_eq!(ELU::default().forward(&Tensor::zeros(&[1], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![0.0]);
    /// ```
    ELU {
        /// Scale of the negative branch.
        alpha: f64,
    } => |s, x| x.elu(s.alpha);
    /// `ln(1 + e^(beta x)) / beta` (`nn.Softplus`; defaults beta 1, threshold 20).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Softplus};
    /// let y = Softplus::default().forward(&Tensor::zeros(&[1], DType::F64, &Device::Cpu));
    /// assert!((y.item::<f64>() - 2f64.ln()).abs() < 1e-15);
    /// ```
    Softplus {
        /// Sharpness.
        beta: f64,
        /// Above `beta * x > threshold` the output is `x`.
        threshold: f64,
    } => |s, x| x.softplus(s.beta, s.threshold);
    /// `relu6(x + 3) / 6` (`nn.Hardsigmoid`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Hardsigmoid};
    /// assert_eq!(Hardsigmoid.forward(&Tensor::zeros(&[1], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![0.5]);
    /// ```
    Hardsigmoid => |_s, x| x.hardsigmoid();
    /// `x * relu6(x + 3) / 6` (`nn.Hardswish`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Hardswish};
    /// assert_eq!(Hardswish.forward(&Tensor::full(&[1], 4.0, DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![4.0]);
    /// ```
    Hardswish => |_s, x| x.hardswish();
    /// `x * tanh(softplus(x))` (`nn.Mish`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Mish};
    /// assert_eq!(Mish.forward(&Tensor::zeros(&[1], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![0.0]);
    /// ```
    Mish => |_s, x| x.mish();
    /// `x * sigmoid(x)` (`nn.SiLU`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, SiLU};
    /// assert_eq!(SiLU.forward(&Tensor::zeros(&[1], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![0.0]);
    /// ```
    SiLU => |_s, x| x.silu();
    /// The logistic function (`nn.Sigmoid`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Sigmoid};
    /// assert_eq!(Sigmoid.forward(&Tensor::zeros(&[1], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![0.5]);
    /// ```
    Sigmoid => |_s, x| x.sigmoid();
    /// `tanh` (`nn.Tanh`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Tanh};
    /// assert_eq!(Tanh.forward(&Tensor::zeros(&[1], DType::F32, &Device::Cpu)).to_vec::<f32>(), vec![0.0]);
    /// ```
    Tanh => |_s, x| x.tanh();
    /// Softmax along `dim` (`nn.Softmax(dim)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Softmax};
    /// let y = Softmax { dim: -1 }.forward(&Tensor::zeros(&[2, 4], DType::F32, &Device::Cpu));
    /// assert_eq!(y.to_vec::<f32>(), vec![0.25; 8]);
    /// ```
    Softmax {
        /// The dim the outputs sum to one along.
        dim: isize,
    } => |s, x| x.softmax(s.dim);
    /// Log-softmax along `dim` (`nn.LogSoftmax(dim)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, LogSoftmax};
    /// let y = LogSoftmax { dim: 1 }.forward(&Tensor::zeros(&[1, 2], DType::F64, &Device::Cpu));
    /// assert!((y.to_vec::<f64>()[0] + 2f64.ln()).abs() < 1e-12);
    /// ```
    LogSoftmax {
        /// The dim normalised along.
        dim: isize,
    } => |s, x| x.log_softmax(s.dim);
}

impl Default for Hardtanh {
    fn default() -> Self {
        Hardtanh {
            min_val: -1.0,
            max_val: 1.0,
        }
    }
}

impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU {
            negative_slope: 0.01,
        }
    }
}

impl Default for ELU {
    fn default() -> Self {
        ELU { alpha: 1.0 }
    }
}

impl Default for Softplus {
    fn default() -> Self {
        Softplus {
            beta: 1.0,
            threshold: 20.0,
        }
    }
}
