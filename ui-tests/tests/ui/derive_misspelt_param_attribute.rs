use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
pub struct Head {
    #[parm]
    w: Tensor,
}

fn main() {}
