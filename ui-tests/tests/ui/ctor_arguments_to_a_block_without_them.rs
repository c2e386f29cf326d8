use ferrograd::prelude::*;

network! {
    pub struct Block<const C: usize>(x: [N, C]) -> [N, C] {
        fc: Linear(C -> C),
    }

    pub struct Net(x: [N, 64]) -> [N, 64] {
        block: Block<64>(64),
    }
}

fn main() {}
