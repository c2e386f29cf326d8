use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = [N, 4], parameters = 36)]
pub struct Head {
    fc: ferrograd::nn::Linear,
}

impl Head {
    pub fn new(device: &Device) -> Self {
        Head { fc: ferrograd::nn::Linear::new(8, 4, device) }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

network! {
    pub struct Net(x: [N, 16]) -> [N, 4] {
        head: Head,
    }
}

fn main() {}
