use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
pub struct Head {
    w: Tensor,
    fc: ferrograd::nn::Linear,
}

fn main() {}
