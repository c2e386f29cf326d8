//! The nn functionals' cases: convolutions, normalisations, fused ops, losses, pooling and
//! resampling, padding, rearrangements, lookups.

use super::*;

/// The nn functionals' cases.
pub(super) fn cases() -> Vec<(&'static str, OpFn, Vec<Tensor>)> {
    let idx = |v: Vec<i64>, shape: &[usize]| Tensor::from_vec(v, shape);
    vec![
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
