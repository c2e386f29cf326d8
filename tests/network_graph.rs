//! `network!`'s graph form: values read by name, several inputs and outputs, tuples,
//! symbolic sizes; each network's forward equals a hand-written one with the same
//! weights, trains (every parameter gets a gradient) and has PyTorch's state_dict keys.

use ferrograd::nn::{MhaArgs, Module};
use ferrograd::prelude::*;

network! {
    /// A ResNet downsampling block with a projection shortcut, over any even or odd size.
    pub struct DownBlock(x: [N, 8, H, W]) -> [N, 16, (H + 1) / 2, (W + 1) / 2] {
        let main = x
            -> conv1: Conv2d(8 -> 16, kernel = 3, stride = 2, padding = 1, bias = false)
            -> bn1: BatchNorm2d(16)
            -> relu
            -> conv2: Conv2d(16 -> 16, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(16);
        let short = down: Conv2d(8 -> 16, kernel = 1, stride = 2, bias = false)(x) -> bn_d: BatchNorm2d(16);
        relu(main + short)
    }
}

network! {
    /// One attention head written out: projections, scaled scores, softmax, values.
    pub struct Head(x: [N, T, 16]) -> [N, T, 16] {
        let q = x -> wq: Linear(16 -> 16);
        let k = x -> wk: Linear(16 -> 16);
        let v = x -> wv: Linear(16 -> 16);
        let scores = matmul(q, transpose(1, 2)(k)) * 0.25;
        let weights = scores -> softmax(dim = -1);
        matmul(weights, v) -> out: Linear(16 -> 16)
    }
}

network! {
    /// BERT-style embeddings: token and position ids, summed, normalised.
    pub struct Embeddings(ids: [N, T]: i64, pos: [N, T]: i64) -> [N, T, 12] {
        let tokens = ids -> tok: Embedding(50 -> 12, padding_idx = 0);
        let positions = pos -> position: Embedding(16 -> 12);
        tokens + positions -> norm: LayerNorm(12) -> drop: Dropout(0.1)
    }
}

network! {
    /// Two towers and two outputs; a gated unit from `chunk`; a mean over time.
    pub struct TwoTower(a: [N, T, 8], b: [N, 6]) -> ([N, 4], [N, 4]) {
        let (gate, value) = a -> proj: Linear(8 -> 16) -> chunk(2, dim = -1);
        let left = value * sigmoid(gate) -> mean(dim = 1) -> head_a: Linear(8 -> 4);
        let right = b -> head_b: Linear(6 -> 4) -> tanh;
        (left, right - 0.5)
    }
}

fn hand_down(m: &DownBlock, x: &Tensor) -> Tensor {
    let main = m
        .bn2
        .forward(&m.conv2.forward(&m.bn1.forward(&m.conv1.forward(x)).relu()));
    let short = m.bn_d.forward(&m.down.forward(x));
    (&main + &short).relu()
}

/// Sorted (key, shape) pairs.
type Keys = Vec<(String, Vec<usize>)>;

/// Sorted (key, shape) pairs of `m`, and of the PyTorch module `net` in the fixture
/// (tests/fixtures/make_dsl_keys.py).
fn keys_and_torch_keys(m: &impl Module, net: &str) -> (Keys, Keys) {
    let mut ours = Vec::new();
    m.visit("", &mut |name, t, _| {
        ours.push((name.to_string(), t.shape().to_vec()))
    });
    let mut theirs: Keys = include_str!("fixtures/dsl_keys.txt")
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split(' ').collect();
            (p[0] == net).then(|| {
                (
                    p[1].to_string(),
                    p[2].split(',')
                        .filter(|x| !x.is_empty())
                        .map(|x| x.parse().expect("size"))
                        .collect(),
                )
            })
        })
        .collect();
    ours.sort();
    theirs.sort();
    assert!(!theirs.is_empty());
    (ours, theirs)
}

fn all_have_grads(m: &impl Module) -> bool {
    m.parameters().iter().all(|p| p.grad().is_some())
}

#[test]
fn resnet_block_with_projection_shortcut() {
    manual_seed(3);
    let net = DownBlock::new(&Device::Cpu);
    for size in [8, 7] {
        let x = Tensor::randn(&[2, 8, size, size + 2], DType::F32, &Device::Cpu);
        let y = net.forward(&x);
        assert_eq!(
            y.shape(),
            &[2, 16, size.div_ceil(2), (size + 2).div_ceil(2)]
        );
        assert!(y.allclose(&hand_down(&net, &x), 1e-6, 1e-6));
    }
    let x = Tensor::randn(&[2, 8, 6, 6], DType::F32, &Device::Cpu);
    net.forward(&x).sum_all().backward();
    assert!(all_have_grads(&net));
    let keys: Vec<String> = net.state_dict().into_keys().collect();
    for k in [
        "conv1.weight",
        "bn1.running_mean",
        "bn1.num_batches_tracked",
        "down.weight",
        "bn_d.bias",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} in {keys:?}");
    }
    assert!(!keys.iter().any(|k| k == "conv1.bias"), "bias = false");
    assert_eq!(DownBlock::NUM_PARAMETERS, net.num_parameters());
}

#[test]
fn attention_written_in_the_dsl() {
    manual_seed(4);
    let net = Head::new(&Device::Cpu);
    let x = Tensor::randn(&[3, 5, 16], DType::F32, &Device::Cpu);
    let y = net.forward(&x);
    let (q, k, v) = (net.wq.forward(&x), net.wk.forward(&x), net.wv.forward(&x));
    let w = q.matmul(&k.transpose(1, 2)).mul_scalar(0.25).softmax(-1);
    let expected = net.out.forward(&w.matmul(&v));
    assert!(y.allclose(&expected, 1e-6, 1e-6));
    y.sum_all().backward();
    assert!(all_have_grads(&net));
    assert_eq!(net.num_parameters(), 4 * (16 * 16 + 16));
}

