//! MobileNetV2 (`torchvision.models.mobilenet_v2`): inverted residuals with depthwise
//! convolutions, torchvision's keys (`features.1.conv.0.0.weight`, `classifier.1.weight`).
//!
//! The three shapes of inverted residual are `network!`s, their shapes checked when this
//! crate compiles, with torchvision's nested `conv` sequence as their field; the width
//! multiplier and the stage table are run-time configuration, so [`MobileNetV2`] stacks
//! the blocks by hand.

use ferrograd::nn::functional as F;
use ferrograd::nn::{
    BatchNorm2d, Conv2d, ConvOptions, Dropout, Forward, Linear, Module, ReLU6, Sequential,
};
use ferrograd::{Device, Tensor, network};

/// torchvision's `_make_divisible`: the nearest multiple of `divisor`, never more than
/// 10% below `v`.
fn make_divisible(v: f64, divisor: usize) -> usize {
    let d = divisor as f64;
    let mut new_v = divisor.max(((v + d / 2.0) as usize) / divisor * divisor);
    if (new_v as f64) < 0.9 * v {
        new_v += divisor;
    }
    new_v
}

/// `Conv2dNormActivation` with ReLU6 (the stem and the last 1×1): a bias-free
/// convolution, batch norm, ReLU6 (keys `0.weight`, `1.weight`).
fn conv_bn_relu6(
    inp: usize,
    out: usize,
    kernel: usize,
    stride: usize,
    device: &Device,
) -> Sequential {
    let options = ConvOptions::default()
        .stride(stride)
        .padding((kernel - 1) / 2)
        .bias(false);
    Sequential::new()
        .append(Conv2d::new(inp, out, kernel, options, device))
        .append(BatchNorm2d::new(out, device))
        .append(ReLU6)
}

network! {
    /// `torchvision.models.mobilenetv2.InvertedResidual` with the identity shortcut
    /// (stride 1, as many channels out as in): 1×1 expansion to `hidden`, 3×3
    /// depthwise, 1×1 linear projection (keys `conv.0.0.weight` … `conv.3.weight`).
    pub struct InvertedResidual[channels, hidden](x: [N, channels, H, W]) -> [N, channels, H, W] {
        let y = x -> conv: (
            (Conv2d(channels -> hidden, kernel = 1, bias = false), BatchNorm2d(hidden), relu6),
            (Conv2d(hidden -> hidden, kernel = 3, padding = 1, groups = hidden, bias = false),
                BatchNorm2d(hidden), relu6),
            Conv2d(hidden -> channels, kernel = 1, bias = false),
            BatchNorm2d(channels)
        );
        y + x
    }

    /// `InvertedResidual` without a shortcut (a stride or a change of width): the
    /// stride on the depthwise 3×3.
    pub struct InvertedResidualDown[inp -> oup, hidden, stride = 2](x: [N, inp, H, W])
        -> [N, oup, (H - 1) / stride + 1, (W - 1) / stride + 1]
    {
        x -> conv: (
            (Conv2d(inp -> hidden, kernel = 1, bias = false), BatchNorm2d(hidden), relu6),
            (Conv2d(hidden -> hidden, kernel = 3, stride = stride, padding = 1, groups = hidden, bias = false),
                BatchNorm2d(hidden), relu6),
            Conv2d(hidden -> oup, kernel = 1, bias = false),
            BatchNorm2d(oup)
        )
    }

    /// `InvertedResidual` of expansion ratio 1 (MobileNetV2's first block) with the
    /// identity shortcut: no 1×1 expansion, so the depthwise 3×3 is `conv.0`.
    pub struct InvertedResidualThin[channels](x: [N, channels, H, W]) -> [N, channels, H, W] {
        let y = x -> conv: (
            (Conv2d(channels -> channels, kernel = 3, padding = 1, groups = channels, bias = false),
                BatchNorm2d(channels), relu6),
            Conv2d(channels -> channels, kernel = 1, bias = false),
            BatchNorm2d(channels)
        );
        y + x
    }

    /// `InvertedResidual` of expansion ratio 1 without a shortcut.
    pub struct InvertedResidualThinDown[inp -> oup, stride = 1](x: [N, inp, H, W])
        -> [N, oup, (H - 1) / stride + 1, (W - 1) / stride + 1]
    {
        x -> conv: (
            (Conv2d(inp -> inp, kernel = 3, stride = stride, padding = 1, groups = inp, bias = false),
                BatchNorm2d(inp), relu6),
            Conv2d(inp -> oup, kernel = 1, bias = false),
            BatchNorm2d(oup)
        )
    }
}

