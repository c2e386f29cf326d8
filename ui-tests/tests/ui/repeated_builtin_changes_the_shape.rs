use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 16] {
        fcs: [Linear(8 -> 16); 2],
    }
}

fn main() {}
