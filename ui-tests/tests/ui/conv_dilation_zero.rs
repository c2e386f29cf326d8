use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 8, 8]) -> [N, 8, 8, 8] {
        conv: Conv2d(3 -> 8, kernel = 3, padding = 1, dilation = 0),
    }
}

fn main() {}
