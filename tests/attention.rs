//! Scaled-dot-product attention: outputs and gradients match PyTorch's
//! `F.scaled_dot_product_attention` (fixtures from
//! `tests/fixtures/make_attention_fixtures.py`) for every mask kind on every device;
//! gradcheck in f64; dropout's fused backward equals its tensor-op backward; the forward
//! keeps no [L, S] matrix.

mod common;

use ferrograd::autograd::{grad, gradcheck};
use ferrograd::prelude::*;
use ferrograd::testing::{assert_close, test_device};
use std::collections::HashMap;

fn fixtures() -> HashMap<String, Tensor> {
    common::typed_tensors(include_bytes!("fixtures/torch_attention.safetensors"))
}

/// (case, is_causal, scale)
const CASES: [(&str, bool, Option<f64>); 9] = [
    ("plain", false, None),
    ("causal", true, None),
    ("causal_short_q", true, None),
    ("bool_mask", false, None),
    ("float_mask", false, None),
    ("key_padding", false, None),
    ("scale_3d", false, Some(0.3)),
    ("broadcast_batch", false, None),
    ("long_causal", true, None),
];

/// Asserts `a` equals PyTorch's `b` at rtol 1e-4 / atol 1e-5 (f32).
use common::close_to_torch as close;

fn matches_pytorch(device: &Device) {
    let fx = fixtures();
    for (name, causal, scale) in CASES {
        let on = |k: &str| fx[&format!("{name}.{k}")].to_device(device).unwrap();
        let (q, k, v) = (
            on("q").requires_grad(true),
            on("k").requires_grad(true),
            on("v").requires_grad(true),
        );
        let mask = fx.get(&format!("{name}.mask")).map(|m| {
            let m = m.to_device(device).unwrap();
            if fx.contains_key(&format!("{name}.dmask")) {
                m.requires_grad(true)
            } else {
                m
            }
        });
        let y = F::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), 0.0, causal, scale);
        close(
            &y,
            &fx[&format!("{name}.out")],
            &format!("{name} output on {device}"),
        );
        y.backward_with(&on("go"));
        for (t, g) in [(&q, "dq"), (&k, "dk"), (&v, "dv")] {
            close(
                &t.grad().unwrap(),
                &fx[&format!("{name}.{g}")],
                &format!("{name} {g} on {device}"),
            );
        }
        if let Some(dm) = fx.get(&format!("{name}.dmask")) {
            close(
                &mask.unwrap().grad().unwrap(),
                dm,
                &format!("{name} dmask on {device}"),
            );
        }
    }
}
test_device!(matches_pytorch);

/// Finite differences in f64: causal, boolean-masked (with a fully masked row) and
/// float-masked attention, through the fused backward.
#[test]
fn gradcheck_f64() {
    let mut g = Generator::new(3);
    let r = |s: &[usize], g: &mut Generator| {
        Tensor::randn_with(s, DType::F64, &Device::Cpu, g).requires_grad(true)
    };
    let (q, k, v) = (
        r(&[2, 5, 4], &mut g),
        r(&[2, 6, 4], &mut g),
        r(&[2, 6, 3], &mut g),
    );
    gradcheck(
        |x| F::scaled_dot_product_attention(&x[0], &x[1], &x[2], None, 0.0, true, None),
        &[q.clone(), k.clone(), v.clone()],
    )
    .unwrap();
    let mut bool_mask = Tensor::rand_with(&[5, 6], DType::F64, &Device::Cpu, &mut g).gt_scalar(0.3);
    let row = Tensor::ones(&[1, 6], DType::Bool, &Device::Cpu).logical_not();
    bool_mask = Tensor::cat(
        &[&bool_mask.narrow(0, 0, 2), &row, &bool_mask.narrow(0, 3, 2)],
        0,
    );
    gradcheck(
        |x| {
            F::scaled_dot_product_attention(
                &x[0],
                &x[1],
                &x[2],
                Some(&bool_mask),
                0.0,
                false,
                Some(0.7),
            )
        },
        &[q.clone(), k.clone(), v.clone()],
    )
    .unwrap();
    let float_mask = r(&[1, 5, 6], &mut g);
    gradcheck(
        |x| F::scaled_dot_product_attention(&x[0], &x[1], &x[2], Some(&x[3]), 0.0, false, None),
        &[q, k, v, float_mask],
    )
    .unwrap();
}

