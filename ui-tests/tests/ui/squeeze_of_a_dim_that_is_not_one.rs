use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 4, 8]) -> [N, 8] {
        squeeze(1),
    }
}

fn main() {}
