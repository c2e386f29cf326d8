use ferrograd::prelude::*;

network! {
    pub struct Block[dim, p: f32](x: [N, dim]) -> [N, dim] {
        x -> fc: Linear(dim -> dim) -> drop: Dropout(p)
    }
}

fn main() {}
