use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, C, L]) -> [N, L, C] {
        permute(0, 2, 2),
    }
}

fn main() {}
