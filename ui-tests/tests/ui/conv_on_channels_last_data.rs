use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 28, 28, 3]) -> [N, 8, 28, 28] {
        conv: Conv2d(3 -> 8, kernel = 3, padding = 1),
    }
}

fn main() {}
