use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 1, 3, 3]) -> [N, 1, 1, 1] {
        max_pool2d(4),
    }
}

fn main() {}
