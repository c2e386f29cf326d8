// The pieces a Hugging Face model needs, as BERT's layer uses them: field names that are
// checkpoint keys (`self`, `LayerNorm`: Rust fields `self_`, `layer_norm`), an optional
// mask (`Option<[..]>`) handed on to a `#[derive(Module)]` layer of two inputs whose
// shapes use its constructor's sizes, and the post-norm ending the macro runs fused at
// inference.
use ferrograd::nn::Module;
use ferrograd::prelude::*;

/// Attention of one head over `[N, T, dim]`, with an optional boolean mask.
#[derive(Module)]
#[module(
    new = [dim],
    input = (x: [N, T, dim], mask: Option<[N, 1, 1, T]: bool>),
    output = [N, T, dim],
    parameters = 3 * (dim * dim + dim)
)]
pub struct Attend {
    query: ferrograd::nn::Linear,
    key: ferrograd::nn::Linear,
    value: ferrograd::nn::Linear,
}

impl Attend {
    pub fn new(dim: usize, device: &Device) -> Self {
        let l = || ferrograd::nn::Linear::new(dim, dim, device);
        Attend { query: l(), key: l(), value: l() }
    }
    pub fn forward(&self, x: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let (q, k, v) = (self.query.forward(x), self.key.forward(x), self.value.forward(x));
        let (q, k, v) = (q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1));
        F::scaled_dot_product_attention(&q, &k, &v, mask, 0.0, false, None).squeeze(1)
    }
}

network! {
    pub struct Block[dim](x: [N, T, dim], mask: Option<[N, 1, 1, T]: bool>) -> [N, T, dim] {
        let a = self: Attend(dim)(x, mask);
        let h = a -> dense: Linear(dim -> dim) -> dropout: Dropout(0.1);
        (h + x) -> LayerNorm: LayerNorm(dim)
    }
}

fn main() {
    let mut block = Block::new(&Device::Cpu, 8);
    let keys: Vec<String> = block.state_dict().keys().cloned().collect();
    for key in ["self.query.weight", "self.value.bias", "dense.weight", "LayerNorm.weight", "LayerNorm.bias"] {
        assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
    }
    assert_eq!(block.num_parameters(), Block::num_parameters_for(8));
    assert_eq!(Attend::num_parameters_for(8), block.self_.num_parameters());
    block.layer_norm.eps = 1e-5;
    block.eval();
    let x = Tensor::randn(&[2, 5, 8], DType::F32, &Device::Cpu);
    let all = Tensor::ones(&[2, 1, 1, 5], DType::Bool, &Device::Cpu);
    let (y, z) = no_grad(|| (block.forward(&x, None), block.forward(&x, Some(&all))));
    assert_eq!(y.shape(), &[2, 5, 8]);
    // Every key allowed is no mask at all.
    assert!(y.sub(&z).abs().max_all().item::<f32>() < 1e-5);
}
