//! Convolution layers: [`Conv1d`], [`Conv2d`], [`ConvTranspose1d`], [`ConvTranspose2d`],
//! with PyTorch's options ([`ConvOptions`]: stride, padding or `"same"`, dilation, groups,
//! bias, padding mode) and default initialisation.

use super::Module;
use super::functional::{self as F, ConvArgs, ConvTransposeArgs, PadMode};
use super::init::default_uniform;
use crate::{Device, Tensor};

/// How a convolution pads its input (`padding=` in PyTorch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding<const D: usize> {
    /// This many elements on both sides of each spatial dim.
    Explicit([usize; D]),
    /// The output has the input's size (stride 1 only); odd total padding puts the extra
    /// element on the right, as PyTorch (`padding='same'`).
    Same,
}

/// What fills a convolution's padding (`padding_mode=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PaddingMode {
    /// Zeros (`'zeros'`, the default).
    #[default]
    Zeros,
    /// The mirror image of the border (`'reflect'`).
    Reflect,
    /// Copies of the edge (`'replicate'`).
    Replicate,
    /// Wrap-around (`'circular'`).
    Circular,
}

/// The options of a `D`-dimensional convolution layer, with PyTorch's defaults (stride 1,
/// no padding, dilation 1, one group, a bias, zero padding).
///
/// ```
/// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
/// let o = ConvOptions::<2>::default().stride(2).padding(3).bias(false);
/// assert_eq!((o.stride, o.padding, o.bias), ([2, 2], Padding::Explicit([3, 3]), false));
/// let same = ConvOptions::<1>::default().padding_same().padding_mode(PaddingMode::Reflect);
/// assert_eq!(same.padding, Padding::Same);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOptions<const D: usize> {
    /// Step of the window per spatial dim.
    pub stride: [usize; D],
    /// Padding per spatial dim, or `"same"`.
    pub padding: Padding<D>,
    /// Spacing of kernel elements per spatial dim.
    pub dilation: [usize; D],
    /// Number of channel groups.
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// What fills the padding.
    pub padding_mode: PaddingMode,
}

impl<const D: usize> Default for ConvOptions<D> {
    fn default() -> Self {
        ConvOptions {
            stride: [1; D],
            padding: Padding::Explicit([0; D]),
            dilation: [1; D],
            groups: 1,
            bias: true,
            padding_mode: PaddingMode::Zeros,
        }
    }
}

impl<const D: usize> From<ConvArgs<D>> for ConvOptions<D> {
    fn from(a: ConvArgs<D>) -> Self {
        ConvOptions {
            stride: a.stride,
            padding: Padding::Explicit(a.padding),
            dilation: a.dilation,
            groups: a.groups,
            ..Default::default()
        }
    }
}

impl<const D: usize> ConvOptions<D> {
    /// The same stride on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert_eq!(ConvOptions::<2>::default().stride(2).stride, [2, 2]);
    /// ```
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; D];
        self
    }
    /// The same padding on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert_eq!(ConvOptions::<1>::default().padding(1).padding, Padding::Explicit([1]));
    /// ```
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = Padding::Explicit([padding; D]);
        self
    }
    /// `padding='same'`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert_eq!(ConvOptions::<2>::default().padding_same().padding, Padding::Same);
    /// ```
    pub fn padding_same(mut self) -> Self {
        self.padding = Padding::Same;
        self
    }
    /// The same dilation on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert_eq!(ConvOptions::<2>::default().dilation(2).dilation, [2, 2]);
    /// ```
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = [dilation; D];
        self
    }
    /// The number of groups.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert_eq!(ConvOptions::<2>::default().groups(4).groups, 4);
    /// ```
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
    /// With or without a bias.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert!(!ConvOptions::<2>::default().bias(false).bias);
    /// ```
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }
    /// What fills the padding.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{ConvOptions, Padding, PaddingMode};
    /// assert_eq!(ConvOptions::<2>::default().padding_mode(PaddingMode::Circular).padding_mode, PaddingMode::Circular);
    /// ```
    pub fn padding_mode(mut self, mode: PaddingMode) -> Self {
        self.padding_mode = mode;
        self
    }
}

