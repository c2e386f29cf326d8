// Number constructor parameters (`p: f64`, with or without a default): dropout
// probabilities and norm epsilons chosen by the caller's configuration, as torchvision's
// ViT block and Hugging Face's configs choose them; given by name where a network uses
// another (`Block(16, p = 0.25)`, or passing its own on: `p = p`).
use ferrograd::nn::Module;
use ferrograd::prelude::*;

network! {
    pub struct Block[dim, p: f64, eps: f64 = 1e-6](x: [N, T, dim]) -> [N, T, dim] {
        let y = x
            -> norm: LayerNorm(dim, eps = eps)
            -> attn: MultiheadAttention(dim, 2, batch_first = true, dropout = p)
            -> drop: Dropout(p);
        x + y
    }

    pub struct Net[p: f64](x: [N, T, 16]) -> [N, T, 16] {
        x -> first: Block(16, p = 0.25) -> second: Block(16, p = p, eps = 1e-5)
    }
}

fn main() {
    let block = Block::new(&Device::Cpu, 8, 0.3, 1e-12);
    assert_eq!((block.p, block.eps, block.drop.p, block.norm.eps), (0.3, 1e-12, 0.3, 1e-12));
    let net = Net::new(&Device::Cpu, 0.5);
    assert_eq!((net.first.drop.p, net.first.norm.eps), (0.25, 1e-6));
    assert_eq!((net.second.drop.p, net.second.norm.eps), (0.5, 1e-5));
    assert_eq!(Net::NUM_PARAMETERS, net.parameters().iter().map(|t| t.numel()).sum::<usize>());
    let x = Tensor::randn(&[2, 3, 16], DType::F32, &Device::Cpu);
    let mut net = net;
    net.eval();
    assert_eq!(net.forward(&x).shape(), &[2, 3, 16]);
}
