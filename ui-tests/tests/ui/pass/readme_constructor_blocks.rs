//! The book's constructor-argument example (`docs/src/dsl.md`), as written there.
use ferrograd::prelude::*;

mod blocks {
    use ferrograd::prelude::*;
    network! {
        pub struct Basic[cin -> cout, stride = 1](x: [N, cin, H, W])
            -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
            let y = x
                -> conv1: Conv2d(cin -> cout, kernel = 3, stride = stride, padding = 1, bias = false)
                -> bn1: BatchNorm2d(cout) -> relu
                -> conv2: Conv2d(cout -> cout, kernel = 3, padding = 1, bias = false)
                -> bn2: BatchNorm2d(cout);
            let short = x -> down: (Conv2d(cin -> cout, kernel = 1, stride = stride, bias = false), BatchNorm2d(cout));
            relu(y + short)
        }
    }
}

use blocks::Basic;

network! {
    pub struct Stage(x: [N, 64, H, W]) -> [N, 128, (H + 1) / 2, (W + 1) / 2] {
        first: Basic(64 -> 128, stride = 2),   // checked: 64 channels in, (H - 1) / 2 + 1 out
        second: Basic(128 -> 128),
    }
}

fn main() {
    let s = Stage::new(&Device::Cpu);
    let _ = s.forward(&Tensor::zeros(&[1, 64, 8, 8], DType::F32, &Device::Cpu));
}
