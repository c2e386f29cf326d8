//! Every differentiable op passes a finite-difference gradient check in f64, on shapes
//! that broadcast and on non-contiguous views (transposed, strided, expanded inputs).

use ferrograd::autograd::{gradcheck, gradcheck_with};
use ferrograd::prelude::*;

#[path = "gradcheck_ops/nn_cases.rs"]
mod nn_cases;
#[path = "gradcheck_ops/tensor_cases.rs"]
mod tensor_cases;

type OpFn = Box<dyn Fn(&[Tensor]) -> Tensor>;

fn input(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F64, &Device::Cpu, &mut Generator::new(seed))
        .requires_grad(true)
}

/// Strictly positive inputs for log/sqrt/pow/div.
fn positive(shape: &[usize], seed: u64) -> Tensor {
    Tensor::rand_with(shape, DType::F64, &Device::Cpu, &mut Generator::new(seed))
        .add_scalar(0.5)
        .requires_grad(true)
}

/// Values bounded away from the kinks of relu/abs/clamp/max.
fn away_from_kinks(shape: &[usize], seed: u64) -> Tensor {
    let x = Tensor::randn_with(shape, DType::F64, &Device::Cpu, &mut Generator::new(seed));
    let bumped = &x + &(x.sign() * 0.2);
    bumped.requires_grad(true)
}

fn case(
    name: &'static str,
    f: impl Fn(&[Tensor]) -> Tensor + 'static,
    inputs: Vec<Tensor>,
) -> (&'static str, OpFn, Vec<Tensor>) {
    (name, Box::new(f), inputs)
}

fn table() -> Vec<(&'static str, OpFn, Vec<Tensor>)> {
    let mut cases = tensor_cases::cases();
    cases.extend(nn_cases::cases());
    cases
}

#[test]
fn every_differentiable_op_passes_gradcheck() {
    let mut failures = Vec::new();
    let cases = table();
    for (name, f, inputs) in &cases {
        if let Err(e) = gradcheck(f, inputs) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "gradcheck failed for:\n{}",
        failures.join("\n")
    );
    assert!(cases.len() >= 80, "the table covers {} cases", cases.len());
}

#[test]
fn to_dtype_backward_converts_the_gradient_back() {
    // Through f32 the function is only f32-smooth, so use a step f32 can resolve.
    let x = input(&[4], 1);
    gradcheck_with(
        |x| {
            x[0].to_dtype(DType::F32)
                .mul_scalar(3.0)
                .to_dtype(DType::F64)
        },
        &[x],
        1e-2,
        1e-4,
        1e-4,
    )
    .unwrap();
}

#[test]
fn gradcheck_detects_a_wrong_gradient() {
    use ferrograd::autograd::{Function, FunctionCtx, SavedTensors, apply};
    /// sin with a deliberately wrong derivative.
    struct BadSin;
    impl Function for BadSin {
        fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Tensor {
            ctx.save_for_backward(&inputs[0]);
            inputs[0].sin()
        }
        fn backward(&self, saved: &SavedTensors, grad: &Tensor) -> Vec<Option<Tensor>> {
            vec![Some(grad * &saved.get(0).sin())]
        }
    }
    let x = input(&[3], 1);
    let err = gradcheck(|x| apply(BadSin, &[&x[0]]), &[x]).unwrap_err();
    assert!((err.analytical - err.numerical).abs() > 1e-3, "{err}");
}

