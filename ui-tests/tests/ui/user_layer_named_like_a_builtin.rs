use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(new = [nx -> nf], input = [N, T, nx], output = [N, T, nf], parameters = nx * nf)]
pub struct Conv1D {
    #[param]
    weight: Tensor,
}

network! {
    pub struct Net(x: [N, T, 8]) -> [N, T, 32] {
        c_fc: Conv1D(8 -> 32),
    }
}

fn main() {}
