//! Tensors with a zero-length dim through every op, forward and backward, as PyTorch: an
//! empty batch is an empty answer, a sum over nothing is 0, a mean over nothing is NaN,
//! and every input gets a gradient of its own (empty) shape. The expected shapes, sums and
//! gradient shapes come from PyTorch (`tests/fixtures/zero_size/generate.py` wrote
//! `expected.json`; the cases here have the same names and input shapes), after OpInfo's
//! habit of giving every op sample inputs with a zero-length dim.

use ferrograd::nn::functional::{CrossEntropyArgs, Reduction};
use ferrograd::prelude::*;

type OpFn = Box<dyn Fn(&[Tensor]) -> Tensor>;

/// Deterministic values, as the generating script makes them: ((7k mod 11) - 5) / 4.
fn x(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|k| ((7 * k % 11) as f64 - 5.0) / 4.0).collect();
    Tensor::from_vec(v, shape).requires_grad(true)
}

fn idx(values: Vec<i64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(values, shape)
}

fn case(
    name: &'static str,
    f: impl Fn(&[Tensor]) -> Tensor + 'static,
    shapes: &[&[usize]],
) -> (&'static str, OpFn, Vec<Tensor>) {
    let inputs = shapes.iter().map(|s| x(s)).collect();
    (name, Box::new(f), inputs)
}

fn table() -> Vec<(&'static str, OpFn, Vec<Tensor>)> {
    vec![
        case("add_broadcast", |t| &t[0] + &t[1], &[&[0, 7], &[7]]),
        case("sub_zero_columns", |t| &t[0] - &t[1], &[&[3, 0], &[3, 1]]),
        case("mul", |t| &t[0] * &t[1], &[&[0, 4], &[0, 4]]),
        case(
            "div_broadcast",
            |t| &t[0] / &t[1].abs().add_scalar(1.0),
            &[&[0, 4], &[4]],
        ),
        case("relu", |t| t[0].relu(), &[&[0, 5]]),
        case("sigmoid", |t| t[0].sigmoid(), &[&[0, 5]]),
        case("tanh", |t| t[0].tanh(), &[&[5, 0]]),
        case("exp", |t| t[0].exp(), &[&[0, 5]]),
        case("gelu", |t| t[0].gelu(), &[&[0, 5]]),
        case(
            "sqrt_abs",
            |t| t[0].abs().add_scalar(1.0).sqrt(),
            &[&[0, 5]],
        ),
        case("pow_scalar", |t| t[0].pow_scalar(2.0), &[&[2, 0]]),
        case("clamp", |t| t[0].clamp(-0.5, 0.5), &[&[0, 5]]),
        case("add_scalar", |t| t[0].add_scalar(1.5), &[&[0, 5]]),
        case("softmax_rows", |t| t[0].softmax(1), &[&[0, 5]]),
        case("softmax_empty_rows", |t| t[0].softmax(1), &[&[2, 0]]),
        case("softmax_dim0", |t| t[0].softmax(0), &[&[0, 5]]),
        case(
            "log_softmax_empty_rows",
            |t| t[0].log_softmax(1),
            &[&[2, 0]],
        ),
        case("sum_all", |t| t[0].sum_all(), &[&[0, 3]]),
        case("sum_dim0", |t| t[0].sum(&[0], false), &[&[0, 3]]),
        case("sum_dim1", |t| t[0].sum(&[1], false), &[&[0, 3]]),
        case("mean_empty_dim", |t| t[0].mean(&[1], false), &[&[4, 0]]),
        case("mean_all", |t| t[0].mean_all(), &[&[0, 3]]),
        case(
            "max_dim_of_empty_rows",
            |t| t[0].max_dim(1, false).0,
            &[&[0, 3]],
        ),
        case(
            "logsumexp_rows",
            |t| t[0].logsumexp(&[1], false),
            &[&[0, 3]],
        ),
        case(
            "logsumexp_empty_dim",
            |t| t[0].logsumexp(&[1], false),
            &[&[2, 0]],
        ),
        case("var_rows", |t| t[0].var(&[1], true, false), &[&[0, 3]]),
        case("cumsum", |t| t[0].cumsum(0), &[&[0, 3]]),
        case(
            "matmul_no_rows",
            |t| t[0].matmul(&t[1]),
            &[&[0, 3], &[3, 4]],
        ),
        case(
            "matmul_empty_inner",
            |t| t[0].matmul(&t[1]),
            &[&[2, 0], &[0, 4]],
        ),
        case(
            "matmul_no_columns",
            |t| t[0].matmul(&t[1]),
            &[&[2, 3], &[3, 0]],
        ),
        case(
            "bmm_no_batches",
            |t| t[0].bmm(&t[1]),
            &[&[0, 2, 3], &[0, 3, 4]],
        ),
        case(
            "linear",
            |t| F::linear(&t[0], &t[1], Some(&t[2])),
            &[&[0, 4], &[3, 4], &[3]],
        ),
        case(
            "conv2d",
            |t| F::conv2d(&t[0], &t[1], Some(&t[2]), &F::Conv2dArgs::default()),
            &[&[0, 3, 8, 8], &[4, 3, 3, 3], &[4]],
        ),
        case("max_pool2d", |t| F::max_pool2d(&t[0], 2), &[&[0, 2, 4, 4]]),
        case("avg_pool2d", |t| F::avg_pool2d(&t[0], 2), &[&[0, 2, 4, 4]]),
        case(
            "adaptive_avg_pool2d",
            |t| F::adaptive_avg_pool2d(&t[0], [1, 1]),
            &[&[0, 2, 4, 4]],
        ),
        case(
            "layer_norm",
            |t| F::layer_norm(&t[0], &[5], Some(&t[1]), Some(&t[2]), 1e-5),
            &[&[0, 5], &[5], &[5]],
        ),
        case(
            "cat",
            |t| Tensor::cat(&[&t[0], &t[1]], 0),
            &[&[0, 3], &[2, 3]],
        ),
        case(
            "stack",
            |t| Tensor::stack(&[&t[0], &t[1]], 0),
            &[&[0, 3], &[0, 3]],
        ),
        case("reshape", |t| t[0].reshape(&[0, 2, 3]), &[&[0, 6]]),
        case("permute", |t| t[0].permute(&[2, 0, 1]), &[&[0, 2, 3]]),
        case(
            "transpose_contiguous",
            |t| t[0].t().contiguous(),
            &[&[0, 3]],
        ),
        case("flatten", |t| t[0].flatten(0, -1), &[&[2, 0, 3]]),
        case("expand", |t| t[0].expand(&[0, 4]), &[&[0, 1]]),
        case("narrow_to_nothing", |t| t[0].narrow(0, 2, 0), &[&[5, 3]]),
        case(
            "index_select_no_indices",
            |t| t[0].index_select(0, &idx(vec![], &[0])),
            &[&[3, 4]],
        ),
        case(
            "index_select_of_empty",
            |t| t[0].index_select(1, &idx(vec![0, 1], &[2])),
            &[&[0, 4]],
        ),
        case(
            "gather_no_columns",
            |t| t[0].gather(1, &idx(vec![], &[3, 0])),
            &[&[3, 4]],
        ),
        case(
            "embedding_no_ids",
            |t| F::embedding(&idx(vec![], &[2, 0]), &t[0]),
            &[&[10, 3]],
        ),
        case(
            "where",
            |t| Tensor::where_cond(&t[0].gt_scalar(0.0), &t[0], &t[1]),
            &[&[0, 3], &[3]],
        ),
        case(
            "masked_fill",
            |t| t[0].masked_fill(&t[0].gt_scalar(0.0), 0.0),
            &[&[0, 3]],
        ),
        case(
            "cross_entropy_mean",
            |t| F::cross_entropy(&t[0], &idx(vec![], &[0])),
            &[&[0, 5]],
        ),
        case(
            "cross_entropy_sum",
            |t| {
                let args = CrossEntropyArgs {
                    reduction: Reduction::Sum,
                    ..CrossEntropyArgs::default()
                };
                F::cross_entropy_with(&t[0], &idx(vec![], &[0]), &args)
            },
            &[&[0, 5]],
        ),
        case(
            "mse_loss_mean",
            |t| F::mse_loss(&t[0], &t[1], Reduction::Mean),
            &[&[0, 3], &[0, 3]],
        ),
        case("sort_rows", |t| t[0].sort(1, false).0, &[&[0, 3]]),
        case("topk_none", |t| t[0].topk(0, 1, true).0, &[&[4, 3]]),
        case("pad", |t| F::pad(&t[0], &[1, 1], 0.0), &[&[0, 3]]),
        case("repeat", |t| t[0].repeat(&[2, 3]), &[&[0, 2]]),
        case("to_float32", |t| t[0].to_dtype(DType::F32), &[&[0, 3]]),
    ]
}

