use ferrograd::prelude::*;

network! {
    pub struct Net(a: [N, 4, 8], b: [N, 6, 2]) -> [N, 4, 2] {
        matmul(a, b)
            -> relu
    }
}

fn main() {}
