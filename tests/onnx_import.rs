//! ONNX import: files written by `torch.onnx.export` (`tests/fixtures/make_onnx_fixtures.py`,
//! torch 2.15, opset 18) run through `onnx::load` and give PyTorch's outputs; with the
//! input repeated along the batch, the dynamic batch axis works too. Malformed and hostile
//! files are errors, never panics. Each model runs on every device (`test_device!`).

use ferrograd::onnx::{self, OnnxError};
use ferrograd::prelude::*;
use ferrograd::testing::test_device;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    let built_in = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/onnx");
    // A test binary carried to another machine (bench/gpu.sh) runs in a copy of the
    // checkout: the fixtures are then under the working directory.
    let dir = if built_in.exists() {
        built_in
    } else {
        PathBuf::from("tests/fixtures/onnx")
    };
    dir.join(name)
}

/// Runs fixture `name` on `dev` and compares with PyTorch's output.
fn check(name: &str, tol: f64, dev: &Device) {
    let model = onnx::load(fixture(&format!("{name}.onnx")))
        .expect("load")
        .to_device(dev)
        .expect("weights to the device");
    let io = ferrograd::checkpoint::read_state_dict(fixture(&format!("{name}.safetensors")))
        .expect("fixture io");
    let x = io["input_0"].to_device(dev).unwrap();
    let want = &io["output"];
    let got = model.run(std::slice::from_ref(&x)).expect("run")[0].clone();
    assert_eq!(got.device(), *dev, "{name}: the output stays on the device");
    let got = got.to_device(&Device::Cpu).unwrap();
    assert_eq!(got.shape(), want.shape(), "{name}");
    let d = (&got.to_dtype(DType::F64) - &want.to_dtype(DType::F64))
        .abs()
        .max_all()
        .item::<f64>();
    let scale = want.to_dtype(DType::F64).abs().max_all().item::<f64>();
    println!(
        "{name} on {dev}: max abs diff vs PyTorch {d:.2e} (largest |output| {scale:.2e}), opset {}",
        model.opset()
    );
    assert!(d <= tol && scale > 1e-6, "{name}: {d}");
    // The batch axis is dynamic: the input twice gives the output twice.
    let x2 = Tensor::cat(&[&x, &x], 0);
    let got2 = model.run(&[x2]).expect("run at batch x2")[0]
        .to_device(&Device::Cpu)
        .unwrap();
    let want2 = Tensor::cat(&[want, want], 0);
    let d2 = (&got2.to_dtype(DType::F64) - &want2.to_dtype(DType::F64))
        .abs()
        .max_all()
        .item::<f64>();
    assert!(d2 <= tol, "{name} at twice the batch: {d2}");
}

fn torchvision_resnet18_narrow(dev: &Device) {
    check("resnet18_narrow", 1e-4, dev);
}
test_device!(torchvision_resnet18_narrow);

fn torchvision_mobilenet_v2_narrow(dev: &Device) {
    check("mobilenet_v2_narrow", 1e-4, dev);
}
test_device!(torchvision_mobilenet_v2_narrow);

fn transformer_encoder_layer(dev: &Device) {
    check("bert_layer", 1e-4, dev);
}
test_device!(transformer_encoder_layer);

fn lstm_classifier(dev: &Device) {
    check("lstm_classifier", 1e-4, dev);
}
test_device!(lstm_classifier);

#[test]
fn malformed_files_are_errors() {
    let good = std::fs::read(fixture("bert_layer.onnx")).expect("fixture");
    // Not protobuf at all, truncated at many points, and bytes flipped: never a panic.
    assert!(matches!(
        onnx::OnnxModel::from_bytes(b"not a model"),
        Err(OnnxError::Malformed(_))
    ));
    for cut in [1, 10, 100, 1000, good.len() / 2, good.len() - 1] {
        assert!(
            onnx::OnnxModel::from_bytes(&good[..cut]).is_err(),
            "truncated at {cut}"
        );
    }
    let mut rng = 12345u64;
    for _ in 0..200 {
        let mut bad = good.clone();
        for _ in 0..4 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (rng >> 33) as usize % bad.len();
            bad[i] ^= (rng >> 13) as u8 | 1;
        }
        if let Ok(m) = onnx::OnnxModel::from_bytes(&bad) {
            let ids = Tensor::from_vec(vec![1i64, 2, 3, 4], &[1, 4]);
            let _ = m.run(&[ids]);
        }
    }
    assert!(matches!(
        onnx::load(fixture("missing.onnx")),
        Err(OnnxError::Io { .. })
    ));
    // Wrong inputs are errors naming the problem.
    let m = onnx::OnnxModel::from_bytes(&good).expect("load");
    let err = m.run(&[]).unwrap_err().to_string();
    assert!(err.contains("takes 1 inputs"), "{err}");
    let err = m
        .run(&[Tensor::zeros(&[2, 3, 4], DType::F32, &Device::Cpu)])
        .unwrap_err();
    assert!(matches!(err, OnnxError::Run(_)), "{err}");
}
