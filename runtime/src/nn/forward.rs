//! The forward contract: [`Forward`] (a module's `forward`, its input and output types
//! chosen per implementation, so layers can take and return tuples) and [`Layer`], the
//! tensor-to-tensor modules that [`Sequential`](super::Sequential) chains.

use super::Module;
use super::{
    AlphaDropout, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d,
    Dropout, Dropout2d, Embedding, GroupNorm, InstanceNorm1d, InstanceNorm2d, LayerNorm, Linear,
    RMSNorm,
};
use crate::Tensor;

/// A module's forward pass (PyTorch's `forward`), generic over the input type so that a
/// module can take one tensor, several, or a tuple, and return what it likes.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Forward, Linear, Module};
///
/// /// Two inputs, a tuple out.
/// #[derive(Module)]
/// #[module(crate = ferrograd_runtime)]
/// struct TwoTower { left: Linear, right: Linear }
///
/// impl<'a> Forward<(&'a Tensor, &'a Tensor)> for TwoTower {
///     type Output = (Tensor, Tensor);
///     fn forward(&self, (a, b): (&'a Tensor, &'a Tensor)) -> (Tensor, Tensor) {
///         (self.left.forward(a), self.right.forward(b))
///     }
/// }
///
/// let m = TwoTower { left: Linear::new(3, 2, &Device::Cpu), right: Linear::new(5, 2, &Device::Cpu) };
/// let x = Tensor::ones(&[4, 3], DType::F32, &Device::Cpu);
/// let y = Tensor::ones(&[4, 5], DType::F32, &Device::Cpu);
/// let (l, r) = m.forward((&x, &y));
/// assert_eq!((l.shape(), r.shape()), (&[4, 2][..], &[4, 2][..]));
/// ```
pub trait Forward<Input> {
    /// What the forward pass returns.
    type Output;

    /// Runs the module on `input`.
    fn forward(&self, input: Input) -> Self::Output;
}

/// A module mapping one tensor to one tensor: what [`Sequential`](super::Sequential),
/// [`ModuleList`](super::ModuleList) and [`ModuleDict`](super::ModuleDict) hold by
/// default. Implemented for every such [`Module`] + [`Forward`], a `#[derive(Module)]`
/// struct included.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Layer, Linear, ReLU};
/// let layers: Vec<Box<dyn Layer>> = vec![Box::new(Linear::new(2, 3, &Device::Cpu)), Box::new(ReLU)];
/// let y = layers.iter().fold(Tensor::ones(&[1, 2], DType::F32, &Device::Cpu), |x, l| l.forward(&x));
/// assert!(y.min_all().item::<f32>() >= 0.0);
/// ```
pub trait Layer: Module + for<'a> Forward<&'a Tensor, Output = Tensor> + Send + Sync {}

impl<T> Layer for T where T: Module + for<'a> Forward<&'a Tensor, Output = Tensor> + Send + Sync {}

/// `Forward<&Tensor>` for layers whose inherent `forward(&self, &Tensor) -> Tensor`
/// already exists.
macro_rules! forward_by_inherent {
    ($($ty:ty),* $(,)?) => {
        $(
            impl<'a> Forward<&'a Tensor> for $ty {
                type Output = Tensor;
                #[track_caller]
                fn forward(&self, input: &'a Tensor) -> Tensor {
                    <$ty>::forward(self, input)
                }
            }
        )*
    };
}

forward_by_inherent!(
    Linear,
    Conv1d,
    Conv2d,
    BatchNorm1d,
    BatchNorm2d,
    LayerNorm,
    Dropout,
    Embedding,
    ConvTranspose1d,
    ConvTranspose2d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    RMSNorm,
    Dropout2d,
    AlphaDropout,
);

impl<'a, L: Layer + ?Sized> Forward<&'a Tensor> for Box<L> {
    type Output = Tensor;
    #[track_caller]
    fn forward(&self, input: &'a Tensor) -> Tensor {
        (**self).forward(input)
    }
}
