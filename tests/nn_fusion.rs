//! `nn::fusion`: an eval-mode batch norm folded into the convolution or linear layer
//! before it gives the same outputs as the two layers (f64, every geometry option), and
//! refuses a norm in training mode or without running statistics. The inference fusions
//! `F::add_layer_norm` and `F::bias_gelu` give exactly their composite ops' results, and
//! `F::batch_norm_relu` (`BatchNorm2d::forward_relu`) gives exactly batch norm then ReLU:
//! outputs, running statistics and gradients, in training and in eval.

use ferrograd::nn::{
    BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvOptions, Linear, Module, fusion,
};
use ferrograd::prelude::*;

/// A batch norm with statistics and affine parameters far from the defaults, in eval mode.
fn trained_bn2d(c: usize, affine: bool) -> BatchNorm2d {
    let mut bn = BatchNorm2d::with_options(c, 1e-3, Some(0.1), affine, true, &Device::Cpu);
    let v = |scale: f64, shift: f64| {
        Tensor::from_vec(
            (0..c)
                .map(|i| shift + scale * ((i * 7 % 5) as f64 - 2.0))
                .collect::<Vec<_>>(),
            &[c],
        )
    };
    bn.running_mean = Some(v(0.3, 0.1));
    bn.running_var = Some(v(0.2, 0.9));
    if affine {
        bn.weight = Some(v(0.4, 1.2).requires_grad(true));
        bn.bias = Some(v(-0.25, 0.05).requires_grad(true));
    }
    bn.to_dtype(DType::F64);
    bn.eval();
    bn
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    a.sub(b).abs().max_all().item::<f64>()
}

#[test]
fn fused_conv_bn_equals_conv_then_bn() {
    manual_seed(3);
    let options = [
        ConvOptions::default().padding(1),
        ConvOptions::default().stride(2).bias(false),
        ConvOptions::default().padding(2).dilation(2).groups(2),
        ConvOptions::default().groups(4).padding(1).bias(false), // depthwise
    ];
    for (k, o) in options.into_iter().enumerate() {
        for affine in [true, false] {
            let mut conv = Conv2d::new(4, 8, 3, o, &Device::Cpu);
            conv.to_dtype(DType::F64);
            let bn = trained_bn2d(8, affine);
            let fused = fusion::fuse_conv_bn_eval(&conv, &bn);
            let x = Tensor::randn(&[2, 4, 11, 9], DType::F64, &Device::Cpu);
            let want = bn.forward(&conv.forward(&x));
            let got = fused.forward(&x);
            assert_eq!(got.shape(), want.shape());
            let d = max_diff(&got, &want);
            assert!(d < 1e-12, "options #{k}, affine {affine}: {d}");
            // With an activation after it, as in a ResNet block.
            assert!(max_diff(&got.relu(), &want.relu()) < 1e-12);
            assert!(fused.bias.is_some());
            assert!(fused.weight.requires_grad_flag());
        }
    }
}

#[test]
fn fused_conv1d_and_linear_equal_their_pairs() {
    manual_seed(4);
    let mut bn = BatchNorm1d::with_options(6, 1e-5, Some(0.1), true, true, &Device::Cpu);
    bn.to_dtype(DType::F64);
    // Running statistics from a few training batches.
    for _ in 0..3 {
        bn.forward(
            &Tensor::randn(&[16, 6], DType::F64, &Device::Cpu)
                .mul_scalar(2.0)
                .add_scalar(0.5),
        );
    }
    bn.eval();
    let mut fc = Linear::new(5, 6, &Device::Cpu);
    fc.to_dtype(DType::F64);
    let x = Tensor::randn(&[7, 5], DType::F64, &Device::Cpu);
    let fused = fusion::fuse_linear_bn_eval(&fc, &bn);
    assert!(max_diff(&fused.forward(&x), &bn.forward(&fc.forward(&x))) < 1e-12);

    let mut conv = Conv1d::new(
        3,
        6,
        3,
        ConvOptions::default().padding(1).stride(2),
        &Device::Cpu,
    );
    conv.to_dtype(DType::F64);
    let x = Tensor::randn(&[2, 3, 10], DType::F64, &Device::Cpu);
    let fused = fusion::fuse_conv1d_bn_eval(&conv, &bn);
    assert!(max_diff(&fused.forward(&x), &bn.forward(&conv.forward(&x))) < 1e-12);
}

