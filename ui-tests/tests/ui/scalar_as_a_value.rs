use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        let y = relu(2.0);
        y
    }
}

fn main() {}