#[test]
fn second_order_gradients_pass_gradcheck() {
    // Differentiate the gradient itself: d/dx of (dy/dx) for elementwise, matmul and
    // reduction ops, checked against finite differences of the first gradient.
    type BinaryFn = fn(&Tensor, &Tensor) -> Tensor;
    let first_grad = |f: BinaryFn| {
        move |x: &[Tensor]| {
            // gradcheck's finite differences run under no_grad on plain tensors: the
            // inner derivative needs graph recording and a leaf either way.
            enable_grad(|| {
                let x0 = if x[0].requires_grad_flag() {
                    x[0].clone()
                } else {
                    x[0].detach().requires_grad(true)
                };
                let y = f(&x0, &x[1]);
                ferrograd::autograd::grad(&[&y], &[&x0], None, true)[0]
                    .clone()
                    .unwrap()
            })
        }
    };
    let cases: Vec<(&str, BinaryFn)> = vec![
        ("elementwise", |a, b| {
            (a.tanh() * b.exp() + a.sigmoid() * a).sum_all()
        }),
        ("matmul", |a, b| a.matmul(b).pow_scalar(2.0).sum_all()),
        ("reductions", |a, b| {
            (a.softmax(1) * b).sum_all()
                + a.logsumexp(&[1], false).sum_all()
                + a.var(&[0], true, false).sum_all()
        }),
        ("log_softmax", |a, b| (a.log_softmax(1) * b).sum_all()),
        // The fused ops' backward runs as tensor ops under create_graph.
        ("layer_norm", |a, b| {
            let w = b.sum(&[0], false);
            (F::layer_norm(a, &[3], Some(&w), None, 1e-5) * b).sum_all()
        }),
        ("cross_entropy", |a, b| {
            let args = F::CrossEntropyArgs {
                weight: Some(Tensor::from_vec(vec![0.5f64, 2.0, 1.0], &[3])),
                label_smoothing: 0.1,
                ..Default::default()
            };
            F::cross_entropy_with(&(a * b), &Tensor::from_vec(vec![2i64, 0, 1], &[3]), &args)
        }),
        ("conv2d_depthwise", |a, b| {
            // a: 3 channels of 1x3 rows as [1, 3, 1, 3]; b's rows as 1x3 kernels.
            let x = a.reshape(&[1, 3, 1, 3]);
            let w = b.reshape(&[3, 1, 1, 3]);
            let y = F::conv2d(&x, &w, None, &F::Conv2dArgs::default().padding(1).groups(3));
            y.pow_scalar(2.0).sum_all()
        }),
        ("batch_norm_eval", |a, b| {
            let (rm, rv) = (
                b.sum(&[1], false),
                b.pow_scalar(2.0).sum(&[1], false).add_scalar(0.5),
            );
            let w = b.sum(&[0], false);
            let x = a.reshape(&[1, 3, 3]);
            let y = F::batch_norm(&x, Some(&rm), Some(&rv), Some(&w), None, false, 0.1, 1e-5);
            (y.pow_scalar(2.0) * b).sum_all()
        }),
        ("batch_norm_train", |a, b| {
            // [1, 3, 3]: three channels of three positions (the fused node, whose backward
            // is tensor ops under create_graph); weight and bias from b.
            let (w, bias) = (b.sum(&[0], false), b.sum(&[1], false));
            let x = a.reshape(&[1, 3, 3]);
            let y = F::batch_norm(&x, None, None, Some(&w), Some(&bias), true, 0.1, 1e-5);
            (y.pow_scalar(2.0) * b.reshape(&[1, 3, 3])).sum_all() + y.sum_all()
        }),
        ("batch_norm_relu_train", |a, b| {
            // As batch_norm_train, with the ReLU fused: its mask is a constant under
            // create_graph.
            let (w, bias) = (b.sum(&[0], false), b.sum(&[1], false));
            let x = a.reshape(&[1, 3, 3]);
            let y = F::batch_norm_relu(&x, None, None, Some(&w), Some(&bias), true, 0.1, 1e-5);
            (y.pow_scalar(2.0) * b.reshape(&[1, 3, 3])).sum_all() + y.sum_all()
        }),
        ("batch_norm_train_1d", |a, b| {
            // [3, 3]: one element per plane, the composed ops.
            let w = b.sum(&[0], false);
            let y = F::batch_norm(a, None, None, Some(&w), None, true, 0.1, 1e-5);
            (y.pow_scalar(2.0) * b).sum_all()
        }),
        ("conv2d_dense", |a, b| {
            // a as one 3x3 image with one channel; b's rows as three 1x3 kernels.
            let x = a.reshape(&[1, 1, 3, 3]);
            let w = b.reshape(&[3, 1, 1, 3]);
            let args = F::Conv2dArgs::default().padding(1).stride(2);
            F::conv2d(&x, &w, None, &args).pow_scalar(2.0).sum_all()
        }),
        ("conv_transpose2d_input", |a, b| {
            // a as one 3x3 image with one channel; b's rows as three 1x3 kernels.
            let x = a.reshape(&[1, 1, 3, 3]);
            let w = b.reshape(&[1, 3, 1, 3]);
            let args = F::ConvTranspose2dArgs::default().stride(2).padding(1);
            F::conv_transpose2d(&x, &w, None, &args)
                .pow_scalar(2.0)
                .sum_all()
        }),
        ("conv_transpose2d_weight", |a, b| {
            // The weight is differentiated: a's rows as three 1x3 kernels of b's image.
            let x = b.reshape(&[1, 1, 3, 3]);
            let w = a.reshape(&[1, 3, 1, 3]);
            let args = F::ConvTranspose2dArgs::default().stride(2).padding(1);
            F::conv_transpose2d(&x, &w, None, &args)
                .pow_scalar(2.0)
                .sum_all()
        }),
        ("pools", |a, b| {
            let x = (a * b).reshape(&[1, 1, 3, 3]);
            let max = F::max_pool2d_with(&x, &F::Pool2dArgs::new(2).stride(1));
            let avg = F::avg_pool2d_with(&x, &F::Pool2dArgs::new(2).stride(1).padding(1));
            max.pow_scalar(2.0).sum_all() + avg.pow_scalar(2.0).sum_all()
        }),
    ];
    for (name, f) in cases {
        let inputs = vec![input(&[3, 3], 11), input(&[3, 3], 12).detach()];
        gradcheck_with(first_grad(f), &inputs, 1e-6, 1e-5, 1e-3)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
