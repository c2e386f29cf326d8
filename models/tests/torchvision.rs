//! torchvision's families (`ferrograd_models::vision`) against the real torchvision:
//! full-size state-dict keys, shapes and parameter counts of resnet18/34/50,
//! mobilenet_v2 and vit_b_16; PyTorch-saved state dicts of small-width variants load
//! through `vision::from_safetensors`, and the eval logits, input gradients, train-mode
//! logits and updated running statistics equal PyTorch's; the `ImageClassification`
//! preset equals torchvision's on a real image.
//! Fixtures: models/tests/fixtures/make_torchvision_fixtures.py.

mod common;

use ferrograd::checkpoint::read_state_dict;
use ferrograd::data::datasets::read_image;
use ferrograd::data::transforms::Transform;
use ferrograd::nn::{Forward, Module, StateDict};
use ferrograd::prelude::*;
use ferrograd_models::ModelError;
use ferrograd_models::vision::mobilenet::{MobileNetV2, mobilenet_v2};
use ferrograd_models::vision::resnet::{ResNet, ResNetConfig, resnet18, resnet34, resnet50};
use ferrograd_models::vision::transforms::ImageClassification;
use ferrograd_models::vision::vit::{ViTConfig, VisionTransformer, vit_b_16};
use ferrograd_models::vision::{self};
use std::path::PathBuf;

fn dir() -> PathBuf {
    common::fixtures().join("torchvision")
}

fn outputs() -> StateDict {
    read_state_dict(dir().join("outputs.safetensors")).expect("the outputs fixture")
}

/// torchvision's `(name, kind, shape)` entries and parameter count for `model`.
fn torchvision_entries(model: &str) -> (Vec<(String, String, Vec<usize>)>, usize) {
    let keys = std::fs::read_to_string(dir().join("keys.txt")).unwrap();
    let mut count = None;
    let mut entries = Vec::new();
    for line in keys.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields[0] == "#" && fields[1] == model {
            count = Some(fields[2].parse().unwrap());
        } else if fields[0] == model {
            let shape = fields
                .get(3)
                .filter(|s| !s.is_empty())
                .map(|s| s.split(',').map(|d| d.parse().unwrap()).collect())
                .unwrap_or_default();
            entries.push((fields[1].to_string(), fields[2].to_string(), shape));
        }
    }
    (entries, count.expect("the model is in keys.txt"))
}

fn assert_same_structure(model: &str, m: &impl Module) {
    let (mut want, count) = torchvision_entries(model);
    let params: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
    let mut got: Vec<(String, String, Vec<usize>)> = Vec::new();
    m.visit("", &mut |k, t, _| {
        let kind = if params.iter().any(|p| p == k) {
            "param"
        } else {
            "buffer"
        };
        got.push((k.to_string(), kind.to_string(), t.shape().to_vec()));
    });
    assert_eq!(
        got.len(),
        want.len(),
        "{model}: number of state-dict entries"
    );
    want.sort();
    got.sort();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "{model}: state-dict entry");
    }
    assert_eq!(m.num_parameters(), count, "{model}: parameter count");
}

#[test]
fn full_size_models_have_torchvisions_keys_shapes_and_parameter_counts() {
    // Built without drawing weights: the structure is what is compared.
    let cpu = &Device::Cpu;
    ferrograd::nn::init::skip_init(|| {
        assert_same_structure("resnet18", &resnet18(1000, cpu));
        assert_same_structure("resnet34", &resnet34(1000, cpu));
        assert_same_structure("resnet50", &resnet50(1000, cpu));
        assert_same_structure("mobilenet_v2", &mobilenet_v2(1000, cpu));
        assert_same_structure("vit_b_16", &vit_b_16(1000, cpu));
    });
}

#[track_caller]
fn assert_close(what: &str, got: &Tensor, want: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (
        got.to_dtype(DType::F64).to_vec::<f64>(),
        want.to_dtype(DType::F64).to_vec::<f64>(),
    );
    let mut worst = 0.0f64;
    let mut max_abs = 0.0f64;
    for (g, w) in g.iter().zip(&w) {
        worst = worst.max((g - w).abs() / (atol + rtol * w.abs()));
        max_abs = max_abs.max((g - w).abs());
    }
    if !what.contains("running") {
        eprintln!("{what}: max |ours - PyTorch| = {max_abs:.2e}");
    }
    assert!(
        worst <= 1.0,
        "{what}: off by {worst} tolerances (rtol {rtol}, atol {atol})"
    );
}

