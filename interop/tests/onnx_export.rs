//! ONNX export: every model here is exported with dynamic axes, then run by tract (an
//! independent ONNX implementation) at two batch sizes, and, for sequence models, two
//! lengths; its outputs must equal ours to 1e-4. The same files are checked against
//! onnxruntime and `onnx.checker` by `tests/fixtures/check_onnx_exports.py` (set
//! `FERROGRAD_ONNX_OUT=dir` to write them).

use ferrograd::nn::Forward;
use ferrograd::onnx::{self, ExportOptions, Exported};
use ferrograd::prelude::*;
use tract_onnx::prelude::{
    Datum, Framework, InferenceFact, InferenceModelExt, TValue, Tensor as TractTensor,
};

#[path = "onnx_export/graph.rs"]
mod graph;

/// Our tensor as a tract tensor.
fn to_tract(x: &Tensor) -> TValue {
    let shape = x.shape().to_vec();
    let t = match x.dtype() {
        DType::F32 => TractTensor::from_shape(&shape, &x.contiguous().to_vec::<f32>()),
        DType::I64 => TractTensor::from_shape(&shape, &x.contiguous().to_vec::<i64>()),
        DType::Bool => TractTensor::from_shape(&shape, &x.contiguous().to_vec::<bool>()),
        other => panic!("no tract conversion for {other:?}"),
    };
    t.expect("shape matches data").into()
}

