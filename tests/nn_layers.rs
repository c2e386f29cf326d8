//! Layers are built as PyTorch builds them: the same state-dict entries (names, order,
//! parameter or buffer, shapes) and default initialisation as PyTorch's constructors
//! with the same arguments (tests/fixtures/layer_keys.txt, written by
//! make_layer_keys.py), plus the behaviour of their options and of `nn::init`.

use ferrograd::nn::init::{self, FanMode, Nonlinearity};
use ferrograd::nn::*;
use ferrograd::prelude::*;
use ferrograd::{get_num_threads, set_num_threads};

const KEYS: &str = include_str!("fixtures/layer_keys.txt");

fn layer(name: &str) -> Box<dyn Module> {
    let cpu = &Device::Cpu;
    let bn = |affine, track| BatchNorm2d::with_options(5, 1e-5, Some(0.1), affine, track, cpu);
    match name {
        "linear" => Box::new(Linear::new(20, 30, cpu)),
        "linear_no_bias" => Box::new(Linear::no_bias(20, 30, cpu)),
        "bilinear" => Box::new(Bilinear::new(5, 6, 7, true, cpu)),
        "conv1d" => Box::new(Conv1d::new(4, 6, 3, ConvOptions::default().groups(2), cpu)),
        "conv2d_no_bias" => Box::new(Conv2d::new(
            3,
            8,
            [3, 5],
            ConvOptions::default()
                .bias(false)
                .padding_same()
                .padding_mode(PaddingMode::Reflect),
            cpu,
        )),
        "conv_transpose1d" => Box::new(ConvTranspose1d::new(
            4,
            6,
            3,
            ConvTransposeOptions::default().groups(2),
            cpu,
        )),
        "conv_transpose2d" => Box::new(ConvTranspose2d::new(
            6,
            4,
            [2, 3],
            ConvTransposeOptions::default().stride(2).bias(false),
            cpu,
        )),
        "batch_norm1d" => Box::new(BatchNorm1d::new(5, cpu)),
        "batch_norm2d_no_affine" => Box::new(bn(false, true)),
        "batch_norm2d_no_stats" => Box::new(bn(true, false)),
        "instance_norm2d" => Box::new(InstanceNorm2d::new(5, cpu)),
        "instance_norm2d_affine_tracked" => Box::new(InstanceNorm2d::with_options(
            5,
            1e-5,
            Some(0.1),
            true,
            true,
            cpu,
        )),
        "group_norm" => Box::new(GroupNorm::new(2, 6, cpu)),
        "layer_norm" => Box::new(LayerNorm::new(&[3, 4], cpu)),
        "layer_norm_no_bias" => Box::new(LayerNorm::with_options(&[8], 1e-5, true, false, cpu)),
        "rms_norm" => Box::new(RMSNorm::new(&[3, 4], None, cpu)),
        "embedding" => Box::new(Embedding::new(10, 4, cpu).padding_idx(2)),
        "embedding_bag" => Box::new(EmbeddingBag::new(10, 4, F::EmbeddingBagMode::Sum, cpu)),
        "cross_entropy_loss" => Box::new(CrossEntropyLoss {
            weight: Some(Tensor::ones(&[3], DType::F32, cpu)),
            ..Default::default()
        }),
        "bce_with_logits_loss" => Box::new(BCEWithLogitsLoss {
            pos_weight: Some(Tensor::ones(&[3], DType::F32, cpu)),
            ..Default::default()
        }),
        other => panic!("no layer for fixture entry {other}"),
    }
}

