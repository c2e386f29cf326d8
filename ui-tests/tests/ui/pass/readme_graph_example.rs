//! The graph-form example of the book (`docs/src/dsl.md`), kept compiling.
use ferrograd::prelude::*;

network! {
    pub struct BasicBlock<const C: usize>(x: [N, C, H, W]) -> [N, C, H, W] {
        let y = x
            -> conv1: Conv2d(C -> C, kernel = 3, padding = 1, bias = false)
            -> bn1: BatchNorm2d(C)
            -> relu
            -> conv2: Conv2d(C -> C, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(C);
        relu(y + x)
    }

    pub struct DownBlock<const CIN: usize, const COUT: usize>(x: [N, CIN, H, W])
        -> [N, COUT, (H + 1) / 2, (W + 1) / 2] {
        let y = x
            -> conv1: Conv2d(CIN -> COUT, kernel = 3, stride = 2, padding = 1, bias = false)
            -> bn1: BatchNorm2d(COUT) -> relu
            -> conv2: Conv2d(COUT -> COUT, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(COUT);
        let short = x -> downsample: (Conv2d(CIN -> COUT, kernel = 1, stride = 2, bias = false), BatchNorm2d(COUT));
        relu(y + short)
    }

    pub struct Stage(x: [N, 64, H, W]) -> [N, 128, (H + 1) / 2, (W + 1) / 2] {
        x -> first: DownBlock<64, 128> -> rest: [BasicBlock<128>; 2]
    }
}

fn main() {
    let x = Tensor::randn(&[2, 64, 9, 8], DType::F32, &Device::Cpu);
    assert_eq!(Stage::new(&Device::Cpu).forward(&x).shape(), &[2, 128, 5, 4]);
}
