use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 10] {
        fc1: Linear(784 -> 128),
        ReLu,
        fc2: Linear(100 -> 10),
    }
}

fn main() {}