/// Runs `exported` in tract on `inputs`.
fn run_tract(exported: &Exported, inputs: &[Tensor]) -> Vec<Vec<f32>> {
    let bytes = exported.to_bytes();
    let mut model = tract_onnx::onnx()
        .model_for_read(&mut bytes.as_slice())
        .expect("tract reads the exported model");
    for (i, x) in inputs.iter().enumerate() {
        let dt = match x.dtype() {
            DType::F32 => f32::datum_type(),
            DType::I64 => i64::datum_type(),
            DType::Bool => bool::datum_type(),
            other => panic!("no tract dtype for {other:?}"),
        };
        model = model
            .with_input_fact(i, InferenceFact::dt_shape(dt, x.shape()))
            .expect("input fact");
    }
    let plan = model
        .into_optimized()
        .expect("tract optimises the model")
        .into_runnable()
        .expect("runnable");
    let outs = plan
        .run(inputs.iter().map(to_tract).collect())
        .expect("tract runs the model");
    outs.iter()
        .map(|t| {
            let t = t.cast_to::<f32>().expect("float output");
            t.as_slice::<f32>().expect("contiguous").to_vec()
        })
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "output sizes differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Checks the export against our forward on every input set, and writes the model and
/// the inputs/outputs when `FERROGRAD_ONNX_OUT` is set.
fn check(
    name: &str,
    exported: &Exported,
    forward: impl Fn(&[Tensor]) -> Vec<Tensor>,
    input_sets: &[Vec<Tensor>],
    tol: f32,
) {
    let out_dir = std::env::var_os("FERROGRAD_ONNX_OUT").map(std::path::PathBuf::from);
    if let Some(dir) = &out_dir {
        std::fs::create_dir_all(dir).expect("create output dir");
        exported
            .save(dir.join(format!("{name}.onnx")))
            .expect("save model");
    }
    // Our own importer runs the same file: the round trip.
    let imported =
        onnx::OnnxModel::from_bytes(&exported.to_bytes()).expect("our importer loads the export");
    for (k, inputs) in input_sets.iter().enumerate() {
        let ours = no_grad(|| forward(inputs));
        {
            let back = imported.run(inputs).expect("the imported model runs");
            for (o, (a, b)) in ours.iter().zip(&back).enumerate() {
                assert_eq!(a.shape(), b.shape(), "{name}: round-trip output {o} shape");
                assert_eq!(a.dtype(), b.dtype(), "{name}: round-trip output {o} dtype");
                let d = max_abs_diff(
                    &a.to_dtype(DType::F32).to_vec::<f32>(),
                    &b.to_dtype(DType::F32).to_vec::<f32>(),
                );
                println!(
                    "{name}: input set {k}: output {o} max abs diff after export + import {d:.2e}"
                );
                assert!(d <= tol, "{name}: round trip differs by {d}");
            }
        }
        let theirs = run_tract(exported, inputs);
        assert_eq!(ours.len(), theirs.len(), "{name}: number of outputs");
        for (o, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let a = a.to_dtype(DType::F32).to_vec::<f32>();
            let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(
                scale > 1e-6,
                "{name}: output {o} is all zeros, a vacuous comparison"
            );
            let d = max_abs_diff(&a, b);
            println!(
                "{name}: input set {k} {:?}: output {o} max abs diff vs tract {d:.2e} (largest |output| {scale:.2e})",
                inputs
                    .iter()
                    .map(|x| x.shape().to_vec())
                    .collect::<Vec<_>>()
            );
            assert!(d <= tol, "{name}: output {o} differs by {d} (set {k})");
        }
        if let Some(dir) = &out_dir {
            let mut tensors: Vec<(String, Tensor)> = Vec::new();
            for (i, x) in inputs.iter().enumerate() {
                tensors.push((format!("input_{i}"), x.clone()));
            }
            for (o, y) in ours.iter().enumerate() {
                tensors.push((format!("output_{o}"), y.clone()));
            }
            let dict: ferrograd::nn::StateDict = tensors.into_iter().collect();
            ferrograd::checkpoint::save_state_dict(
                &dict,
                dir.join(format!("{name}.{k}.safetensors")),
                None,
            )
            .expect("save io");
        }
    }
}

/// The initializers that are parameters or buffers (the exporter's own constants start
/// with `/`).
fn params_of(exported: &Exported) -> Vec<String> {
    exported
        .initializer_names()
        .into_iter()
        .filter(|n| !n.starts_with('/'))
        .collect()
}

/// Overwrites every parameter and buffer with random values (variances stay positive).
fn randomize(m: &impl Module) {
    no_grad(|| {
        for (name, t) in m.state_dict() {
            if !t.dtype().is_float() {
                continue;
            }
            let r = Tensor::randn(t.shape(), t.dtype(), &Device::Cpu);
            // Weights scaled by 1/sqrt(fan_in), so activations neither vanish nor saturate.
            let fan_in: usize = t.shape().iter().skip(1).product::<usize>().max(1);
            // Normalisation layers stay near identity, so the input still matters at the end.
            let v = if name.ends_with("running_var") {
                r.abs().mul_scalar(0.2).add_scalar(1.0)
            } else if t.dim() >= 2 {
                r.mul_scalar(1.0 / (fan_in as f64).sqrt())
            } else if name.ends_with("weight") {
                r.mul_scalar(0.1).add_scalar(1.0)
            } else {
                r.mul_scalar(0.1)
            };
            let target = m
                .named_parameters()
                .into_iter()
                .chain(m.named_buffers())
                .find(|(n, _)| *n == name)
                .map(|(_, t)| t);
            if let Some(target) = target {
                target.copy_(&v);
            }
        }
    });
}

fn batch_dynamic() -> ExportOptions {
    ExportOptions::new()
        .dynamic_axis("input", 0, "batch")
        .dynamic_axis("output", 0, "batch")
}

ferrograd::network! {
    /// The README's MNIST perceptron.
    pub struct Mlp(x: [N, 1, 28, 28]) -> [N, 10] {
        flatten,
        fc1: Linear(784 -> 128), relu,
        fc2: Linear(128 -> 10),
    }

    /// LeNet-5, as in `examples/lenet_mnist.rs`.
    pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2),
        relu,
        max_pool2d(2),
        conv2: Conv2d(6 -> 16, kernel = 5),
        relu,
        max_pool2d(2) => [N, 16, 5, 5],
        flatten,
        fc1: Linear(400 -> 120), relu,
        fc2: Linear(120 -> 84), relu,
        fc3: Linear(84 -> 10),
    }
}

#[test]
fn mlp_and_lenet() {
    manual_seed(1);
    let mlp = Mlp::new(&Device::Cpu);
    let x = Tensor::randn(&[2, 1, 28, 28], DType::F32, &Device::Cpu);
    let exported = onnx::export_module(&mlp, &x, &batch_dynamic()).expect("export mlp");
    assert_eq!(
        params_of(&exported),
        ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    );
    let sets = [
        vec![Tensor::randn(&[2, 1, 28, 28], DType::F32, &Device::Cpu)],
        vec![Tensor::randn(&[5, 1, 28, 28], DType::F32, &Device::Cpu)],
    ];
    check(
        "mlp",
        &exported,
        |xs| vec![mlp.forward(&xs[0])],
        &sets,
        1e-4,
    );

    let lenet = LeNet::new(&Device::Cpu);
    let exported = onnx::export_module(&lenet, &x, &batch_dynamic()).expect("export lenet");
    assert!(exported.op_types().contains(&"Conv".to_string()));
    check(
        "lenet",
        &exported,
        |xs| vec![lenet.forward(&xs[0])],
        &sets,
        1e-4,
    );
}

