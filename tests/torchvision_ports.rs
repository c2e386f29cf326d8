//! Two torchvision architectures ported onto ferrograd's `nn` (tests/ports): their
//! state-dict keys, shapes and parameter counts equal torchvision's, a PyTorch-saved
//! state dict loads strictly, and the logits, input gradients and updated running
//! statistics match PyTorch's. Fixtures: tests/fixtures/make_torchvision_fixtures.py.

mod common;
mod ports;

use ferrograd::nn::{Forward, Module, StateDict};
use ferrograd::prelude::*;
use ports::mobilenet::MobileNetV2;
use ports::resnet::{ResNet, resnet18};
use std::collections::HashMap;

const KEYS: &str = include_str!("fixtures/torchvision_keys.txt");

fn fixtures() -> HashMap<String, Tensor> {
    common::typed_tensors(include_bytes!("fixtures/torchvision_ports.safetensors"))
}

/// torchvision's `(name, kind, shape)` entries and parameter count for `model`.
fn torchvision_entries(model: &str) -> (Vec<(String, String, Vec<usize>)>, usize) {
    let mut count = 0;
    let mut entries = Vec::new();
    for line in KEYS.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields[0] == "#" && fields[1] == model {
            count = fields[2].parse().unwrap();
        } else if fields[0] == model {
            let shape = fields
                .get(3)
                .filter(|s| !s.is_empty())
                .map(|s| s.split(',').map(|d| d.parse().unwrap()).collect())
                .unwrap_or_default();
            entries.push((fields[1].to_string(), fields[2].to_string(), shape));
        }
    }
    (entries, count)
}

fn our_entries(m: &impl Module) -> Vec<(String, String, Vec<usize>)> {
    let params: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
    m.state_dict()
        .into_iter()
        .map(|(k, t)| {
            let kind = if params.contains(&k) {
                "param"
            } else {
                "buffer"
            };
            (k, kind.to_string(), t.shape().to_vec())
        })
        .collect()
}

fn assert_same_structure(model: &str, m: &impl Module) {
    let (mut want, count) = torchvision_entries(model);
    let mut got = our_entries(m);
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
fn resnet18_has_torchvisions_keys_shapes_and_parameter_count() {
    assert_same_structure("resnet18", &resnet18(1000, &Device::Cpu));
}

#[test]
fn mobilenet_v2_has_torchvisions_keys_shapes_and_parameter_count() {
    assert_same_structure("mobilenet_v2", &MobileNetV2::new(1000, 1.0, &Device::Cpu));
}

#[track_caller]
fn assert_close(what: &str, got: &Tensor, want: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (
        got.to_dtype(DType::F64).to_vec::<f64>(),
        want.to_dtype(DType::F64).to_vec::<f64>(),
    );
    let worst = g
        .iter()
        .zip(&w)
        .map(|(g, w)| (g - w).abs() / (atol + rtol * w.abs()))
        .fold(0.0f64, f64::max);
    let max_abs = g
        .iter()
        .zip(&w)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f64, f64::max);
    if !what.contains("running") {
        eprintln!("{what}: max |ours - PyTorch| = {max_abs:.2e} ({worst:.3} of the tolerance)");
    }
    assert!(
        worst <= 1.0,
        "{what}: off by {worst} tolerances (rtol {rtol}, atol {atol})"
    );
}

/// Loads `prefix.state.*` strictly into `model`, then checks eval logits, the input
/// gradient of their sum, train-mode logits (with `dropout_off` applied, as the fixture
/// turns dropout off) and the running statistics after that step.
fn check_against_pytorch<M>(prefix: &str, model: &mut M, dropout_off: fn(&mut M))
where
    M: Module + for<'a> Forward<&'a Tensor, Output = Tensor>,
{
    let fx = fixtures();
    let state: StateDict = fx
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(&format!("{prefix}.state."))
                .map(|k| (k.to_string(), v.clone()))
        })
        .collect();
    let report = model
        .load_state_dict(&state, true)
        .unwrap_or_else(|e| panic!("{prefix}: strict load of the PyTorch state dict failed: {e}"));
    assert!(report.missing.is_empty() && report.unexpected.is_empty());

    model.eval();
    let x = fx["input"].clone().requires_grad(true);
    let logits = model.forward(&x);
    assert_close(
        &format!("{prefix} eval logits"),
        &logits,
        &fx[&format!("{prefix}.eval_logits")],
        1e-4,
        1e-4,
    );
    logits.sum_all().backward();
    assert_close(
        &format!("{prefix} input gradient"),
        &x.grad().expect("the input gets a gradient"),
        &fx[&format!("{prefix}.input_grad")],
        1e-4,
        1e-5,
    );

    model.train();
    dropout_off(model);
    let logits = no_grad(|| model.forward(&fx["input"]));
    assert_close(
        &format!("{prefix} train logits"),
        &logits,
        &fx[&format!("{prefix}.train_logits")],
        1e-4,
        1e-4,
    );
    let after = model.state_dict();
    let mut checked = 0;
    for (k, want) in &fx {
        if let Some(name) = k.strip_prefix(&format!("{prefix}.after_train.")) {
            let got = &after[name];
            if want.dtype() == DType::I64 {
                assert_eq!(
                    got.to_vec::<i64>(),
                    want.to_vec::<i64>(),
                    "{prefix}: {name}"
                );
            } else {
                // Variances of deep random activations over 8 values per channel: f32
                // summation order (PyTorch uses Welford's update) moves them by ~1e-4.
                assert_close(&format!("{prefix} {name}"), got, want, 3e-4, 1e-5);
            }
            checked += 1;
        }
    }
    assert!(
        checked > 20,
        "{prefix}: only {checked} running statistics compared"
    );
}

#[test]
fn resnet18_architecture_matches_pytorch_logits_and_gradients() {
    // resnet18's blocks at 1/16 of the width (torchvision's own `_make_layer` in the
    // fixture script), so that the PyTorch-saved weights stay small.
    let mut model = ResNet::new([2, 2, 2, 2], 4, 10, &Device::Cpu);
    check_against_pytorch("resnet", &mut model, |_| {});
}

#[test]
fn mobilenet_v2_matches_pytorch_logits_and_gradients() {
    let mut model = MobileNetV2::new(10, 0.25, &Device::Cpu);
    check_against_pytorch("mobilenet", &mut model, |m| {
        m.classifier[0].set_training(false)
    });
}
