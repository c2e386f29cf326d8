use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 64]) -> [N, 32] {
        let skip,
        fc: Linear(64 -> 32),
        + skip,
    }
}

fn main() {}
