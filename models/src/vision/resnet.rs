//! ResNet (`torchvision.models.resnet18/34/50`): basic and bottleneck blocks, torchvision's
//! state-dict keys (`layer1.0.conv1.weight`, `layer2.0.downsample.0.weight`).
//!
//! The blocks are `network!`s, their shapes checked when this crate compiles, with
//! torchvision's names as their fields; a block with a projection shortcut is its own
//! network (`BasicDownBlock`, `BottleneckDown`). The stages' depth comes from the
//! configuration at run time, so [`ResNet`] stacks the blocks by hand.

use ferrograd::nn::functional::{self as F, Pool2dArgs};
use ferrograd::nn::{BatchNorm2d, Conv2d, ConvOptions, Forward, Linear, Module, Sequential};
use ferrograd::{Device, Tensor, network};

network! {
    /// `torchvision.models.resnet.BasicBlock` that keeps its width and size (no
    /// `downsample`): two 3×3 convolutions and the identity shortcut.
    pub struct BasicBlock[planes](x: [N, planes, H, W]) -> [N, planes, H, W] {
        let y = x
            -> conv1: Conv2d(planes -> planes, kernel = 3, padding = 1, bias = false)
            -> bn1: BatchNorm2d(planes)
            -> relu
            -> conv2: Conv2d(planes -> planes, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(planes);
        relu(y + x)
    }

    /// `BasicBlock` that changes width or stride: the first 3×3 carries the stride, and
    /// the shortcut is a projection (`downsample.0` a 1×1 convolution, `downsample.1` a
    /// batch norm).
    pub struct BasicDownBlock[inplanes -> planes, stride = 2](x: [N, inplanes, H, W])
        -> [N, planes, (H - 1) / stride + 1, (W - 1) / stride + 1]
    {
        let y = x
            -> conv1: Conv2d(inplanes -> planes, kernel = 3, stride = stride, padding = 1, bias = false)
            -> bn1: BatchNorm2d(planes)
            -> relu
            -> conv2: Conv2d(planes -> planes, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(planes);
        let short = x -> downsample: (
            Conv2d(inplanes -> planes, kernel = 1, stride = stride, bias = false),
            BatchNorm2d(planes)
        );
        relu(y + short)
    }

    /// `torchvision.models.resnet.Bottleneck` (ResNet v1.5) that keeps its width and
    /// size: 1×1 down to `planes`, 3×3, 1×1 back up to `4 * planes`, identity shortcut.
    pub struct Bottleneck[planes](x: [N, 4 * planes, H, W]) -> [N, 4 * planes, H, W] {
        let y = x
            -> conv1: Conv2d(4 * planes -> planes, kernel = 1, bias = false)
            -> bn1: BatchNorm2d(planes)
            -> relu
            -> conv2: Conv2d(planes -> planes, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(planes)
            -> relu
            -> conv3: Conv2d(planes -> 4 * planes, kernel = 1, bias = false)
            -> bn3: BatchNorm2d(4 * planes);
        relu(y + x)
    }

    /// `Bottleneck` that changes width or stride: the stride on the 3×3 (v1.5) and a
    /// projection shortcut.
    pub struct BottleneckDown[inplanes -> planes, stride = 1](x: [N, inplanes, H, W])
        -> [N, 4 * planes, (H - 1) / stride + 1, (W - 1) / stride + 1]
    {
        let y = x
            -> conv1: Conv2d(inplanes -> planes, kernel = 1, bias = false)
            -> bn1: BatchNorm2d(planes)
            -> relu
            -> conv2: Conv2d(planes -> planes, kernel = 3, stride = stride, padding = 1, bias = false)
            -> bn2: BatchNorm2d(planes)
            -> relu
            -> conv3: Conv2d(planes -> 4 * planes, kernel = 1, bias = false)
            -> bn3: BatchNorm2d(4 * planes);
        let short = x -> downsample: (
            Conv2d(inplanes -> 4 * planes, kernel = 1, stride = stride, bias = false),
            BatchNorm2d(4 * planes)
        );
        relu(y + short)
    }
}

impl BasicBlock {
    /// Output width of a block of `planes` (`BasicBlock.expansion`).
    pub const EXPANSION: usize = 1;
}

impl Bottleneck {
    /// Output width of a block of `planes` (`Bottleneck.expansion`).
    pub const EXPANSION: usize = 4;
}

/// Which block a [`ResNet`] stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// [`BasicBlock`] (ResNet-18 and -34).
    Basic,
    /// [`Bottleneck`] (ResNet-50, -101, -152).
    Bottleneck,
}

/// The shape of a [`ResNet`]: torchvision's `ResNet(block, layers, num_classes)`, with
/// `width` the stem's channels (64 in every torchvision model; smaller for tests).
///
/// ```
/// use ferrograd_models::vision::resnet::ResNetConfig;
/// let c = ResNetConfig::resnet50().num_classes(10);
/// assert_eq!((c.layers, c.num_classes, c.width), ([3, 4, 6, 3], 10, 64));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    /// The block.
    pub block: Block,
    /// Blocks in each of the four stages.
    pub layers: [usize; 4],
    /// Channels of the stem and of the first stage's `planes` (64).
    pub width: usize,
    /// Outputs of `fc`.
    pub num_classes: usize,
}

impl ResNetConfig {
    /// `resnet18`: basic blocks `[2, 2, 2, 2]`, 1000 classes.
    pub fn resnet18() -> Self {
        Self::of(Block::Basic, [2, 2, 2, 2])
    }
    /// `resnet34`: basic blocks `[3, 4, 6, 3]`, 1000 classes.
    pub fn resnet34() -> Self {
        Self::of(Block::Basic, [3, 4, 6, 3])
    }
    /// `resnet50`: bottlenecks `[3, 4, 6, 3]`, 1000 classes.
    pub fn resnet50() -> Self {
        Self::of(Block::Bottleneck, [3, 4, 6, 3])
    }
    /// `resnet101`: bottlenecks `[3, 4, 23, 3]`, 1000 classes.
    pub fn resnet101() -> Self {
        Self::of(Block::Bottleneck, [3, 4, 23, 3])
    }
    fn of(block: Block, layers: [usize; 4]) -> Self {
        ResNetConfig {
            block,
            layers,
            width: 64,
            num_classes: 1000,
        }
    }
    /// With `n` outputs.
    pub fn num_classes(mut self, n: usize) -> Self {
        self.num_classes = n;
        self
    }
    /// With a stem of `width` channels (and every stage scaled alike).
    pub fn width(mut self, width: usize) -> Self {
        self.width = width;
        self
    }
    /// Channels into `fc`.
    pub fn features(&self) -> usize {
        let expansion = match self.block {
            Block::Basic => BasicBlock::EXPANSION,
            Block::Bottleneck => Bottleneck::EXPANSION,
        };
        8 * self.width * expansion
    }
}

/// `torchvision.models.ResNet`: a 7×7 stem, max pooling, four stages, global average
/// pooling and `fc`. Keys and parameter counts are torchvision's (`resnet18`: 11,689,512).
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::nn::{Forward, Module};
/// use ferrograd_models::vision::resnet::{ResNet, ResNetConfig};
/// let mut model = ResNet::new(&ResNetConfig::resnet18().width(8).num_classes(5), &Device::Cpu);
/// model.eval();
/// let logits = model.forward(&Tensor::randn(&[2, 3, 32, 32], DType::F32, &Device::Cpu));
/// assert_eq!(logits.shape(), &[2, 5]);
/// assert!(model.state_dict().contains_key("layer2.0.downsample.0.weight"));
/// ```
#[derive(Module)]
pub struct ResNet {
    /// The 7×7 stride-2 stem.
    pub conv1: Conv2d,
    /// After the stem.
    pub bn1: BatchNorm2d,
    /// Stage 1 (stride 1).
    pub layer1: Sequential,
    /// Stage 2 (stride 2).
    pub layer2: Sequential,
    /// Stage 3 (stride 2).
    pub layer3: Sequential,
    /// Stage 4 (stride 2).
    pub layer4: Sequential,
    /// The classifier.
    pub fc: Linear,
}

impl ResNet {
    /// A randomly initialised network of `config` (torchvision's initialisation scheme
    /// is not reproduced; load weights or train).
    pub fn new(config: &ResNetConfig, device: &Device) -> Self {
        let w = config.width;
        let mut inplanes = w;
        let mut stage = |planes: usize, blocks: usize, stride: usize| {
            let mut seq = Sequential::new();
            for i in 0..blocks {
                let s = if i == 0 { stride } else { 1 };
                match config.block {
                    Block::Basic => {
                        if s != 1 || inplanes != planes {
                            seq.push(BasicDownBlock::new(device, inplanes, planes, s));
                        } else {
                            seq.push(BasicBlock::new(device, planes));
                        }
                        inplanes = planes * BasicBlock::EXPANSION;
                    }
                    Block::Bottleneck => {
                        if s != 1 || inplanes != planes * Bottleneck::EXPANSION {
                            seq.push(BottleneckDown::new(device, inplanes, planes, s));
                        } else {
                            seq.push(Bottleneck::new(device, planes));
                        }
                        inplanes = planes * Bottleneck::EXPANSION;
                    }
                }
            }
            seq
        };
        let layer1 = stage(w, config.layers[0], 1);
        let layer2 = stage(2 * w, config.layers[1], 2);
        let layer3 = stage(4 * w, config.layers[2], 2);
        let layer4 = stage(8 * w, config.layers[3], 2);
        let stem = ConvOptions::default().stride(2).padding(3).bias(false);
        ResNet {
            conv1: Conv2d::new(3, w, 7, stem, device),
            bn1: BatchNorm2d::new(w, device),
            layer1,
            layer2,
            layer3,
            layer4,
            fc: Linear::new(config.features(), config.num_classes, device),
        }
    }

    /// The pooled features `[N, 8 * width * expansion]` fed to `fc` (for a new head).
    pub fn features(&self, x: &Tensor) -> Tensor {
        let x = self.bn1.forward_relu(&self.conv1.forward(x));
        let x = F::max_pool2d_with(&x, &Pool2dArgs::new(3).stride(2).padding(1));
        let x = self.layer1.forward(&x);
        let x = self.layer2.forward(&x);
        let x = self.layer3.forward(&x);
        let x = self.layer4.forward(&x);
        F::adaptive_avg_pool2d(&x, [1, 1]).flatten(1, -1)
    }
}

impl<'a> Forward<&'a Tensor> for ResNet {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        self.fc.forward(&self.features(x))
    }
}

/// `torchvision.models.resnet18(num_classes=num_classes)`.
pub fn resnet18(num_classes: usize, device: &Device) -> ResNet {
    ResNet::new(&ResNetConfig::resnet18().num_classes(num_classes), device)
}

/// `torchvision.models.resnet34(num_classes=num_classes)`.
pub fn resnet34(num_classes: usize, device: &Device) -> ResNet {
    ResNet::new(&ResNetConfig::resnet34().num_classes(num_classes), device)
}

/// `torchvision.models.resnet50(num_classes=num_classes)`.
pub fn resnet50(num_classes: usize, device: &Device) -> ResNet {
    ResNet::new(&ResNetConfig::resnet50().num_classes(num_classes), device)
}
