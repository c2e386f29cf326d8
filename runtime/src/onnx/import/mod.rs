//! ONNX import: an interpreter that runs an ONNX graph node by node on ferrograd tensors
//! (so on any device ferrograd runs on), for the operator set the exporter writes plus
//! the common forms `torch.onnx.export` produces.
//!
//! Loading checks everything that can be checked without inputs: the protobuf decodes,
//! every operator is supported (all unsupported ones are listed at once), initializers
//! hold as many bytes as their dims say, and every node reads only names defined before
//! it. Running turns a failing op (shapes that do not fit) into an `Err` naming the node.

use super::OnnxError;
use super::proto::{self as pb, tensor_proto::DataType};
use crate::nn::functional as F;
use crate::{DType, Device, Tensor};
use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

mod layers;
mod ops;

use layers::{conv, pool, recurrent};
use ops::run_node;

/// Operators [`OnnxModel`] runs.
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "Cos",
    "CumSum",
    "Div",
    "Dropout",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "LayerNormalization",
    "LeakyRelu",
    "LSTM",
    "GRU",
    "RNN",
    "Mod",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "MaxPool",
    "Min",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pad",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Shape",
    "Sigmoid",
    "Sin",
    "Slice",
    "Softmax",
    "Softplus",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Where",
];

/// An ONNX model ready to run on ferrograd tensors (`onnxruntime.InferenceSession`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Forward};
/// use ferrograd_runtime::onnx::{self, ExportOptions, OnnxModel};
/// let model = Linear::new(4, 2, &Device::Cpu);
/// let x = Tensor::randn(&[3, 4], DType::F32, &Device::Cpu);
/// let bytes = onnx::export_module(&model, &x, &ExportOptions::new().dynamic_axis("input", 0, "batch"))?.to_bytes();
/// let loaded = OnnxModel::from_bytes(&bytes)?;
/// let x5 = Tensor::randn(&[5, 4], DType::F32, &Device::Cpu);
/// let y = loaded.run(&[x5.clone()])?;
/// assert!(y[0].allclose(&model.forward(&x5), 1e-6, 1e-6));
/// # Ok::<(), onnx::OnnxError>(())
/// ```
#[derive(Debug)]
pub struct OnnxModel {
    inputs: Vec<String>,
    input_specs: Vec<InputSpec>,
    outputs: Vec<String>,
    output_specs: Vec<InputSpec>,
    initializers: HashMap<String, Tensor>,
    nodes: Vec<pb::NodeProto>,
    opset: i64,
    /// For each node, the names whose last reader it is (freed once it has run).
    last_reads: Vec<Vec<String>>,
    /// The most bytes one run may hold at once ([`OnnxModel::with_max_run_bytes`]).
    max_run_bytes: u64,
}

/// What a graph input declares: its element type and dims (`None` for a symbolic or
/// unknown dim, with its name when it has one).
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    /// The input's name.
    pub name: String,
    /// Its element type, if the graph declares one ferrograd has.
    pub dtype: Option<DType>,
    /// Each dim: `Ok(size)` when fixed, `Err(name)` when symbolic (empty name if unnamed).
    pub dims: Option<Vec<Result<usize, String>>>,
}

impl InputSpec {
    /// Checks `x` against the declared dtype and fixed dims, naming what differs.
    pub fn check(&self, x: &Tensor) -> Result<(), String> {
        if let Some(dt) = self.dtype
            && x.dtype() != dt
        {
            return Err(format!(
                "input `{}` must be {dt:?}, got {:?}",
                self.name,
                x.dtype()
            ));
        }
        if let Some(dims) = &self.dims {
            let ok = dims.len() == x.dim()
                && dims.iter().zip(x.shape()).all(|(d, &s)| match d {
                    Ok(n) => *n == s,
                    Err(_) => true,
                });
            if !ok {
                let want: Vec<String> = dims
                    .iter()
                    .map(|d| match d {
                        Ok(n) => n.to_string(),
                        Err(name) if name.is_empty() => "?".into(),
                        Err(name) => name.clone(),
                    })
                    .collect();
                return Err(format!(
                    "input `{}` must have shape [{}], got {:?}",
                    self.name,
                    want.join(", "),
                    x.shape()
                ));
            }
        }
        Ok(())
    }
}

