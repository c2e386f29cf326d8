use ferrograd::prelude::*;

network! {
    pub struct Block(x: [N, 8, H, W]) -> [N, 8, H, W] {
        x -> conv: (Conv2d(8 -> 8, kernel = 1), (), relu6)
    }
}

fn main() {}
