use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 4] {
        let y = fc: Linear(8 -> 4);
        y
    }
}

fn main() {}
