use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8, 4] {
        fc: Linear(8 -> 8),
        relu,
        emb: Embedding(100 -> 4),
    }
}

fn main() {}
