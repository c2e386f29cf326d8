use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(new = [nx -> nf], input = [N, nx], output = [N, nf])]
pub struct Proj {
    #[param]
    weight: Tensor,
}

fn main() {}