#[test]
fn embeddings_take_integer_ids() {
    manual_seed(5);
    let mut net = Embeddings::new(&Device::Cpu);
    net.eval();
    let ids = Tensor::from_vec(vec![0i64, 3, 7, 49, 1, 2], &[2, 3]);
    let pos = Tensor::from_vec(vec![0i64, 1, 2, 0, 1, 2], &[2, 3]);
    let y = net.forward(&ids, &pos);
    let expected = net
        .norm
        .forward(&(&net.tok.forward(&ids) + &net.position.forward(&pos)));
    assert!(y.allclose(&expected, 1e-6, 1e-6));
    // padding_idx 0: its row starts at zero.
    assert_eq!(
        net.tok.weight.select(0, 0).abs().sum_all().item::<f32>(),
        0.0
    );
    let floats = Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu);
    let m = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| net.forward(&floats, &pos)))
        .expect_err("float ids are refused");
    let m = m.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        m.contains("Embeddings.forward") && m.contains("`ids`") && m.contains("i64"),
        "{m}"
    );
}

#[test]
fn two_inputs_two_outputs_and_tuples() {
    manual_seed(6);
    let net = TwoTower::new(&Device::Cpu);
    let a = Tensor::randn(&[4, 3, 8], DType::F32, &Device::Cpu);
    let b = Tensor::randn(&[4, 6], DType::F32, &Device::Cpu);
    let (left, right) = net.forward(&a, &b);
    let p = net.proj.forward(&a);
    let parts = p.chunk(2, -1);
    let gated = parts[1].mul(&parts[0].sigmoid()).mean(&[1], false);
    assert!(left.allclose(&net.head_a.forward(&gated), 1e-6, 1e-6));
    assert!(right.allclose(&net.head_b.forward(&b).tanh().add_scalar(-0.5), 1e-6, 1e-6));
    (&left.sum_all() + &right.sum_all()).backward();
    assert!(all_have_grads(&net));
    let (ours, theirs) = keys_and_torch_keys(&net, "two_tower");
    assert_eq!(ours, theirs);
    let summary = TwoTower::summary();
    assert!(
        summary.contains("proj") && summary.contains("[N, T, 16]"),
        "{summary}"
    );
}

#[path = "common/nets.rs"]
#[allow(dead_code)]
mod nets;
use nets::LstmClassifier;

network! {
    /// A pre-norm encoder layer, then self-attention returning its weights too.
    pub struct Encoder(x: [N, T, 32]) -> ([N, T, 32], [N, T, T]) {
        let y = x -> layer: TransformerEncoderLayer(32, 4, dim_feedforward = 64, dropout = 0.0, batch_first = true, norm_first = true, activation = "gelu");
        let (out, weights) = attn: MultiheadAttention(32, 4, batch_first = true, need_weights = true)(y);
        (out, weights)
    }
}

#[test]
fn lstm_classifier() {
    manual_seed(7);
    let net = LstmClassifier::new(&Device::Cpu);
    let ids = Tensor::from_vec((0..24).map(|i| (i * 7 % 100) as i64).collect(), &[4, 6]);
    let y = net.forward(&ids);
    let (out, _) = net.lstm.forward(&net.embed.forward(&ids), None);
    let expected = net.head.forward(&out.mean(&[1], false));
    assert!(y.allclose(&expected, 1e-6, 1e-6));
    y.sum_all().backward();
    assert!(all_have_grads(&net));
    let keys: Vec<String> = net.state_dict().into_keys().collect();
    for k in [
        "lstm.weight_ih_l0",
        "lstm.weight_hh_l1_reverse",
        "lstm.bias_ih_l1",
        "embed.weight",
        "head.bias",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} in {keys:?}");
    }
    assert_eq!(LstmClassifier::NUM_PARAMETERS, net.num_parameters());
}

#[test]
fn transformer_encoder_layer_and_attention_weights() {
    manual_seed(8);
    let net = Encoder::new(&Device::Cpu);
    let x = Tensor::randn(&[2, 5, 32], DType::F32, &Device::Cpu);
    let (out, weights) = net.forward(&x);
    let y = net.layer.forward(&x);
    let (o, w) = net.attn.forward_with(
        &y,
        &y,
        &y,
        &MhaArgs {
            need_weights: true,
            ..Default::default()
        },
    );
    assert!(out.allclose(&o, 1e-6, 1e-6));
    assert!(weights.allclose(&w.expect("weights"), 1e-6, 1e-6));
    assert_eq!(weights.shape(), &[2, 5, 5]);
    out.sum_all().backward();
    assert!(all_have_grads(&net));
    assert_eq!(Encoder::NUM_PARAMETERS, net.num_parameters());
    let keys: Vec<String> = net.state_dict().into_keys().collect();
    for k in [
        "layer.self_attn.in_proj_weight",
        "layer.linear1.weight",
        "layer.norm2.bias",
        "attn.out_proj.weight",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} in {keys:?}");
    }
}

network! {
    /// `split` into parts of 4.
    pub struct Splits(x: [N, 12]) -> [N, 4] {
        let (a, b, c) = x -> split(4, dim = 1);
        a * b + c
    }
}

#[test]
fn split_into_equal_parts() {
    let net = Splits::new(&Device::Cpu);
    let x = Tensor::randn(&[3, 12], DType::F32, &Device::Cpu);
    let p = x.split(4, 1);
    assert!(
        net.forward(&x)
            .allclose(&(&p[0].mul(&p[1]) + &p[2]), 1e-6, 1e-6)
    );
}
