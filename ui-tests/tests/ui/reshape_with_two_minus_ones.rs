use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 16]) -> [N, 4, 4] {
        reshape([N, -1, -1]),
    }
}

fn main() {}
