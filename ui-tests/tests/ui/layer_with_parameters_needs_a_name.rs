use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 10] {
        Linear(784 -> 10),
    }
}

fn main() {}
