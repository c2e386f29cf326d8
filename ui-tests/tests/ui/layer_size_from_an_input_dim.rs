use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, D]) -> [N, 4] {
        fc: Linear(D -> 4),
    }
}

fn main() {}
