//! Whole training loops as a user writes them (`bench/training_compare.py` runs the same
//! loops in PyTorch and prints the ratios).
//!
//! `train_epoch`: the MNIST MLP 784-128-10 and LeNet-5 at batch 64, from the full MNIST
//! training set in `$FERROGRAD_DATA/mnist` or `../shared/data/mnist` (LeNet on its first
//! 10,000 images, to keep a sample short), two ways:
//! - `*_slices`: the epoch's shuffled copy is taken once (`index_select` by a random
//!   permutation) and each batch is a slice of it — PyTorch's fastest loop, the headline;
//! - the others go through the DataLoader (shuffled, batch 64).
//!
//! `train_step`: one step of a pre-LN transformer block (d 128, 4 heads, T 64, batch 16,
//! MLP 512) forward + backward, with attention written as matmuls and a softmax, with
//! [`F::scaled_dot_product_attention`], and as `nn::TransformerEncoderLayer`; and one step
//! of an LSTM / GRU character language model (embedding 128, hidden 256, T 64, batch 32,
//! 65 symbols, cross-entropy, AdamW).

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{
    Embedding, LayerNorm, Linear, Module, Recurrent, RnnConfig, RnnMode, TransformerConfig,
    TransformerEncoderLayer,
};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::path::PathBuf;

#[path = "common/models.rs"]
mod models;
use models::{LeNet, Mlp, epoch};

fn mnist() -> Option<(Tensor, Tensor)> {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"))
        .join("mnist");
    match MNIST::new(&root, true) {
        Ok(d) => Some(d.tensors()),
        Err(e) => {
            eprintln!("skipping the training benchmarks: {e}");
            None
        }
    }
}

/// One epoch with the batches cut from a shuffled copy of the data (no loader).
fn epoch_slices(
    x: &Tensor,
    y: &Tensor,
    opt: &mut dyn Optimizer,
    forward: &dyn Fn(&Tensor) -> Tensor,
) -> f32 {
    let n = x.shape()[0];
    let perm = Tensor::randperm(n, &Device::Cpu);
    let (xs, ys) = (x.index_select(0, &perm), y.index_select(0, &perm));
    let mut last = 0.0;
    for s in (0..n).step_by(64) {
        let len = 64.min(n - s);
        opt.zero_grad();
        let loss = F::cross_entropy(&forward(&xs.narrow(0, s, len)), &ys.narrow(0, s, len));
        loss.backward();
        opt.step();
        last = loss.item::<f32>();
    }
    last
}

fn training(c: &mut Criterion) {
    let Some((x, y)) = mnist() else { return };
    let mut group = c.benchmark_group("train_epoch");
    group.sample_size(10);

    manual_seed(0);
    let mlp = Mlp::new(&Device::Cpu);
    let mut sgd = Sgd::new(mlp.parameters(), SgdConfig::new(0.01));
    group.bench_function("mlp_60k_b64_sgd_slices", |b| {
        b.iter(|| epoch_slices(&x, &y, &mut sgd, &|x| mlp.forward(x)))
    });
    let mut opt = AdamW::named(mlp.named_parameters(), AdamConfig::default());
    group.bench_function("mlp_60k_b64_slices", |b| {
        b.iter(|| epoch_slices(&x, &y, &mut opt, &|x| mlp.forward(x)))
    });
    let mut loader = DataLoader::builder(TensorDataset::new((x.clone(), y.clone())))
        .batch_size(64)
        .shuffle(true)
        .seed(0)
        .build();
    group.bench_function("mlp_60k_b64", |b| {
        b.iter(|| epoch(&mut loader, &mut opt, &|x| mlp.forward(x)))
    });

    let lenet = LeNet::new(&Device::Cpu);
    let n = 10_000;
    let (x10, y10) = (x.narrow(0, 0, n), y.narrow(0, 0, n));
    let mut sgd = Sgd::new(lenet.parameters(), SgdConfig::new(0.01).momentum(0.9));
    group.bench_function("lenet_10k_b64_sgd_slices", |b| {
        b.iter(|| epoch_slices(&x10, &y10, &mut sgd, &|x| lenet.forward(x)))
    });
    let mut opt = AdamW::named(lenet.named_parameters(), AdamConfig::default());
    group.bench_function("lenet_10k_b64_slices", |b| {
        b.iter(|| epoch_slices(&x10, &y10, &mut opt, &|x| lenet.forward(x)))
    });
    let mut loader = DataLoader::builder(TensorDataset::new((x10.clone(), y10.clone())))
        .batch_size(64)
        .shuffle(true)
        .seed(0)
        .build();
    group.bench_function("lenet_10k_b64", |b| {
        b.iter(|| epoch(&mut loader, &mut opt, &|x| lenet.forward(x)))
    });
    group.bench_function("lenet_10k_b64_sgd", |b| {
        b.iter(|| epoch(&mut loader, &mut sgd, &|x| lenet.forward(x)))
    });
    group.finish();
}

