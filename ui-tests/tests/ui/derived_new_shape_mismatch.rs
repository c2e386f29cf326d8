use ferrograd::prelude::*;

#[derive(ferrograd::nn::Module)]
#[module(new = [nx -> nf], input = [N, T, nx], output = [N, T, nf], parameters = nx * nf)]
pub struct Conv1D {
    #[param]
    weight: Tensor,
}

impl Conv1D {
    pub fn new(nx: usize, nf: usize, device: &Device) -> Self {
        Conv1D { weight: Tensor::zeros(&[nx, nf], DType::F32, device) }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.weight)
    }
}

network! {
    pub struct Net(x: [N, T, 8]) -> [N, T, 32] {
        c_fc: self::Conv1D(16 -> 32),
    }
}

fn main() {}