fn input_spec(v: &pb::ValueInfoProto) -> InputSpec {
    let name = v.name.clone().unwrap_or_default();
    let tensor = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(pb::type_proto::Value::TensorType(t)) => Some(t),
        _ => None,
    };
    let dtype = tensor
        .and_then(|t| t.elem_type)
        .and_then(|e| dtype_of(e as i64).ok());
    let dims = tensor.and_then(|t| t.shape.as_ref()).map(|s| {
        s.dim
            .iter()
            .map(|d| {
                use pb::tensor_shape_proto::dimension::Value;
                match &d.value {
                    Some(Value::DimValue(n)) if *n >= 0 => Ok(*n as usize),
                    Some(Value::DimParam(p)) => Err(p.clone()),
                    _ => Err(String::new()),
                }
            })
            .collect()
    });
    InputSpec { name, dtype, dims }
}

/// Reads and checks an ONNX file ([`OnnxModel::from_bytes`]).
pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel, OnnxError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    OnnxModel::from_bytes(&bytes)
}

fn malformed(reason: impl Into<String>) -> OnnxError {
    OnnxError::Malformed(reason.into())
}

impl OnnxModel {
    /// Decodes and checks a serialized model.
    pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel, OnnxError> {
        let model = <pb::ModelProto as prost::Message>::decode(bytes)
            .map_err(|e| malformed(format!("not an ONNX protobuf: {e}")))?;
        let opset = model
            .opset_import
            .iter()
            .find(|o| {
                o.domain.as_deref().unwrap_or("").is_empty()
                    || o.domain.as_deref() == Some("ai.onnx")
            })
            .and_then(|o| o.version)
            .ok_or_else(|| malformed("no default-domain opset_import"))?;
        if !(13..=21).contains(&opset) {
            return Err(OnnxError::Unsupported(format!(
                "opset {opset} (supported: 13 to 21)"
            )));
        }
        let graph = model
            .graph
            .ok_or_else(|| malformed("the model has no graph"))?;
        let mut initializers = HashMap::new();
        for t in &graph.initializer {
            let name = t.name.clone().unwrap_or_default();
            initializers.insert(
                name.clone(),
                tensor_of(t).map_err(|e| malformed(format!("initializer `{name}`: {e}")))?,
            );
        }
        let inputs: Vec<String> = graph
            .input
            .iter()
            .filter_map(|v| v.name.clone())
            .filter(|n| !initializers.contains_key(n))
            .collect();
        let input_specs: Vec<InputSpec> = graph
            .input
            .iter()
            .filter(|v| {
                v.name
                    .as_ref()
                    .is_some_and(|n| !initializers.contains_key(n))
            })
            .map(input_spec)
            .collect();
        let outputs: Vec<String> = graph.output.iter().filter_map(|v| v.name.clone()).collect();
        let output_specs: Vec<InputSpec> = graph
            .output
            .iter()
            .filter(|v| v.name.is_some())
            .map(input_spec)
            .collect();
        // Every operator supported (all the missing ones at once), every name defined
        // before it is read.
        let mut missing: Vec<String> = graph
            .node
            .iter()
            .filter(|n| {
                let domain = n.domain.as_deref().unwrap_or("");
                !(domain.is_empty() || domain == "ai.onnx")
                    || !SUPPORTED_OPS.contains(&n.op_type.as_deref().unwrap_or(""))
            })
            .map(|n| {
                let d = n.domain.as_deref().unwrap_or("");
                let op = n.op_type.clone().unwrap_or_default();
                if d.is_empty() {
                    op
                } else {
                    format!("{d}::{op}")
                }
            })
            .collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            return Err(OnnxError::Unsupported(format!(
                "operators {}",
                missing.join(", ")
            )));
        }
        let mut defined: HashSet<&str> = inputs.iter().map(String::as_str).collect();
        defined.extend(initializers.keys().map(String::as_str));
        for (i, n) in graph.node.iter().enumerate() {
            for input in &n.input {
                if !input.is_empty() && !defined.contains(input.as_str()) {
                    return Err(malformed(format!(
                        "node {i} ({}) reads `{input}`, which no earlier node, input or initializer defines",
                        n.op_type.as_deref().unwrap_or("?")
                    )));
                }
            }
            defined.extend(n.output.iter().map(String::as_str));
        }
        for o in &outputs {
            if !defined.contains(o.as_str()) {
                return Err(malformed(format!("graph output `{o}` is never computed")));
            }
        }
        // Intermediate values are dropped after their last reader (graph outputs kept),
        // so a run holds what is still needed, not every value it ever computed.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, n) in graph.node.iter().enumerate() {
            for input in n.input.iter().filter(|s| !s.is_empty()) {
                last.insert(input, i);
            }
        }
        let mut last_reads = vec![Vec::new(); graph.node.len()];
        for (name, i) in last {
            if !outputs.iter().any(|o| o == name) && !initializers.contains_key(name) {
                last_reads[i].push(name.to_string());
            }
        }
        Ok(OnnxModel {
            inputs,
            input_specs,
            outputs,
            output_specs,
            initializers,
            nodes: graph.node,
            opset,
            last_reads,
            max_run_bytes: super::budget::default_max_run_bytes(),
        })
    }

    /// The graph's input names, in order (initializers excluded).
    pub fn input_names(&self) -> &[String] {
        &self.inputs
    }

    /// What each input declares (dtype, fixed and symbolic dims), in order.
    pub fn input_specs(&self) -> &[InputSpec] {
        &self.input_specs
    }

    /// The graph's output names, in order.
    pub fn output_names(&self) -> &[String] {
        &self.outputs
    }

    /// What each output declares (dtype, fixed and symbolic dims), in order: the same
    /// [`InputSpec`] form as the inputs'. A server reads the batch axis of each output
    /// from it (the symbolic dim that the inputs' batch axis also names).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Linear;
    /// use ferrograd_runtime::onnx::{self, ExportOptions, OnnxModel};
    /// let model = Linear::new(4, 2, &Device::Cpu);
    /// let x = Tensor::randn(&[3, 4], DType::F32, &Device::Cpu);
    /// let opts = ExportOptions::new()
    ///     .dynamic_axis("input", 0, "batch")
    ///     .dynamic_axis("output", 0, "batch");
    /// let loaded = OnnxModel::from_bytes(&onnx::export_module(&model, &x, &opts)?.to_bytes())?;
    /// let dims = loaded.output_specs()[0].dims.clone().unwrap();
    /// assert_eq!(dims, vec![Err("batch".to_string()), Ok(2)]);
    /// # Ok::<(), onnx::OnnxError>(())
    /// ```
    pub fn output_specs(&self) -> &[InputSpec] {
        &self.output_specs
    }

    /// Sets the most bytes one [`OnnxModel::run`] may hold at once (its inputs, the
    /// values still to be read, and what the next node is about to allocate, estimated
    /// from its inputs' shapes and values before it runs). A run that would go over fails
    /// with [`OnnxError::Run`] naming the node, so a graph whose shapes come from its
    /// inputs cannot ask the allocator for more than this. The default is
    /// [`default_max_run_bytes`](super::default_max_run_bytes), half of the machine's
    /// memory.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::Linear;
    /// use ferrograd_runtime::onnx::{self, ExportOptions, OnnxModel};
    /// let model = Linear::new(4, 2, &Device::Cpu);
    /// let x = Tensor::randn(&[3, 4], DType::F32, &Device::Cpu);
    /// let opts = ExportOptions::new().dynamic_axis("input", 0, "batch");
    /// let bytes = onnx::export_module(&model, &x, &opts)?.to_bytes();
    /// let small = OnnxModel::from_bytes(&bytes)?.with_max_run_bytes(1024);
    /// assert!(small.run(&[Tensor::randn(&[2, 4], DType::F32, &Device::Cpu)]).is_ok());
    /// let err = small.run(&[Tensor::randn(&[4096, 4], DType::F32, &Device::Cpu)]).unwrap_err();
    /// assert!(err.to_string().contains("limit"), "{err}");
    /// # Ok::<(), onnx::OnnxError>(())
    /// ```
    pub fn with_max_run_bytes(mut self, bytes: u64) -> OnnxModel {
        self.max_run_bytes = bytes;
        self
    }

    /// The limit [`OnnxModel::with_max_run_bytes`] set.
    pub fn max_run_bytes(&self) -> u64 {
        self.max_run_bytes
    }

    /// The opset the graph was written for.
    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// Moves the weights to `device` (inputs must then be there too).
    pub fn to_device(mut self, device: &Device) -> Result<OnnxModel, OnnxError> {
        for t in self.initializers.values_mut() {
            *t = t
                .to_device(device)
                .map_err(|e| OnnxError::Unsupported(format!("moving weights to {device}: {e}")))?;
        }
        Ok(self)
    }

    /// Runs the graph on `inputs` (one per [`OnnxModel::input_names`]) and returns the
    /// outputs in order.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, OnnxError> {
        if inputs.len() != self.inputs.len() {
            return Err(OnnxError::Run(format!(
                "the model takes {} inputs ({:?}), got {}",
                self.inputs.len(),
                self.inputs,
                inputs.len()
            )));
        }
        for (spec, x) in self.input_specs.iter().zip(inputs) {
            spec.check(x).map_err(OnnxError::Run)?;
        }
        let mut env: HashMap<&str, Tensor> = HashMap::new();
        for (name, x) in self.inputs.iter().zip(inputs) {
            env.insert(name, x.clone());
        }
        use super::budget::{node_bytes, over_limit, tensor_bytes};
        let limit = self.max_run_bytes;
        let mut held: u128 = env.values().map(tensor_bytes).sum();
        if held > limit as u128 {
            return Err(OnnxError::Run(format!(
                "the inputs take {held} bytes, over the model's limit of {limit} bytes (OnnxModel::with_max_run_bytes)"
            )));
        }
        crate::autograd::no_grad(|| {
            for (i, node) in self.nodes.iter().enumerate() {
                let args: Vec<Option<Tensor>> = node
                    .input
                    .iter()
                    .map(|n| {
                        if n.is_empty() {
                            None
                        } else {
                            env.get(n.as_str())
                                .or_else(|| self.initializers.get(n))
                                .cloned()
                        }
                    })
                    .collect();
                let op = node.op_type.as_deref().unwrap_or("");
                let args = same_device(op, args)
                    .map_err(|e| OnnxError::Run(format!("node {i} ({op}): {e}")))?;
                let need = node_bytes(node, op, &args);
                if held.saturating_add(need) > limit as u128 {
                    return Err(OnnxError::Run(format!(
                        "node {i} ({op}): {}",
                        over_limit(need, held, limit)
                    )));
                }
                let result = catch_unwind(AssertUnwindSafe(|| run_node(node, op, &args)));
                let outs = match result {
                    Ok(Ok(outs)) => outs,
                    Ok(Err(e)) => return Err(OnnxError::Run(format!("node {i} ({op}): {e}"))),
                    Err(payload) => {
                        let msg = payload
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        return Err(OnnxError::Run(format!("node {i} ({op}): {msg}")));
                    }
                };
                drop(args);
                for (name, t) in node.output.iter().zip(outs) {
                    if !name.is_empty() {
                        held = held.saturating_add(tensor_bytes(&t));
                        if let Some(old) = env.insert(name, t) {
                            held = held.saturating_sub(tensor_bytes(&old));
                        }
                    }
                }
                for name in &self.last_reads[i] {
                    if let Some(old) = env.remove(name.as_str()) {
                        held = held.saturating_sub(tensor_bytes(&old));
                    }
                }
                if held > limit as u128 {
                    return Err(OnnxError::Run(format!(
                        "node {i} ({op}): the run holds {held} bytes, over the model's limit of {limit} bytes (OnnxModel::with_max_run_bytes)"
                    )));
                }
            }
            self.outputs
                .iter()
                .map(|o| {
                    env.get(o.as_str())
                        .or_else(|| self.initializers.get(o))
                        .cloned()
                        .ok_or_else(|| OnnxError::Run(format!("output `{o}` was not computed")))
                })
                .collect()
        })
    }
}