#[test]
fn layers_have_pytorchs_state_dict_entries_and_default_init() {
    manual_seed(11);
    let mut names: Vec<&str> = Vec::new();
    for line in KEYS.lines().filter(|l| l.starts_with('#')) {
        names.push(line.split(' ').nth(1).unwrap());
    }
    assert!(names.len() >= 20);
    for name in names {
        let m = layer(name);
        let count_line = KEYS
            .lines()
            .find(|l| l.starts_with(&format!("# {name} ")))
            .unwrap();
        let count: usize = count_line.split(' ').nth(2).unwrap().parse().unwrap();
        assert_eq!(m.num_parameters(), count, "{name}: parameter count");
        let params: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
        let mut ours = Vec::new();
        m.visit("", &mut |k, t, _| ours.push((k.to_string(), t.clone())));
        let want: Vec<Vec<&str>> = KEYS
            .lines()
            .filter(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l.split(' ').collect())
            .collect();
        let got_names: Vec<&str> = ours.iter().map(|(k, _)| k.as_str()).collect();
        let want_names: Vec<&str> = want.iter().map(|w| w[1]).collect();
        assert_eq!(
            got_names, want_names,
            "{name}: state-dict keys in PyTorch's order"
        );
        for ((key, t), w) in ours.iter().zip(&want) {
            let kind = if params.contains(key) {
                "param"
            } else {
                "buffer"
            };
            assert_eq!(kind, w[2], "{name}.{key}: parameter or buffer");
            let shape: Vec<usize> = w[3]
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|d| d.parse().unwrap())
                .collect();
            assert_eq!(t.shape(), shape.as_slice(), "{name}.{key}: shape");
            let v = t.to_dtype(DType::F64).to_vec::<f64>();
            let (init, arg) = w[4].split_once(':').unwrap_or((w[4], ""));
            match init {
                "const" => {
                    let c: f64 = arg.parse().unwrap();
                    assert!(v.iter().all(|&x| x == c), "{name}.{key}: expected all {c}");
                }
                "uniform" => {
                    let b: f64 = arg.parse().unwrap();
                    let max = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                    assert!(
                        max <= b * (1.0 + 1e-6),
                        "{name}.{key}: |x| {max} above the bound {b}"
                    );
                    assert!(
                        max >= 0.4 * b,
                        "{name}.{key}: |x| {max} far below the bound {b}"
                    );
                }
                "normal" => {
                    let n = v.len() as f64;
                    let mean = v.iter().sum::<f64>() / n;
                    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
                    assert!(
                        (0.6..1.4).contains(&std),
                        "{name}.{key}: std {std} for N(0, 1)"
                    );
                }
                other => panic!("unknown init {other}"),
            }
        }
    }
}

#[test]
fn embedding_padding_row_starts_at_zero_and_gets_no_gradient() {
    let emb = Embedding::new(5, 3, &Device::Cpu).padding_idx(-1);
    assert_eq!(emb.options.padding_idx, Some(4));
    assert_eq!(emb.weight.select(0, 4).to_vec::<f32>(), vec![0.0; 3]);
    let ids = Tensor::from_vec(vec![4i64, 1, 4], &[3]);
    emb.forward(&ids).sum_all().backward();
    let g = emb.weight.grad().unwrap().to_vec::<f32>();
    assert_eq!(&g[12..15], &[0.0; 3], "padding row");
    assert_eq!(&g[3..6], &[1.0; 3], "looked-up row");
}

#[test]
fn batch_norm_without_running_stats_normalises_with_the_batch_in_eval() {
    let mut bn = BatchNorm2d::with_options(2, 0.0, Some(0.1), false, false, &Device::Cpu);
    bn.eval();
    let x = Tensor::randn(&[4, 2, 3, 3], DType::F64, &Device::Cpu).mul_scalar(5.0);
    let y = bn.forward(&x);
    let mean = y.mean(&[0, 2, 3], false).abs().max_all().item::<f64>();
    assert!(
        mean < 1e-12,
        "batch statistics are used in eval without running stats"
    );
}

