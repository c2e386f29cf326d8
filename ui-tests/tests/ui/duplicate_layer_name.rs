use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 10] {
        fc: Linear(784 -> 64),
        relu,
        fc: Linear(64 -> 10),
    }
}

fn main() {}
