use ferrograd::prelude::*;

network! {
    pub struct Mlp[dim, act: Activation](x: [N, dim]) -> [N, dim] {
        x -> fc1: Linear(dim -> 4 * dim) -> a: act -> fc2: Linear(4 * dim -> dim)
    }
}

fn main() {}
