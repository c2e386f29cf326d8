use ferrograd::prelude::*;

network! {
    pub struct Net(a: [N, 4, 8], b: [N, 8, 2], c: [N, 2]) -> [N, 4, 2] {
        (a, b, c) -> matmul
    }
}

fn main() {}
