//! Sequence models, forward + backward (`bench/sequence_compare.py` runs the same in
//! PyTorch and prints the ratios): a pre-LN transformer encoder block (d 128, 4 heads,
//! seq 64, batch 16, MLP 512), an LSTM (2 layers, input 128, hidden 256, seq 100,
//! batch 32) and scaled-dot-product attention (batch 16, 4 heads, seq 256, d 32).

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::nn::{
    Module, Recurrent, RnnConfig, RnnMode, TransformerConfig, TransformerEncoderLayer,
};
use ferrograd::prelude::*;

fn zero_grads(m: &impl Module) {
    for p in m.parameters() {
        p.zero_grad();
    }
}

fn sequence(c: &mut Criterion) {
    let mut group = c.benchmark_group("sequence");
    group.sample_size(20);
    manual_seed(0);

    let cfg = TransformerConfig::new(128, 4)
        .dim_feedforward(512)
        .dropout(0.0)
        .batch_first(true)
        .norm_first(true);
    let block = TransformerEncoderLayer::new(cfg, &Device::Cpu);
    let x = Tensor::randn(&[16, 64, 128], DType::F32, &Device::Cpu).requires_grad(true);
    group.bench_function("transformer_block_fwd_bwd", |b| {
        b.iter(|| {
            zero_grads(&block);
            x.zero_grad();
            block.forward(&x).sum_all().backward();
        })
    });

    let lstm = Recurrent::new(
        RnnMode::Lstm,
        RnnConfig::new(128, 256).num_layers(2),
        &Device::Cpu,
    );
    let xs = Tensor::randn(&[100, 32, 128], DType::F32, &Device::Cpu).requires_grad(true);
    group.bench_function("lstm_fwd_bwd", |b| {
        b.iter(|| {
            zero_grads(&lstm);
            xs.zero_grad();
            lstm.forward(&xs, None).0.sum_all().backward();
        })
    });

    let q = Tensor::randn(&[16, 4, 256, 32], DType::F32, &Device::Cpu).requires_grad(true);
    group.bench_function("sdpa_causal_fwd_bwd", |b| {
        b.iter(|| {
            q.zero_grad();
            F::scaled_dot_product_attention(&q, &q, &q, None, 0.0, true, None)
                .sum_all()
                .backward();
        })
    });
    group.finish();
}

criterion_group!(benches, sequence);
criterion_main!(benches);
