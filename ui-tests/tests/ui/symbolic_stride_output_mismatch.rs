use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 3, H, W]) -> [N, 8, H / 2, W / 2] {
        conv: Conv2d(3 -> 8, kernel = 3, stride = 2, padding = 1),
    }
}

fn main() {}
