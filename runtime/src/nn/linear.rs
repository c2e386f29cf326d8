//! Affine layers: [`Linear`] and [`Bilinear`].

use super::Module;
use super::functional as F;
use super::init::default_uniform;
use crate::{Device, Tensor};

/// `y = x W^T + b` (`nn.Linear`): weight `[out, in]`, bias `[out]`, both `U(±1/√in)`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module};
/// let fc = Linear::new(3, 2, &Device::Cpu);
/// assert_eq!(fc.forward(&Tensor::ones(&[5, 3], DType::F32, &Device::Cpu)).shape(), &[5, 2]);
/// assert_eq!(fc.state_dict().keys().collect::<Vec<_>>(), ["bias", "weight"]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Linear {
    /// `[out_features, in_features]`.
    #[param]
    pub weight: Tensor,
    /// `[out_features]`, if the layer has a bias.
    #[param]
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with bias, initialised like `nn.Linear(in_features, out_features)`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Bilinear, Linear, Module};
    /// let fc = Linear::new(4, 2, &Device::Cpu);
    /// assert_eq!((fc.weight.shape(), fc.num_parameters()), (&[2, 4][..], 10));
    /// ```
    pub fn new(in_features: usize, out_features: usize, device: &Device) -> Self {
        Self::with_bias(in_features, out_features, true, device)
    }

    /// A layer without bias (`bias=False`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, Module};
    /// assert_eq!(Linear::no_bias(4, 2, &Device::Cpu).num_parameters(), 8);
    /// ```
    pub fn no_bias(in_features: usize, out_features: usize, device: &Device) -> Self {
        Self::with_bias(in_features, out_features, false, device)
    }

    /// A layer with or without bias (`nn.Linear(in, out, bias=bias)`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Linear;
    /// assert!(Linear::with_bias(4, 2, false, &Device::Cpu).bias.is_none());
    /// ```
    pub fn with_bias(in_features: usize, out_features: usize, bias: bool, device: &Device) -> Self {
        Linear {
            weight: default_uniform(&[out_features, in_features], in_features, device),
            bias: bias.then(|| default_uniform(&[out_features], in_features, device)),
        }
    }

    /// Applies the layer to `[*, in_features]`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Bilinear, Linear, Module};
    /// let fc = Linear::new(4, 2, &Device::Cpu);
    /// assert_eq!(fc.forward(&Tensor::ones(&[3, 5, 4], DType::F32, &Device::Cpu)).shape(), &[3, 5, 2]);
    /// ```
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        F::linear(x, &self.weight, self.bias.as_ref())
    }
}

/// `y_k = x1^T A_k x2 + b_k` (`nn.Bilinear`): weight `[out, in1, in2]`, bias `[out]`, both
/// `U(±1/√in1)` as PyTorch.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Bilinear, Forward};
/// let b = Bilinear::new(3, 4, 5, true, &Device::Cpu);
/// let (x1, x2) = (Tensor::ones(&[2, 3], DType::F32, &Device::Cpu), Tensor::ones(&[2, 4], DType::F32, &Device::Cpu));
/// assert_eq!(b.forward((&x1, &x2)).shape(), &[2, 5]);
/// ```
#[derive(Module, Debug)]
#[module(crate = crate)]
pub struct Bilinear {
    /// `[out_features, in1_features, in2_features]`.
    #[param]
    pub weight: Tensor,
    /// `[out_features]`, if the layer has a bias.
    #[param]
    pub bias: Option<Tensor>,
}

impl Bilinear {
    /// A layer initialised like `nn.Bilinear(in1, in2, out, bias)`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Bilinear, Linear, Module};
    /// assert_eq!(Bilinear::new(3, 4, 5, false, &Device::Cpu).num_parameters(), 60);
    /// ```
    pub fn new(in1: usize, in2: usize, out: usize, bias: bool, device: &Device) -> Self {
        Bilinear {
            weight: default_uniform(&[out, in1, in2], in1, device),
            bias: bias.then(|| default_uniform(&[out], in1, device)),
        }
    }
}

impl<'a> super::Forward<(&'a Tensor, &'a Tensor)> for Bilinear {
    type Output = Tensor;
    #[track_caller]
    fn forward(&self, (x1, x2): (&'a Tensor, &'a Tensor)) -> Tensor {
        F::bilinear(x1, x2, &self.weight, self.bias.as_ref())
    }
}
