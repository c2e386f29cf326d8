//! Helpers for tests that run the same body on every device, as Candle's `test_device!`.
//!
//! Write the body once as `fn name(dev: &Device)`, then `test_device!(name);` makes the
//! tests `name::cpu` and `name::cuda`. The CUDA test runs on `cuda:0` when the crate was
//! built with the `cuda` feature and a GPU is present, and otherwise passes after printing
//! why it skipped (run `cargo test -- --nocapture` to see it).
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::testing::{assert_close, test_device};
//!
//! fn add_matches_the_cpu(dev: &Device) {
//!     let a = Tensor::randn(&[4, 5], DType::F32, &Device::Cpu);
//!     let on_dev = a.to_device(dev).unwrap();
//!     assert_close(&on_dev.add(&on_dev), &a.add(&a), DType::F32);
//! }
//! test_device!(add_matches_the_cpu);
//! # add_matches_the_cpu(&Device::Cpu);
//! ```

use crate::{DType, Device, Tensor};

/// Generates `#[test] fn cpu()` and `#[test] fn cuda()` in a module named after `$body`,
/// each calling `$body(&device)`; the CUDA one skips (and says so) without a GPU.
#[macro_export]
macro_rules! test_device {
    ($body:ident) => {
        #[cfg(test)]
        mod $body {
            #[test]
            fn cpu() {
                super::$body(&$crate::Device::Cpu)
            }

            #[test]
            fn cuda() {
                match $crate::testing::cuda_test_device() {
                    Ok(dev) => super::$body(&dev),
                    Err(why) => println!("skipped {}::cuda: {why}", stringify!($body)),
                }
            }
        }
    };
}

pub use test_device;

/// The GPU device tests should use (`cuda:0`), or why there is none.
///
/// ```
/// match ferrograd_runtime::testing::cuda_test_device() {
///     Ok(dev) => assert!(dev.is_cuda()),
///     Err(why) => assert!(!why.is_empty()),
/// }
/// ```
pub fn cuda_test_device() -> Result<Device, String> {
    if !cfg!(feature = "cuda") {
        return Err("built without the `cuda` feature".into());
    }
    crate::storage::cuda_device(0)
        .map(|()| Device::Cuda(0))
        .map_err(|e| e.to_string())
}

/// Every device tests can run on here: the CPU, then `cuda:0` when usable.
///
/// ```
/// let devs = ferrograd_runtime::testing::devices();
/// assert_eq!(devs[0], ferrograd_runtime::Device::Cpu);
/// ```
pub fn devices() -> Vec<Device> {
    let mut devs = vec![Device::Cpu];
    devs.extend(cuda_test_device().ok());
    devs
}

/// `(rtol, atol)` for comparing results of `dtype` computed on two devices or by two
/// algorithms: f64 1e-10/1e-12, f32 1e-4/1e-5 (reduction order and fused multiply-adds
/// differ), f16 1e-2/1e-3, bf16 2e-2/1e-2 (8 bits of mantissa), exact for integers.
///
/// ```
/// use ferrograd_runtime::{DType, testing::tolerance};
/// assert_eq!(tolerance(DType::I64), (0.0, 0.0));
/// ```
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-10, 1e-12),
        DType::F32 => (1e-4, 1e-5),
        DType::F16 => (1e-2, 1e-3),
        DType::BF16 => (2e-2, 1e-2),
        DType::I64 | DType::U8 | DType::Bool => (0.0, 0.0),
    }
}

/// Asserts that `actual` (on any device) equals `expected` within [`tolerance`] of
/// `dtype`, with the same shape; the message names the worst element.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
/// ferrograd_runtime::testing::assert_close(&a, &a.add_scalar(1e-6), DType::F32);
/// ```
#[track_caller]
pub fn assert_close(actual: &Tensor, expected: &Tensor, dtype: DType) {
    assert_eq!(
        actual.shape(),
        expected.shape(),
        "assert_close: shapes differ (actual {:?}, expected {:?})",
        actual.shape(),
        expected.shape()
    );
    let host = |t: &Tensor| {
        t.detach()
            .to_device(&Device::Cpu)
            .expect("assert_close: copying to the host failed")
            .to_dtype(DType::F64)
            .to_vec::<f64>()
    };
    let (a, e) = (host(actual), host(expected));
    let (rtol, atol) = tolerance(dtype);
    let worst = a
        .iter()
        .zip(&e)
        .enumerate()
        .filter(|&(_, (x, y))| {
            let same_nan = x.is_nan() && y.is_nan();
            // Written so that a NaN on one side only counts as a mismatch.
            let close = (x - y).abs() <= atol + rtol * y.abs();
            !same_nan && !close
        })
        .max_by(|(_, (x1, y1)), (_, (x2, y2))| (*x1 - *y1).abs().total_cmp(&(*x2 - *y2).abs()));
    if let Some((i, (x, y))) = worst {
        panic!(
            "assert_close: element {i} of shape {:?} is {x}, expected {y} (|diff| {}, rtol {rtol}, atol {atol} for {dtype:?}) on {}",
            actual.shape(),
            (x - y).abs(),
            actual.device()
        );
    }
}
