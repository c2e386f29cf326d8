use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 16, 8, 8]) -> [N, 16, 8, 8] {
        bn: BatchNorm1d(16),
    }
}

fn main() {}
