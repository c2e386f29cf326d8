use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 1, 28, 28]) -> [N, 6, 14, 14] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2) => [N, 6, 24, 24],
        max_pool2d(2),
    }
}

fn main() {}
