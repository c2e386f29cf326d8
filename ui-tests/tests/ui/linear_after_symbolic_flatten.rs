use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, C, 28]) -> [N, 10] {
        flatten,
        fc: Linear(280 -> 10),
    }
}

fn main() {}
