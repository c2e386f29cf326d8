// torchvision's MobileNetV2 block as a `network!`: a sequence inside a sequence (keys
// `conv.1.0.weight`, as `nn.Sequential` in `nn.Sequential`), a depthwise convolution whose
// `groups` is a constructor parameter, and `relu6`.
use ferrograd::nn::Module;
use ferrograd::prelude::*;

network! {
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
}

fn main() {
    let block = InvertedResidual::new(&Device::Cpu, 8, 48);
    let keys = block.state_dict();
    for key in ["conv.0.0.weight", "conv.1.0.weight", "conv.1.1.running_mean", "conv.2.weight", "conv.3.bias"] {
        assert!(keys.contains_key(key), "{key} missing");
    }
    // The depthwise convolution has one 3×3 filter per channel.
    assert_eq!(keys["conv.1.0.weight"].shape(), &[48, 1, 3, 3]);
    let x = Tensor::randn(&[2, 8, 5, 5], DType::F32, &Device::Cpu);
    assert_eq!(block.forward(&x).shape(), &[2, 8, 5, 5]);
}
