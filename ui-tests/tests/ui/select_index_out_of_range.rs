use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 4, 16]) -> [N, 16] {
        select(dim = 1, index = 4),
    }
}

fn main() {}
