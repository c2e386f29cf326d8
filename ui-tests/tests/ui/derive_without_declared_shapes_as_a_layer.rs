use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
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
    pub struct Net(x: [N, 8]) -> [N, 4] {
        head: Head,
    }
}

fn main() {}
