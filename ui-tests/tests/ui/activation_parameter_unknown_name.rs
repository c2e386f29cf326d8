use ferrograd::prelude::*;

network! {
    pub struct Mlp[dim, act: Activation](x: [N, dim]) -> [N, dim] {
        x -> fc1: Linear(dim -> 4 * dim) -> act -> fc2: Linear(4 * dim -> dim)
    }

    pub struct Net(x: [N, 16]) -> [N, 16] {
        x -> mlp: Mlp(16, act = "gelu_exact")
    }
}

fn main() {}
