use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8], mask: Option<[N, S]: bool>) -> [N, 8] {
        x -> fc: Linear(8 -> 8)
    }
}

fn main() {}
