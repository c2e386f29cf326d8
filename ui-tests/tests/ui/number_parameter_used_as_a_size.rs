use ferrograd::prelude::*;

network! {
    pub struct Block[dim, p: f64](x: [N, dim]) -> [N, dim] {
        x -> fc: Linear(dim -> dim) -> drop: Dropout(p) -> out: Linear(p -> dim)
    }
}

fn main() {}
