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
    for (k, inputs) in input_sets.iter().enumerate() {
        let ours = no_grad(|| forward(inputs));
        let theirs = run_tract(exported, inputs);
        assert_eq!(ours.len(), theirs.len(), "{name}: number of outputs");
        for (o, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let d = max_abs_diff(&a.to_dtype(DType::F32).to_vec::<f32>(), b);
            println!(
                "{name}: input set {k} {:?}: output {o} max abs diff vs tract {d:.2e}",
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
