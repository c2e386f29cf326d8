use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 10] {
        fc1: Linear(780 -> 128),
        relu,
        fc2: Linear(100 -> 10),
    }
}

fn main() {}
