use ferrograd::prelude::*;

network! {
    pub struct Net<const K: usize>(x: [N, 3, 8, 8]) -> [N, 8, 6, 6] {
        conv: Conv2d(3 -> 8, kernel = K),
    }
}

fn main() {}
