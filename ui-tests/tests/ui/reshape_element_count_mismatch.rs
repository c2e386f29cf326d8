use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 400]) -> [N, 16, 5, 6] {
        reshape([N, 16, 5, 6]),
    }
}

fn main() {}
