use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 10]) -> [N, 3] {
        let (a, b, c) = x -> chunk(3, dim = 1);
        a
    }
}

fn main() {}
