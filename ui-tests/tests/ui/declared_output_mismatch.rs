use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 10] {
        fc1: Linear(784 -> 128),
        relu,
        fc2: Linear(128 -> 12),
    }
}

fn main() {}