/// The pre-LN encoder block with its attention spelled out (PyTorch's `Explicit` block in
/// `bench/training_compare.py`), or through the fused kernel.
#[derive(Module)]
struct Block {
    qkv: Linear,
    out: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
    l1: Linear,
    l2: Linear,
}

impl Block {
    fn new(d: usize, ff: usize) -> Self {
        let dev = Device::Cpu;
        Block {
            qkv: Linear::new(d, 3 * d, &dev),
            out: Linear::new(d, d, &dev),
            norm1: LayerNorm::new(&[d], &dev),
            norm2: LayerNorm::new(&[d], &dev),
            l1: Linear::new(d, ff, &dev),
            l2: Linear::new(ff, d, &dev),
        }
    }

    fn forward(&self, x: &Tensor, heads: usize, fused: bool) -> Tensor {
        let (n, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let qkv = self
            .qkv
            .forward(&self.norm1.forward(x))
            .reshape(&[n, t, 3, heads, d / heads])
            .permute(&[2, 0, 3, 1, 4]);
        let (q, k, v) = (qkv.select(0, 0), qkv.select(0, 1), qkv.select(0, 2));
        let a = if fused {
            F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None)
        } else {
            q.matmul(&k.transpose(-1, -2))
                .mul_scalar(1.0 / ((d / heads) as f64).sqrt())
                .softmax(-1)
                .matmul(&v)
        };
        let x = x.add(&self.out.forward(&a.transpose(1, 2).reshape(&[n, t, d])));
        let h = self
            .l2
            .forward(&self.l1.forward(&self.norm2.forward(&x)).relu());
        x.add(&h)
    }
}

/// A character language model: embedding, one recurrent layer, a linear head.
#[derive(Module)]
struct CharLm {
    embed: Embedding,
    rnn: Recurrent,
    head: Linear,
}

fn steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("train_step");
    group.sample_size(30);
    manual_seed(0);
    let x = Tensor::randn(&[16, 64, 128], DType::F32, &Device::Cpu).requires_grad(true);

    let block = Block::new(128, 512);
    for (name, fused) in [
        ("transformer_block_explicit", false),
        ("transformer_block_sdpa", true),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                block.zero_grad();
                x.zero_grad();
                block.forward(&x, 4, fused).sum_all().backward();
            })
        });
    }
    let cfg = TransformerConfig::new(128, 4)
        .dim_feedforward(512)
        .dropout(0.0)
        .batch_first(true)
        .norm_first(true);
    let layer = TransformerEncoderLayer::new(cfg, &Device::Cpu);
    group.bench_function("transformer_encoder_layer", |b| {
        b.iter(|| {
            layer.zero_grad();
            x.zero_grad();
            layer.forward(&x).sum_all().backward();
        })
    });

    let (vocab, t, n) = (65, 64, 32);
    let tokens = Tensor::randint(0, vocab as i64, &[t + 1, n], &Device::Cpu);
    let (inputs, targets) = (
        tokens.narrow(0, 0, t),
        tokens.narrow(0, 1, t).reshape(&[t * n]),
    );
    for (name, mode) in [("lstm_lm", RnnMode::Lstm), ("gru_lm", RnnMode::Gru)] {
        let lm = CharLm {
            embed: Embedding::new(vocab, 128, &Device::Cpu),
            rnn: Recurrent::new(mode, RnnConfig::new(128, 256), &Device::Cpu),
            head: Linear::new(256, vocab, &Device::Cpu),
        };
        let mut opt = AdamW::named(lm.named_parameters(), AdamConfig::default());
        group.bench_function(name, |b| {
            b.iter(|| {
                opt.zero_grad();
                let h = lm.rnn.forward(&lm.embed.forward(&inputs), None).0;
                let logits = lm.head.forward(&h).reshape(&[t * n, vocab]);
                let loss = F::cross_entropy(&logits, &targets);
                loss.backward();
                opt.step();
                loss.item::<f32>()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, training, steps);
criterion_main!(benches);
