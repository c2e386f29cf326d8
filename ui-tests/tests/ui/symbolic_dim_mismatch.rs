use ferrograd::prelude::*;

network! {
    pub struct Net<const H: usize, const W: usize>(x: [N, 784]) -> [N, 10] {
        fc1: Linear(784 -> H),
        relu,
        fc2: Linear(W -> 10),
    }
}

fn main() {}
