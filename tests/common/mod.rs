//! Shared by the integration tests that read PyTorch fixtures.

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