#[test]
fn batch_norm_eval_is_the_same_with_and_without_autograd() {
    // Under `no_grad` the per-channel scale and shift are folded on the host; with
    // autograd they are tensor ops (so gradients reach the weight and bias). Same
    // operations in the same precision: the outputs agree bit for bit, for f32 and f64,
    // with and without the affine parameters, with and without the fused ReLU.
    for dtype in [DType::F32, DType::F64] {
        for affine in [true, false] {
            let cpu = &Device::Cpu;
            let mut bn = BatchNorm2d::with_options(3, 1e-3, Some(0.3), affine, true, cpu);
            bn.to_dtype(dtype);
            bn.train();
            // Running statistics away from 0 and 1, and weights away from 1 and 0.
            for _ in 0..3 {
                let x = Tensor::randn(&[4, 3, 5, 5], dtype, cpu)
                    .mul_scalar(3.0)
                    .add_scalar(1.5);
                no_grad(|| bn.forward(&x));
            }
            if affine {
                no_grad(|| {
                    for (_, p) in bn.named_parameters() {
                        p.copy_(&Tensor::randn(p.shape(), dtype, cpu));
                    }
                });
            }
            bn.eval();
            let x = Tensor::randn(&[2, 3, 4, 4], dtype, cpu);
            for relu in [false, true] {
                let run = |x: &Tensor| {
                    if relu {
                        bn.forward_relu(x)
                    } else {
                        bn.forward(x)
                    }
                };
                let recorded = run(&x);
                assert_eq!(
                    recorded.requires_grad_flag(),
                    affine,
                    "{dtype:?} affine {affine}"
                );
                let folded = no_grad(|| run(&x));
                let (a, b) = (
                    recorded.to_dtype(DType::F64).to_vec::<f64>(),
                    folded.to_dtype(DType::F64).to_vec::<f64>(),
                );
                assert_eq!(a, b, "{dtype:?} affine {affine} relu {relu}");
            }
        }
    }
}

#[test]
fn instance_norm_tracks_the_batch_average_of_instance_statistics() {
    let norm = InstanceNorm1d::with_options(1, 0.0, Some(1.0), false, true, &Device::Cpu);
    let x = Tensor::from_vec(vec![1.0f32, 3.0, 10.0, 30.0], &[2, 1, 2]);
    norm.forward(&x);
    // means 2 and 20, unbiased variances 2 and 200: averaged over the batch.
    assert_eq!(
        norm.running_mean.as_ref().unwrap().to_vec::<f32>(),
        vec![11.0]
    );
    assert_eq!(
        norm.running_var.as_ref().unwrap().to_vec::<f32>(),
        vec![101.0]
    );
}

#[test]
fn init_functions_give_pytorchs_distributions() {
    manual_seed(5);
    let cpu = &Device::Cpu;
    let w = Tensor::zeros(&[256, 128, 3, 3], DType::F64, cpu);
    init::kaiming_normal_(&w, 0.0, FanMode::FanOut, Nonlinearity::ReLU);
    let std = w.std(&[0, 1, 2, 3], true, false).item::<f64>();
    assert!((std - (2.0f64 / (256.0 * 9.0)).sqrt()).abs() < 1e-3);
    init::kaiming_uniform_(&w, 0.0, FanMode::FanIn, Nonlinearity::LeakyReLU(0.0));
    let bound = (6.0f64 / (128.0 * 9.0)).sqrt();
    assert!(w.abs().max_all().item::<f64>() <= bound);
    assert!(
        (init::calculate_gain(Nonlinearity::LeakyReLU(0.2)) - (2.0f64 / 1.04).sqrt()).abs() < 1e-12
    );

    for shape in [[7usize, 3], [3, 7]] {
        let q = Tensor::zeros(&shape, DType::F64, cpu);
        init::orthogonal_(&q, 2.0);
        let gram = if shape[0] < shape[1] {
            q.matmul(&q.t())
        } else {
            q.t().matmul(&q)
        };
        let eye = Tensor::eye(3, DType::F64, cpu).mul_scalar(4.0);
        assert!(gram.allclose(&eye, 1e-9, 1e-9), "orthogonal {shape:?}");
    }

    let t = Tensor::zeros(&[20000], DType::F64, cpu);
    init::trunc_normal_(&t, 1.0, 2.0, 0.0, 1.5);
    assert!(t.min_all().item::<f64>() >= 0.0 && t.max_all().item::<f64>() <= 1.5);
    // Mean of N(1, 4) truncated to [0, 1.5]: about 0.7578.
    assert!((t.mean_all().item::<f64>() - 0.7578).abs() < 0.01);

    let f = Tensor::zeros(&[1], DType::F32, cpu);
    let err = std::panic::catch_unwind(|| init::fan_in_and_fan_out(&f)).unwrap_err();
    assert!(
        err.downcast_ref::<String>()
            .unwrap()
            .contains("fewer than 2 dimensions")
    );
}

