use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 1, 4, 4]) -> [N, 6, 1, 1] {
        conv1: Conv2d(1 -> 6, kernel = 5),
    }
}

fn main() {}
