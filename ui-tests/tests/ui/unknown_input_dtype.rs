use ferrograd::prelude::*;

network! {
    pub struct Net(ids: [N, T]: int64) -> [N, T] {
        x -> relu
    }
}

fn main() {}
