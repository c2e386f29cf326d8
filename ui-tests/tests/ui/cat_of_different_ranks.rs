use ferrograd::prelude::*;

network! {
    pub struct Net(a: [N, 8], b: [N, 2, 4]) -> [N, 8] {
        cat(dim = 1)(a, b)
            -> relu
    }
}

fn main() {}
