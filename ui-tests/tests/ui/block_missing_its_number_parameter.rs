use ferrograd::prelude::*;

network! {
    pub struct Block[dim, p: f64](x: [N, dim]) -> [N, dim] {
        x -> fc: Linear(dim -> dim) -> drop: Dropout(p)
    }

    pub struct Net(x: [N, 16]) -> [N, 16] {
        x -> one: Block(16, p = 0.1) -> two: Block(16)
    }
}

fn main() {}
