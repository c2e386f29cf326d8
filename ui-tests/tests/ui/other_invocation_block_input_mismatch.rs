use ferrograd::prelude::*;

mod blocks {
    use ferrograd::prelude::*;

    network! {
        pub struct ResBlock<const C: usize>(x: [N, C]) -> [N, C] {
            fc1: Linear(C -> C),
            relu,
            + x,
        }
    }
}

use blocks::ResBlock;

network! {
    pub struct Tower(x: [B, 32]) -> [B, 64] {
        block: ResBlock<64>,
    }
}

fn main() {}
