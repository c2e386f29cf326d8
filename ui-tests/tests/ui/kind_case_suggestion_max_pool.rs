use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 8, 8]) -> [N, 3, 4, 4] {
        MaxPool2d(2),
    }
}

fn main() {}
