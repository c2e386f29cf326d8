use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = [N, 8])]
pub struct Scale {
    #[param]
    gain: Tensor,
}

fn main() {}
