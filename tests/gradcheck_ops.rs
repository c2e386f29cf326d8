//! Every differentiable op passes a finite-difference gradient check in f64, on shapes
//! that broadcast and on non-contiguous views (transposed, strided, expanded inputs).

use ferrograd::autograd::{gradcheck, gradcheck_with};
use ferrograd::prelude::*;

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
    let idx = |v: Vec<i64>, shape: &[usize]| Tensor::from_vec(v, shape);
    vec![
        // binary, with broadcasting and non-contiguous operands
        case(
            "add_broadcast",
            |x| &x[0] + &x[1],
            vec![input(&[3, 4], 1), input(&[4], 2)],
        ),
        case(
            "add_transposed",
            |x| &x[0].t() + &x[1],
            vec![input(&[4, 3], 1), input(&[3, 1], 2)],
        ),
        case(
            "sub_broadcast",
            |x| &x[0] - &x[1],
            vec![input(&[2, 1, 3], 1), input(&[4, 1], 2)],
        ),
        case(
            "mul_broadcast",
            |x| &x[0] * &x[1],
            vec![input(&[3, 4], 1), input(&[3, 1], 2)],
        ),
        case(
            "mul_strided",
            |x| &x[0].slice(1, 0, 6, 2) * &x[1],
            vec![input(&[3, 6], 1), input(&[3, 3], 2)],
        ),
        case(
            "div",
            |x| &x[0] / &x[1],
            vec![input(&[3, 4], 1), positive(&[4], 2)],
        ),
        case(
            "pow_tensor",
            |x| x[0].pow(&x[1]),
            vec![positive(&[3, 2], 1), input(&[2], 2)],
        ),
        case(
            "maximum",
            |x| x[0].maximum(&x[1]),
            vec![away_from_kinks(&[3, 4], 1), away_from_kinks(&[3, 4], 2)],
        ),
        case(
            "minimum",
            |x| x[0].minimum(&x[1]),
            vec![away_from_kinks(&[3, 4], 1), away_from_kinks(&[4], 2)],
        ),
        case(
            "scalar_ops",
            |x| (&x[0] * 3.0 - 1.0) / 2.0 + (1.0 - &x[0]),
            vec![input(&[5], 1)],
        ),
        case(
            "rdiv_scalar",
            |x| x[0].rdiv_scalar(2.0),
            vec![positive(&[5], 1)],
        ),
        // unary
        case("neg", |x| -&x[0], vec![input(&[3, 4], 1)]),
        case("abs", |x| x[0].abs(), vec![away_from_kinks(&[3, 4], 1)]),
        case("exp", |x| x[0].t().exp(), vec![input(&[3, 4], 1)]),
        case("log", |x| x[0].log(), vec![positive(&[3, 4], 1)]),
        case("sqrt", |x| x[0].sqrt(), vec![positive(&[3, 4], 1)]),
        case("rsqrt", |x| x[0].rsqrt(), vec![positive(&[3, 4], 1)]),
        case("sin", |x| x[0].sin(), vec![input(&[3, 4], 1)]),
        case("cos", |x| x[0].cos(), vec![input(&[3, 4], 1)]),
        case("tanh", |x| x[0].tanh(), vec![input(&[3, 4], 1)]),
        case("sigmoid", |x| x[0].sigmoid(), vec![input(&[3, 4], 1)]),
        case("relu", |x| x[0].relu(), vec![away_from_kinks(&[3, 4], 1)]),
        case("erf", |x| x[0].erf(), vec![input(&[3, 4], 1)]),
        case("gelu", |x| x[0].gelu(), vec![input(&[3, 4], 1)]),
        case("gelu_tanh", |x| x[0].gelu_tanh(), vec![input(&[3, 4], 1)]),
        case("silu", |x| x[0].silu(), vec![input(&[3, 4], 1)]),
        case(
            "clamp",
            |x| x[0].clamp(-0.5, 0.5),
            vec![away_from_kinks(&[3, 4], 1)],
        ),
        case(
            "leaky_relu elu hardsigmoid hardswish",
            |x| {
                x[0].leaky_relu(0.2)
                    + x[0].elu(1.3)
                    + x[0].mul_scalar(2.0).hardsigmoid()
                    + x[0].mul_scalar(2.0).hardswish()
            },
            vec![away_from_kinks(&[3, 4], 1)],
        ),
        case(
            "softplus mish",
            |x| x[0].softplus(2.0, 3.0) + x[0].mish() + x[0].mul_scalar(30.0).softplus(1.0, 20.0),
            vec![away_from_kinks(&[3, 4], 1)],
        ),
        case(
            "hardtanh relu6",
            |x| x[0].hardtanh(-0.5, 0.5) + x[0].mul_scalar(4.0).relu6(),
            vec![away_from_kinks(&[3, 4], 1)],
        ),
        case(
            "atan2_broadcast",
            |x| x[0].atan2(&x[1]),
            vec![input(&[3, 4], 1), input(&[4], 2)],
        ),
        case(
            "atan2_transposed",
            |x| x[0].t().atan2(&x[1]),
            vec![input(&[4, 3], 1), input(&[3, 1], 2)],
        ),
        case(
            "pow_scalar",
            |x| x[0].pow_scalar(3.0) + x[0].abs().pow_scalar(1.5),
            vec![away_from_kinks(&[3, 4], 1)],
        ),
        case(
            "where",
            |x| Tensor::where_cond(&x[0].detach().gt_scalar(0.0), &x[0], &x[1]),
            vec![input(&[3, 4], 1), input(&[4], 2)],
        ),
        case(
            "masked_fill",
            |x| x[0].masked_fill(&x[0].detach().lt_scalar(0.0), 2.0),
            vec![input(&[3, 4], 1)],
        ),
        // views
        case(
            "reshape",
            |x| x[0].reshape(&[4, 3]) * &x[1],
            vec![input(&[3, 4], 1), input(&[4, 3], 2)],
        ),
        case(
            "reshape_noncontiguous",
            |x| x[0].t().reshape(&[12]),
            vec![input(&[3, 4], 1)],
        ),
        case(
            "permute",
            |x| x[0].permute(&[2, 0, 1]).exp(),
            vec![input(&[2, 3, 4], 1)],
        ),
        case(
            "transpose",
            |x| x[0].transpose(0, 2),
            vec![input(&[2, 3, 4], 1)],
        ),
        case(
            "squeeze_unsqueeze",
            |x| x[0].unsqueeze(1).squeeze(1).unsqueeze(-1),
            vec![input(&[3, 4], 1)],
        ),
        case(
            "expand",
            |x| x[0].expand(&[3, -1, 4]),
            vec![input(&[2, 1], 1)],
        ),
        case("narrow", |x| x[0].narrow(1, 1, 2), vec![input(&[3, 4], 1)]),
        case(
            "slice_step",
            |x| x[0].slice(0, 1, 5, 2),
            vec![input(&[5, 3], 1)],
        ),
        case("select", |x| x[0].select(1, 2), vec![input(&[3, 4], 1)]),
        case(
            "flatten",
            |x| x[0].flatten(1, 2),
            vec![input(&[2, 3, 4], 1)],
        ),
        case(
            "chunk",
            |x| {
                let c = x[0].chunk(2, 1);
                &c[0] * &c[1]
            },
            vec![input(&[3, 4], 1)],
        ),
        case(
            "cat",
            |x| Tensor::cat(&[&x[0], &x[1].t()], 0),
            vec![input(&[2, 3], 1), input(&[3, 4], 2)],
        ),
        case(
            "stack",
            |x| Tensor::stack(&[&x[0], &x[1]], 1),
            vec![input(&[2, 3], 1), input(&[2, 3], 2)],
        ),
        case(
            "contiguous",
            |x| x[0].t().contiguous(),
            vec![input(&[2, 3], 1)],
        ),
        // reductions
        case(
            "sum_dims",
            |x| x[0].sum(&[0, 2], false),
            vec![input(&[2, 3, 4], 1)],
        ),
        case(
            "sum_keepdim_transposed",
            |x| x[0].t().sum(&[1], true),
            vec![input(&[3, 4], 1)],
        ),
        case("mean", |x| x[0].mean(&[-1], false), vec![input(&[3, 4], 1)]),
        case(
            "max_dim",
            |x| x[0].max_dim(1, false).0,
            vec![input(&[3, 5], 1)],
        ),
        case(
            "min_dim_keepdim",
            |x| x[0].min_dim(0, true).0,
            vec![input(&[3, 5], 1)],
        ),
        case("max_all", |x| x[0].max_all(), vec![input(&[3, 5], 1)]),
        case(
            "var_unbiased",
            |x| x[0].var(&[1], true, false),
            vec![input(&[3, 5], 1)],
        ),
        case(
            "std",
            |x| x[0].std(&[0, 1], false, true),
            vec![input(&[3, 5], 1)],
        ),
        case("prod", |x| x[0].prod(1, false), vec![positive(&[3, 4], 1)]),
        case(
            "logsumexp",
            |x| x[0].logsumexp(&[1], false),
            vec![input(&[3, 5], 1)],
        ),
        case("softmax", |x| x[0].softmax(1), vec![input(&[3, 5], 1)]),
        case(
            "softmax_dim0_transposed",
            |x| x[0].t().softmax(0),
            vec![input(&[3, 5], 1)],
        ),
        case(
            "log_softmax",
            |x| x[0].log_softmax(-1),
            vec![input(&[3, 5], 1)],
        ),
        case(
            "norm2",
            |x| x[0].norm(2.0, &[1], false),
            vec![input(&[3, 5], 1)],
        ),
        case(
            "norm3",
            |x| x[0].norm(3.0, &[], false),
            vec![away_from_kinks(&[3, 5], 1)],
        ),
        case("cumsum", |x| x[0].cumsum(1), vec![input(&[3, 5], 1)]),
        // linear algebra
        case(
            "matmul_2d",
            |x| x[0].matmul(&x[1]),
            vec![input(&[3, 4], 1), input(&[4, 2], 2)],
        ),
        case(
            "matmul_transposed",
            |x| x[0].t().matmul(&x[1].t()),
            vec![input(&[4, 3], 1), input(&[2, 4], 2)],
        ),
        case(
            "matmul_batched_broadcast",
            |x| x[0].matmul(&x[1]),
            vec![input(&[2, 1, 3, 4], 1), input(&[3, 4, 2], 2)],
        ),
        case(
            "matmul_3d_by_2d",
            |x| x[0].matmul(&x[1]),
            vec![input(&[2, 3, 4], 1), input(&[4, 2], 2)],
        ),
        case(
            "matmul_vec",
            |x| x[0].matmul(&x[1]) + x[1].matmul(&x[2]),
            vec![input(&[3, 4], 1), input(&[4], 2), input(&[4], 3)],
        ),
        case(
            "bmm",
            |x| x[0].bmm(&x[1]),
            vec![input(&[2, 3, 4], 1), input(&[2, 4, 5], 2)],
        ),
        // indexing
        case(
            "index_select",
            move |x| x[0].index_select(0, &idx(vec![2, 0, 2], &[3])),
            vec![input(&[3, 4], 1)],
        ),
        case(
            "gather",
            move |x| x[0].gather(1, &idx(vec![0, 2, 1, 1, 0, 0], &[3, 2])),
            vec![input(&[3, 4], 1)],
        ),
        case(
            "scatter_add",
            move |x| x[0].scatter_add(0, &idx(vec![1, 0, 1, 1], &[2, 2]), &x[1]),
            vec![input(&[2, 3], 1), input(&[2, 2], 2)],
        ),
        case(
            "index_add",
            move |x| x[0].index_add(1, &idx(vec![0, 0], &[2]), &x[1]),
            vec![input(&[2, 3], 1), input(&[2, 2], 2)],
        ),
        case(
            "tril_triu",
            |x| x[0].tril(0) + x[0].triu(1) * 2.0,
            vec![input(&[3, 3], 1)],
        ),
        case(
            "deep_copy",
            |x| x[0].deep_copy() * &x[0],
            vec![input(&[3], 1)],
        ),
        // nn functionals
        case(
            "conv2d",
            |x| {
                F::conv2d(
                    &x[0],
                    &x[1],
                    Some(&x[2]),
                    &F::Conv2dArgs::default().padding(1),
                )
            },
            vec![
                input(&[2, 2, 4, 4], 1),
                input(&[3, 2, 3, 3], 2),
                input(&[3], 3),
            ],
        ),
        case(
            "conv2d_stride_dilation_groups",
            |x| {
                F::conv2d(
                    &x[0],
                    &x[1],
                    None,
                    &F::Conv2dArgs {
                        stride: [2, 1],
                        padding: [1, 2],
                        dilation: [1, 2],
                        groups: 2,
                    },
                )
            },
            vec![input(&[1, 4, 5, 5], 1), input(&[2, 2, 2, 3], 2)],
        ),
        // One input channel per group: the direct depthwise kernels.
        case(
            "conv2d_depthwise",
            |x| {
                F::conv2d(
                    &x[0],
                    &x[1],
                    Some(&x[2]),
                    &F::Conv2dArgs::default().padding(1).groups(3),
                )
            },
            vec![
                input(&[2, 3, 5, 4], 1),
                input(&[3, 1, 3, 3], 2),
                input(&[3], 3),
            ],
        ),
        case(
            "conv2d_depthwise_multiplier_stride_dilation",
            |x| {
                F::conv2d(
                    &x[0],
                    &x[1],
                    None,
                    &F::Conv2dArgs {
                        stride: [2, 1],
                        padding: [1, 2],
                        dilation: [1, 2],
                        groups: 2,
                    },
                )
            },
            vec![input(&[2, 2, 6, 5], 1), input(&[4, 1, 3, 2], 2)],
        ),
        case(
            "conv1d",
            |x| {
                F::conv1d(
                    &x[0],
                    &x[1],
                    Some(&x[2]),
                    &F::Conv1dArgs::default().stride(2).padding(1),
                )
            },
            vec![input(&[2, 3, 7], 1), input(&[2, 3, 3], 2), input(&[2], 3)],
        ),
        case(
            "max_pool2d",
            |x| F::max_pool2d(&x[0], 2),
            vec![input(&[1, 2, 4, 4], 1)],
        ),
        case(
            "max_pool2d_padded",
            |x| F::max_pool2d_with(&x[0], &F::Pool2dArgs::new(3).stride(2).padding(1)),
            vec![input(&[1, 1, 5, 5], 1)],
        ),
        case(
            "avg_pool2d",
            |x| F::avg_pool2d_with(&x[0], &F::Pool2dArgs::new(2).stride(1).padding(1)),
            vec![input(&[1, 2, 3, 3], 1)],
        ),
        case(
            "adaptive_avg_pool2d",
            |x| F::adaptive_avg_pool2d(&x[0], [2, 3]),
            vec![input(&[1, 2, 5, 5], 1)],
        ),
        case(
            "adaptive_avg_pool2d_global",
            |x| F::adaptive_avg_pool2d(&x[0], [1, 1]),
            vec![input(&[2, 3, 4, 5], 1)],
        ),
        case(
            "pad",
            |x| F::pad(&x[0], &[1, 2, 0, 1], 0.5),
            vec![input(&[2, 3], 1)],
        ),
        case(
            "layer_norm",
            |x| F::layer_norm(&x[0], &[4], Some(&x[1]), Some(&x[2]), 1e-5),
            vec![input(&[3, 4], 1), input(&[4], 2), input(&[4], 3)],
        ),
        case(
            "batch_norm_train",
            |x| F::batch_norm(&x[0], None, None, Some(&x[1]), Some(&x[2]), true, 0.1, 1e-5),
            vec![input(&[4, 3, 2], 1), input(&[3], 2), input(&[3], 3)],
        ),
        // The fused norm + ReLU: the mask recomputed from the input in the backward.
        case(
            "batch_norm_relu_train",
            |x| F::batch_norm_relu(&x[0], None, None, Some(&x[1]), Some(&x[2]), true, 0.1, 1e-5),
            vec![input(&[4, 3, 2], 1), input(&[3], 2), input(&[3], 3)],
        ),
        case(
            "batch_norm_relu_eval",
            |x| {
                let rm = Tensor::from_vec(vec![0.5f64, -1.0, 2.0], &[3]);
                let rv = Tensor::from_vec(vec![1.5f64, 0.25, 4.0], &[3]);
                F::batch_norm_relu(
                    &x[0],
                    Some(&rm),
                    Some(&rv),
                    Some(&x[1]),
                    Some(&x[2]),
                    false,
                    0.1,
                    1e-5,
                )
            },
            vec![input(&[4, 3, 2], 1), input(&[3], 2), input(&[3], 3)],
        ),
        // One element per plane ([N, C], BatchNorm1d): the composed ops.
        case(
            "batch_norm_train_1d",
            |x| F::batch_norm(&x[0], None, None, Some(&x[1]), Some(&x[2]), true, 0.1, 1e-5),
            vec![input(&[5, 3], 1), input(&[3], 2), input(&[3], 3)],
        ),
        // Eval: the running statistics folded into one per-channel affine pass.
        case(
            "batch_norm_eval",
            |x| {
                let rm = Tensor::from_vec(vec![0.5f64, -1.0, 2.0], &[3]);
                let rv = Tensor::from_vec(vec![1.5f64, 0.25, 4.0], &[3]);
                F::batch_norm(
                    &x[0],
                    Some(&rm),
                    Some(&rv),
                    Some(&x[1]),
                    Some(&x[2]),
                    false,
                    0.1,
                    1e-5,
                )
            },
            vec![input(&[4, 3, 2], 1), input(&[3], 2), input(&[3], 3)],
        ),
        case(
            "embedding",
            move |x| F::embedding(&idx(vec![1, 0, 1, 2], &[2, 2]), &x[0]),
            vec![input(&[3, 2], 1)],
        ),
        case(
            "cross_entropy",
            move |x| F::cross_entropy(&x[0], &idx(vec![1, 0, 3], &[3])),
            vec![input(&[3, 4], 1)],
        ),
        case(
            "cross_entropy_weighted_smoothed",
            move |x| {
                let args = F::CrossEntropyArgs {
                    weight: Some(Tensor::from_vec(vec![1.0f64, 2.0, 0.5, 1.0], &[4])),
                    ignore_index: 2,
                    label_smoothing: 0.1,
                    ..Default::default()
                };
                F::cross_entropy_with(&x[0], &idx(vec![1, 2, 3], &[3]), &args)
            },
            vec![input(&[3, 4], 1)],
        ),
        case(
            "cross_entropy_spatial",
            move |x| F::cross_entropy(&x[0], &idx(vec![0, 1, 2, 0], &[1, 2, 2])),
            vec![input(&[1, 3, 2, 2], 1)],
        ),
        case(
            "cross_entropy_probabilities",
            |x| F::cross_entropy(&x[0], &x[1].softmax(1)),
            vec![input(&[3, 4], 1), input(&[3, 4], 2).detach()],
        ),
        case(
            "nll_loss",
            move |x| F::nll_loss(&x[0].log_softmax(1), &idx(vec![2, 0], &[2])),
            vec![input(&[2, 3], 1)],
        ),
        case(
            "mse_loss",
            |x| F::mse_loss(&x[0], &x[1], F::Reduction::Sum),
            vec![input(&[3, 4], 1), input(&[3, 4], 2)],
        ),
        case(
            "bce_with_logits",
            |x| F::binary_cross_entropy_with_logits(&x[0], &x[1].sigmoid(), F::Reduction::Mean),
            vec![input(&[3, 4], 1), input(&[3, 4], 2).detach()],
        ),
        case(
            "linear",
            |x| F::linear(&x[0], &x[1], Some(&x[2])),
            vec![input(&[2, 3], 1), input(&[4, 3], 2), input(&[4], 3)],
        ),
        // The fused linear node: batched rows from a transposed view, a transposed
        // weight, and no bias.
        case(
            "linear_3d_views",
            |x| F::linear(&x[0].transpose(0, 1), &x[1].t(), Some(&x[2])),
            vec![input(&[3, 2, 5], 1), input(&[5, 4], 2), input(&[4], 3)],
        ),
        case(
            "linear_no_bias",
            |x| F::linear(&x[0], &x[1], None),
            vec![input(&[2, 2, 3], 1), input(&[4, 3], 2)],
        ),
        // order statistics, selection, products
        case("sort", |x| x[0].sort(1, true).0, vec![input(&[3, 5], 1)]),
        case("topk", |x| x[0].topk(2, 0, true).0, vec![input(&[4, 3], 1)]),
        case(
            "kthvalue",
            |x| x[0].kthvalue(2, 1, true).0,
            vec![input(&[3, 4], 1)],
        ),
        case("cummax", |x| x[0].cummax(1).0, vec![input(&[3, 5], 1)]),
        case("cummin", |x| x[0].cummin(0).0, vec![input(&[4, 3], 1)]),
        case(
            "masked_select",
            |x| x[0].masked_select(&Tensor::from_vec(vec![true, false, true], &[3])),
            vec![input(&[2, 3], 1)],
        ),
        case(
            "einsum_contract",
            |x| Tensor::einsum("bij,bjk,k->bi", &[&x[0], &x[1], &x[2]]),
            vec![input(&[2, 3, 4], 1), input(&[2, 4, 5], 2), input(&[5], 3)],
        ),
        case(
            "outer",
            |x| x[0].outer(&x[1]),
            vec![input(&[3], 1), input(&[4], 2)],
        ),
        case(
            "baddbmm",
            |x| x[0].baddbmm(&x[1], &x[2], 0.5, 2.0),
            vec![
                input(&[3, 1], 1),
                input(&[2, 3, 4], 2),
                input(&[2, 4, 2], 3),
            ],
        ),
        case(
            "lerp",
            |x| x[0].lerp(&x[1], &x[2]),
            vec![input(&[3, 4], 1), input(&[3, 4], 2), input(&[4], 3)],
        ),
        case(
            "nan_to_num",
            |x| x[0].add(&x[1]).nan_to_num(0.0, Some(5.0), None),
            vec![
                input(&[4], 1),
                Tensor::from_vec(vec![f64::INFINITY, 0.0, f64::NAN, f64::NEG_INFINITY], &[4]),
            ],
        ),
        // losses
        case(
            "smooth_l1_loss",
            |x| F::smooth_l1_loss(&x[0], &x[1], F::Reduction::Mean, 0.5),
            vec![input(&[3, 4], 1), input(&[3, 4], 2)],
        ),
        case(
            "huber_loss",
            |x| F::huber_loss(&x[0], &x[1], F::Reduction::Sum, 0.7),
            vec![input(&[3, 4], 1), input(&[3, 4], 2)],
        ),
        case(
            "l1_loss",
            |x| F::l1_loss(&x[0], &x[1], F::Reduction::Mean),
            vec![
                away_from_kinks(&[3, 4], 1),
                Tensor::zeros(&[3, 4], DType::F64, &Device::Cpu),
            ],
        ),
        case(
            "binary_cross_entropy",
            |x| F::binary_cross_entropy(&x[0].sigmoid(), &x[1], Some(&x[2]), F::Reduction::Mean),
            vec![
                input(&[3, 4], 1),
                positive(&[3, 4], 2).mul_scalar(0.5).detach(),
                positive(&[4], 3).detach(),
            ],
        ),
        case(
            "bce_with_logits_weighted",
            |x| {
                F::binary_cross_entropy_with_logits_weighted(
                    &x[0],
                    &x[1],
                    None,
                    Some(&x[2]),
                    F::Reduction::Sum,
                )
            },
            vec![
                input(&[3, 4], 1),
                positive(&[3, 4], 2).mul_scalar(0.5).detach(),
                positive(&[4], 3).detach(),
            ],
        ),
        case(
            "kl_div",
            |x| {
                F::kl_div(
                    &x[0].log_softmax(1),
                    &x[1].softmax(1),
                    F::KlReduction::BatchMean,
                    false,
                )
            },
            vec![input(&[3, 5], 1), input(&[3, 5], 2)],
        ),
        case(
            "kl_div_log_target",
            |x| {
                F::kl_div(
                    &x[0].log_softmax(1),
                    &x[1].log_softmax(1),
                    F::KlReduction::Sum,
                    true,
                )
            },
            vec![input(&[3, 5], 1), input(&[3, 5], 2)],
        ),
        case(
            "cosine_embedding_loss",
            |x| {
                let y = Tensor::from_vec(vec![1.0f64, -1.0, -1.0, 1.0], &[4]);
                F::cosine_embedding_loss(&x[0], &x[1], &y, -0.9, F::Reduction::Mean)
            },
            vec![input(&[4, 3], 1), input(&[4, 3], 2)],
        ),
        case(
            "triplet_margin_loss",
            |x| {
                F::triplet_margin_loss(
                    &x[0],
                    &x[1],
                    &x[2],
                    5.0,
                    2.0,
                    1e-6,
                    true,
                    F::Reduction::Mean,
                )
            },
            vec![input(&[4, 3], 1), input(&[4, 3], 2), input(&[4, 3], 3)],
        ),
        case(
            "margin_ranking_loss",
            |x| {
                let y = Tensor::from_vec(vec![1.0f64, -1.0, 1.0], &[3]);
                F::margin_ranking_loss(&x[0], &x[1], &y, 10.0, F::Reduction::Sum)
            },
            vec![input(&[3], 1), input(&[3], 2)],
        ),
        // pooling and resampling
        case(
            "max_pool2d_ceil",
            |x| {
                F::max_pool2d_with(
                    &x[0],
                    &F::Pool2dArgs::new(3).stride(2).padding(1).ceil_mode(true),
                )
            },
            vec![input(&[1, 2, 6, 5], 1)],
        ),
        case(
            "avg_pool2d_ceil_exclude_pad",
            |x| {
                let args = F::Pool2dArgs::new(3)
                    .stride(2)
                    .padding(1)
                    .ceil_mode(true)
                    .count_include_pad(false);
                F::avg_pool2d_with(&x[0], &args)
            },
            vec![input(&[1, 2, 6, 5], 1)],
        ),
        case(
            "avg_pool1d",
            |x| F::avg_pool1d(&x[0], &F::Pool1dArgs::new(3).stride(2).padding(1)),
            vec![input(&[2, 2, 7], 1)],
        ),
        case(
            "adaptive_max_pool2d",
            |x| F::adaptive_max_pool2d(&x[0], [2, 3]),
            vec![input(&[1, 2, 5, 7], 1)],
        ),
        case(
            "interpolate_bilinear",
            |x| {
                F::interpolate(
                    &x[0],
                    &F::InterpolateSize::Size(vec![5, 3]),
                    F::InterpolateMode::Linear {
                        align_corners: false,
                    },
                )
            },
            vec![input(&[1, 2, 3, 4], 1)],
        ),
        case(
            "interpolate_nearest",
            |x| {
                F::interpolate(
                    &x[0],
                    &F::InterpolateSize::Scale(vec![2.0]),
                    F::InterpolateMode::Nearest,
                )
            },
            vec![input(&[1, 2, 3], 1)],
        ),
        case(
            "pixel_shuffle",
            |x| F::pixel_shuffle(&x[0], 2),
            vec![input(&[1, 8, 2, 3], 1)],
        ),
        // rearrangements
        case("flip", |x| x[0].flip(&[0, 2]), vec![input(&[2, 3, 4], 1)]),
        case(
            "roll",
            |x| x[0].roll(&[2, -1], &[1, 0]),
            vec![input(&[3, 5], 1)],
        ),
        case(
            "roll_flat",
            |x| x[0].roll(&[3], &[]),
            vec![input(&[3, 5], 1)],
        ),
        case(
            "repeat",
            |x| x[0].repeat(&[2, 1, 3]),
            vec![input(&[2, 3], 1)],
        ),
        case(
            "repeat_interleave",
            |x| x[0].repeat_interleave(3, -1),
            vec![input(&[2, 3], 1)],
        ),
        case(
            "repeat_interleave_counts",
            |x| x[0].repeat_interleave_counts(&Tensor::from_vec(vec![2i64, 0, 3], &[3]), 0),
            vec![input(&[3, 2], 1)],
        ),
        // padding modes
        case(
            "pad_reflect",
            |x| F::pad_with(&x[0], &[2, 1, 1, 2], F::PadMode::Reflect),
            vec![input(&[1, 2, 4, 3], 1)],
        ),
        case(
            "pad_replicate",
            |x| F::pad_with(&x[0], &[3, 1], F::PadMode::Replicate),
            vec![input(&[2, 2, 3], 1)],
        ),
        case(
            "pad_circular",
            |x| F::pad_with(&x[0], &[1, 2, 2, 0], F::PadMode::Circular),
            vec![input(&[1, 1, 3, 3], 1)],
        ),
        // transposed convolutions
        case(
            "conv_transpose2d",
            |x| {
                let args = F::ConvTranspose2dArgs {
                    stride: [2, 1],
                    padding: [1, 0],
                    output_padding: [1, 0],
                    dilation: [1, 2],
                    groups: 2,
                };
                F::conv_transpose2d(&x[0], &x[1], Some(&x[2]), &args)
            },
            vec![
                input(&[2, 4, 3, 3], 1),
                input(&[4, 3, 2, 2], 2),
                input(&[6], 3),
            ],
        ),
        // One output channel per group (with a channel multiplier): the depthwise loops.
        case(
            "conv_transpose2d_depthwise",
            |x| {
                let args = F::ConvTranspose2dArgs {
                    stride: [2, 1],
                    padding: [1, 1],
                    output_padding: [1, 0],
                    dilation: [1, 2],
                    groups: 2,
                };
                F::conv_transpose2d(&x[0], &x[1], Some(&x[2]), &args)
            },
            vec![
                input(&[2, 4, 3, 4], 1),
                input(&[4, 1, 3, 2], 2),
                input(&[2], 3),
            ],
        ),
        case(
            "conv_transpose1d",
            |x| {
                let args = F::ConvTranspose1dArgs::default().stride(3).padding(1);
                F::conv_transpose1d(&x[0], &x[1], None, &args)
            },
            vec![input(&[2, 3, 4], 1), input(&[3, 2, 3], 2)],
        ),
        // normalisation
        case(
            "group_norm",
            |x| F::group_norm(&x[0], 2, Some(&x[1]), Some(&x[2]), 1e-5),
            vec![input(&[2, 4, 3], 1), input(&[4], 2), input(&[4], 3)],
        ),
        case(
            "instance_norm",
            |x| F::instance_norm(&x[0], None, None, Some(&x[1]), Some(&x[2]), true, 0.1, 1e-5),
            vec![input(&[2, 3, 2, 3], 1), input(&[3], 2), input(&[3], 3)],
        ),
        case(
            "rms_norm",
            |x| F::rms_norm(&x[0], &[2, 3], Some(&x[1]), None),
            vec![input(&[2, 2, 3], 1), input(&[2, 3], 2)],
        ),
        // affine and lookup
        case(
            "bilinear",
            |x| F::bilinear(&x[0], &x[1], &x[2], Some(&x[3])),
            vec![
                input(&[4, 3], 1),
                input(&[4, 2], 2),
                input(&[5, 3, 2], 3),
                input(&[5], 4),
            ],
        ),
        case(
            "embedding_bag_mean",
            |x| {
                let ids = Tensor::from_vec(vec![0i64, 2, 1, 2, 3], &[5]);
                let offsets = Tensor::from_vec(vec![0i64, 1, 1], &[3]);
                F::embedding_bag(
                    &ids,
                    &x[0],
                    Some(&offsets),
                    F::EmbeddingBagMode::Mean,
                    None,
                    false,
                    None,
                )
            },
            vec![input(&[4, 3], 1)],
        ),
        case(
            "embedding_bag_weighted_sum",
            |x| {
                let ids = Tensor::from_vec(vec![0i64, 2, 1, 2], &[2, 2]);
                F::embedding_bag(
                    &ids,
                    &x[0],
                    None,
                    F::EmbeddingBagMode::Sum,
                    Some(&x[1]),
                    false,
                    None,
                )
            },
            vec![input(&[4, 3], 1), input(&[2, 2], 2)],
        ),
        case(
            "embedding_bag_max",
            |x| {
                let ids = Tensor::from_vec(vec![0i64, 2, 1, 3], &[2, 2]);
                F::embedding_bag(
                    &ids,
                    &x[0],
                    None,
                    F::EmbeddingBagMode::Max,
                    None,
                    false,
                    None,
                )
            },
            vec![input(&[4, 3], 1)],
        ),
    ]
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
