use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 4] {
        let (a, b, c) = x -> chunk(2, dim = 1);
        a
    }
}

fn main() {}