/// Operands in any layout are read in place (the heads of `[batch, len, heads, d]`
/// projections through a transpose, keys and values broadcast over the heads, as
/// grouped-query attention has them): the same output as contiguous copies, and
/// gradients by finite differences.
#[test]
fn strided_and_broadcast_operands_equal_contiguous_copies() {
    let mut g = Generator::new(5);
    let r = |s: &[usize], g: &mut Generator| {
        Tensor::randn_with(s, DType::F64, &Device::Cpu, g).requires_grad(true)
    };
    let x = r(&[2, 7, 3, 4], &mut g); // [batch, len, heads, d]
    let kv = r(&[2, 1, 9, 5], &mut g); // one key/value head
    let attend = |x: &Tensor, kv: &Tensor, causal: bool| {
        let q = x.transpose(1, 2); // [2, 3, 7, 4], strided
        let k = kv.narrow(3, 0, 4).expand(&[-1, 3, -1, -1]); // broadcast over heads
        let v = kv.narrow(3, 1, 4).expand(&[-1, 3, -1, -1]);
        F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None)
    };
    for causal in [false, true] {
        let y = attend(&x, &kv, causal);
        let q = x.transpose(1, 2).contiguous();
        let k = kv.narrow(3, 0, 4).expand(&[-1, 3, -1, -1]).contiguous();
        let v = kv.narrow(3, 1, 4).expand(&[-1, 3, -1, -1]).contiguous();
        let want = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None);
        assert!(y.allclose(&want, 1e-12, 1e-12), "causal {causal}");
    }
    gradcheck(|t| attend(&t[0], &t[1], true), &[x.clone(), kv.clone()]).unwrap();
    gradcheck(|t| attend(&t[0], &t[1], false), &[x, kv]).unwrap();
}

/// With dropout, the fused backward and the tensor-op backward (`create_graph`) of one
/// forward agree, and the kept fraction is about 1 - p.
fn dropout_backward_agrees(device: &Device) {
    manual_seed(11);
    let r = |s: &[usize]| {
        Tensor::randn(s, DType::F64, &Device::Cpu)
            .to_device(device)
            .unwrap()
            .requires_grad(true)
    };
    let (q, k, v) = (r(&[2, 3, 70, 8]), r(&[2, 3, 70, 8]), r(&[2, 3, 70, 8]));
    let y = F::scaled_dot_product_attention(&q, &k, &v, None, 0.25, false, None);
    let go = Tensor::randn(y.shape(), DType::F64, &Device::Cpu)
        .to_device(device)
        .unwrap();
    let graph = grad(&[&y], &[&q, &k, &v], Some(std::slice::from_ref(&go)), true);
    let fused = grad(&[&y], &[&q, &k, &v], Some(&[go]), false);
    for (a, b) in graph.iter().zip(&fused) {
        assert_close(a.as_ref().unwrap(), b.as_ref().unwrap(), DType::F64);
    }
    // v = 1 everywhere: each output is the sum of the kept probabilities times 1/(1-p).
    let ones = Tensor::ones(&[1, 1, 400, 4], DType::F64, device);
    let q1 = Tensor::zeros(&[1, 1, 400, 4], DType::F64, device);
    let y = F::scaled_dot_product_attention(&q1, &q1, &ones, None, 0.25, false, None);
    let mean = y.mean_all().to_device(&Device::Cpu).unwrap().item::<f64>();
    assert!((mean - 1.0).abs() < 0.02, "mean {mean}");
}
test_device!(dropout_backward_agrees);

/// Half-precision operands compute in f32 and come back in their dtype.
#[test]
fn half_inputs_follow_f32() {
    let q = Tensor::randn(&[1, 2, 7, 8], DType::F32, &Device::Cpu);
    let y32 = F::scaled_dot_product_attention(&q, &q, &q, None, 0.0, true, None);
    let h = q.to_dtype(DType::BF16);
    let y16 = F::scaled_dot_product_attention(&h, &h, &h, None, 0.0, true, None);
    assert_eq!(y16.dtype(), DType::BF16);
    assert_close(&y16, &y32.to_dtype(DType::BF16), DType::BF16);
}