/// A kernel size: one number for every spatial dim (`kernel_size=3`) or one per dim
/// (`kernel_size=(3, 1)`).
///
/// ```
/// use ferrograd_runtime::nn::KernelSize;
/// assert_eq!(KernelSize::<2>::dims(3), [3, 3]);
/// assert_eq!(KernelSize::<2>::dims([3, 1]), [3, 1]);
/// ```
pub trait KernelSize<const D: usize> {
    /// The size per spatial dim.
    fn dims(self) -> [usize; D];
}

impl<const D: usize> KernelSize<D> for [usize; D] {
    fn dims(self) -> [usize; D] {
        self
    }
}

impl<const D: usize> KernelSize<D> for usize {
    fn dims(self) -> [usize; D] {
        [self; D]
    }
}

/// Checks a layer's channel and option arguments as PyTorch's constructors do.
#[track_caller]
fn check_options<const D: usize>(
    layer: &str,
    in_channels: usize,
    out_channels: usize,
    kernel: &[usize; D],
    o: &ConvOptions<D>,
) {
    assert!(
        o.groups > 0
            && in_channels.is_multiple_of(o.groups)
            && out_channels.is_multiple_of(o.groups),
        "{layer}: in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({})",
        o.groups
    );
    assert!(
        kernel
            .iter()
            .chain(&o.stride)
            .chain(&o.dilation)
            .all(|&v| v > 0),
        "{layer}: kernel size {kernel:?}, stride {:?} and dilation {:?} must be positive",
        o.stride,
        o.dilation
    );
    if o.padding == Padding::Same {
        assert!(
            o.stride.iter().all(|&s| s == 1),
            "{layer}: padding='same' is not supported for strided convolutions (stride {:?})",
            o.stride
        );
    }
}

/// The (left, right) padding per spatial dim and the functional arguments: explicit zero
/// padding goes to the convolution itself, anything else is applied by [`F::pad_with`].
pub(crate) fn resolve<const D: usize>(
    kernel: &[usize],
    o: &ConvOptions<D>,
) -> ([(usize, usize); D], bool) {
    let mut pads = [(0, 0); D];
    for d in 0..D {
        pads[d] = match o.padding {
            Padding::Explicit(p) => (p[d], p[d]),
            Padding::Same => {
                let total = o.dilation[d] * (kernel[d] - 1);
                (total / 2, total - total / 2)
            }
        };
    }
    let symmetric_zeros = o.padding_mode == PaddingMode::Zeros && pads.iter().all(|(l, r)| l == r);
    (pads, symmetric_zeros)
}

/// Runs `conv(x, args)` with the layer's padding: inside the convolution when it is
/// symmetric zeros, else by an explicit pad first (PyTorch's `_conv_forward`).
#[track_caller]
fn padded_conv<const D: usize>(
    x: &Tensor,
    kernel: &[usize],
    o: &ConvOptions<D>,
    conv: impl FnOnce(&Tensor, ConvArgs<D>) -> Tensor,
) -> Tensor {
    let (pads, inside) = resolve(kernel, o);
    let mut args = ConvArgs {
        stride: o.stride,
        padding: [0; D],
        dilation: o.dilation,
        groups: o.groups,
    };
    if inside {
        args.padding = pads.map(|(left, _)| left);
        return conv(x, args);
    }
    let flat: Vec<usize> = pads.iter().rev().flat_map(|&(l, r)| [l, r]).collect();
    let mode = match o.padding_mode {
        PaddingMode::Zeros => PadMode::Constant(0.0),
        PaddingMode::Reflect => PadMode::Reflect,
        PaddingMode::Replicate => PadMode::Replicate,
        PaddingMode::Circular => PadMode::Circular,
    };
    conv(&F::pad_with(x, &flat, mode), args)
}