#[test]
fn resnet18_and_mobilenet_v2() {
    use ferrograd::models::vision::{mobilenet::MobileNetV2, resnet::resnet18};
    manual_seed(2);
    let mut resnet = resnet18(10, &Device::Cpu);
    resnet.eval();
    randomize(&resnet);
    let x = Tensor::randn(&[2, 3, 64, 64], DType::F32, &Device::Cpu);
    let exported = onnx::export_module(&resnet, &x, &batch_dynamic()).expect("export resnet18");
    let names = params_of(&exported);
    assert!(
        names.contains(&"layer4.1.bn2.running_var".to_string()),
        "{names:?}"
    );
    let sets = [
        vec![Tensor::randn(&[2, 3, 64, 64], DType::F32, &Device::Cpu)],
        vec![Tensor::randn(&[3, 3, 64, 64], DType::F32, &Device::Cpu)],
    ];
    check(
        "resnet18",
        &exported,
        |xs| vec![resnet.forward(&xs[0])],
        &sets,
        1e-4,
    );

    let mut mobilenet = MobileNetV2::new(10, 0.5, &Device::Cpu);
    mobilenet.eval();
    // Fresh batch-norm statistics make the logits nearly independent of the input;
    // random weights and statistics make the comparison mean something.
    randomize(&mobilenet);
    let exported = onnx::export_module(&mobilenet, &x, &batch_dynamic()).expect("export mobilenet");
    check(
        "mobilenet_v2",
        &exported,
        |xs| vec![mobilenet.forward(&xs[0])],
        &sets,
        1e-4,
    );
}

#[path = "../../tests/common/nets.rs"]
mod nets;
use nets::{BertLayer, UNet};

#[test]
fn unet_with_dynamic_batch_and_size() {
    manual_seed(3);
    let mut unet = UNet::new(&Device::Cpu);
    unet.eval();
    let x = Tensor::randn(&[1, 3, 16, 12], DType::F32, &Device::Cpu);
    let opts = ExportOptions::new()
        .dynamic_axis("input", 0, "batch")
        .dynamic_axis("input", 2, "height")
        .dynamic_axis("input", 3, "width");
    let exported = onnx::export_module(&unet, &x, &opts).expect("export unet");
    let sets = [
        vec![Tensor::randn(&[1, 3, 16, 12], DType::F32, &Device::Cpu)],
        vec![Tensor::randn(&[2, 3, 8, 20], DType::F32, &Device::Cpu)],
    ];
    check(
        "unet",
        &exported,
        |xs| vec![unet.forward(&xs[0])],
        &sets,
        1e-4,
    );
}

fn token_inputs(n: usize, t: usize, seed: usize) -> Vec<Tensor> {
    let ids = Tensor::from_vec(
        (0..n * t).map(|i| ((i * 13 + seed) % 100) as i64).collect(),
        &[n, t],
    );
    let pos = Tensor::from_vec((0..n * t).map(|i| (i % t) as i64).collect(), &[n, t]);
    let types = Tensor::from_vec((0..n * t).map(|i| ((i / 3) % 2) as i64).collect(), &[n, t]);
    vec![ids, pos, types]
}

#[test]
fn bert_layer_with_dynamic_batch_and_length() {
    manual_seed(4);
    let mut bert = BertLayer::new(&Device::Cpu);
    bert.eval();
    let mut opts = ExportOptions::new()
        .input_names(["ids", "positions", "types"])
        .output_names(["hidden"]);
    for name in ["ids", "positions", "types"] {
        opts = opts
            .dynamic_axis(name, 0, "batch")
            .dynamic_axis(name, 1, "seq");
    }
    let forward = |xs: &[Tensor]| vec![bert.forward(&xs[0], &xs[1], &xs[2])];
    let exported =
        onnx::export_with(&bert, &token_inputs(2, 5, 0), forward, &opts).expect("export bert");
    let sets = [token_inputs(2, 5, 1), token_inputs(3, 9, 2)];
    check("bert_layer", &exported, forward, &sets, 1e-4);
}

