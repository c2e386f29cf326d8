use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        fc: Linear(8 -> 8),
        act: ReLU,
    }
}

fn main() {}
