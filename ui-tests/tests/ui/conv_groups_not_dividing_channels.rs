use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 6, 8, 8]) -> [N, 8, 8, 8] {
        conv: Conv2d(6 -> 8, kernel = 3, padding = 1, groups = 4),
    }
}

fn main() {}
