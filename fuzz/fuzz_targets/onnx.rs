//! `OnnxModel::from_bytes` on arbitrary bytes, then a run on a small input: any result,
//! never a panic, hang or out-of-memory.
#![no_main]
use ferrograd::prelude::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = ferrograd::onnx::OnnxModel::from_bytes(data) {
        let inputs: Vec<Tensor> = model
            .input_names()
            .iter()
            .map(|_| Tensor::ones(&[1, 4], DType::F32, &Device::Cpu))
            .collect();
        let _ = model.run(&inputs);
    }
});
