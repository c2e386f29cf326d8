use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 10]) -> [N, 3, 3] {
        reshape([N, 3, -1]),
    }
}

fn main() {}
