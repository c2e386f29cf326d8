use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, K, K]) -> [N, 8, 1, 1] {
        conv: Conv2d(3 -> 8, kernel = K),
    }
}

fn main() {}
