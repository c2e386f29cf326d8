//! Convolutions against references: depthwise against a dense block-diagonal convolution,
//! f32 against f64 (narrow, ResNet-shaped, transposed), and a bias of another dtype.

use super::*;

/// A depthwise convolution (one input channel per group: direct kernels on the CPU) is a
/// dense convolution with a block-diagonal weight (im2col + GEMM): same output and the
/// same gradients for input, weight and bias, at a size that runs the kernels in parallel,
/// on every device.
#[test]
fn depthwise_conv2d_matches_a_dense_block_diagonal_convolution() {
    for device in ferrograd::testing::devices() {
        for (m, stride, padding, dilation) in [(1, 1, 1, 1), (1, 2, 1, 1), (2, 1, 2, 2)] {
            let (n, c, h, w) = (3, 8, 17, 13);
            let o = c * m;
            let rng = &mut Generator::new(7);
            let x = Tensor::randn_with(&[n, c, h, w], DType::F32, &device, rng);
            let wt = Tensor::randn_with(&[o, 1, 3, 3], DType::F32, &device, rng);
            let b = Tensor::randn_with(&[o], DType::F32, &device, rng);
            let mask: Vec<f32> = (0..o * c)
                .map(|i| f32::from(((i / c) / m == i % c) as u8))
                .collect();
            let mask = Tensor::from_vec(mask, &[o, c, 1, 1])
                .to_device(&device)
                .unwrap();
            let args = F::Conv2dArgs::default()
                .stride(stride)
                .padding(padding)
                .dilation(dilation);
            let run = |dense: bool| {
                let (x, wt, b) = (
                    x.detach().requires_grad(true),
                    wt.detach().requires_grad(true),
                    b.detach().requires_grad(true),
                );
                let y = if dense {
                    F::conv2d(&x, &wt.mul(&mask), Some(&b), &args)
                } else {
                    F::conv2d(&x, &wt, Some(&b), &args.groups(c))
                };
                let up = Tensor::randn_with(y.shape(), DType::F32, &device, &mut Generator::new(9));
                y.mul(&up).sum_all().backward();
                [y, x.grad().unwrap(), wt.grad().unwrap(), b.grad().unwrap()]
            };
            let (direct, dense) = (run(false), run(true));
            for (name, (a, e)) in ["output", "input grad", "weight grad", "bias grad"]
                .iter()
                .zip(direct.iter().zip(&dense))
            {
                assert_eq!(a.shape(), e.shape(), "{name}");
                assert!(
                    a.allclose(e, 1e-4, 1e-4),
                    "{device:?} m={m} stride={stride} padding={padding} dilation={dilation}: {name} differs"
                );
            }
        }
    }
}

/// Narrow f32 convolutions (LeNet's two layers, a padded and a dilated one) run the
/// direct CPU kernels (forward and weight gradient, where the CPU has AVX-512): output and
/// every gradient equal the f64 convolution's, which takes the im2col path.
#[test]
fn narrow_f32_conv2d_matches_f64() {
    for (c, o, hw, k, padding, dilation) in [
        (6, 16, [14, 14], 5, 0, 1),
        (1, 12, [28, 28], 5, 2, 1),
        (1, 6, [28, 28], 5, 2, 1),
        (3, 19, [11, 9], 3, 1, 2),
    ] {
        let rng = &mut Generator::new(11);
        let x = Tensor::randn_with(&[4, c, hw[0], hw[1]], DType::F64, &Device::Cpu, rng);
        let wt = Tensor::randn_with(&[o, c, k, k], DType::F64, &Device::Cpu, rng);
        let b = Tensor::randn_with(&[o], DType::F64, &Device::Cpu, rng);
        let args = F::Conv2dArgs::default().padding(padding).dilation(dilation);
        f32_matches_f64(&format!("c={c} o={o}"), [&x, &wt, &b], |x, w, b| {
            F::conv2d(x, w, Some(b), &args)
        });
    }
}

/// `conv(x, w, b)` in f32 and in f64 from the same f64 data: output and the gradients of
/// x, w and b (through a random upstream gradient) agree within 1e-3.
pub(super) fn f32_matches_f64(
    label: &str,
    [x, w, b]: [&Tensor; 3],
    conv: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
) {
    let run = |dtype: DType| {
        let (x, w, b) = (
            x.to_dtype(dtype).requires_grad(true),
            w.to_dtype(dtype).requires_grad(true),
            b.to_dtype(dtype).requires_grad(true),
        );
        let y = conv(&x, &w, &b);
        let up = Tensor::randn_with(y.shape(), DType::F64, &Device::Cpu, &mut Generator::new(5));
        y.mul(&up.to_dtype(dtype)).sum_all().backward();
        [y, x.grad().unwrap(), w.grad().unwrap(), b.grad().unwrap()].map(|t| t.to_dtype(DType::F64))
    };
    let (narrow, wide) = (run(DType::F32), run(DType::F64));
    for (name, (a, e)) in ["output", "input grad", "weight grad", "bias grad"]
        .iter()
        .zip(narrow.iter().zip(&wide))
    {
        assert_eq!(a.shape(), e.shape(), "{label}: {name}");
        assert!(a.allclose(e, 1e-3, 1e-3), "{label}: {name} differs");
    }
}

