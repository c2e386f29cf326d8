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
