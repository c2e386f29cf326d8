//! Parameter-free modules for activations, reshapes and pooling, so that a
//! [`Sequential`](super::Sequential) lines up index for index with PyTorch's (a PyTorch
//! `nn.ReLU()` at position 1 is a [`ReLU`] at position 1, and `2.weight` stays `2.weight`).

use super::forward::Forward;
use super::functional::{self as F, Pool2dArgs};
use super::{Module, TensorKind};
use crate::Tensor;

/// The struct of a [`stateless!`] module: a unit struct, or one with public fields.
macro_rules! declare {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name;
    };
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty),* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            $($(#[$fm])* pub $field: $ty),*
        }
    };
}

/// Declares parameter-free modules: `Module` with nothing to visit, and `Forward` by the
/// given body.
macro_rules! stateless {
    ($(
        $(#[$m:meta])*
        $name:ident $({ $($(#[$fm:meta])* $field:ident: $ty:ty),* $(,)? })? => |$s:ident, $x:ident| $body:expr;
    )*) => {
        $(
            declare! { $(#[$m])* $name $({ $($(#[$fm])* $field: $ty),* })? }

            impl Module for $name {
                fn visit(&self, _: &str, _: &mut dyn FnMut(&str, &Tensor, TensorKind)) {}
                fn visit_mut(&mut self, _: &str, _: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {}
                fn set_training(&mut self, _: bool) {}
            }

            impl<'a> Forward<&'a Tensor> for $name {
                type Output = Tensor;
                #[track_caller]
                fn forward(&self, $x: &'a Tensor) -> Tensor {
                    let $s = self;
                    $body
                }
            }
        )*
    };
}

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
    /// Flattens dims `start_dim..=end_dim` into one (`nn.Flatten`; `Flatten::default()`
    /// keeps the batch dim: 1 to -1).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Flatten, Forward};
    /// let y = Flatten::default().forward(&Tensor::zeros(&[2, 3, 4, 5], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 60]);
    /// ```
    Flatten {
        /// First dim flattened.
        start_dim: isize,
        /// Last dim flattened.
        end_dim: isize,
    } => |s, x| x.flatten(s.start_dim, s.end_dim);
    /// Returns its input (`nn.Identity`): a placeholder that keeps indices aligned.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, Identity};
    /// let x = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// assert_eq!(Identity.forward(&x).to_vec::<f32>(), x.to_vec::<f32>());
    /// ```
    Identity => |_s, x| x.clone();
    /// 2-D max pooling (`nn.MaxPool2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, MaxPool2d};
    /// let pool = MaxPool2d::new(2);
    /// assert_eq!(pool.forward(&Tensor::zeros(&[1, 3, 8, 8], DType::F32, &Device::Cpu)).shape(), &[1, 3, 4, 4]);
    /// ```
    MaxPool2d {
        /// Window, stride, padding and dilation.
        args: Pool2dArgs,
    } => |s, x| F::max_pool2d_with(x, &s.args);
    /// 2-D average pooling (`nn.AvgPool2d`, padding counted in the average).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AvgPool2d, Forward};
    /// let y = AvgPool2d::new(2).forward(&Tensor::ones(&[1, 1, 4, 4], DType::F32, &Device::Cpu));
    /// assert_eq!(y.to_vec::<f32>(), vec![1.0; 4]);
    /// ```
    AvgPool2d {
        /// Window, stride and padding.
        args: Pool2dArgs,
    } => |s, x| F::avg_pool2d_with(x, &s.args);
    /// Average pooling to a fixed output size (`nn.AdaptiveAvgPool2d`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{AdaptiveAvgPool2d, Forward};
    /// let y = AdaptiveAvgPool2d { output_size: [1, 1] }.forward(&Tensor::ones(&[2, 8, 7, 7], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[2, 8, 1, 1]);
    /// ```
    AdaptiveAvgPool2d {
        /// `[H, W]` of the output.
        output_size: [usize; 2],
    } => |s, x| F::adaptive_avg_pool2d(x, s.output_size);
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

impl Default for Flatten {
    fn default() -> Self {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}

impl MaxPool2d {
    /// A square window of `kernel` with stride `kernel` (`nn.MaxPool2d(kernel)`); set the
    /// other arguments on `args`.
    pub fn new(kernel: usize) -> Self {
        MaxPool2d {
            args: Pool2dArgs::new(kernel),
        }
    }
}

impl AvgPool2d {
    /// A square window of `kernel` with stride `kernel` (`nn.AvgPool2d(kernel)`).
    pub fn new(kernel: usize) -> Self {
        AvgPool2d {
            args: Pool2dArgs::new(kernel),
        }
    }
}