/// Constants, `Shape`'s results and the arithmetic on them live on the host; where a node
/// mixes them with tensors on a device (a model moved by [`OnnxModel::to_device`]), they
/// join the device. The operands an op only reads as numbers (a `Reshape`'s shape, a
/// `Slice`'s bounds: every input after the first of these ops) stay where they are.
fn same_device(op: &str, mut args: Vec<Option<Tensor>>) -> Result<Vec<Option<Tensor>>, String> {
    const READ_ON_HOST: &[&str] = &[
        "Reshape",
        "Expand",
        "Slice",
        "Tile",
        "Unsqueeze",
        "Squeeze",
        "Pad",
        "Resize",
        "TopK",
        "Split",
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL2",
        "OneHot",
    ];
    let Some(dev) = args
        .iter()
        .flatten()
        .map(|t| t.device())
        .find(|d| *d != Device::Cpu)
    else {
        return Ok(args);
    };
    let movable = if READ_ON_HOST.contains(&op) {
        1
    } else {
        args.len()
    };
    for t in args.iter_mut().take(movable).flatten() {
        if t.device() != dev {
            *t = t
                .to_device(&dev)
                .map_err(|e| format!("moving an operand to {dev}: {e}"))?;
        }
    }
    Ok(args)
}

/// A tensor from a `TensorProto` (raw or typed data), checked against its dims.
fn tensor_of(t: &pb::TensorProto) -> Result<Tensor, String> {
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dim {d}")))
        .collect::<Result<_, _>>()?;
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= 1 << 34)
        .ok_or("dims overflow")?;
    let dt = DataType::try_from(t.data_type.unwrap_or(0)).map_err(|_| "unknown data type")?;
    if t.data_location == Some(pb::tensor_proto::DataLocation::External as i32) {
        return Err("external data is not supported".into());
    }
    let raw = t.raw_data.as_deref();
    macro_rules! read {
        ($ty:ty, $size:expr, $typed:expr) => {{
            let v: Vec<$ty> = match raw {
                Some(r) => {
                    if r.len() != n * $size {
                        return Err(format!("{} bytes of raw data for {n} elements", r.len()));
                    }
                    r.chunks_exact($size)
                        .map(|c| <$ty>::from_le_bytes(c.try_into().expect("chunk size")))
                        .collect()
                }
                None => $typed,
            };
            if v.len() != n {
                return Err(format!("{} values for {n} elements", v.len()));
            }
            v
        }};
    }
    Ok(match dt {
        DataType::Float => Tensor::from_vec(read!(f32, 4, t.float_data.clone()), &dims),
        DataType::Double => Tensor::from_vec(read!(f64, 8, t.double_data.clone()), &dims),
        DataType::Int64 => Tensor::from_vec(read!(i64, 8, t.int64_data.clone()), &dims),
        DataType::Int32 => {
            let v = read!(i32, 4, t.int32_data.clone());
            Tensor::from_vec(v.into_iter().map(i64::from).collect::<Vec<_>>(), &dims)
        }
        DataType::Float16 => {
            let v = read!(u16, 2, t.int32_data.iter().map(|&x| x as u16).collect());
            Tensor::from_vec(
                v.into_iter().map(half::f16::from_bits).collect::<Vec<_>>(),
                &dims,
            )
        }
        DataType::Bfloat16 => {
            let v = read!(u16, 2, t.int32_data.iter().map(|&x| x as u16).collect());
            Tensor::from_vec(
                v.into_iter().map(half::bf16::from_bits).collect::<Vec<_>>(),
                &dims,
            )
        }
        DataType::Uint8 | DataType::Bool => {
            let v: Vec<u8> = match raw {
                Some(r) => r.to_vec(),
                None => t.int32_data.iter().map(|&x| x as u8).collect(),
            };
            if v.len() != n {
                return Err(format!("{} values for {n} elements", v.len()));
            }
            if dt == DataType::Bool {
                Tensor::from_vec(v.into_iter().map(|b| b != 0).collect::<Vec<_>>(), &dims)
            } else {
                Tensor::from_vec(v, &dims)
            }
        }
        other => return Err(format!("data type {other:?} is not supported")),
    })
}