#[test]
fn thread_count_can_be_limited() {
    let before = get_num_threads();
    set_num_threads(1);
    assert_eq!(get_num_threads(), 1);
    let a = Tensor::randn(&[256, 256], DType::F32, &Device::Cpu);
    let single = a.matmul(&a).sum_all().item::<f32>();
    set_num_threads(0);
    assert_eq!(get_num_threads(), before);
    let multi = a.matmul(&a).sum_all().item::<f32>();
    assert!((single - multi).abs() <= 1e-3 * single.abs().max(1.0));
}

#[test]
fn sequential_lines_up_with_pytorch_indices_for_new_modules() {
    let cpu = &Device::Cpu;
    let net = Sequential::new()
        .append(Conv2d::new(
            3,
            8,
            3,
            ConvOptions::default().padding(1).bias(false),
            cpu,
        ))
        .append(GroupNorm::new(2, 8, cpu))
        .append(ReLU)
        .append(MaxPool2d {
            args: F::Pool2dArgs::new(2).ceil_mode(true),
        })
        .append(ConvTranspose2d::new(
            8,
            4,
            2,
            F::ConvTranspose2dArgs::default().stride(2),
            cpu,
        ))
        .append(Upsample {
            size: F::InterpolateSize::Scale(vec![2.0, 2.0]),
            mode: F::InterpolateMode::Nearest,
        })
        .append(Flatten::default())
        .append(Dropout::new(0.1));
    let keys: Vec<String> = net.state_dict().into_keys().collect();
    assert_eq!(
        keys,
        ["0.weight", "1.bias", "1.weight", "4.bias", "4.weight"]
    );
    let y = net.forward(&Tensor::randn(&[2, 3, 5, 5], DType::F32, cpu));
    assert_eq!(y.shape(), &[2, 4 * 12 * 12]);
}

/// The linear layer's fused node (one product with the bias added in place, one backward
/// of three products) gives the values and gradients of the product-and-add it replaces,
/// on a batch large enough that the bias pass runs on the pool; a shape mistake still
/// names the product.
#[test]
fn fused_linear_equals_matmul_plus_bias() {
    let mut rng = Generator::new(7);
    let x =
        Tensor::randn_with(&[6, 50, 96], DType::F32, &Device::Cpu, &mut rng).requires_grad(true);
    let w = Tensor::randn_with(&[80, 96], DType::F32, &Device::Cpu, &mut rng).requires_grad(true);
    let b = Tensor::randn_with(&[80], DType::F32, &Device::Cpu, &mut rng).requires_grad(true);
    let fused = F::linear(&x, &w, Some(&b));
    let plain = x.matmul(&w.t()).add(&b);
    assert_eq!(fused.shape(), &[6, 50, 80]);
    let close = |a: &Tensor, b: &Tensor, what: &str| {
        let (a, b) = (a.to_vec::<f32>(), b.to_vec::<f32>());
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!(
                (p - q).abs() <= 1e-4 * (1.0 + q.abs()),
                "{what}[{i}]: {p} vs {q}"
            );
        }
    };
    close(&fused, &plain, "y");
    let g = Tensor::randn_with(&[6, 50, 80], DType::F32, &Device::Cpu, &mut rng);
    let grads = |y: &Tensor| {
        let got =
            ferrograd::autograd::grad(&[y], &[&x, &w, &b], Some(std::slice::from_ref(&g)), false);
        got.into_iter()
            .map(|t| t.expect("a gradient"))
            .collect::<Vec<_>>()
    };
    for (what, (p, q)) in ["dx", "dw", "db"]
        .iter()
        .zip(grads(&fused).iter().zip(&grads(&plain)))
    {
        close(p, q, what);
    }
    let err = std::panic::catch_unwind(|| F::linear(&x, &w.narrow(1, 0, 95), None))
        .expect_err("a contracted-dim mismatch panics");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("matmul") && msg.contains("50x96 and 95x80"),
        "{msg}"
    );
}
