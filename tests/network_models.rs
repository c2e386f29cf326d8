//! Real architectures written entirely in `network!`: a U-Net and a BERT-style encoder
//! layer with its embeddings. Each forward equals a hand-written one with the same
//! weights, one training step reaches every parameter, and the state_dict keys and
//! shapes equal those of the PyTorch module written the same way
//! (`tests/fixtures/make_dsl_keys.py` → `tests/fixtures/dsl_keys.txt`).

use ferrograd::nn::Module;
use ferrograd::optim::{Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;

#[path = "common/nets.rs"]
#[allow(dead_code)]
mod nets;
use nets::{BertLayer, DoubleConv, UNet};

/// `net`'s parameter and buffer names with shapes, sorted.
fn keys(m: &impl Module) -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    m.visit("", &mut |name, t, _| {
        out.push((name.to_string(), t.shape().to_vec()))
    });
    out.sort();
    out
}

/// The PyTorch module's keys for `net` from the fixture.
fn torch_keys(net: &str) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = include_str!("fixtures/dsl_keys.txt")
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            (parts[0] == net).then(|| {
                let shape = parts[2]
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().expect("size"))
                    .collect();
                (parts[1].to_string(), shape)
            })
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no keys for {net} in the fixture");
    out
}

/// DoubleConv by hand, for any channel counts.
fn dc<const A: usize, const B: usize>(m: &DoubleConv<A, B>, x: &Tensor) -> Tensor {
    let (c1, n1, _, c2, n2, _) = &m.block;
    let y = n1.forward(&c1.forward(x)).relu();
    n2.forward(&c2.forward(&y)).relu()
}

fn one_sgd_step(params: Vec<Tensor>) {
    let mut opt = Sgd::new(params, SgdConfig::new(0.01));
    opt.step();
}

#[test]
fn unet() {
    manual_seed(21);
    let net = UNet::new(&Device::Cpu);
    assert_eq!(keys(&net), torch_keys("unet"));
    assert_eq!(UNet::NUM_PARAMETERS, net.num_parameters());
    let x = Tensor::randn(&[2, 3, 12, 8], DType::F32, &Device::Cpu);
    let y = net.forward(&x);
    assert_eq!(y.shape(), &[2, 2, 12, 8]);
    // By hand (training mode, batch statistics, like the network).
    let e1 = dc(&net.enc1, &x);
    let e2 = dc(&net.enc2, &F::max_pool2d(&e1, 2));
    let mid = dc(&net.bottleneck, &F::max_pool2d(&e2, 2));
    let d2 = dc(&net.dec2, &Tensor::cat(&[&net.up2.forward(&mid), &e2], 1));
    let d1 = dc(&net.dec1, &Tensor::cat(&[&net.up1.forward(&d2), &e1], 1));
    assert!(y.allclose(&net.head.forward(&d1), 1e-5, 1e-5));
    y.sum_all().backward();
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
    let before = net.head.weight.to_vec::<f32>();
    one_sgd_step(net.parameters());
    assert_ne!(
        net.head.weight.to_vec::<f32>(),
        before,
        "the step moved the head"
    );
    // A size that is not a multiple of 4 is refused, naming the input and the factor.
    let m = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        net.forward(&Tensor::randn(&[1, 3, 10, 8], DType::F32, &Device::Cpu))
    }))
    .expect_err("10 is not a multiple of 4");
    let m = m.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        m.contains("UNet.forward") && m.contains("multiple of 4"),
        "{m}"
    );
}

#[test]
fn bert_layer() {
    manual_seed(22);
    let mut net = BertLayer::new(&Device::Cpu);
    assert_eq!(keys(&net), torch_keys("bert"));
    assert_eq!(BertLayer::NUM_PARAMETERS, net.num_parameters());
    net.eval();
    let ids = Tensor::from_vec((0..10).map(|i| (i * 13 % 100) as i64).collect(), &[2, 5]);
    let pos = Tensor::from_vec((0..10).map(|i| (i % 5) as i64).collect(), &[2, 5]);
    let types = Tensor::from_vec((0..10).map(|i| (i / 7) as i64).collect(), &[2, 5]);
    let y = net.forward(&ids, &pos, &types);
    let emb = &(&net.word_embeddings.forward(&ids) + &net.position_embeddings.forward(&pos))
        + &net.token_type_embeddings.forward(&types);
    let h = net.emb_norm.forward(&emb);
    let a = net.attention.forward(&h, &h, &h);
    let h1 = net.attn_norm.forward(&(&h + &a));
    let f = net.output.forward(&net.intermediate.forward(&h1).gelu());
    let expected = net.out_norm.forward(&(&h1 + &f));
    assert!(y.allclose(&expected, 1e-5, 1e-5));
    net.train();
    net.forward(&ids, &pos, &types).sum_all().backward();
    let named = net.named_parameters();
    for (name, p) in &named {
        assert!(p.grad().is_some(), "{name} has a gradient");
    }
    one_sgd_step(net.parameters());
}
