use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, T, 64]) -> [N, T, 64] {
        attn: MultiHeadAttention(64, 4, batch_first = true),
    }
}

fn main() {}