/// Weight `[out, in/groups, *kernel]` and bias `[out]` of a convolution, initialised like
/// PyTorch's (uniform in ±1/√fan_in, fan_in = in/groups · kernel size). Transposed
/// convolutions pass their weight's dims 0 and 1 swapped.
fn conv_params(
    shape_head: [usize; 2],
    fan_in_channels: usize,
    kernel: &[usize],
    bias: Option<usize>,
    device: &Device,
) -> (Tensor, Option<Tensor>) {
    let fan_in = fan_in_channels * kernel.iter().product::<usize>();
    let shape: Vec<usize> = shape_head.iter().chain(kernel).copied().collect();
    (
        default_uniform(&shape, fan_in, device),
        bias.map(|b| default_uniform(&[b], fan_in, device)),
    )
}

macro_rules! conv_layer {
    ($name:ident, $d:literal, $input:literal, $functional:path, $doc:literal) => {
        #[doc = $doc]
        #[derive(Module, Debug)]
        #[module(crate = crate)]
        pub struct $name {
            /// `[out, in/groups, *kernel]`.
            #[param]
            pub weight: Tensor,
            /// `[out]`, if the layer has a bias.
            #[param]
            pub bias: Option<Tensor>,
            /// Stride, padding, dilation, groups, padding mode.
            #[module(skip)]
            pub options: ConvOptions<$d>,
        }

        impl $name {
            /// A convolution initialised like PyTorch's; `options` may be a
            /// [`ConvOptions`] or the functional arguments (then with a bias).
            ///
            /// ```
            /// use ferrograd_runtime::prelude::*;
            /// use ferrograd_runtime::nn::{Conv1d, Conv2d, ConvOptions};
            /// let c = Conv2d::new(4, 8, 3, ConvOptions::default().groups(2), &Device::Cpu);
            /// assert_eq!(c.weight.shape(), &[8, 2, 3, 3]);
            /// let c = Conv1d::new(4, 8, 5, F::Conv1dArgs::default(), &Device::Cpu);
            /// assert_eq!(c.weight.shape(), &[8, 4, 5]);
            /// ```
            #[track_caller]
            pub fn new(
                in_channels: usize,
                out_channels: usize,
                kernel: impl KernelSize<$d>,
                options: impl Into<ConvOptions<$d>>,
                device: &Device,
            ) -> Self {
                let options = options.into();
                let kernel: [usize; $d] = kernel.dims();
                check_options(
                    stringify!($name),
                    in_channels,
                    out_channels,
                    &kernel,
                    &options,
                );
                let (weight, bias) = conv_params(
                    [out_channels, in_channels / options.groups],
                    in_channels / options.groups,
                    &kernel,
                    options.bias.then_some(out_channels),
                    device,
                );
                $name {
                    weight,
                    bias,
                    options,
                }
            }

            /// ```
            /// use ferrograd_runtime::prelude::*;
            /// use ferrograd_runtime::nn::{Conv2d, ConvOptions};
            /// let c = Conv2d::new(1, 2, [3, 1], ConvOptions::default().padding_same(), &Device::Cpu);
            /// assert_eq!(c.forward(&Tensor::zeros(&[1, 1, 5, 6], DType::F32, &Device::Cpu)).shape(), &[1, 2, 5, 6]);
            /// ```
            #[doc = concat!("Applies the convolution to `", $input, "`.")]
            #[track_caller]
            pub fn forward(&self, x: &Tensor) -> Tensor {
                let kernel = &self.weight.shape()[2..];
                padded_conv(x, kernel, &self.options, |x, args| {
                    $functional(x, &self.weight, self.bias.as_ref(), &args)
                })
            }
        }
    };
}

