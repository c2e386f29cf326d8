//! Shared by the integration tests that read PyTorch fixtures (each test crate uses
//! some of these helpers).

#![allow(dead_code)]

use ferrograd::Tensor;
use safetensors::SafeTensors;
use std::collections::HashMap;

/// Every tensor of a safetensors file of f64 tensors (as the fixture scripts write them).
pub fn f64_tensors(bytes: &[u8]) -> HashMap<String, Tensor> {
    let st = SafeTensors::deserialize(bytes).expect("a valid safetensors fixture");
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let data: Vec<f64> = view
                .data()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (name, Tensor::from_vec(data, view.shape()))
        })
        .collect()
}

/// Every tensor of a safetensors file of f32, f64, int64 and bool tensors (as PyTorch's
/// `save_file` writes a state dict), in its own dtype.
pub fn typed_tensors(bytes: &[u8]) -> HashMap<String, Tensor> {
    use safetensors::Dtype;
    let st = SafeTensors::deserialize(bytes).expect("a valid safetensors fixture");
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let shape = view.shape();
            let data = view.data();
            let t = match view.dtype() {
                Dtype::F32 => Tensor::from_vec(
                    data.chunks_exact(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                        .collect::<Vec<f32>>(),
                    shape,
                ),
                Dtype::F64 => Tensor::from_vec(
                    data.chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                        .collect::<Vec<f64>>(),
                    shape,
                ),
                Dtype::I64 => Tensor::from_vec(
                    data.chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                        .collect::<Vec<i64>>(),
                    shape,
                ),
                Dtype::U8 => Tensor::from_vec(data.to_vec(), shape),
                Dtype::BOOL => {
                    Tensor::from_vec(data.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape)
                }
                other => panic!("fixture tensor {name} has unsupported dtype {other:?}"),
            };
            (name, t)
        })
        .collect()
}

/// Asserts `actual` (any device, any float dtype) equals PyTorch's `expected` at f32's
/// parity tolerance (rtol 1e-4, atol 1e-5), naming `what` and the first bad element.
#[track_caller]
pub fn close_to_torch(actual: &Tensor, expected: &Tensor, what: &str) {
    use ferrograd::{DType, Device};
    let a = actual.to_device(&Device::Cpu).unwrap().to_dtype(DType::F64);
    let b = expected.to_dtype(DType::F64);
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    for (i, (x, y)) in a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
            "{what}: element {i} is {x}, PyTorch {y}"
        );
    }
}

/// Every `.rs` file below `dir` (for the tests that scan the runtime's source).
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
