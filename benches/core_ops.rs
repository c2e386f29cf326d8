//! Criterion benchmarks of the runtime core. `bench/compare_pytorch.py` runs the same
//! workloads in PyTorch and prints ratios; keep the two in step.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ferrograd::autograd::NoGradGuard;
use ferrograd::nn::{Forward, Module};
use ferrograd::optim::{Adam, AdamConfig, Optimizer};
use ferrograd::prelude::*;
use std::hint::black_box;

use ferrograd::models::vision::{mobilenet, resnet};

fn matmul(c: &mut Criterion) {
    let mut group = c.benchmark_group("matmul_f32");
    for n in [256usize, 512, 1024, 2048] {
        let a = Tensor::randn(&[n, n], DType::F32, &Device::Cpu);
        let b = Tensor::randn(&[n, n], DType::F32, &Device::Cpu);
        group.throughput(Throughput::Elements((2 * n * n * n) as u64));
        if n >= 1024 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, _| {
            bench.iter(|| black_box(a.matmul(&b)))
        });
    }
    group.finish();
}

fn elementwise(c: &mut Criterion) {
    let a = Tensor::randn(&[1_000_000], DType::F32, &Device::Cpu);
    let b = Tensor::randn(&[1_000_000], DType::F32, &Device::Cpu);
    c.bench_function("add_1e6_f32", |bench| bench.iter(|| black_box(&a + &b)));
}

fn softmax(c: &mut Criterion) {
    let x = Tensor::randn(&[256, 1024], DType::F32, &Device::Cpu);
    c.bench_function("softmax_256x1024", |bench| {
        bench.iter(|| black_box(x.softmax(-1)))
    });
}

/// The fused NN ops and an optimizer step, forward + backward where they have one.
fn fused_ops(c: &mut Criterion) {
    let x = Tensor::randn(&[256, 1024], DType::F32, &Device::Cpu).requires_grad(true);
    let w = Tensor::ones(&[1024], DType::F32, &Device::Cpu).requires_grad(true);
    let b = Tensor::zeros(&[1024], DType::F32, &Device::Cpu).requires_grad(true);
    c.bench_function("layer_norm_fwd_bwd_256x1024", |bench| {
        bench.iter(|| {
            F::layer_norm(&x, &[1024], Some(&w), Some(&b), 1e-5)
                .sum_all()
                .backward();
            for t in [&x, &w, &b] {
                t.zero_grad();
            }
        })
    });
    // Training-mode batch norm over ResNet-18's first stage: [8, 64, 56, 56].
    let xb = Tensor::randn(&[8, 64, 56, 56], DType::F32, &Device::Cpu).requires_grad(true);
    let bw = Tensor::ones(&[64], DType::F32, &Device::Cpu).requires_grad(true);
    let bb = Tensor::zeros(&[64], DType::F32, &Device::Cpu).requires_grad(true);
    let (rm, rv) = (
        Tensor::zeros(&[64], DType::F32, &Device::Cpu),
        Tensor::ones(&[64], DType::F32, &Device::Cpu),
    );
    let gy = Tensor::randn(&[8, 64, 56, 56], DType::F32, &Device::Cpu);
    c.bench_function("batch_norm_train_fwd_bwd_8x64x56x56", |bench| {
        bench.iter(|| {
            let y = F::batch_norm(
                &xb,
                Some(&rm),
                Some(&rv),
                Some(&bw),
                Some(&bb),
                true,
                0.1,
                1e-5,
            );
            y.backward_with(&gy);
            for t in [&xb, &bw, &bb] {
                t.zero_grad();
            }
        })
    });
    let logits = Tensor::randn(&[256, 1000], DType::F32, &Device::Cpu).requires_grad(true);
    let target = Tensor::randint(0, 1000, &[256], &Device::Cpu);
    c.bench_function("cross_entropy_fwd_bwd_256x1000", |bench| {
        bench.iter(|| {
            F::cross_entropy(&logits, &target).backward();
            logits.zero_grad();
        })
    });
    let xa = Tensor::randn(&[256, 4096], DType::F32, &Device::Cpu).requires_grad(true);
    let ga = Tensor::randn(&[256, 4096], DType::F32, &Device::Cpu);
    for (name, f) in [
        (
            "gelu_fwd_bwd_256x4096",
            Tensor::gelu as fn(&Tensor) -> Tensor,
        ),
        ("silu_fwd_bwd_256x4096", Tensor::silu),
    ] {
        c.bench_function(name, |bench| {
            bench.iter(|| {
                f(&xa).backward_with(&ga);
                xa.zero_grad();
            })
        });
    }
    let p = Tensor::randn(&[1_000_000], DType::F32, &Device::Cpu).requires_grad(true);
    let g = Tensor::randn(&[1_000_000], DType::F32, &Device::Cpu);
    let mut opt = Adam::new(vec![p.clone()], AdamConfig::default());
    p.set_grad(Some(g));
    c.bench_function("adam_step_1e6", |bench| bench.iter(|| opt.step()));
}

