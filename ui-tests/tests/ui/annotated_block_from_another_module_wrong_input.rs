// `down: Down => [..]` where `Down` is a network of another module: checked through its
// declared shapes by constant evaluation, the error on the layer's token.
mod blocks {
    use ferrograd::prelude::*;
    network! {
        pub struct Down(x: [N, 32, 16, 16]) -> [N, 64, 8, 8] {
            conv: Conv2d(32 -> 64, kernel = 3, stride = 2, padding = 1),
            relu,
        }
    }
}

use blocks::Down;
use ferrograd::prelude::*;

network! {
    pub struct Net(x: [B, 3, 32, 32]) -> [B, 64, 8, 8] {
        stem: Conv2d(3 -> 32, kernel = 3, padding = 1),
        down: Down => [B, 64, 8, 8],
    }
}

fn main() {}
