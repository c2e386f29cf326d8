use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, T, 8]) -> [N, 8, T] {
        transpose(1, 3),
    }
}

fn main() {}
