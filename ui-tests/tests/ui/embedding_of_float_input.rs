use ferrograd::prelude::*;

network! {
    pub struct Net(ids: [N, T]) -> [N, T, 8] {
        emb: Embedding(100 -> 8),
    }
}

fn main() {}
