use ferrograd::prelude::*;

network! {
    pub struct ResBlock(x: [N, 64]) -> [N, 64] {
        fc1: Linear(64 -> 64),
        relu,
        + x,
    }
}

network! {
    pub struct Tower(x: [B, 64]) -> [B, 32] {
        block: ResBlock => [B, 32],
    }
}

fn main() {}
