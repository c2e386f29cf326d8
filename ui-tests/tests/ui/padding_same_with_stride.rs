use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, 8, 8]) -> [N, 8, 4, 4] {
        conv: Conv2d(3 -> 8, kernel = 3, stride = 2, padding = "same"),
    }
}

fn main() {}