#[test]
#[should_panic(
    expected = "scaled_dot_product_attention: query [2, 5, 8] and key [2, 6, 4] differ in the feature dim (axis -1)"
)]
fn mismatched_features_are_refused() {
    let q = Tensor::zeros(&[2, 5, 8], DType::F32, &Device::Cpu);
    let k = Tensor::zeros(&[2, 6, 4], DType::F32, &Device::Cpu);
    F::scaled_dot_product_attention(&q, &k, &k, None, 0.0, false, None);
}

#[test]
#[should_panic(expected = "an explicit attn_mask should not be set when is_causal=True")]
fn mask_with_causal_is_refused() {
    let q = Tensor::zeros(&[2, 5, 8], DType::F32, &Device::Cpu);
    let m = Tensor::ones(&[5, 5], DType::Bool, &Device::Cpu);
    F::scaled_dot_product_attention(&q, &q, &q, Some(&m), 0.0, true, None);
}

/// RoPE equals the scalar formula (pairs i and i + d/2 rotated by pos * base^(-2i/d)),
/// and rotated queries and keys score by relative position only.
#[test]
fn rotary_embeddings_follow_the_formula_and_are_relative() {
    use ferrograd::nn::RotaryEmbedding;
    let (d, base) = (8usize, 10_000.0f64);
    let rope = RotaryEmbedding::new(d, base, 64, &Device::Cpu);
    let x = Tensor::randn(&[2, 3, d], DType::F64, &Device::Cpu);
    let r = rope.apply(&x, 5).to_vec::<f64>();
    let xv = x.to_vec::<f64>();
    for row in 0..6 {
        let pos = 5 + row % 3;
        for i in 0..d / 2 {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
            let (a, b) = (xv[row * d + i], xv[row * d + i + d / 2]);
            let (ra, rb) = (
                a * theta.cos() - b * theta.sin(),
                b * theta.cos() + a * theta.sin(),
            );
            assert!(
                (r[row * d + i] - ra).abs() < 1e-6 && (r[row * d + i + d / 2] - rb).abs() < 1e-6
            );
        }
    }
    let q = Tensor::randn(&[1, d], DType::F64, &Device::Cpu);
    let k = Tensor::randn(&[1, d], DType::F64, &Device::Cpu);
    let score = |m: usize, n: usize| {
        rope.apply(&q, m)
            .mul(&rope.apply(&k, n))
            .sum_all()
            .item::<f64>()
    };
    assert!((score(10, 7) - score(30, 27)).abs() < 1e-5);
}

/// Decoding token by token (and in a chunk) through a KVCache gives full causal
/// attention's outputs.
#[test]
fn cached_decoding_equals_full_causal_attention() {
    use ferrograd::nn::KVCache;
    let (t, h, d) = (9, 2, 4);
    let q = Tensor::randn(&[1, h, t, d], DType::F64, &Device::Cpu);
    let k = Tensor::randn(&[1, h, t, d], DType::F64, &Device::Cpu);
    let v = Tensor::randn(&[1, h, t, d], DType::F64, &Device::Cpu);
    let full = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None);
    let mut cache = KVCache::new(1, h, 16, d, DType::F64, &Device::Cpu);
    let mut steps = Vec::new();
    // Four tokens one by one, then a chunk of five with the cache's causal mask.
    for i in 0..4 {
        let (kc, vc) = cache.append(&k.narrow(2, i, 1), &v.narrow(2, i, 1));
        steps.push(F::scaled_dot_product_attention(
            &q.narrow(2, i, 1),
            &kc,
            &vc,
            None,
            0.0,
            false,
            None,
        ));
    }
    let (kc, vc) = cache.append(&k.narrow(2, 4, 5), &v.narrow(2, 4, 5));
    let mask = cache.causal_mask(5);
    steps.push(F::scaled_dot_product_attention(
        &q.narrow(2, 4, 5),
        &kc,
        &vc,
        Some(&mask),
        0.0,
        false,
        None,
    ));
    let cached = Tensor::cat(&steps.iter().collect::<Vec<_>>(), 2);
    assert_close(&cached, &full, DType::F64);
    assert_eq!(cache.len(), 9);
}
