use ferrograd::prelude::*;

network! {
    pub struct Block[cin -> cout, stride = 1](x: [N, cin, H, W])
        -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
        conv: Conv2d(cin -> cout, kernel = 3, stride = stride),
    }
}

fn main() {}
