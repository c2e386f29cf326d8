use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8, 4, 4]) -> [N, 24, 2, 2] {
        let skip,
        conv: Conv2d(8 -> 16, kernel = 3, stride = 2, padding = 1),
        cat(skip, dim = 1),
    }
}

fn main() {}