conv_layer!(
    Conv2d,
    2,
    "[N, C, H, W]",
    F::conv2d,
    "2-D convolution (`nn.Conv2d`): weight `[out, in/groups, kh, kw]`, bias `[out]`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{Conv2d, ConvOptions, Module};\nlet conv = Conv2d::new(1, 6, [5, 5], F::Conv2dArgs::default().padding(2), &Device::Cpu);\nlet y = conv.forward(&Tensor::zeros(&[2, 1, 28, 28], DType::F32, &Device::Cpu));\nassert_eq!(y.shape(), &[2, 6, 28, 28]);\nlet stem = Conv2d::new(3, 64, [7, 7], ConvOptions::default().stride(2).padding(3).bias(false), &Device::Cpu);\nassert_eq!(stem.state_dict().keys().collect::<Vec<_>>(), [\"weight\"]);\n```"
);
conv_layer!(
    Conv1d,
    1,
    "[N, C, L]",
    F::conv1d,
    "1-D convolution (`nn.Conv1d`): weight `[out, in/groups, k]`, bias `[out]`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{Conv1d, ConvOptions, PaddingMode};\nlet conv = Conv1d::new(3, 4, 3, F::Conv1dArgs::default().padding(1), &Device::Cpu);\nassert_eq!(conv.forward(&Tensor::zeros(&[2, 3, 10], DType::F32, &Device::Cpu)).shape(), &[2, 4, 10]);\nlet same = Conv1d::new(3, 4, 4, ConvOptions::default().padding_same().padding_mode(PaddingMode::Circular), &Device::Cpu);\nassert_eq!(same.forward(&Tensor::zeros(&[2, 3, 10], DType::F32, &Device::Cpu)).shape(), &[2, 4, 10]);\n```"
);

/// The options of a transposed convolution layer: the functional arguments and a bias.
///
/// ```
/// use ferrograd_runtime::nn::ConvTransposeOptions;
/// let o = ConvTransposeOptions::<2>::default().stride(2).output_padding(1).bias(false);
/// assert_eq!((o.args.stride, o.args.output_padding, o.bias), ([2, 2], [1, 1], false));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeOptions<const D: usize> {
    /// Stride, padding, output padding, dilation, groups.
    pub args: ConvTransposeArgs<D>,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl<const D: usize> Default for ConvTransposeOptions<D> {
    fn default() -> Self {
        ConvTransposeOptions {
            args: ConvTransposeArgs::default(),
            bias: true,
        }
    }
}

impl<const D: usize> From<ConvTransposeArgs<D>> for ConvTransposeOptions<D> {
    fn from(args: ConvTransposeArgs<D>) -> Self {
        ConvTransposeOptions { args, bias: true }
    }
}

impl<const D: usize> ConvTransposeOptions<D> {
    /// The same stride on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::ConvTransposeOptions;
    /// assert_eq!(ConvTransposeOptions::<2>::default().stride(2).args.stride, [2, 2]);
    /// ```
    pub fn stride(mut self, stride: usize) -> Self {
        self.args = self.args.stride(stride);
        self
    }
    /// The same padding on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::ConvTransposeOptions;
    /// assert_eq!(ConvTransposeOptions::<1>::default().padding(1).args.padding, [1]);
    /// ```
    pub fn padding(mut self, padding: usize) -> Self {
        self.args = self.args.padding(padding);
        self
    }
    /// The same output padding on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::ConvTransposeOptions;
    /// assert_eq!(ConvTransposeOptions::<2>::default().output_padding(1).args.output_padding, [1, 1]);
    /// ```
    pub fn output_padding(mut self, output_padding: usize) -> Self {
        self.args = self.args.output_padding(output_padding);
        self
    }
    /// The same dilation on every spatial dim.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::ConvTransposeOptions;
    /// assert_eq!(ConvTransposeOptions::<2>::default().dilation(3).args.dilation, [3, 3]);
    /// ```
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.args = self.args.dilation(dilation);
        self
    }
    /// The number of groups.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::ConvTransposeOptions;
    /// assert_eq!(ConvTransposeOptions::<2>::default().groups(2).args.groups, 2);
    /// ```
    pub fn groups(mut self, groups: usize) -> Self {
        self.args = self.args.groups(groups);
        self
    }
    /// With or without a bias.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::ConvTransposeOptions;
    /// assert!(!ConvTransposeOptions::<2>::default().bias(false).bias);
    /// ```
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }
}

