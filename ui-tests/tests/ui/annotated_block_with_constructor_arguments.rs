use ferrograd::prelude::*;
mod blocks {
    use ferrograd::prelude::*;
    network! {
        pub struct DownBlock[cin -> cout, stride = 1](x: [N, cin, H, W])
            -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
            conv: Conv2d(cin -> cout, kernel = 3, stride = stride, padding = 1),
        }
    }
}
use blocks::DownBlock;
network! {
    pub struct Net(x: [N, 16, 32, 32]) -> [N, 32, 16, 16] {
        down: DownBlock(16 -> 32, stride = 2) => [N, 32, 16, 16],
    }
}
network! {
    pub struct Wrong(x: [N, 16, 32, 32]) -> [N, 32, 16, 16] {
        down: DownBlock(16 -> 32, stride = 2) => [N, 32, 8, 8],
    }
}
fn main() {}
