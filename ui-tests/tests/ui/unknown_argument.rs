use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 1, 28, 28]) -> [N, 6, 24, 24] {
        conv1: Conv2d(1 -> 6, kernal = 5),
    }
}

fn main() {}
