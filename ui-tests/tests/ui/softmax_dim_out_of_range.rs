use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        softmax(dim = 2),
    }
}

fn main() {}