/// Appends torchvision's `InvertedResidual(inp, oup, stride, expand_ratio)` to `seq` as
/// the network of its shape: with the identity shortcut where it applies (stride 1, `inp
/// == oup`: [`InvertedResidual`], [`InvertedResidualThin`] for an expansion ratio of 1),
/// without it otherwise ([`InvertedResidualDown`], [`InvertedResidualThinDown`]).
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::nn::Module;
/// use ferrograd_models::vision::mobilenet::inverted_residual;
/// let mut seq = ferrograd::nn::Sequential::new();
/// inverted_residual(&mut seq, 16, 24, 2, 6, &Device::Cpu);
/// assert!(seq.state_dict().contains_key("0.conv.1.0.weight"));
/// ```
pub fn inverted_residual(
    seq: &mut Sequential,
    inp: usize,
    oup: usize,
    stride: usize,
    expand_ratio: usize,
    device: &Device,
) {
    let hidden = inp * expand_ratio;
    match (expand_ratio, stride == 1 && inp == oup) {
        (1, true) => seq.push(InvertedResidualThin::new(device, inp)),
        (1, false) => seq.push(InvertedResidualThinDown::new(device, inp, oup, stride)),
        (_, true) => seq.push(InvertedResidual::new(device, inp, hidden)),
        (_, false) => seq.push(InvertedResidualDown::new(device, inp, oup, hidden, stride)),
    }
}

/// `torchvision.models.MobileNetV2`: keys and parameter count are torchvision's
/// (`mobilenet_v2()`: 3,504,872).
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::nn::{Forward, Module};
/// use ferrograd_models::vision::mobilenet::MobileNetV2;
/// let mut model = MobileNetV2::new(10, 0.25, &Device::Cpu);
/// model.eval();
/// let logits = model.forward(&Tensor::randn(&[1, 3, 32, 32], DType::F32, &Device::Cpu));
/// assert_eq!(logits.shape(), &[1, 10]);
/// ```
#[derive(Module)]
pub struct MobileNetV2 {
    /// The convolutional trunk.
    pub features: Sequential,
    /// Dropout (p = 0.2) and the linear classifier.
    pub classifier: Sequential,
}

impl MobileNetV2 {
    /// `mobilenet_v2(width_mult=width_mult, num_classes=num_classes)`.
    pub fn new(num_classes: usize, width_mult: f64, device: &Device) -> Self {
        // t (expansion), c (channels), n (repeats), s (stride of the first)
        const SETTING: [[usize; 4]; 7] = [
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ];
        let mut input_channel = make_divisible(32.0 * width_mult, 8);
        let last_channel = make_divisible(1280.0 * width_mult.max(1.0), 8);
        let mut features = Sequential::new().append(conv_bn_relu6(3, input_channel, 3, 2, device));
        for [t, c, n, s] in SETTING {
            let output_channel = make_divisible(c as f64 * width_mult, 8);
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                inverted_residual(
                    &mut features,
                    input_channel,
                    output_channel,
                    stride,
                    t,
                    device,
                );
                input_channel = output_channel;
            }
        }
        features.push(conv_bn_relu6(input_channel, last_channel, 1, 1, device));
        MobileNetV2 {
            features,
            classifier: Sequential::new()
                .append(Dropout::new(0.2))
                .append(Linear::new(last_channel, num_classes, device)),
        }
    }

    /// The pooled features `[N, last_channel]` fed to the classifier.
    pub fn features(&self, x: &Tensor) -> Tensor {
        let x = self.features.forward(x);
        F::adaptive_avg_pool2d(&x, [1, 1]).flatten(1, -1)
    }
}

impl<'a> Forward<&'a Tensor> for MobileNetV2 {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        self.classifier.forward(&self.features(x))
    }
}

/// `torchvision.models.mobilenet_v2(num_classes=num_classes)`.
pub fn mobilenet_v2(num_classes: usize, device: &Device) -> MobileNetV2 {
    MobileNetV2::new(num_classes, 1.0, device)
}