/// ResNet-shaped f32 convolutions run the wide direct kernel (unit stride, 32+ channels,
/// planes of 24×24 and up, on AVX-512 or AVX2 CPUs with at least one sample per thread:
/// forward, the input gradient as a forward of the flipped weights, and the
/// pixel-vectorised weight gradient), Winograd F(2×2, 3×3) (3×3 unit-stride layers
/// of 128+ channels over 128+ output tiles), or, for small
/// planes, several samples per GEMM (and, with large weights, gradients by blocks of
/// input channels): output and every gradient equal the f64 convolution's (which
/// gradcheck checks).
#[test]
fn resnet_shaped_f32_conv2d_matches_f64() {
    // (in, out, input size, kernel, stride, padding, dilation)
    for (c, o, hw, k, stride, padding, dilation) in [
        (32, 32, [24, 24], 3, 1, 1, 1),
        (48, 32, [26, 25], 3, 1, 2, 2),
        (16, 48, [28, 28], 1, 1, 0, 1),
        (64, 64, [7, 7], 3, 1, 1, 1),
        (32, 64, [14, 14], 3, 2, 1, 1),
        // small plane, large weights: the channel-blocked backward
        (128, 256, [7, 7], 3, 1, 1, 1),
        // a stem (7×7 / 2): the weight gradient over phase planes
        (3, 64, [52, 52], 7, 2, 3, 1),
        // 3×3, unit stride, 128+ channels and 128+ tiles of 2×2 in the batch:
        // Winograd F(2×2, 3×3), forward and input gradient (and, over 256+ tiles, the
        // weight gradient), every padding it takes
        (128, 160, [14, 13], 3, 1, 1, 1),
        (144, 128, [12, 12], 3, 1, 2, 1),
        (128, 128, [18, 17], 3, 1, 0, 1),
        (128, 136, [22, 21], 3, 1, 1, 1),
        // 4×4 / 2, padding 1, 16×16 outputs and up: space to depth
        (8, 16, [32, 34], 4, 2, 1, 1),
        (16, 8, [36, 32], 4, 2, 1, 1),
    ] {
        let rng = &mut Generator::new(17);
        let x = Tensor::randn_with(&[4, c, hw[0], hw[1]], DType::F64, &Device::Cpu, rng);
        let wt = Tensor::randn_with(&[o, c, k, k], DType::F64, &Device::Cpu, rng);
        let b = Tensor::randn_with(&[o], DType::F64, &Device::Cpu, rng);
        let args = F::Conv2dArgs::default()
            .stride(stride)
            .padding(padding)
            .dilation(dilation);
        f32_matches_f64(&format!("c={c} o={o} {hw:?}"), [&x, &wt, &b], |x, w, b| {
            F::conv2d(x, w, Some(b), &args)
        });
    }
}

/// `conv_transpose2d` runs conv2d's backward kernels (tiled input gradient, depthwise
/// loops, the direct weight gradient for narrow f32 layers, space to depth for 4×4 / 2
/// from 16×16 up) and its backward a conv2d:
/// in f32, output and every gradient equal the f64 results (which gradcheck checks).
#[test]
fn f32_conv_transpose2d_matches_f64() {
    // (in, out, groups, input size, kernel, stride, padding, output padding, dilation)
    for (c, o, groups, hw, k, stride, padding, out_pad, dilation) in [
        // Narrow and unit-stride: the direct weight gradient (AVX-512 or AVX2 CPUs).
        (16, 6, 1, [10, 10], 5, 1, 0, 0, 1),
        (12, 1, 1, [24, 24], 5, 1, 2, 0, 1),
        // Strided, grouped, dilated: tiled columns.
        (8, 6, 2, [7, 5], 3, 2, 1, 1, 2),
        (64, 32, 1, [9, 9], 4, 2, 1, 0, 1),
        // DCGAN's upsampling (4×4 / 2, padding 1) from 16×16: space to depth, one GEMM
        // per tap (`fused::conv::subpixel`); the weight gradient too from 64 × 128
        // products per tap (64 in, 32 out), the tiles' below.
        (16, 8, 1, [16, 16], 4, 2, 1, 0, 1),
        (8, 16, 1, [16, 18], 4, 2, 1, 0, 1),
        (64, 32, 1, [16, 16], 4, 2, 1, 0, 1),
        // One output channel per group: the depthwise loops.
        (6, 3, 3, [8, 7], 3, 2, 1, 1, 1),
    ] {
        let rng = &mut Generator::new(13);
        let x = Tensor::randn_with(&[3, c, hw[0], hw[1]], DType::F64, &Device::Cpu, rng);
        let wt = Tensor::randn_with(&[c, o / groups, k, k], DType::F64, &Device::Cpu, rng);
        let b = Tensor::randn_with(&[o], DType::F64, &Device::Cpu, rng);
        let args = F::ConvTranspose2dArgs {
            stride: [stride; 2],
            padding: [padding; 2],
            output_padding: [out_pad; 2],
            dilation: [dilation; 2],
            groups,
        };
        f32_matches_f64(
            &format!("c={c} o={o} groups={groups} stride={stride}"),
            [&x, &wt, &b],
            |x, w, b| F::conv_transpose2d(x, w, Some(b), &args),
        );
    }
}

/// A bias of another dtype than the input (f64 bias on f32 data) promotes, as in PyTorch,
/// instead of reaching the single-dtype CPU kernels.
#[test]
fn conv2d_with_a_bias_of_another_dtype_promotes() {
    let x = Tensor::ones(&[1, 2, 3, 3], DType::F32, &Device::Cpu);
    let w = Tensor::ones(&[1, 2, 2, 2], DType::F32, &Device::Cpu);
    let b = Tensor::from_vec(vec![0.5f64], &[1]);
    let y = F::conv2d(&x, &w, Some(&b), &F::Conv2dArgs::default());
    assert_eq!(y.dtype(), DType::F64);
    assert_eq!(y.to_vec::<f64>(), vec![8.5; 4]);
}
