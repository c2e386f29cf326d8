use ferrograd::prelude::*;

network! {
    pub struct Net(ids: [N, T]: i64) -> [N, T, 8] {
        wte: Embedding(100 -> 8)(ids) + wpe: Embedding(64 -> 8)(arange(L))
    }
}

fn main() {}
