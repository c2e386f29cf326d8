// A layer written with its output, through a type alias of a hand-written module that
// declares no shapes.
use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
pub struct Projection {
    fc: ferrograd::nn::Linear,
}

impl Projection {
    pub fn new(device: &Device) -> Self {
        Projection { fc: ferrograd::nn::Linear::new(8, 4, device) }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

type Head = Projection;

network! {
    pub struct Net(x: [N, 8]) -> [N, 4] {
        head: Head => [N, 4],
    }
}

fn main() {}
