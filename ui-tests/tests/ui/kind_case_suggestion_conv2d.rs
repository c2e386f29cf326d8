use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 8, 8]) -> [N, 8, 6, 6] {
        conv: Conv2D(3 -> 8, kernel = 3),
    }
}

fn main() {}
