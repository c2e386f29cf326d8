use ferrograd::prelude::*;

network! {
    pub struct Block[p: f64, dim](x: [N, dim]) -> [N, dim] {
        x -> fc: Linear(dim -> dim) -> drop: Dropout(p)
    }
}

fn main() {}
