use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 8, 8]) -> [N, 3, 5, 5] {
        max_pool2d(2, padding = 2),
    }
}

fn main() {}
