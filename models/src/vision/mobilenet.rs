//! MobileNetV2 (`torchvision.models.mobilenet_v2`): inverted residuals with depthwise
//! convolutions, torchvision's keys (`features.1.conv.0.0.weight`, `classifier.1.weight`).

use ferrograd::nn::functional as F;
use ferrograd::nn::{
    BatchNorm2d, Conv2d, ConvOptions, Dropout, Forward, Linear, Module, ReLU6, Sequential,
};
use ferrograd::{Device, Tensor};

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

/// `Conv2dNormActivation` with ReLU6: a bias-free convolution, batch norm, ReLU6
/// (keys `0.weight`, `1.weight`).
fn conv_bn_relu6(
    inp: usize,
    out: usize,
    kernel: usize,
    stride: usize,
    groups: usize,
    device: &Device,
) -> Sequential {
    let options = ConvOptions::default()
        .stride(stride)
        .padding((kernel - 1) / 2)
        .groups(groups)
        .bias(false);
    Sequential::new()
        .append(Conv2d::new(inp, out, kernel, options, device))
        .append(BatchNorm2d::new(out, device))
        .append(ReLU6)
}

/// `torchvision.models.mobilenetv2.InvertedResidual`: 1×1 expansion (unless the ratio
/// is 1), 3×3 depthwise, 1×1 linear projection, and the identity shortcut when stride
/// and width allow it.
#[derive(Module)]
pub struct InvertedResidual {
    /// The block's layers.
    pub conv: Sequential,
    #[module(skip)]
    use_res_connect: bool,
}

impl InvertedResidual {
    /// A block from `inp` to `oup` channels, expanding by `expand_ratio`.
    pub fn new(
        inp: usize,
        oup: usize,
        stride: usize,
        expand_ratio: usize,
        device: &Device,
    ) -> Self {
        let hidden = inp * expand_ratio;
        let mut conv = Sequential::new();
        if expand_ratio != 1 {
            conv.push(conv_bn_relu6(inp, hidden, 1, 1, 1, device));
        }
        conv.push(conv_bn_relu6(hidden, hidden, 3, stride, hidden, device));
        let project = ConvOptions::default().bias(false);
        conv.push(Conv2d::new(hidden, oup, 1, project, device));
        conv.push(BatchNorm2d::new(oup, device));
        InvertedResidual {
            conv,
            use_res_connect: stride == 1 && inp == oup,
        }
    }
}

impl<'a> Forward<&'a Tensor> for InvertedResidual {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        let y = self.conv.forward(x);
        if self.use_res_connect { x + &y } else { y }
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
        let mut features =
            Sequential::new().append(conv_bn_relu6(3, input_channel, 3, 2, 1, device));
        for [t, c, n, s] in SETTING {
            let output_channel = make_divisible(c as f64 * width_mult, 8);
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                features.push(InvertedResidual::new(
                    input_channel,
                    output_channel,
                    stride,
                    t,
                    device,
                ));
                input_channel = output_channel;
            }
        }
        features.push(conv_bn_relu6(input_channel, last_channel, 1, 1, 1, device));
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
