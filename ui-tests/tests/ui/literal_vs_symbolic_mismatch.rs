use ferrograd::prelude::*;

network! {
    pub struct Net<const H: usize>(x: [N, 784]) -> [N, 10] {
        fc1: Linear(784 -> H),
        fc2: Linear(128 -> 10),
    }
}

fn main() {}
