use ferrograd::prelude::*;

network! {
    pub struct Block[cin -> cout, stride = 1](x: [N, cin, H, W])
        -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
        conv: Conv2d(cin -> cout, kernel = 3, stride = stride, padding = 1),
    }

    pub struct Net(x: [N, 64, 8, 8]) -> [N, 64, 8, 8] {
        block: Block(64),
    }
}

fn main() {}