#[test]
fn small_gpt2_with_dynamic_batch_and_length() {
    use ferrograd::models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
    manual_seed(5);
    let config = Gpt2Config {
        vocab_size: 64,
        n_positions: 32,
        n_embd: 32,
        n_layer: 2,
        n_head: 4,
        ..Gpt2Config::default()
    };
    let mut gpt = Gpt2LMHeadModel::new(&config, &Device::Cpu);
    gpt.eval();
    let ids = |n: usize, t: usize, s: usize| {
        Tensor::from_vec(
            (0..n * t).map(|i| ((i * 7 + s) % 64) as i64).collect(),
            &[n, t],
        )
    };
    let opts = ExportOptions::new()
        .input_names(["input_ids"])
        .output_names(["logits"])
        .dynamic_axis("input_ids", 0, "batch")
        .dynamic_axis("input_ids", 1, "seq");
    let forward = |xs: &[Tensor]| vec![gpt.forward(&xs[0], None)];
    let exported = onnx::export_with(&gpt, &[ids(2, 6, 0)], forward, &opts).expect("export gpt2");
    let sets = [vec![ids(2, 6, 1)], vec![ids(1, 11, 2)]];
    check("gpt2_small", &exported, forward, &sets, 1e-4);
}

#[test]
fn mistakes_are_errors_naming_the_op_and_call_site() {
    manual_seed(6);
    let x = Tensor::randn(&[2, 4], DType::F32, &Device::Cpu);
    let lin = ferrograd::nn::Linear::new(4, 3, &Device::Cpu);

    // An op with no ONNX mapping, in the middle of the forward.
    let err = onnx::export_with(
        &lin,
        std::slice::from_ref(&x),
        |xs| vec![lin.forward(&xs[0].cumsum(1))],
        &ExportOptions::new(),
    )
    .expect_err("cumsum is not traced");
    let msg = err.to_string();
    assert!(
        matches!(err, onnx::OnnxError::UnsupportedOp { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("cumsum") && msg.contains("tests/onnx_export.rs"),
        "{msg}"
    );

    // An untraced op on integer inputs leaves no autograd trace; the trace with other
    // input values catches the baked-in result.
    let emb = ferrograd::nn::Embedding::new(10, 4, &Device::Cpu);
    let ids = Tensor::from_vec(vec![1i64, 2, 3, 4], &[1, 4]);
    let err = onnx::export_with(
        &emb,
        &[ids],
        |xs| vec![emb.forward(&xs[0].flip(&[1]))],
        &ExportOptions::new(),
    )
    .expect_err("flip is not traced");
    assert!(err.to_string().contains("input values"), "{err}");

    // Dropout in training mode.
    let drop = ferrograd::nn::Dropout::new(0.5);
    let err = onnx::export_module(&drop, &x, &ExportOptions::new()).expect_err("training dropout");
    assert!(err.to_string().contains("eval()"), "{err}");

    // Control flow that depends on a dynamic size.
    let opts = ExportOptions::new().dynamic_axis("input", 0, "batch");
    let err = onnx::export_with(
        &lin,
        std::slice::from_ref(&x),
        |xs| {
            let y = lin.forward(&xs[0]);
            vec![if xs[0].shape()[0] > 2 { y.relu() } else { y }]
        },
        &opts,
    )
    .expect_err("shape-dependent branch");
    assert!(err.to_string().contains("`batch`"), "{err}");

    // A dynamic axis that does not exist.
    let opts = ExportOptions::new().dynamic_axis("input", 5, "batch");
    assert!(onnx::export_module(&lin, &x, &opts).is_err());
    let opts = ExportOptions::new().dynamic_axis("nope", 0, "batch");
    assert!(
        onnx::export_module(&lin, &x, &opts)
            .unwrap_err()
            .to_string()
            .contains("nope")
    );

    // Saving to a directory that does not exist is an Err, not a panic.
    let exported = onnx::export_module(&lin, &x, &ExportOptions::new()).expect("export");
    assert!(exported.save("/nonexistent-dir/model.onnx").is_err());
}

/// A bidirectional two-layer LSTM tagger-classifier: embeddings, LSTM, the last step, a head.
#[derive(ferrograd::nn::Module)]
struct LstmClassifier {
    emb: ferrograd::nn::Embedding,
    lstm: ferrograd::nn::LSTM,
    head: ferrograd::nn::Linear,
}

impl LstmClassifier {
    fn forward(&self, ids: &Tensor) -> Tensor {
        let (y, _) = self.lstm.forward(&self.emb.forward(ids), None);
        let last = y.select(1, y.shape()[1] - 1);
        self.head.forward(&last)
    }
}

#[test]
fn lstm_and_gru_as_onnx_recurrent_ops() {
    use ferrograd::nn::{GRU, LSTM, RnnConfig, RnnState};
    manual_seed(7);
    let mut m = LstmClassifier {
        emb: ferrograd::nn::Embedding::new(50, 8, &Device::Cpu),
        lstm: LSTM::lstm(
            RnnConfig::new(8, 6)
                .num_layers(2)
                .bidirectional(true)
                .batch_first(true)
                .dropout(0.3),
            &Device::Cpu,
        ),
        head: ferrograd::nn::Linear::new(12, 3, &Device::Cpu),
    };
    m.eval();
    let ids = |n: usize, t: usize, s: usize| {
        Tensor::from_vec(
            (0..n * t).map(|i| ((i * 11 + s) % 50) as i64).collect(),
            &[n, t],
        )
    };
    let opts = ExportOptions::new()
        .input_names(["ids"])
        .dynamic_axis("ids", 0, "batch")
        .dynamic_axis("ids", 1, "seq");
    let forward = |xs: &[Tensor]| vec![m.forward(&xs[0])];
    let exported = onnx::export_with(&m, &[ids(2, 5, 0)], forward, &opts).expect("export lstm");
    assert!(exported.op_types().contains(&"LSTM".to_string()));
    assert!(params_of(&exported).contains(&"lstm.weight_hh_l1_reverse".to_string()));
    check(
        "lstm_classifier",
        &exported,
        forward,
        &[vec![ids(2, 5, 1)], vec![ids(3, 9, 2)]],
        1e-4,
    );

    // A GRU from a given initial state, time-major, returning the outputs and h_n.
    let gru = GRU::gru(RnnConfig::new(4, 5).num_layers(2), &Device::Cpu);
    let x = Tensor::randn(&[6, 2, 4], DType::F32, &Device::Cpu);
    let h0 = Tensor::randn(&[2, 2, 5], DType::F32, &Device::Cpu);
    let opts = ExportOptions::new()
        .input_names(["x", "h0"])
        .output_names(["y", "h_n"])
        .dynamic_axis("x", 0, "seq")
        .dynamic_axis("x", 1, "batch")
        .dynamic_axis("h0", 1, "batch");
    let forward = |xs: &[Tensor]| {
        let (y, s) = gru.forward(
            &xs[0],
            Some(&RnnState {
                h: xs[1].clone(),
                c: None,
            }),
        );
        vec![y, s.h]
    };
    let exported = onnx::export_with(&gru, &[x, h0], forward, &opts).expect("export gru");
    let sets = [
        vec![
            Tensor::randn(&[6, 2, 4], DType::F32, &Device::Cpu),
            Tensor::randn(&[2, 2, 5], DType::F32, &Device::Cpu),
        ],
        vec![
            Tensor::randn(&[3, 4, 4], DType::F32, &Device::Cpu),
            Tensor::randn(&[2, 4, 5], DType::F32, &Device::Cpu),
        ],
    ];
    check("gru", &exported, forward, &sets, 1e-4);
}

#[test]
fn integer_arithmetic_casts_and_reductions() {
    manual_seed(8);
    let emb = ferrograd::nn::Embedding::new(20, 4, &Device::Cpu);
    let forward = |xs: &[Tensor]| {
        let ids = &xs[0];
        // Integer arithmetic stays integer; a float scalar makes it float.
        let shifted = (ids.add_scalar(1.0).mul_scalar(2.0)).sub_scalar(1.0);
        let half = ids.mul_scalar(0.5);
        let count = ids.gt_scalar(3.0).sum(&[1], false);
        let e = emb.forward(&shifted.clamp(0.0, 19.0));
        vec![e.sum(&[1], false), half, count]
    };
    let ids = |n: usize, t: usize| {
        Tensor::from_vec((0..n * t).map(|i| (i % 9) as i64).collect(), &[n, t])
    };
    let opts = ExportOptions::new()
        .dynamic_axis("input", 0, "batch")
        .dynamic_axis("input", 1, "seq");
    let exported = onnx::export_with(&emb, &[ids(2, 5)], forward, &opts).expect("export");
    check(
        "int_ops",
        &exported,
        forward,
        &[vec![ids(2, 5)], vec![ids(3, 7)]],
        1e-5,
    );
}