/// Loads `name.safetensors` (a PyTorch `state_dict()` saved with `save_file`) through
/// `vision::from_safetensors`, then checks eval logits, the input gradient of their
/// sum, train-mode logits (dropout off, as in the fixture) and the running statistics
/// after that step.
fn check_against_pytorch<M>(
    name: &str,
    input: &str,
    build: impl FnOnce() -> M,
    dropout_off: fn(&mut M),
) where
    M: Module + for<'a> Forward<&'a Tensor, Output = Tensor>,
{
    let fx = outputs();
    let mut model = vision::from_safetensors(dir().join(format!("{name}.safetensors")), build)
        .unwrap_or_else(|e| panic!("{name}: loading the PyTorch state dict failed: {e}"));
    let x = fx[input].clone().requires_grad(true);
    let logits = model.forward(&x);
    let want = &fx[&format!("{name}.eval_logits")];
    assert_close(&format!("{name} eval logits"), &logits, want, 1e-4, 1e-4);
    logits.sum_all().backward();
    let grad = x.grad().expect("the input gets a gradient");
    let want = &fx[&format!("{name}.input_grad")];
    assert_close(&format!("{name} input gradient"), &grad, want, 1e-4, 1e-5);

    model.train();
    dropout_off(&mut model);
    let logits = no_grad(|| model.forward(&fx[input]));
    let want = &fx[&format!("{name}.train_logits")];
    assert_close(&format!("{name} train logits"), &logits, want, 1e-4, 1e-4);
    let after = model.state_dict();
    let mut checked = 0;
    for (k, want) in &fx {
        if let Some(key) = k.strip_prefix(&format!("{name}.after_train.")) {
            let got = &after[key];
            if want.dtype() == DType::I64 {
                assert_eq!(got.to_vec::<i64>(), want.to_vec::<i64>(), "{name}: {key}");
            } else {
                // Variances of deep random activations over few values per channel:
                // f32 summation order (PyTorch uses Welford's update) moves them ~1e-4.
                assert_close(&format!("{name} {key}"), got, want, 3e-4, 1e-5);
            }
            checked += 1;
        }
    }
    let has_norms = after.keys().any(|k| k.ends_with("running_mean"));
    assert!(
        !has_norms || checked > 20,
        "{name}: only {checked} running statistics compared"
    );
}

#[test]
fn resnet18_matches_torchvision() {
    let config = ResNetConfig::resnet18().width(4).num_classes(10);
    check_against_pytorch(
        "resnet18-narrow",
        "input",
        || ResNet::new(&config, &Device::Cpu),
        |_| {},
    );
}

#[test]
fn resnet50_bottlenecks_match_torchvision() {
    let config = ResNetConfig::resnet50().width(2).num_classes(10);
    check_against_pytorch(
        "resnet50-narrow",
        "input",
        || ResNet::new(&config, &Device::Cpu),
        |_| {},
    );
}

#[test]
fn mobilenet_v2_matches_torchvision() {
    check_against_pytorch(
        "mobilenet_v2-narrow",
        "input",
        || MobileNetV2::new(10, 0.25, &Device::Cpu),
        |m| m.classifier[0].set_training(false),
    );
}

fn tiny_vit() -> ViTConfig {
    ViTConfig {
        image_size: 32,
        patch_size: 8,
        num_layers: 2,
        num_heads: 2,
        hidden_dim: 16,
        mlp_dim: 32,
        ..ViTConfig::vit_b_16()
    }
    .num_classes(10)
}

#[test]
fn vision_transformer_matches_torchvision() {
    check_against_pytorch(
        "vit-tiny",
        "vit_input",
        || VisionTransformer::new(&tiny_vit(), &Device::Cpu),
        |_| {},
    ); // dropout p = 0, as torchvision's default
}

#[test]
fn a_state_dict_of_another_shape_is_an_error_naming_the_key_and_shapes() {
    let path = dir().join("resnet18-narrow.safetensors");
    let wider = ResNetConfig::resnet18().width(8).num_classes(10);
    let e = load_error(&path, || ResNet::new(&wider, &Device::Cpu));
    match &e {
        ModelError::Shape {
            key,
            expected,
            found,
            ..
        } => {
            assert_eq!(key, "bn1.bias");
            assert_eq!(
                (expected.as_slice(), found.as_slice()),
                (&[8][..], &[4][..])
            );
        }
        other => panic!("expected a shape error, got {other}"),
    }
    // A BasicBlock file for a Bottleneck model: keys are missing.
    let e = load_error(&path, || {
        ResNet::new(
            &ResNetConfig::resnet50().width(4).num_classes(10),
            &Device::Cpu,
        )
    })
    .to_string();
    assert!(e.contains("conv3.weight") || e.contains("shape"), "{e}");
    let e = load_error(&dir().join("absent.safetensors"), || {
        ResNet::new(&tiny_resnet(), &Device::Cpu)
    })
    .to_string();
    assert!(e.contains("absent"), "{e}");
}

fn load_error<M: Module>(path: &std::path::Path, build: impl FnOnce() -> M) -> ModelError {
    match vision::from_safetensors(path, build) {
        Ok(_) => panic!("{} loaded into the wrong model", path.display()),
        Err(e) => e,
    }
}

fn tiny_resnet() -> ResNetConfig {
    ResNetConfig::resnet18().width(4).num_classes(10)
}

#[test]
fn the_imagenet_preset_matches_torchvisions_on_a_real_image() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/images/shirt.png");
    let image = read_image(&path).unwrap();
    let fx = outputs();
    let shape: Vec<usize> = fx["preset_input_shape"]
        .to_vec::<i64>()
        .into_iter()
        .map(|d| d as usize)
        .collect();
    assert_eq!(image.permute(&[2, 0, 1]).shape(), shape.as_slice());
    let got = ImageClassification::new(48, 56).apply(image);
    // One step of 255 in u8 resizing (f32 rounding at a .5), over ImageNet's std.
    let step = 1.0 / 255.0 / 0.224;
    assert_close("preset", &got, &fx["preset_48_56"], 0.0, step + 1e-5);
    let mean_diff = got.sub(&fx["preset_48_56"]).abs().mean_all().item::<f32>();
    eprintln!("preset: mean |ours - torchvision| = {mean_diff:.2e}");
    assert!(mean_diff < 1e-3, "{mean_diff}");
}