macro_rules! conv_transpose_layer {
    ($name:ident, $d:literal, $input:literal, $functional:path, $doc:literal) => {
        #[doc = $doc]
        #[derive(Module, Debug)]
        #[module(crate = crate)]
        pub struct $name {
            /// `[in, out/groups, *kernel]`.
            #[param]
            pub weight: Tensor,
            /// `[out]`, if the layer has a bias.
            #[param]
            pub bias: Option<Tensor>,
            /// Stride, padding, output padding, dilation, groups.
            #[module(skip)]
            pub options: ConvTransposeOptions<$d>,
        }

        impl $name {
            /// A transposed convolution initialised like PyTorch's (fan_in computed from
            /// the weight's dim 1, `out/groups`, as PyTorch does).
            ///
            /// ```
            /// use ferrograd_runtime::prelude::*;
            /// use ferrograd_runtime::nn::{ConvTranspose2d, ConvTransposeOptions};
            /// let up = ConvTranspose2d::new(8, 4, 2, ConvTransposeOptions::default().stride(2), &Device::Cpu);
            /// assert_eq!(up.weight.shape(), &[8, 4, 2, 2]);
            /// ```
            #[track_caller]
            pub fn new(
                in_channels: usize,
                out_channels: usize,
                kernel: impl KernelSize<$d>,
                options: impl Into<ConvTransposeOptions<$d>>,
                device: &Device,
            ) -> Self {
                let options = options.into();
                let kernel: [usize; $d] = kernel.dims();
                let groups = options.args.groups;
                assert!(
                    groups > 0 && in_channels.is_multiple_of(groups) && out_channels.is_multiple_of(groups),
                    "{}: in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})",
                    stringify!($name)
                );
                let (weight, bias) = conv_params(
                    [in_channels, out_channels / groups],
                    out_channels / groups,
                    &kernel,
                    options.bias.then_some(out_channels),
                    device,
                );
                $name { weight, bias, options }
            }

            /// ```
            /// use ferrograd_runtime::prelude::*;
            /// use ferrograd_runtime::nn::{ConvTranspose2d, ConvTransposeOptions};
            /// let up = ConvTranspose2d::new(8, 4, 2, ConvTransposeOptions::default().stride(2), &Device::Cpu);
            /// assert_eq!(up.forward(&Tensor::zeros(&[1, 8, 3, 3], DType::F32, &Device::Cpu)).shape(), &[1, 4, 6, 6]);
            /// ```
            #[doc = concat!("Applies the transposed convolution to `", $input, "`.")]
            #[track_caller]
            pub fn forward(&self, x: &Tensor) -> Tensor {
                $functional(x, &self.weight, self.bias.as_ref(), &self.options.args)
            }
        }
    };
}

conv_transpose_layer!(
    ConvTranspose2d,
    2,
    "[N, C, H, W]",
    F::conv_transpose2d,
    "2-D transposed convolution (`nn.ConvTranspose2d`): weight `[in, out/groups, kh, kw]`, bias `[out]`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{ConvTranspose2d, ConvTransposeOptions};\nlet up = ConvTranspose2d::new(8, 4, [3, 3], ConvTransposeOptions::default().stride(2).padding(1).output_padding(1), &Device::Cpu);\nassert_eq!(up.forward(&Tensor::zeros(&[1, 8, 5, 5], DType::F32, &Device::Cpu)).shape(), &[1, 4, 10, 10]);\n```"
);
conv_transpose_layer!(
    ConvTranspose1d,
    1,
    "[N, C, L]",
    F::conv_transpose1d,
    "1-D transposed convolution (`nn.ConvTranspose1d`): weight `[in, out/groups, k]`, bias `[out]`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::ConvTranspose1d;\nlet up = ConvTranspose1d::new(4, 2, 4, F::ConvTranspose1dArgs::default().stride(2).padding(1), &Device::Cpu);\nassert_eq!(up.forward(&Tensor::zeros(&[3, 4, 7], DType::F32, &Device::Cpu)).shape(), &[3, 2, 14]);\n```"
);
