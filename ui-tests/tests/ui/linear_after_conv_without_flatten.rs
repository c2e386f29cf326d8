use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5),
        fc1: Linear(3456 -> 10),
    }
}

fn main() {}
