use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = [N, 8], parameters = 72)]
pub struct Splitter {
    fc: ferrograd::nn::Linear,
}

impl Splitter {
    pub fn new(device: &Device) -> Self {
        Splitter { fc: ferrograd::nn::Linear::new(8, 8, device) }
    }
    pub fn forward(&self, x: &Tensor) -> (Tensor, Tensor) {
        (self.fc.forward(x), x.clone())
    }
}

network! {
    pub struct Net(x: [N, 8]) -> [N, 4] {
        split: Splitter,
        fc: Linear(8 -> 4),
    }
}

fn main() {}
