//! The device suite: one body per behaviour, run on every device by `test_device!`
//! (`<body>::cpu` and `<body>::cuda`; the CUDA test skips and says so without a GPU).
//! Each op runs on fresh random inputs on the device under test and is compared with the
//! CPU result within the dtype's tolerance; gradients are compared the same way, and
//! gradcheck runs on the device in f64.

use ferrograd::autograd::gradcheck;
use ferrograd::prelude::*;
use ferrograd::testing::{assert_close, test_device};
use std::sync::{Mutex, MutexGuard};

/// The global generator and the device's memory statistics are one per process, as
/// PyTorch's, and the test harness runs tests on several threads: every test here holds
/// this lock, so a seed set by one test is not consumed by another, and no other test
/// allocates device memory while one counts it.
static PROCESS_STATE: Mutex<()> = Mutex::new(());

fn process_lock() -> MutexGuard<'static, ()> {
    PROCESS_STATE.lock().unwrap_or_else(|e| e.into_inner())
}

type Op = fn(&[Tensor]) -> Tensor;

/// Inputs for one case: shapes, and whether each is positive (for log/sqrt/pow).
struct Case {
    name: &'static str,
    shapes: &'static [&'static [usize]],
    positive: bool,
    op: Op,
}

const fn case(name: &'static str, shapes: &'static [&'static [usize]], op: Op) -> Case {
    Case {
        name,
        shapes,
        positive: false,
        op,
    }
}

const fn positive(name: &'static str, shapes: &'static [&'static [usize]], op: Op) -> Case {
    Case {
        name,
        shapes,
        positive: true,
        op,
    }
}

/// Every differentiable float op of the runtime core, with broadcasting and views.
const FLOAT_CASES: &[Case] = &[
    case("add broadcast", &[&[4, 1, 5], &[3, 1]], |x| x[0].add(&x[1])),
    case("sub", &[&[3, 5], &[3, 5]], |x| x[0].sub(&x[1])),
    case("mul transposed", &[&[5, 3], &[3, 5]], |x| {
        x[0].t().mul(&x[1])
    }),
    positive("div", &[&[3, 5], &[5]], |x| x[0].div(&x[1])),
    positive("pow", &[&[3, 4], &[3, 4]], |x| x[0].pow(&x[1])),
    case("maximum", &[&[3, 4], &[4]], |x| x[0].maximum(&x[1])),
    case("minimum", &[&[3, 4], &[3, 1]], |x| x[0].minimum(&x[1])),
    case("scalar ops", &[&[6]], |x| {
        x[0].mul_scalar(3.0)
            .add_scalar(1.0)
            .div_scalar(2.0)
            .rsub_scalar(1.0)
    }),
    case("neg abs", &[&[7]], |x| x[0].neg().abs()),
    case("exp", &[&[3, 4]], |x| x[0].exp()),
    positive("log", &[&[3, 4]], |x| x[0].log()),
    positive("sqrt rsqrt", &[&[3, 4]], |x| x[0].sqrt().add(&x[0].rsqrt())),
    case("sin cos", &[&[3, 4]], |x| x[0].sin().mul(&x[0].cos())),
    case("tanh sigmoid", &[&[3, 4]], |x| {
        x[0].tanh().add(&x[0].sigmoid())
    }),
    case("relu gelu silu", &[&[3, 4]], |x| {
        x[0].relu()
            .add(&x[0].gelu())
            .add(&x[0].gelu_tanh())
            .add(&x[0].silu())
    }),
    case("clamp", &[&[3, 4]], |x| x[0].clamp(-0.5, 0.5)),
    case("hardtanh relu6", &[&[3, 4]], |x| {
        x[0].hardtanh(-0.5, 0.5).add(&x[0].mul_scalar(4.0).relu6())
    }),
    case("atan2", &[&[3, 4], &[4]], |x| x[0].atan2(&x[1])),
    case("leaky_relu elu softplus", &[&[3, 4]], |x| {
        x[0].leaky_relu(0.1)
            .add(&x[0].elu(1.0))
            .add(&x[0].softplus(1.0, 20.0))
    }),
    case("hardsigmoid hardswish mish", &[&[3, 4]], |x| {
        x[0].mul_scalar(3.0)
            .hardsigmoid()
            .add(&x[0].mul_scalar(3.0).hardswish())
            .add(&x[0].mish())
    }),
    case("where masked_fill", &[&[3, 4], &[3, 4]], |x| {
        let m = x[0].gt_scalar(0.0);
        Tensor::where_cond(&m, &x[0], &x[1]).masked_fill(&x[1].lt_scalar(-0.5), 2.0)
    }),
    case("sum mean", &[&[3, 4, 5]], |x| {
        x[0].sum(&[0, 2], false).add(&x[0].mean(&[0, 2], false))
    }),
    case("max min dim", &[&[3, 4, 5]], |x| {
        x[0].max_dim(1, false)
            .0
            .add(&x[0].min_dim(-1, false).0.sum(&[1], true))
    }),
    case("var std", &[&[4, 6]], |x| {
        x[0].var(&[1], true, false)
            .add(&x[0].std(&[0], false, false).sum_all())
    }),
    case("prod", &[&[3, 4]], |x| x[0].prod(1, false)),
    // Too few outputs to fill a GPU: the split reductions (32-column tiles with chunks
    // of a long strided dim, chunks of long rows), on positive inputs so the sums are far
    // from zero.
    positive("sum over a long strided dim", &[&[4096, 48]], |x| {
        x[0].sum(&[0], false)
    }),
    positive("mean over a middle dim", &[&[3, 300, 20]], |x| {
        x[0].mean(&[1], true)
    }),
    positive("sum of long rows", &[&[2, 40000]], |x| {
        x[0].sum(&[1], false)
    }),
    positive("prod over a strided dim", &[&[40, 3]], |x| {
        x[0].add_scalar(0.5).sqrt().prod(0, false)
    }),
    case("logsumexp", &[&[3, 4]], |x| x[0].logsumexp(&[1], true)),
    case("softmax", &[&[3, 7]], |x| x[0].softmax(-1)),
    case("log_softmax dim 0", &[&[5, 3]], |x| x[0].log_softmax(0)),
    case("softmax middle dim", &[&[2, 5, 3]], |x| x[0].softmax(1)),
    case("log_softmax long rows", &[&[3, 1500]], |x| {
        x[0].log_softmax(-1)
    }),
    case("norm", &[&[3, 4]], |x| x[0].norm(2.0, &[1], false)),
    case("cumsum", &[&[3, 4]], |x| x[0].cumsum(1)),
    case("matmul batched broadcast", &[&[2, 3, 4], &[4, 5]], |x| {
        x[0].matmul(&x[1])
    }),
    case("matmul vector", &[&[4], &[3, 4, 2]], |x| x[0].matmul(&x[1])),
    case("bmm transposed", &[&[2, 4, 3], &[2, 4, 5]], |x| {
        x[0].transpose(1, 2).bmm(&x[1])
    }),
    case("views", &[&[2, 3, 4]], |x| {
        x[0].permute(&[2, 0, 1])
            .slice(0, 1, 4, 2)
            .reshape(&[2, 6])
            .contiguous()
    }),
    case("cat stack", &[&[2, 3], &[2, 3]], |x| {
        Tensor::cat(&[&x[0], &x[1]], 1).add(&Tensor::stack(&[&x[0], &x[1]], 1).reshape(&[2, 6]))
    }),
    case("index_select gather", &[&[4, 5]], |x| {
        let i = Tensor::from_vec(vec![3i64, 0, 3], &[3])
            .to_device(&x[0].device())
            .unwrap();
        let g = Tensor::from_vec(vec![4i64, 0, 1, 2], &[4, 1])
            .to_device(&x[0].device())
            .unwrap();
        x[0].index_select(0, &i)
            .sum_all()
            .add(&x[0].gather(1, &g).sum_all())
    }),
    case("max_dim of a 0-dim tensor", &[&[]], |x| {
        // The index comes back on the input's device.
        let (values, index) = x[0].max_dim(0, false);
        values.add(&index.to_dtype(values.dtype()))
    }),
    case("scatter_add tril", &[&[4, 4], &[2, 4]], |x| {
        let i = Tensor::from_vec(vec![1i64, 1, 0, 3, 1, 1, 2, 0], &[2, 4])
            .to_device(&x[0].device())
            .unwrap();
        x[0].scatter_add(0, &i, &x[1]).tril(0)
    }),
    case("conv2d", &[&[2, 3, 7, 7], &[4, 3, 3, 3], &[4]], |x| {
        F::conv2d(
            &x[0],
            &x[1],
            Some(&x[2]),
            &F::Conv2dArgs::default().padding(1).stride(2),
        )
    }),
    case(
        "conv2d groups dilation",
        &[&[1, 4, 8, 8], &[6, 2, 3, 3]],
        |x| {
            F::conv2d(
                &x[0],
                &x[1],
                None,
                &F::Conv2dArgs::default().groups(2).dilation(2),
            )
        },
    ),
    case("pools", &[&[2, 3, 6, 6]], |x| {
        F::max_pool2d(&x[0], 2)
            .add(&F::avg_pool2d(&x[0], 2))
            .sum_all()
            .add(&F::adaptive_avg_pool2d(&x[0], [2, 2]).sum_all())
    }),
    case("pools ceil_mode and divisors", &[&[2, 3, 7, 6]], |x| {
        let args = F::Pool2dArgs::new(3).stride(2).padding(1).ceil_mode(true);
        F::max_pool2d_with(&x[0], &args)
            .add(&F::avg_pool2d_with(&x[0], &args))
            .add(&F::avg_pool2d_with(&x[0], &args.count_include_pad(false)))
            .add(&F::avg_pool2d_with(&x[0], &args.divisor_override(4)))
    }),
    case(
        "conv_transpose2d",
        &[&[2, 4, 3, 3], &[4, 3, 3, 2], &[6]],
        |x| {
            let args = F::ConvTranspose2dArgs::default()
                .stride(2)
                .padding(1)
                .output_padding(1)
                .groups(2);
            F::conv_transpose2d(&x[0], &x[1], Some(&x[2]), &args)
        },
    ),
    case("group_norm rms_norm", &[&[2, 6, 4], &[6], &[6]], |x| {
        F::group_norm(&x[0], 3, Some(&x[1]), Some(&x[2]), 1e-5).add(&F::rms_norm(
            &x[0],
            &[4],
            None,
            Some(1e-6),
        ))
    }),
    case(
        "interpolate pad_with pixel_shuffle",
        &[&[1, 4, 3, 4]],
        |x| {
            let up = F::interpolate(
                &x[0],
                &F::InterpolateSize::Size(vec![6, 5]),
                F::InterpolateMode::Linear {
                    align_corners: false,
                },
            );
            let padded = F::pad_with(&up, &[1, 2, 2, 1], F::PadMode::Reflect);
            padded.sum_all().add(&F::pixel_shuffle(&x[0], 2).sum_all())
        },
    ),
    case("sort topk cummax", &[&[3, 6]], |x| {
        x[0].sort(1, true)
            .0
            .add(&x[0].cummax(1).0)
            .sum_all()
            .add(&x[0].topk(2, 0, false).0.sum_all())
    }),
    case("einsum", &[&[2, 3, 4], &[4, 5]], |x| {
        Tensor::einsum("bij,jk->bik", &[&x[0], &x[1]])
    }),
    case("layer_norm", &[&[3, 8], &[8], &[8]], |x| {
        F::layer_norm(&x[0], &[8], Some(&x[1]), Some(&x[2]), 1e-5)
    }),
    case("cross_entropy", &[&[6, 5]], |x| {
        let t = Tensor::from_vec(vec![0i64, 4, 2, 2, 1, 3], &[6])
            .to_device(&x[0].device())
            .unwrap();
        F::cross_entropy(&x[0], &t)
    }),
    case("mse bce", &[&[3, 4], &[3, 4]], |x| {
        F::mse_loss(&x[0], &x[1], F::Reduction::Mean).add(&F::binary_cross_entropy_with_logits(
            &x[0],
            &x[1].sigmoid(),
            F::Reduction::Sum,
        ))
    }),
];

fn inputs(case: &Case, dtype: DType) -> Vec<Tensor> {
    case.shapes
        .iter()
        .map(|s| {
            let t = Tensor::randn(s, DType::F64, &Device::Cpu);
            let t = if case.positive {
                t.abs().add_scalar(0.5)
            } else {
                t
            };
            t.to_dtype(dtype)
        })
        .collect()
}

fn to(dev: &Device, ts: &[Tensor]) -> Vec<Tensor> {
    ts.iter()
        .map(|t| {
            t.to_device(dev)
                .unwrap_or_else(|e| panic!("moving to {dev}: {e}"))
                .requires_grad(t.dtype().is_float())
        })
        .collect()
}

/// Forward values and the gradients of every input agree with the CPU. Every case runs,
/// and the failure names all the cases that disagree.
fn ops_match_the_cpu_forward_and_backward(dev: &Device) {
    let _lock = process_lock();
    manual_seed(10);
    let mut failed = Vec::new();
    for dtype in [DType::F32, DType::F64] {
        for case in FLOAT_CASES {
            let host = inputs(case, dtype);
            let check = || {
                let (cpu_in, dev_in) = (to(&Device::Cpu, &host), to(dev, &host));
                let (expected, actual) = ((case.op)(&cpu_in), (case.op)(&dev_in));
                assert_eq!(
                    actual.device(),
                    *dev,
                    "{} ran on the wrong device",
                    case.name
                );
                assert_close(&actual, &expected, dtype);
                // Backward with the same upstream gradient on both devices.
                let g = Tensor::randn(expected.shape(), dtype, &Device::Cpu);
                expected.backward_with(&g);
                actual.backward_with(&g.to_device(dev).unwrap());
                for (i, (c, d)) in cpu_in.iter().zip(&dev_in).enumerate() {
                    match (c.grad(), d.grad()) {
                        (Some(gc), Some(gd)) => {
                            assert_eq!(gd.device(), *dev);
                            assert_close(&gd, &gc, dtype)
                        }
                        (None, None) => {}
                        _ => panic!("{}: input {i} got a gradient on one device only", case.name),
                    }
                }
            };
            if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!("{} ({dtype:?}): {msg}", case.name));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} cases disagree on {dev}:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
test_device!(ops_match_the_cpu_forward_and_backward);

/// Half types: forward parity of the ops that matter in mixed precision.
fn half_precision_ops_match_the_cpu(dev: &Device) {
    let _lock = process_lock();
    manual_seed(11);
    let cases = [
        "add broadcast",
        "mul transposed",
        "exp",
        "relu gelu silu",
        "sum mean",
        "softmax",
        "log_softmax dim 0",
        "matmul batched broadcast",
        "layer_norm",
        "cross_entropy",
    ];
    for dtype in [DType::F16, DType::BF16] {
        for case in FLOAT_CASES.iter().filter(|c| cases.contains(&c.name)) {
            let host = inputs(case, dtype);
            let expected = (case.op)(&host);
            let actual = (case.op)(&to(dev, &host));
            assert_eq!(actual.dtype(), expected.dtype(), "{}", case.name);
            assert_close(&actual, &expected, dtype);
        }
    }
}
test_device!(half_precision_ops_match_the_cpu);

/// Finite differences in f64 on the device itself.
fn gradcheck_on_the_device(dev: &Device) {
    let _lock = process_lock();
    manual_seed(12);
    for name in [
        "mul transposed",
        "softmax",
        "matmul batched broadcast",
        "conv2d",
        "layer_norm",
        "cross_entropy",
        "logsumexp",
        "pools",
    ] {
        let case = FLOAT_CASES.iter().find(|c| c.name == name).unwrap();
        let xs = to(dev, &inputs(case, DType::F64));
        gradcheck(|x| (case.op)(x), &xs).unwrap_or_else(|e| panic!("{name} on {dev}: {e}"));
    }
}
test_device!(gradcheck_on_the_device);

/// Integer and bool ops, exact.
fn integer_ops_match_the_cpu(dev: &Device) {
    let _lock = process_lock();
    let a = Tensor::randint(-5, 5, &[4, 6], &Device::Cpu);
    let b = Tensor::randint(1, 5, &[6], &Device::Cpu);
    let (da, db) = (a.to_device(dev).unwrap(), b.to_device(dev).unwrap());
    for (expected, actual) in [
        (a.add(&b), da.add(&db)),
        (a.mul(&b), da.mul(&db)),
        (a.sum(&[1], false), da.sum(&[1], false)),
        (a.argmax(1, false), da.argmax(1, false)),
        (
            a.gt(&b).logical_not().to_dtype(DType::I64),
            da.gt(&db).logical_not().to_dtype(DType::I64),
        ),
        (
            a.abs().one_hot(6).sum(&[0], false),
            da.abs().one_hot(6).sum(&[0], false),
        ),
        (a.cumsum(0), da.cumsum(0)),
    ] {
        assert_close(&actual, &expected, DType::I64);
    }
}
test_device!(integer_ops_match_the_cpu);

/// A LeNet-style training step: the loss and every parameter's gradient agree.
fn a_training_step_matches_the_cpu(dev: &Device) {
    let _lock = process_lock();
    manual_seed(13);
    let x = Tensor::randn(&[8, 1, 12, 12], DType::F32, &Device::Cpu);
    let y = Tensor::randint(0, 10, &[8], &Device::Cpu);
    let params: Vec<Tensor> = [&[4usize, 1, 3, 3][..], &[4], &[10, 100], &[10]]
        .iter()
        .map(|s| Tensor::randn(s, DType::F32, &Device::Cpu).mul_scalar(0.3))
        .collect();
    let step = |dev: &Device| {
        let p = to(dev, &params);
        let (x, y) = (x.to_device(dev).unwrap(), y.to_device(dev).unwrap());
        let h = F::conv2d(&x, &p[0], Some(&p[1]), &Default::default()).relu();
        let h = F::max_pool2d(&h, 2).flatten(1, -1);
        let loss = F::cross_entropy(&F::linear(&h, &p[2], Some(&p[3])), &y);
        loss.backward();
        (
            loss,
            p.iter().map(|t| t.grad().unwrap()).collect::<Vec<_>>(),
        )
    };
    let (l_cpu, g_cpu) = step(&Device::Cpu);
    let (l_dev, g_dev) = step(dev);
    assert_close(&l_dev, &l_cpu, DType::F32);
    for (d, c) in g_dev.iter().zip(&g_cpu) {
        assert_close(d, c, DType::F32);
    }
}
test_device!(a_training_step_matches_the_cpu);

/// Dropout draws its mask from a counter-based (Philox) stream seeded by the global
/// generator: the same seed gives the same mask on every device, in every float dtype,
/// and the gradient is the scaled mask.
fn dropout_masks_are_the_same_on_every_device(dev: &Device) {
    let _lock = process_lock();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = Tensor::randn_with(&[3, 1000], DType::F32, &Device::Cpu, &mut Generator::new(1))
            .to_dtype(dtype);
        let xd = x.to_device(dev).unwrap().requires_grad(true);
        manual_seed(77);
        let y = F::dropout(&xd, 0.3, true);
        manual_seed(77);
        let expected = F::dropout(&x, 0.3, true);
        assert_close(&y, &expected, dtype);
        let y_host = y
            .to_device(&Device::Cpu)
            .unwrap()
            .to_dtype(DType::F64)
            .to_vec::<f64>();
        let kept = y_host.iter().filter(|&&v| v != 0.0).count() as f64 / y_host.len() as f64;
        assert!((kept - 0.7).abs() < 0.03, "{dtype:?}: kept {kept}");
        y.sum_all().backward();
        let g = xd
            .grad()
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap()
            .to_dtype(DType::F64);
        let scale = (1.0 / 0.7f64) as f32 as f64;
        for (gv, yv) in g.to_vec::<f64>().iter().zip(&y_host) {
            assert!(
                (*yv == 0.0) == (*gv == 0.0) && (*gv == 0.0 || (gv - scale).abs() < 1e-2 * scale),
                "{dtype:?}: gradient {gv} for output {yv}"
            );
        }
    }
}
test_device!(dropout_masks_are_the_same_on_every_device);

/// Moving back and forth keeps values, dtype and gradients.
fn to_device_round_trips(dev: &Device) {
    let _lock = process_lock();
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::U8,
        DType::Bool,
    ] {
        let t = Tensor::randn(&[3, 5], DType::F32, &Device::Cpu).to_dtype(dtype);
        let view = t.t().slice(0, 1, 5, 2);
        let moved = view.to_device(dev).unwrap();
        assert_eq!((moved.device(), moved.dtype()), (*dev, dtype));
        let back = moved.to_device(&Device::Cpu).unwrap();
        assert_close(&back, &view, dtype);
    }
    let w = Tensor::randn(&[4], DType::F32, &Device::Cpu).requires_grad(true);
    w.to_device(dev)
        .unwrap()
        .mul_scalar(2.0)
        .sum_all()
        .backward();
    assert_eq!(
        w.grad().unwrap().to_vec::<f32>(),
        vec![2.0; 4],
        "grad flows back to the host leaf"
    );
}
test_device!(to_device_round_trips);

/// Device memory comes from the caching allocator: counted, reused, released on request.
/// CPU tensors never touch it.
fn device_memory_is_cached_and_counted(dev: &Device) {
    use ferrograd::cuda;
    let _lock = process_lock();
    let Device::Cuda(i) = *dev else {
        let before = cuda::memory_stats(0);
        let t = Tensor::zeros(&[1 << 16], DType::F32, dev);
        assert_eq!(
            cuda::memory_stats(0),
            before,
            "a CPU tensor changed device statistics"
        );
        drop(t);
        return;
    };
    let mib4 = 4 << 20;
    cuda::synchronize(i).unwrap();
    let base = cuda::memory_allocated(i);
    cuda::reset_peak_memory_stats(i);
    let host = Tensor::zeros(&[1 << 20], DType::F32, &Device::Cpu);
    let t = host.to_device(dev).unwrap();
    assert_eq!(cuda::memory_allocated(i), base + mib4);
    assert!(cuda::memory_reserved(i) >= cuda::memory_allocated(i));
    let segments = cuda::memory_stats(i).segments_allocated;
    drop(t);
    assert_eq!(
        cuda::memory_allocated(i),
        base,
        "freed blocks are not counted"
    );
    assert_eq!(cuda::max_memory_allocated(i), base + mib4);
    let reserved = cuda::memory_reserved(i);
    let again = host.to_device(dev).unwrap();
    assert_eq!(
        cuda::memory_stats(i).segments_allocated,
        segments,
        "the cached block was not reused"
    );
    drop(again);
    cuda::empty_cache();
    assert!(
        cuda::memory_reserved(i) < reserved,
        "empty_cache released nothing"
    );
}
test_device!(device_memory_is_cached_and_counted);

/// The profiler times an op on the device by CUDA events around it: its kernels' time
/// (and its enclosing range's, less its own as the range's self time), in the table's
/// CUDA columns and on a `cuda:N` row of the Chrome trace. A view queues no work, so it
/// has no device time (not the gap between its events); nor has anything on the CPU.
fn the_profiler_times_ops_on_the_device(dev: &Device) {
    use ferrograd::profiler::{self, ProfilerOptions, SortBy};
    let _lock = process_lock();
    let a = Tensor::randn(&[512, 512], DType::F32, &Device::Cpu)
        .to_device(dev)
        .unwrap();
    let (_, prof) = profiler::profile(ProfilerOptions::default(), || {
        profiler::record_function("block", || {
            a.matmul(&a)
                .relu()
                .reshape(&[256, 1024])
                .sum_all()
                .to_vec::<f32>()
        })
    });
    let find = |name: &str| {
        prof.events()
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", prof.events()))
            .clone()
    };
    let matmul = find("matmul");
    assert!(find("reshape").cuda.is_none(), "a view has a device time");
    let table = prof.table(SortBy::Total, 10);
    let Device::Cuda(i) = *dev else {
        assert!(matmul.cuda.is_none(), "a CPU op has a device time");
        if prof.events().iter().all(|e| e.cuda.is_none()) {
            assert!(!table.contains("CUDA"), "{table}");
        }
        return;
    };
    let t = matmul.cuda.expect("the matmul has a device time");
    assert_eq!(t.ordinal, i);
    assert!(t.duration_us > 0.0 && t.self_us == t.duration_us, "{t:?}");
    let block = find("block").cuda.expect("the range has a device time");
    assert!(block.duration_us >= t.duration_us, "{block:?} vs {t:?}");
    assert!(
        block.self_us <= block.duration_us - t.duration_us + 1.0,
        "{block:?}"
    );
    assert!(block.start_us <= t.start_us, "{block:?} vs {t:?}");
    assert!(
        table.contains("Self CUDA") && table.contains("CUDA total"),
        "{table}"
    );
    let path =
        std::env::temp_dir().join(format!("ferrograd-cuda-trace-{}.json", std::process::id()));
    prof.export_chrome_trace(&path).unwrap();
    let trace = std::fs::read_to_string(&path).unwrap();
    assert!(
        trace.contains(&format!("\"cuda:{i}\"")),
        "no device row in the trace"
    );
    std::fs::remove_file(&path).ok();
}
test_device!(the_profiler_times_ops_on_the_device);

/// With deterministic algorithms on, `scatter_add` with many colliding indices (the
/// atomics' worst case on a GPU) gives the CPU's bits, every time; so does the backward
/// of `index_select`, which is built on it.
fn scatter_add_is_deterministic_on_request(dev: &Device) {
    let _lock = process_lock();
    manual_seed(21);
    let n = 20_000;
    let src = Tensor::randn(&[n], DType::F32, &Device::Cpu);
    let index = Tensor::randint(0, 3, &[n], &Device::Cpu);
    let want = Tensor::zeros(&[3], DType::F32, &Device::Cpu)
        .scatter_add(0, &index, &src)
        .to_vec::<f32>();
    let (src_d, index_d) = (src.to_device(dev).unwrap(), index.to_device(dev).unwrap());
    ferrograd::use_deterministic_algorithms(true);
    let runs: Vec<Vec<f32>> = (0..3)
        .map(|_| {
            Tensor::zeros(&[3], DType::F32, dev)
                .scatter_add(0, &index_d, &src_d)
                .to_vec::<f32>()
        })
        .collect();
    let table = Tensor::randn(&[3, 8], DType::F32, &Device::Cpu)
        .to_device(dev)
        .unwrap()
        .requires_grad(true);
    table.index_select(0, &index_d).sum_all().backward();
    let grad = table.grad().expect("a gradient").to_vec::<f32>();
    ferrograd::use_deterministic_algorithms(false);
    for r in &runs {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(r), bits(&want), "{r:?} vs the CPU's {want:?}");
    }
    // Each row's gradient counts the rows that picked it, exactly.
    let counts = index.to_vec::<i64>().iter().fold([0f32; 3], |mut c, &i| {
        c[i as usize] += 1.0;
        c
    });
    for (row, chunk) in grad.chunks(8).enumerate() {
        assert!(
            chunk.iter().all(|&g| g == counts[row]),
            "{chunk:?} vs {}",
            counts[row]
        );
    }
}
test_device!(scatter_add_is_deterministic_on_request);
