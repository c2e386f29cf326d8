use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 12, 8, 8]) -> [N, 12, 8, 8] {
        gn: GroupNorm(5, 12),
    }
}

fn main() {}
