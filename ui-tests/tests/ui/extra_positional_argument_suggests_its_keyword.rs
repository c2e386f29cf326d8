use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 32, 32]) -> [N, 8, 16, 16] {
        conv: Conv2d(3 -> 8, 3, 2, padding = 1),
    }
}

fn main() {}
