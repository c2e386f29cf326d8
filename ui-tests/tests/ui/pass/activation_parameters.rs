// An activation chosen by the caller's configuration (a Hugging Face `hidden_act`):
// `act: Activation` is a constructor parameter, applied as `-> act`, given to another
// network by name (`act = "gelu_tanh"`, or its own: `act = act`); the graph export names it.
use ferrograd::nn::{Activation, Module};
use ferrograd::prelude::*;

network! {
    pub struct Mlp[dim, act: Activation, p: f64 = 0.0](x: [N, T, dim]) -> [N, T, dim] {
        x -> c_fc: Linear(dim -> 4 * dim) -> act -> c_proj: Linear(4 * dim -> dim) -> dropout: Dropout(p)
    }

    pub struct Net[act: Activation](x: [N, T, 8]) -> [N, T, 8] {
        x -> first: Mlp(8, act = "gelu_tanh") -> second: Mlp(8, act = act)
    }
}

fn main() {
    let x = Tensor::randn(&[2, 3, 8], DType::F32, &Device::Cpu);
    for name in ["gelu", "gelu_new", "relu", "silu"] {
        let act = Activation::from_name(name).unwrap();
        let mlp = Mlp::new(&Device::Cpu, 8, act, 0.0);
        let want = mlp.c_proj.forward(&act.apply(&mlp.c_fc.forward(&x)));
        assert_eq!(mlp.forward(&x).to_vec::<f32>(), want.to_vec::<f32>(), "{name}");
    }
    let mut net = Net::new(&Device::Cpu, Activation::Silu);
    net.eval();
    assert_eq!((net.first.act, net.second.act), (Activation::GeluTanh, Activation::Silu));
    assert_eq!(net.forward(&x).shape(), &[2, 3, 8]);
    assert!(net.state_dict().contains_key("second.c_fc.weight"));
}
