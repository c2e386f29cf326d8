// The same layer written with its output: the same message.
use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(input = [N, D], output = [N, D], parameters = 72)]
pub struct GatedUnit {
    fc: ferrograd::nn::Linear,
}

impl GatedUnit {
    pub fn new(dim: usize, device: &Device) -> Self {
        GatedUnit { fc: ferrograd::nn::Linear::new(dim, dim, device) }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        gate: GatedUnit => [N, 8],
    }
}

fn main() {}
