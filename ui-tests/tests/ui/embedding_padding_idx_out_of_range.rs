use ferrograd::prelude::*;

network! {
    pub struct Net(ids: [N, T]: i64) -> [N, T, 8] {
        emb: Embedding(10 -> 8, padding_idx = 10),
    }
}

fn main() {}