#[test]
#[should_panic(expected = "fuse_conv_bn_eval: the batch norm must be in eval mode")]
fn a_training_batch_norm_is_refused() {
    let conv = Conv2d::new(2, 3, 1, ConvOptions::default(), &Device::Cpu);
    fusion::fuse_conv_bn_eval(&conv, &BatchNorm2d::new(3, &Device::Cpu));
}

#[test]
#[should_panic(expected = "no running statistics")]
fn a_batch_norm_without_statistics_is_refused() {
    let conv = Conv2d::new(2, 3, 1, ConvOptions::default(), &Device::Cpu);
    let mut bn = BatchNorm2d::with_options(3, 1e-5, Some(0.1), true, false, &Device::Cpu);
    bn.eval();
    fusion::fuse_conv_bn_eval(&conv, &bn);
}

#[test]
#[should_panic(expected = "does not match the 3 output channels")]
fn a_channel_mismatch_is_refused() {
    let conv = Conv2d::new(2, 3, 1, ConvOptions::default(), &Device::Cpu);
    let mut bn = BatchNorm2d::new(4, &Device::Cpu);
    bn.eval();
    fusion::fuse_conv_bn_eval(&conv, &bn);
}

/// `F::add_layer_norm` and `F::bias_gelu` for inference (one fused pass each) give exactly
/// what their composite ops give (f32 and f64; with and without shift, weight and bias;
/// rows shorter than, equal to and longer than a SIMD vector), and with gradients wanted
/// they run as those ops: the same values and the same gradients for every operand.
#[test]
fn inference_fusions_equal_their_composite_ops() {
    manual_seed(5);
    let exact = |a: &Tensor, b: &Tensor| {
        assert_eq!(a.shape(), b.shape());
        max_diff(&a.to_dtype(DType::F64), &b.to_dtype(DType::F64))
    };
    for dtype in [DType::F32, DType::F64] {
        for (rows, len) in [(3usize, 5usize), (70, 384), (4, 16), (2, 33)] {
            let t = |shape: &[usize]| Tensor::randn(shape, dtype, &Device::Cpu);
            let (x, r) = (t(&[rows, len]), t(&[rows, len]));
            let (s, w, b) = (t(&[len]), t(&[len]), t(&[len]));
            let options = [
                (Some(&s), Some(&w), Some(&b)),
                (None, None, None),
                (Some(&s), None, Some(&b)),
                (None, Some(&w), None),
            ];
            for (shift, weight, bias) in options {
                let composite = no_grad(|| {
                    let y = shift.map_or_else(|| x.clone(), |s| x.add(s));
                    F::layer_norm(&y.add(&r), &[len], weight, bias, 1e-5)
                });
                let fused =
                    no_grad(|| F::add_layer_norm(&x, &r, shift, &[len], weight, bias, 1e-5));
                assert_eq!(exact(&fused, &composite), 0.0, "{dtype:?} [{rows}, {len}]");
            }
            let fused = no_grad(|| F::bias_gelu(&x, &s));
            assert_eq!(exact(&fused, &no_grad(|| x.add(&s).gelu())), 0.0);
        }
    }
    // Gradients wanted: the composite ops, differentiable in every operand.
    let leaf = |shape: &[usize]| Tensor::randn(shape, DType::F64, &Device::Cpu).requires_grad(true);
    let (x, r, s, w, b) = (
        leaf(&[4, 8]),
        leaf(&[4, 8]),
        leaf(&[8]),
        leaf(&[8]),
        leaf(&[8]),
    );
    let probe = Tensor::randn(&[4, 8], DType::F64, &Device::Cpu);
    let grads = |y: Tensor| {
        y.mul(&probe).sum_all().backward();
        let all = [&x, &r, &s, &w, &b].map(|t| t.grad().expect("a gradient"));
        for t in [&x, &r, &s, &w, &b] {
            t.zero_grad();
        }
        all
    };
    let fused = grads(F::add_layer_norm(
        &x,
        &r,
        Some(&s),
        &[8],
        Some(&w),
        Some(&b),
        1e-5,
    ));
    let composite = grads(F::layer_norm(
        &x.add(&s).add(&r),
        &[8],
        Some(&w),
        Some(&b),
        1e-5,
    ));
    for (f, c) in fused.iter().zip(&composite) {
        assert_eq!(exact(f, c), 0.0);
    }
    let gelu = |y: Tensor| {
        y.mul(&probe).sum_all().backward();
        let all = [&x, &s].map(|t| t.grad().expect("a gradient"));
        x.zero_grad();
        s.zero_grad();
        all
    };
    let (fused, composite) = (gelu(F::bias_gelu(&x, &s)), gelu(x.add(&s).gelu()));
    for (f, c) in fused.iter().zip(&composite) {
        assert_eq!(exact(f, c), 0.0);
    }
}

