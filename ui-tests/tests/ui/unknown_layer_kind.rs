use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 784]) -> [N, 10] {
        fc1: Linaer(784 -> 10),
    }
}

fn main() {}
