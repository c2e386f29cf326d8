//! The tensor ops' cases: binary (broadcasting, non-contiguous operands), unary, views,
//! reductions, linear algebra and indexing.

use super::*;

/// The tensor ops' cases.
pub(super) fn cases() -> Vec<(&'static str, OpFn, Vec<Tensor>)> {
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
    ]
}
