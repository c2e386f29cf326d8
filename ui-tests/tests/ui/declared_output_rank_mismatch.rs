use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 1, 10] {
        fc1: Linear(784 -> 10),
    }
}

fn main() {}
