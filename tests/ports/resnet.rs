//! torchvision's ResNet with basic blocks (`resnet18` is `[2, 2, 2, 2]`).

use ferrograd::nn::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, ConvOptions, Forward, Linear, MaxPool2d, Module,
    Sequential,
};
use ferrograd::prelude::*;

/// `conv3x3` / `conv1x1` of torchvision: no bias.
fn conv(inp: usize, out: usize, kernel: usize, stride: usize, device: &Device) -> Conv2d {
    let options = ConvOptions::default()
        .stride(stride)
        .padding(kernel / 2)
        .bias(false);
    Conv2d::new(inp, out, kernel, options, device)
}

/// `torchvision.models.resnet.BasicBlock`.
#[derive(Module)]
pub struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    downsample: Option<Sequential>,
}

impl BasicBlock {
    fn new(inplanes: usize, planes: usize, stride: usize, device: &Device) -> Self {
        let downsample = (stride != 1 || inplanes != planes).then(|| {
            Sequential::new()
                .append(conv(inplanes, planes, 1, stride, device))
                .append(BatchNorm2d::new(planes, device))
        });
        BasicBlock {
            conv1: conv(inplanes, planes, 3, stride, device),
            bn1: BatchNorm2d::new(planes, device),
            conv2: conv(planes, planes, 3, 1, device),
            bn2: BatchNorm2d::new(planes, device),
            downsample,
        }
    }
}

impl<'a> Forward<&'a Tensor> for BasicBlock {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        let out = self.bn1.forward(&self.conv1.forward(x)).relu();
        let out = self.bn2.forward(&self.conv2.forward(&out));
        let identity = match &self.downsample {
            Some(d) => d.forward(x),
            None => x.clone(),
        };
        (out + identity).relu()
    }
}

/// `torchvision.models.ResNet` with basic blocks; `width` is 64 for the real networks.
#[derive(Module)]
pub struct ResNet {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    maxpool: MaxPool2d,
    layer1: Sequential,
    layer2: Sequential,
    layer3: Sequential,
    layer4: Sequential,
    avgpool: AdaptiveAvgPool2d,
    fc: Linear,
}

impl ResNet {
    pub fn new(layers: [usize; 4], width: usize, num_classes: usize, device: &Device) -> Self {
        let mut inplanes = width;
        let mut make_layer = |planes: usize, blocks: usize, stride: usize| {
            let mut seq = Sequential::new();
            for i in 0..blocks {
                seq.push(BasicBlock::new(
                    inplanes,
                    planes,
                    if i == 0 { stride } else { 1 },
                    device,
                ));
                inplanes = planes;
            }
            seq
        };
        let layer1 = make_layer(width, layers[0], 1);
        let layer2 = make_layer(2 * width, layers[1], 2);
        let layer3 = make_layer(4 * width, layers[2], 2);
        let layer4 = make_layer(8 * width, layers[3], 2);
        ResNet {
            conv1: Conv2d::new(
                3,
                width,
                7,
                ConvOptions::default().stride(2).padding(3).bias(false),
                device,
            ),
            bn1: BatchNorm2d::new(width, device),
            maxpool: MaxPool2d {
                args: F::Pool2dArgs::new(3).stride(2).padding(1),
            },
            layer1,
            layer2,
            layer3,
            layer4,
            avgpool: AdaptiveAvgPool2d {
                output_size: [1, 1],
            },
            fc: Linear::new(8 * width, num_classes, device),
        }
    }
}

/// `torchvision.models.resnet18(num_classes)`.
pub fn resnet18(num_classes: usize, device: &Device) -> ResNet {
    ResNet::new([2, 2, 2, 2], 64, num_classes, device)
}

impl<'a> Forward<&'a Tensor> for ResNet {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        let x = self.bn1.forward(&self.conv1.forward(x)).relu();
        let x = self.maxpool.forward(&x);
        let x = self.layer4.forward(
            &self
                .layer3
                .forward(&self.layer2.forward(&self.layer1.forward(&x))),
        );
        self.fc.forward(&self.avgpool.forward(&x).flatten(1, -1))
    }
}
