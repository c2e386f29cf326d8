use ferrograd::prelude::*;

mod blocks {
    use ferrograd::prelude::*;

    network! {
        pub struct Block[cin -> cout, stride = 1](x: [N, cin, H, W])
            -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
            conv: Conv2d(cin -> cout, kernel = 3, stride = stride, padding = 1),
        }
    }
}

use blocks::Block;

network! {
    pub struct Net(x: [N, 64, 32, 32]) -> [N, 128, 32, 32] {
        block: Block(64 -> 128, stride = 2),
    }
}

fn main() {}
