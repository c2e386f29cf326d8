use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 64]) -> [N, 64] {
        fc: Linear(64 -> 64),
        + skip,
    }
}

fn main() {}