/// The values of a tensor as f64 bits (exact comparison, NaN-safe).
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_dtype(DType::F64)
        .to_vec::<f64>()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn batch_norm_relu_equals_batch_norm_then_relu() {
    manual_seed(11);
    let mut checked = 0;
    for dtype in [DType::F32, DType::F64] {
        // Planes of many elements (the fused kernels, vector loops and tails), of two,
        // and [N, C] (one per plane: the composed ops).
        for shape in [vec![4usize, 5, 9, 7], vec![3, 2, 2], vec![6, 3]] {
            for affine in [true, false] {
                let c = shape[1];
                let make = || {
                    let mut bn =
                        BatchNorm2d::with_options(c, 1e-5, Some(0.1), affine, true, &Device::Cpu);
                    bn.to_dtype(dtype);
                    if affine {
                        let w = Tensor::randn(&[c], dtype, &Device::Cpu).requires_grad(true);
                        let b = Tensor::randn(&[c], dtype, &Device::Cpu).requires_grad(true);
                        (bn.weight, bn.bias) = (Some(w), Some(b));
                    }
                    bn
                };
                let (fused_bn, plain_bn) = (make(), make());
                if affine {
                    for (a, b) in [
                        (&fused_bn.weight, &plain_bn.weight),
                        (&fused_bn.bias, &plain_bn.bias),
                    ] {
                        no_grad(|| b.as_ref().unwrap().copy_(a.as_ref().unwrap()));
                    }
                }
                // Exact zeros in the input: pre-activations at the kink after the shift.
                let x = Tensor::randn(&shape, dtype, &Device::Cpu)
                    .relu()
                    .requires_grad(true);
                let probe = Tensor::randn(&shape, dtype, &Device::Cpu);
                let run = |bn: &BatchNorm2d, fused: bool| {
                    let y = if fused {
                        bn.forward_relu(&x)
                    } else {
                        bn.forward(&x).relu()
                    };
                    y.mul(&probe).sum_all().backward();
                    let mut grads = vec![x.grad().expect("input gradient")];
                    x.zero_grad();
                    for p in [&bn.weight, &bn.bias].into_iter().flatten() {
                        grads.push(p.grad().expect("parameter gradient"));
                    }
                    (y, grads)
                };
                let (y_f, g_f) = run(&fused_bn, true);
                let (y_p, g_p) = run(&plain_bn, false);
                let what = format!("{dtype:?} {shape:?} affine {affine}");
                assert_eq!(bits(&y_f), bits(&y_p), "output, {what}");
                assert_eq!(g_f.len(), g_p.len());
                for (a, b) in g_f.iter().zip(&g_p) {
                    assert_eq!(bits(a), bits(b), "gradient, {what}");
                }
                for (a, b) in [
                    (&fused_bn.running_mean, &plain_bn.running_mean),
                    (&fused_bn.running_var, &plain_bn.running_var),
                ] {
                    assert_eq!(
                        bits(a.as_ref().unwrap()),
                        bits(b.as_ref().unwrap()),
                        "{what}"
                    );
                }
                // Eval: one pass without gradients, the composite ops with them.
                let (mut fused_bn, mut plain_bn) = (fused_bn, plain_bn);
                fused_bn.eval();
                plain_bn.eval();
                let (a, b) = no_grad(|| (fused_bn.forward_relu(&x), plain_bn.forward(&x).relu()));
                assert_eq!(bits(&a), bits(&b), "eval, {what}");
                let (y_f, g_f) = run(&fused_bn, true);
                let (y_p, g_p) = run(&plain_bn, false);
                assert_eq!(bits(&y_f), bits(&y_p), "eval with gradients, {what}");
                for (a, b) in g_f.iter().zip(&g_p) {
                    assert_eq!(bits(a), bits(b), "eval gradient, {what}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 12);
}
