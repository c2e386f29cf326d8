// A `bool` constructor parameter switches a layer's bias (Llama's `mlp_bias`), counted
// as the layers it builds; a layer type of the user's whose name is close to a built-in
// one (GPT-2's `Conv1D` beside `Conv1d`) is written with its path.
use ferrograd::nn::Module;
use ferrograd::prelude::*;

/// A linear layer stored `[in, out]`, as GPT-2's.
#[derive(Module)]
#[module(new = [nx -> nf], input = [N, T, nx], output = [N, T, nf], parameters = nx * nf + nf)]
pub struct Conv1D {
    #[param]
    weight: Tensor,
    #[param]
    bias: Tensor,
}

impl Conv1D {
    pub fn new(nx: usize, nf: usize, device: &Device) -> Self {
        Conv1D {
            weight: Tensor::randn(&[nx, nf], DType::F32, device).requires_grad(true),
            bias: Tensor::zeros(&[nf], DType::F32, device).requires_grad(true),
        }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.weight).add(&self.bias)
    }
}

network! {
    pub struct Mlp[hidden, inner, bias: bool = false](x: [N, T, hidden]) -> [N, T, hidden] {
        let gate = x -> gate_proj: Linear(hidden -> inner, bias = bias) -> silu;
        let up = x -> up_proj: self::Conv1D(hidden -> inner);
        (gate * up) -> down_proj: Linear(inner -> hidden, bias = bias)
    }

    pub struct Twice(x: [N, T, 8]) -> [N, T, 8] {
        first: Mlp(8, 16, bias = true),
        second: Mlp(8, 16),
    }
}

fn main() {
    let with = Mlp::new(&Device::Cpu, 8, 16, true);
    let without = Mlp::new(&Device::Cpu, 8, 16, false);
    assert_eq!(with.num_parameters(), Mlp::num_parameters_for(8, 16, true));
    assert_eq!(without.num_parameters(), Mlp::num_parameters_for(8, 16, false));
    assert_eq!(with.num_parameters() - without.num_parameters(), 16 + 8);
    assert!(with.state_dict().contains_key("gate_proj.bias"));
    assert!(!without.state_dict().contains_key("gate_proj.bias"));
    let twice = Twice::new(&Device::Cpu);
    assert_eq!(Twice::NUM_PARAMETERS, twice.num_parameters());
    assert!(Twice::summary().contains(&format!("Total trainable parameters: {}", twice.num_parameters())));
    let x = Tensor::randn(&[2, 3, 8], DType::F32, &Device::Cpu);
    assert_eq!(twice.forward(&x).shape(), &[2, 3, 8]);
}
