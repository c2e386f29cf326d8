use ferrograd::prelude::*;

network! {
    pub struct Net(ids: [N, 16]: i64) -> [N, 4] {
        fc: Linear(16 -> 4),
    }
}

fn main() {}