fn expected() -> serde_json::Value {
    let text = include_str!("fixtures/zero_size/expected.json");
    serde_json::from_str(text).expect("expected.json")
}

fn number(v: &serde_json::Value) -> f64 {
    match v.as_str() {
        Some("nan") => f64::NAN,
        Some("inf") => f64::INFINITY,
        Some("-inf") => f64::NEG_INFINITY,
        _ => v.as_f64().expect("a number"),
    }
}

#[test]
fn every_op_takes_zero_length_dims_forward_and_backward_as_pytorch() {
    let expected = expected();
    let cases = table();
    assert_eq!(
        cases.len(),
        expected.as_object().expect("an object").len(),
        "the table and expected.json list the same cases"
    );
    let mut failures = Vec::new();
    for (name, f, inputs) in cases {
        let want = &expected[name];
        assert!(!want.is_null(), "{name} is not in expected.json");
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let y = f(&inputs);
            let sum = y.to_dtype(DType::F64).sum_all().item::<f64>();
            y.to_dtype(DType::F64).sum_all().backward();
            let grads: Vec<Option<Vec<usize>>> = inputs
                .iter()
                .map(|t| t.grad().map(|g| g.shape().to_vec()))
                .collect();
            (y.shape().to_vec(), sum, grads)
        }));
        let (shape, sum, grads) = match run {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{name}: panicked: {msg}"));
                continue;
            }
        };
        let want_shape: Vec<usize> = serde_json::from_value(want["shape"].clone()).expect("shape");
        let want_sum = number(&want["sum"]);
        let want_grads: Vec<Option<Vec<usize>>> =
            serde_json::from_value(want["grads"].clone()).expect("grads");
        if shape != want_shape {
            failures.push(format!("{name}: shape {shape:?}, PyTorch {want_shape:?}"));
        }
        let same_sum = (sum.is_nan() && want_sum.is_nan())
            || sum == want_sum
            || (sum - want_sum).abs() <= 1e-12 * want_sum.abs().max(1.0);
        if !same_sum {
            failures.push(format!("{name}: sum {sum}, PyTorch {want_sum}"));
        }
        if grads != want_grads {
            failures.push(format!(
                "{name}: gradients {grads:?}, PyTorch {want_grads:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