fn dtype_of(code: i64) -> Result<DType, String> {
    let dt = DataType::try_from(code as i32).map_err(|_| format!("unknown data type {code}"))?;
    Ok(match dt {
        DataType::Float => DType::F32,
        DataType::Double => DType::F64,
        DataType::Float16 => DType::F16,
        DataType::Bfloat16 => DType::BF16,
        DataType::Int64 | DataType::Int32 => DType::I64,
        DataType::Uint8 => DType::U8,
        DataType::Bool => DType::Bool,
        other => return Err(format!("cast to {other:?} is not supported")),
    })
}

/// Attribute lookups on a node.
pub(crate) struct Attrs<'a>(pub(crate) &'a pb::NodeProto);

impl Attrs<'_> {
    fn get(&self, name: &str) -> Option<&pb::AttributeProto> {
        self.0
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))
    }
    pub(crate) fn i(&self, name: &str, default: i64) -> i64 {
        self.get(name).and_then(|a| a.i).unwrap_or(default)
    }
    fn f(&self, name: &str, default: f64) -> f64 {
        self.get(name)
            .and_then(|a| a.f)
            .map(f64::from)
            .unwrap_or(default)
    }
    pub(crate) fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }
    fn s(&self, name: &str) -> Option<String> {
        self.get(name)
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }
}

fn req(args: &[Option<Tensor>], i: usize) -> Result<&Tensor, String> {
    args.get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("input {i} is required"))
}

pub(crate) fn ints_of(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).contiguous().to_vec::<i64>()
}

fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a as usize >= rank.max(1) {
        return Err(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(a as usize)
}

fn usize_list(v: &[i64], what: &str) -> Result<Vec<usize>, String> {
    v.iter()
        .map(|&x| usize::try_from(x).map_err(|_| format!("{what} must be non-negative, got {x}")))
        .collect()
}

/// Symmetric pads (`[b1, b2, .., e1, e2, ..]` with `b == e`) per spatial dim.
fn symmetric_pads(a: &Attrs, k: usize) -> Result<Vec<usize>, String> {
    if let Some(p) = a.s("auto_pad")
        && p != "NOTSET"
    {
        return Err(format!("auto_pad={p} is not supported"));
    }
    let pads = a.ints("pads").unwrap_or_else(|| vec![0; 2 * k]);
    if pads.len() != 2 * k || pads[..k] != pads[k..] {
        return Err(format!("asymmetric pads {pads:?} are not supported"));
    }
    usize_list(&pads[..k], "pads")
}
