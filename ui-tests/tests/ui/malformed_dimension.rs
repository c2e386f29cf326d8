use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 7.5]) -> [N, 10] {
        fc: Linear(784 -> 10),
    }
}

fn main() {}
