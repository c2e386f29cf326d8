use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 32, 32]) -> [N, 6, 28, 28] {
        conv1: Conv2d(1 -> 6, kernel = 5),
    }
}

fn main() {}
