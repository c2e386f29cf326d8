use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 16, kernel = 5),
        relu,
        max_pool2d(2),
        flatten,
        fc1: Linear(2305 -> 10),
    }
}

fn main() {}
