//! Forms PyTorch users write: `Dropout(1.0)` (as `nn.Dropout(1.0)`), a body of one
//! expression without `let`, a `#[derive(Module)]` layer whose `new` takes sizes before
//! the device, one whose `forward` returns a tuple (taken apart with `let (a, b)`), and
//! attention sized by const parameters.
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
        self.fc.forward(x).sigmoid().mul(x)
    }
}

#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = ([N, 8], [N, 8]), parameters = 72)]
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
    pub struct Halves(x: [N, 8]) -> [N, 4] {
        let (a, b) = split: Splitter(x);
        a + b -> fc: Linear(8 -> 4)
    }

    pub struct Gated(x: [N, 8]) -> [N, 8] {
        gate: GatedUnit(8),
        drop: Dropout(1.0),
    }

    pub struct Fuse(a: [N, 8], b: [N, 8]) -> [N, 8] {
        a + b
    }

    pub struct Embeddings(ids: [N, T]: i64, positions: [N, T]: i64) -> [N, T, 16] {
        tokens: Embedding(100 -> 16)(ids) + wpe: Embedding(64 -> 16)(positions)
    }

    pub struct Block<const D: usize, const HEADS: usize>(x: [N, T, D]) -> [N, T, D] {
        let a = attn: MultiheadAttention(D, HEADS, batch_first = true)(x);
        a + x -> enc: TransformerEncoderLayer(D, HEADS, dim_feedforward = 4 * D, batch_first = true)
    }
}

fn main() {
    let device = Device::Cpu;
    let x = Tensor::ones(&[2, 8], DType::F32, &device);
    let mut gated = Gated::new(&device);
    assert_eq!(gated.gate.fc.weight.shape(), &[8, 8]);
    // Dropout(1.0) zeroes everything in training, and is the identity in eval.
    gated.train();
    assert_eq!(gated.forward(&x).to_vec::<f32>(), vec![0.0; 16]);
    gated.eval();
    let expected = gated.gate.forward(&x);
    assert_eq!(gated.forward(&x).to_vec::<f32>(), expected.to_vec::<f32>());
    let y = Fuse::new(&device).forward(&x, &x);
    assert_eq!(y.to_vec::<f32>(), vec![2.0; 16]);
    let ids = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]);
    let positions = Tensor::from_vec(vec![0i64, 1, 2, 0, 1, 2], &[2, 3]);
    let e = Embeddings::new(&device);
    let want = e.tokens.forward(&ids).add(&e.wpe.forward(&positions));
    assert_eq!(e.forward(&ids, &positions).to_vec::<f32>(), want.to_vec::<f32>());
    let halves = Halves::new(&device);
    let (a, b) = halves.split.forward(&x);
    let want = halves.fc.forward(&a.add(&b));
    assert_eq!(halves.forward(&x).to_vec::<f32>(), want.to_vec::<f32>());
    let block = Block::<16, 4>::new(&device);
    let x = Tensor::ones(&[2, 5, 16], DType::F32, &device);
    assert_eq!(block.forward(&x).shape(), &[2, 5, 16]);
    assert_eq!(block.attn.num_heads, 4);
    assert_eq!(block.num_parameters(), Block::<16, 4>::NUM_PARAMETERS);
}
