use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 16, 5, 5]) -> [N, 10] {
        reshape([B, 400]),
        fc: Linear(400 -> 10),
    }
}

fn main() {}