fn conv2d_lenet(c: &mut Criterion) {
    let x1 = Tensor::randn(&[64, 1, 28, 28], DType::F32, &Device::Cpu);
    let w1 = Tensor::randn(&[6, 1, 5, 5], DType::F32, &Device::Cpu);
    let x2 = Tensor::randn(&[64, 6, 14, 14], DType::F32, &Device::Cpu);
    let w2 = Tensor::randn(&[16, 6, 5, 5], DType::F32, &Device::Cpu);
    let pad2 = F::Conv2dArgs::default().padding(2);
    c.bench_function("conv2d_lenet1_b64", |bench| {
        bench.iter(|| black_box(F::conv2d(&x1, &w1, None, &pad2)))
    });
    c.bench_function("conv2d_lenet2_b64", |bench| {
        bench.iter(|| black_box(F::conv2d(&x2, &w2, None, &F::Conv2dArgs::default())))
    });
    // MobileNetV2's widest 3x3 depthwise layer, forward.
    let xd = Tensor::randn(&[20, 96, 112, 112], DType::F32, &Device::Cpu);
    let wd = Tensor::randn(&[96, 1, 3, 3], DType::F32, &Device::Cpu);
    let dw = F::Conv2dArgs::default().padding(1).groups(96);
    c.bench_function("conv2d_depthwise_b20", |bench| {
        bench.iter(|| black_box(F::conv2d(&xd, &wd, None, &dw)))
    });
    // A DCGAN generator's upsampling layer (4x4, stride 2: 16x16 -> 32x32), forward +
    // backward through input and weight.
    let xt = Tensor::randn(&[16, 128, 16, 16], DType::F32, &Device::Cpu).requires_grad(true);
    let wt = Tensor::randn(&[128, 64, 4, 4], DType::F32, &Device::Cpu).requires_grad(true);
    let up = F::ConvTranspose2dArgs::default().stride(2).padding(1);
    c.bench_function("conv_transpose2d_dcgan_fwd_bwd_b16", |bench| {
        bench.iter(|| {
            F::conv_transpose2d(&xt, &wt, None, &up)
                .sum_all()
                .backward();
            xt.zero_grad();
            wt.zero_grad();
        })
    });
    // LeNet's first pooling layer, forward + backward.
    let p = Tensor::randn(&[64, 6, 28, 28], DType::F32, &Device::Cpu).requires_grad(true);
    c.bench_function("max_pool2d_lenet_b64", |bench| {
        bench.iter(|| F::max_pool2d(&p, 2).sum_all().backward())
    });
}

fn per_op_overhead(c: &mut Criterion) {
    let a = Tensor::randn(&[1], DType::F32, &Device::Cpu);
    let b = Tensor::randn(&[1], DType::F32, &Device::Cpu);
    c.bench_function("add_1elem_nograd", |bench| {
        bench.iter(|| black_box(&a + &b))
    });
    let ag = a.detach().requires_grad(true);
    c.bench_function("add_1elem_grad", |bench| bench.iter(|| black_box(&ag + &b)));
}

/// Ten ops forward on a 64-element vector, then backward.
fn chain10(c: &mut Criterion) {
    let x = Tensor::randn(&[64], DType::F32, &Device::Cpu).requires_grad(true);
    let w = Tensor::randn(&[64], DType::F32, &Device::Cpu);
    c.bench_function("chain10_fwd_bwd", |bench| {
        bench.iter(|| {
            let y = &x * &w; // 1
            let y = &y + &w; // 2
            let y = y.tanh(); // 3
            let y = y.exp(); // 4
            let y = &y * &x; // 5
            let y = y.sigmoid(); // 6
            let y = &y - &w; // 7
            let y = y.relu(); // 8
            let y = &y * &y; // 9
            let loss = y.sum_all(); // 10
            loss.backward();
            x.zero_grad();
        })
    });
}

/// Whole torchvision-architecture CNNs (random weights): MobileNetV2 forward at batch 20
/// and ResNet-18 forward and forward + backward at batch 8, 224²; both forwards at batch 1
/// too (the serving case: latency of one image).
fn cnn_models(c: &mut Criterion) {
    let mut group = c.benchmark_group("cnn");
    group.sample_size(10);
    let cpu = &Device::Cpu;
    let mut mobilenet = mobilenet::MobileNetV2::new(1000, 1.0, cpu);
    mobilenet.eval();
    let x20 = Tensor::randn(&[20, 3, 224, 224], DType::F32, cpu);
    group.bench_function("mobilenet_v2_fwd_b20", |bench| {
        let _guard = NoGradGuard::new();
        bench.iter(|| black_box(mobilenet.forward(&x20)))
    });
    let x1 = Tensor::randn(&[1, 3, 224, 224], DType::F32, cpu);
    group.bench_function("mobilenet_v2_fwd_b1", |bench| {
        let _guard = NoGradGuard::new();
        bench.iter(|| black_box(mobilenet.forward(&x1)))
    });
    let mut resnet = resnet::resnet18(1000, cpu);
    let x8 = Tensor::randn(&[8, 3, 224, 224], DType::F32, cpu);
    resnet.eval();
    group.bench_function("resnet18_fwd_b8", |bench| {
        let _guard = NoGradGuard::new();
        bench.iter(|| black_box(resnet.forward(&x8)))
    });
    group.bench_function("resnet18_fwd_b1", |bench| {
        let _guard = NoGradGuard::new();
        bench.iter(|| black_box(resnet.forward(&x1)))
    });
    resnet.train();
    group.bench_function("resnet18_fwd_bwd_b8", |bench| {
        bench.iter(|| {
            resnet.forward(&x8).sum_all().backward();
            resnet.zero_grad();
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    cnn_models,
    matmul,
    elementwise,
    softmax,
    fused_ops,
    conv2d_lenet,
    per_op_overhead,
    chain10
);
criterion_main!(benches);
