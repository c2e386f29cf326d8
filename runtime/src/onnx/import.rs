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

fn run_node(
    node: &pb::NodeProto,
    op: &str,
    args: &[Option<Tensor>],
) -> Result<Vec<Tensor>, String> {
    let a = Attrs(node);
    let x = || req(args, 0);
    let one = |t: Tensor| Ok(vec![t]);
    let bin = |f: fn(&Tensor, &Tensor) -> Tensor| -> Result<Vec<Tensor>, String> {
        Ok(vec![f(req(args, 0)?, req(args, 1)?)])
    };
    match op {
        "Identity" | "Dropout" => one(x()?.clone()),
        "Add" => bin(|a, b| a.add(b)),
        "Sub" => bin(|a, b| a.sub(b)),
        "Mul" => bin(|a, b| a.mul(b)),
        "Div" => bin(|a, b| {
            if a.dtype().is_float() || b.dtype().is_float() {
                a.div(b)
            } else {
                // ONNX integer division truncates (as the cast to an integer type does).
                a.to_dtype(DType::F64)
                    .div(&b.to_dtype(DType::F64))
                    .to_dtype(DType::promote(a.dtype(), b.dtype()))
            }
        }),
        "Pow" => bin(|a, b| a.pow(&b.to_dtype(a.dtype()))),
        "Max" | "Min" => {
            let mut acc = x()?.clone();
            for t in args.iter().skip(1).flatten() {
                acc = if op == "Max" {
                    acc.maximum(t)
                } else {
                    acc.minimum(t)
                };
            }
            one(acc)
        }
        "Equal" => bin(|a, b| a.eq(b)),
        "Less" => bin(|a, b| a.lt(b)),
        "LessOrEqual" => bin(|a, b| a.le(b)),
        "Greater" => bin(|a, b| a.gt(b)),
        "GreaterOrEqual" => bin(|a, b| a.ge(b)),
        "And" => bin(|a, b| a.logical_and(b)),
        "Or" => bin(|a, b| a.logical_not().logical_and(&b.logical_not()).logical_not()),
        "Not" => one(x()?.logical_not()),
        "Mod" => {
            let (p, q) = (req(args, 0)?, req(args, 1)?);
            if p.dtype().is_float() || q.dtype().is_float() {
                return Err("Mod of floating-point tensors".into());
            }
            let shape = crate::ops::broadcast_shape("Mod", p, q);
            let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
            let pv = p
                .to_dtype(DType::I64)
                .expand(&dims)
                .contiguous()
                .to_vec::<i64>();
            let qv = q
                .to_dtype(DType::I64)
                .expand(&dims)
                .contiguous()
                .to_vec::<i64>();
            let c_style = a.i("fmod", 0) != 0;
            let mut out = Vec::with_capacity(pv.len());
            for (x, y) in pv.into_iter().zip(qv) {
                if y == 0 {
                    return Err("Mod by zero".into());
                }
                let r = x.wrapping_rem(y);
                // fmod=0: the sign of the divisor (Python's %); fmod=1: of the dividend.
                out.push(if !c_style && r != 0 && (r < 0) != (y < 0) {
                    r + y
                } else {
                    r
                });
            }
            one(Tensor::from_vec(out, &shape))
        }
        "LSTM" | "GRU" | "RNN" => recurrent(op, &a, args),
        "Where" => one(Tensor::where_cond(
            req(args, 0)?,
            req(args, 1)?,
            req(args, 2)?,
        )),
        "Relu" => one(x()?.relu()),
        "Sigmoid" => one(x()?.sigmoid()),
        "Tanh" => one(x()?.tanh()),
        "Exp" => one(x()?.exp()),
        "Log" => one(x()?.log()),
        "Sqrt" => one(x()?.sqrt()),
        "Neg" => one(x()?.neg()),
        "Abs" => one(x()?.abs()),
        "Erf" => one(x()?.erf()),
        "Sin" => one(x()?.sin()),
        "Cos" => one(x()?.cos()),
        "Reciprocal" => one(x()?.pow_scalar(-1.0)),
        "HardSwish" => one(x()?.hardswish()),
        "HardSigmoid" => {
            let (alpha, beta) = (a.f("alpha", 0.2), a.f("beta", 0.5));
            one(x()?.mul_scalar(alpha).add_scalar(beta).clamp(0.0, 1.0))
        }
        "LeakyRelu" => one(x()?.leaky_relu(a.f("alpha", 0.01))),
        "Elu" => one(x()?.elu(a.f("alpha", 1.0))),
        "Softplus" => one(x()?.softplus(1.0, f64::INFINITY)),
        "Gelu" => one(if a.s("approximate").as_deref() == Some("tanh") {
            x()?.gelu_tanh()
        } else {
            x()?.gelu()
        }),
        "Clip" => {
            let lo = args
                .get(1)
                .and_then(Option::as_ref)
                .map(|t| t.to_dtype(DType::F64).item::<f64>());
            let hi = args
                .get(2)
                .and_then(Option::as_ref)
                .map(|t| t.to_dtype(DType::F64).item::<f64>());
            one(x()?.clamp(lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY)))
        }
        "Cast" => one(x()?.to_dtype(dtype_of(a.i("to", 1))?)),
        "MatMul" => bin(|a, b| a.matmul(b)),
        "Gemm" => {
            let (mut p, mut q) = (req(args, 0)?.clone(), req(args, 1)?.clone());
            if a.i("transA", 0) != 0 {
                p = p.t();
            }
            if a.i("transB", 0) != 0 {
                q = q.t();
            }
            let mut y = p.matmul(&q).mul_scalar(a.f("alpha", 1.0));
            if let Some(c) = args.get(2).and_then(Option::as_ref) {
                y = y.add(&c.mul_scalar(a.f("beta", 1.0)));
            }
            one(y)
        }
        "Conv" | "ConvTranspose" => conv(op, &a, args),
        "BatchNormalization" => one(F::batch_norm(
            x()?,
            Some(req(args, 3)?),
            Some(req(args, 4)?),
            Some(req(args, 1)?),
            Some(req(args, 2)?),
            false,
            0.0,
            a.f("epsilon", 1e-5),
        )),
        "LayerNormalization" => {
            let x = x()?;
            let axis = norm_axis(a.i("axis", -1), x.dim())?;
            let shape = x.shape()[axis..].to_vec();
            one(F::layer_norm(
                x,
                &shape,
                Some(req(args, 1)?),
                args.get(2).and_then(Option::as_ref),
                a.f("epsilon", 1e-5),
            ))
        }
        "InstanceNormalization" => {
            let x = x()?;
            let c = *x
                .shape()
                .get(1)
                .ok_or("InstanceNormalization needs [N, C, ...]")?;
            one(F::group_norm(
                x,
                c,
                Some(req(args, 1)?),
                Some(req(args, 2)?),
                a.f("epsilon", 1e-5),
            ))
        }
        "MaxPool" | "AveragePool" => pool(op, &a, x()?),
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = x()?;
            let dims: Vec<isize> = (2..x.dim() as isize).collect();
            one(if op == "GlobalAveragePool" {
                x.mean(&dims, true)
            } else {
                let mut y = x.clone();
                for &d in dims.iter().rev() {
                    y = y.max_dim(d, true).0;
                }
                y
            })
        }
        "Softmax" | "LogSoftmax" => {
            let x = x()?;
            let axis = norm_axis(a.i("axis", -1), x.dim())? as isize;
            one(if op == "Softmax" {
                x.softmax(axis)
            } else {
                x.log_softmax(axis)
            })
        }
        "Shape" => {
            let x = x()?;
            let v: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
            let r = v.len() as i64;
            let clampi = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r) as usize;
            let (s, e) = (clampi(a.i("start", 0)), clampi(a.i("end", r)));
            let v = if s < e { v[s..e].to_vec() } else { vec![] };
            let n = v.len();
            one(Tensor::from_vec(v, &[n]))
        }
        "Constant" => {
            let t = a
                .get("value")
                .and_then(|v| v.t.as_ref())
                .ok_or("Constant without a tensor value")?;
            one(tensor_of(t)?)
        }
        "ConstantOfShape" => {
            let shape = usize_list(&ints_of(x()?), "shape")?;
            let (value, dt) = match a.get("value").and_then(|v| v.t.as_ref()) {
                Some(t) => {
                    let v = tensor_of(t)?;
                    (
                        v.to_dtype(DType::F64).reshape(&[1]).to_vec::<f64>()[0],
                        v.dtype(),
                    )
                }
                None => (0.0, DType::F32),
            };
            one(Tensor::full(&shape, value, dt, &x()?.device()))
        }
        "Range" => {
            let s = req(args, 0)?;
            let (start, limit, delta) = (
                s.to_dtype(DType::F64).item::<f64>(),
                req(args, 1)?.to_dtype(DType::F64).item::<f64>(),
                req(args, 2)?.to_dtype(DType::F64).item::<f64>(),
            );
            if delta == 0.0 || (limit - start) / delta > 1e9 {
                return Err("Range with a zero or huge step count".into());
            }
            if (limit - start) / delta <= 0.0 {
                return one(Tensor::zeros(&[0], s.dtype(), &s.device()));
            }
            one(Tensor::arange(start, limit, delta, s.dtype(), &s.device()))
        }
        "CumSum" => {
            let x = x()?;
            let axis = norm_axis(
                ints_of(req(args, 1)?).first().copied().unwrap_or(0),
                x.dim(),
            )?;
            if a.i("exclusive", 0) != 0 || a.i("reverse", 0) != 0 {
                return Err("CumSum with exclusive or reverse".into());
            }
            one(x.cumsum(axis as isize))
        }
        "Trilu" => {
            let k = args
                .get(1)
                .and_then(Option::as_ref)
                .map(|t| ints_of(t)[0])
                .unwrap_or(0);
            let x = x()?;
            let is_bool = x.dtype() == DType::Bool;
            let xi = if is_bool {
                x.to_dtype(DType::U8)
            } else {
                x.clone()
            };
            let y = if a.i("upper", 1) != 0 {
                xi.triu(k)
            } else {
                xi.tril(k)
            };
            one(if is_bool { y.ne_scalar(0.0) } else { y })
        }
        "Reshape" => {
            let x = x()?;
            let target = ints_of(req(args, 1)?);
            let allow_zero = a.i("allowzero", 0) != 0;
            let mut shape: Vec<isize> = Vec::with_capacity(target.len());
            for (i, &d) in target.iter().enumerate() {
                shape.push(if d == 0 && !allow_zero {
                    *x.shape()
                        .get(i)
                        .ok_or("Reshape copies a dim the input lacks")? as isize
                } else {
                    d as isize
                });
            }
            one(x.reshape_infer(&shape))
        }
        "Flatten" => {
            let x = x()?;
            let axis = if x.dim() == 0 {
                0
            } else {
                norm_axis(a.i("axis", 1), x.dim() + 1)?
            };
            let outer: usize = x.shape()[..axis].iter().product();
            let inner: usize = x.shape()[axis..].iter().product();
            one(x.reshape(&[outer, inner]))
        }
        "Transpose" => {
            let x = x()?;
            let perm: Vec<isize> = match a.ints("perm") {
                Some(p) => p.iter().map(|&v| v as isize).collect(),
                None => (0..x.dim() as isize).rev().collect(),
            };
            one(x.permute(&perm).contiguous())
        }
        "Expand" => {
            let x = x()?;
            let target = ints_of(req(args, 1)?);
            // Bidirectional broadcast of x's shape and the target.
            let rank = x.dim().max(target.len());
            let mut shape = vec![0isize; rank];
            for i in 0..rank {
                let xd = if i + x.dim() >= rank {
                    x.shape()[i + x.dim() - rank] as isize
                } else {
                    1
                };
                let td = if i + target.len() >= rank {
                    target[i + target.len() - rank] as isize
                } else {
                    1
                };
                shape[i] = if xd == 1 { td } else { xd };
            }
            one(x.expand(&shape).contiguous())
        }
        "Slice" => {
            let x = x()?;
            let starts = ints_of(req(args, 1)?);
            let ends = ints_of(req(args, 2)?);
            let axes = match args.get(3).and_then(Option::as_ref) {
                Some(t) => ints_of(t),
                None => (0..starts.len() as i64).collect(),
            };
            let steps = match args.get(4).and_then(Option::as_ref) {
                Some(t) => ints_of(t),
                None => vec![1; starts.len()],
            };
            let mut y = x.clone();
            for i in 0..starts
                .len()
                .min(ends.len())
                .min(axes.len())
                .min(steps.len())
            {
                let axis = norm_axis(axes[i], x.dim())?;
                let size = x.shape()[axis] as i64;
                if steps[i] <= 0 {
                    return Err("Slice with a non-positive step".into());
                }
                let fix = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size) as usize;
                let (s, e) = (fix(starts[i]), fix(ends[i]));
                y = if s >= e {
                    y.narrow(axis as isize, 0, 0)
                } else {
                    y.slice(axis as isize, s, e, steps[i] as usize)
                };
            }
            one(y.contiguous())
        }
        "Gather" => {
            let (data, idx) = (x()?, req(args, 1)?);
            let axis = norm_axis(a.i("axis", 0), data.dim())?;
            let size = data.shape()[axis] as i64;
            let idx = idx.to_dtype(DType::I64);
            let fixed = Tensor::where_cond(&idx.lt_scalar(0.0), &idx.add_scalar(size as f64), &idx);
            let flat = fixed.reshape(&[fixed.numel()]);
            let picked = data.index_select(axis as isize, &flat);
            let mut shape = data.shape()[..axis].to_vec();
            shape.extend_from_slice(idx.shape());
            shape.extend_from_slice(&data.shape()[axis + 1..]);
            one(picked.reshape(&shape))
        }
        "Squeeze" | "Unsqueeze" => {
            let x = x()?;
            let axes = match args.get(1).and_then(Option::as_ref) {
                Some(t) => ints_of(t),
                None => a.ints("axes").unwrap_or_default(),
            };
            if op == "Squeeze" {
                let mut shape = x.shape().to_vec();
                let mut drop: Vec<usize> = if axes.is_empty() {
                    (0..x.dim()).filter(|&i| shape[i] == 1).collect()
                } else {
                    axes.iter()
                        .map(|&v| norm_axis(v, x.dim()))
                        .collect::<Result<_, _>>()?
                };
                drop.sort_unstable();
                for &d in drop.iter().rev() {
                    shape.remove(d);
                }
                one(x.reshape(&shape))
            } else {
                let rank = x.dim() + axes.len();
                let mut ins: Vec<usize> = axes
                    .iter()
                    .map(|&v| norm_axis(v, rank))
                    .collect::<Result<_, _>>()?;
                ins.sort_unstable();
                let mut shape = x.shape().to_vec();
                for &d in &ins {
                    if d > shape.len() {
                        return Err("Unsqueeze axis out of range".into());
                    }
                    shape.insert(d, 1);
                }
                one(x.reshape(&shape))
            }
        }
        "Concat" => {
            let ts: Vec<&Tensor> = args.iter().flatten().collect();
            let first = ts.first().ok_or("Concat of nothing")?;
            let axis = norm_axis(a.i("axis", 0), first.dim())?;
            one(Tensor::cat(&ts, axis as isize))
        }
        "Split" => {
            let x = x()?;
            let axis = norm_axis(a.i("axis", 0), x.dim())?;
            let n = node.output.len();
            let sizes = match args.get(1).and_then(Option::as_ref) {
                Some(t) => usize_list(&ints_of(t), "split")?,
                None => match a.ints("split") {
                    Some(s) => usize_list(&s, "split")?,
                    None => {
                        let total = x.shape()[axis];
                        let each = total.div_ceil(n.max(1));
                        (0..n)
                            .map(|i| each.min(total.saturating_sub(i * each)))
                            .collect()
                    }
                },
            };
            if sizes.iter().sum::<usize>() != x.shape()[axis] {
                return Err(format!(
                    "split sizes {sizes:?} do not add up to {}",
                    x.shape()[axis]
                ));
            }
            let mut start = 0;
            Ok(sizes
                .iter()
                .map(|&s| {
                    let t = x.narrow(axis as isize, start, s).contiguous();
                    start += s;
                    t
                })
                .collect())
        }
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" => {
            let x = x()?;
            let axes = match (op, args.get(1).and_then(Option::as_ref)) {
                (_, Some(t)) => ints_of(t),
                _ => a.ints("axes").unwrap_or_default(),
            };
            let keep = a.i("keepdims", 1) != 0;
            let dims: Vec<isize> = if axes.is_empty() {
                if a.i("noop_with_empty_axes", 0) != 0 {
                    return one(x.clone());
                }
                (0..x.dim() as isize).collect()
            } else {
                axes.iter()
                    .map(|&v| norm_axis(v, x.dim()).map(|d| d as isize))
                    .collect::<Result<_, _>>()?
            };
            one(match op {
                "ReduceSum" => x.sum(&dims, keep),
                "ReduceMean" => x.mean(&dims, keep),
                _ => {
                    let mut sorted = dims.clone();
                    sorted.sort_unstable();
                    let mut y = x.clone();
                    for &d in sorted.iter().rev() {
                        y = if op == "ReduceMax" {
                            y.max_dim(d, keep).0
                        } else {
                            y.min_dim(d, keep).0
                        };
                    }
                    y
                }
            })
        }
        "ArgMax" | "ArgMin" => {
            let x = x()?;
            let axis = norm_axis(a.i("axis", 0), x.dim())? as isize;
            let keep = a.i("keepdims", 1) != 0;
            one(if op == "ArgMax" {
                x.argmax(axis, keep)
            } else {
                x.argmin(axis, keep)
            })
        }
        "Pad" => {
            let x = x()?;
            let pads = ints_of(req(args, 1)?);
            let rank = x.dim();
            if pads.len() != 2 * rank || pads.iter().any(|&p| p < 0) {
                return Err(format!("pads {pads:?} for rank {rank}"));
            }
            // ONNX [b0.., e0..] → PyTorch's last-dim-first pairs.
            let mut torch = Vec::new();
            for d in (0..rank).rev() {
                torch.push(pads[d] as usize);
                torch.push(pads[d + rank] as usize);
            }
            while torch.len() > 2 && torch[torch.len() - 2..] == [0, 0] {
                torch.truncate(torch.len() - 2);
            }
            let mode = a.s("mode").unwrap_or_else(|| "constant".into());
            one(match mode.as_str() {
                "constant" => {
                    let v = args
                        .get(2)
                        .and_then(Option::as_ref)
                        .map(|t| t.to_dtype(DType::F64).item::<f64>())
                        .unwrap_or(0.0);
                    F::pad(x, &torch, v)
                }
                "reflect" => F::pad_with(x, &torch, F::PadMode::Reflect),
                "edge" => F::pad_with(x, &torch, F::PadMode::Replicate),
                other => return Err(format!("Pad mode {other}")),
            })
        }
        other => Err(format!("operator {other} is not supported")),
    }
}

fn conv(op: &str, a: &Attrs, args: &[Option<Tensor>]) -> Result<Vec<Tensor>, String> {
    let (x, w) = (req(args, 0)?, req(args, 1)?);
    let b = args.get(2).and_then(Option::as_ref);
    let k = x.dim().checked_sub(2).ok_or("Conv needs [N, C, ...]")?;
    let ones = vec![1i64; k];
    let stride = usize_list(
        &a.ints("strides").unwrap_or_else(|| ones.clone()),
        "strides",
    )?;
    let dilation = usize_list(
        &a.ints("dilations").unwrap_or_else(|| ones.clone()),
        "dilations",
    )?;
    let padding = symmetric_pads(a, k)?;
    let groups = usize::try_from(a.i("group", 1)).map_err(|_| "negative group")?;
    let two = |v: &[usize]| -> Result<[usize; 2], String> {
        v.try_into().map_err(|_| "2-D conv args".to_string())
    };
    let one_d = |v: &[usize]| -> Result<[usize; 1], String> {
        v.try_into().map_err(|_| "1-D conv args".to_string())
    };
    let y = match (op, k) {
        ("Conv", 2) => F::conv2d(
            x,
            w,
            b,
            &F::Conv2dArgs {
                stride: two(&stride)?,
                padding: two(&padding)?,
                dilation: two(&dilation)?,
                groups,
            },
        ),
        ("Conv", 1) => F::conv1d(
            x,
            w,
            b,
            &F::Conv1dArgs {
                stride: one_d(&stride)?,
                padding: one_d(&padding)?,
                dilation: one_d(&dilation)?,
                groups,
            },
        ),
        ("ConvTranspose", 2 | 1) => {
            let op_pad = usize_list(
                &a.ints("output_padding").unwrap_or_else(|| vec![0; k]),
                "output_padding",
            )?;
            if a.ints("output_shape").is_some() {
                return Err("ConvTranspose with output_shape".into());
            }
            if k == 2 {
                F::conv_transpose2d(
                    x,
                    w,
                    b,
                    &F::ConvTranspose2dArgs {
                        stride: two(&stride)?,
                        padding: two(&padding)?,
                        output_padding: two(&op_pad)?,
                        dilation: two(&dilation)?,
                        groups,
                    },
                )
            } else {
                F::conv_transpose1d(
                    x,
                    w,
                    b,
                    &F::ConvTranspose1dArgs {
                        stride: one_d(&stride)?,
                        padding: one_d(&padding)?,
                        output_padding: one_d(&op_pad)?,
                        dilation: one_d(&dilation)?,
                        groups,
                    },
                )
            }
        }
        _ => return Err(format!("{op} over {k} spatial dims")),
    };
    Ok(vec![y])
}

fn pool(op: &str, a: &Attrs, x: &Tensor) -> Result<Vec<Tensor>, String> {
    let kernel = usize_list(
        &a.ints("kernel_shape").ok_or("kernel_shape is required")?,
        "kernel_shape",
    )?;
    let k = kernel.len();
    if k != 2 || x.dim() != 4 {
        if k == 1 && x.dim() == 3 {
            // [N, C, L] as [N, C, 1, L].
            let x4 = x.unsqueeze(2);
            let a2 = Attrs2 {
                kernel: vec![1, kernel[0]],
                inner: a,
            };
            let y = pool2d(op, &a2, &x4)?;
            return Ok(vec![y.squeeze(2)]);
        }
        return Err(format!("{op} with a {k}-D kernel on rank {}", x.dim()));
    }
    let a2 = Attrs2 { kernel, inner: a };
    Ok(vec![pool2d(op, &a2, x)?])
}

/// Pooling attributes, with 1-D ones lifted to 2-D.
struct Attrs2<'a, 'b> {
    kernel: Vec<usize>,
    inner: &'a Attrs<'b>,
}

fn pool2d(op: &str, a: &Attrs2, x: &Tensor) -> Result<Tensor, String> {
    let lift = |v: Vec<usize>, fill: usize| -> [usize; 2] {
        if v.len() == 1 {
            [fill, v[0]]
        } else {
            [v[0], v[1]]
        }
    };
    let k1 = a.kernel.len() == 2 && a.inner.ints("kernel_shape").is_some_and(|k| k.len() == 1);
    let n = if k1 { 1 } else { 2 };
    let stride = usize_list(
        &a.inner.ints("strides").unwrap_or_else(|| vec![1; n]),
        "strides",
    )?;
    let dilation = usize_list(
        &a.inner.ints("dilations").unwrap_or_else(|| vec![1; n]),
        "dilations",
    )?;
    let padding = symmetric_pads(a.inner, n)?;
    let args = F::Pool2dArgs {
        kernel: [a.kernel[0], a.kernel[1]],
        stride: lift(stride, 1),
        padding: lift(padding, 0),
        dilation: lift(dilation, 1),
        ceil_mode: a.inner.i("ceil_mode", 0) != 0,
        count_include_pad: a.inner.i("count_include_pad", 0) != 0,
        divisor_override: None,
    };
    Ok(if op == "MaxPool" {
        F::max_pool2d_with(x, &args)
    } else {
        F::avg_pool2d_with(x, &args)
    })
}

/// ONNX's `LSTM`, `GRU` and `RNN` (layout 0 or 1, forward/reverse/bidirectional, default
/// activations, no peepholes or sequence lengths) step by step.
fn recurrent(op: &str, a: &Attrs, args: &[Option<Tensor>]) -> Result<Vec<Tensor>, String> {
    let (x, w, r) = (req(args, 0)?, req(args, 1)?, req(args, 2)?);
    let hidden = usize::try_from(a.i("hidden_size", 0)).map_err(|_| "hidden_size")?;
    if hidden == 0 || x.dim() != 3 || w.dim() != 3 || r.dim() != 3 {
        return Err(format!(
            "{op}: X, W, R must be 3-D and hidden_size positive"
        ));
    }
    if args.get(4).and_then(Option::as_ref).is_some()
        || args.get(7).and_then(Option::as_ref).is_some()
    {
        return Err(format!("{op} with sequence_lens or peepholes"));
    }
    if a.get("clip").is_some() || a.i("input_forget", 0) != 0 {
        return Err(format!("{op} with clip or input_forget"));
    }
    let acts = a.get("activations").map(|v| {
        v.strings
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect::<Vec<_>>()
    });
    let relu = match (op, acts.as_deref()) {
        (_, None) => false,
        ("RNN", Some(v)) if v.iter().all(|s| s == "Relu") => true,
        ("RNN", Some(v)) if v.iter().all(|s| s == "Tanh") => false,
        ("LSTM", Some(v)) if v.chunks(3).all(|c| c == ["Sigmoid", "Tanh", "Tanh"]) => false,
        ("GRU", Some(v)) if v.chunks(2).all(|c| c == ["Sigmoid", "Tanh"]) => false,
        (_, Some(v)) => return Err(format!("{op} activations {v:?}")),
    };
    let batch_major = a.i("layout", 0) != 0;
    let x = if batch_major {
        x.transpose(0, 1)
    } else {
        x.clone()
    };
    let (t_len, n) = (x.shape()[0], x.shape()[1]);
    let dirs = w.shape()[0];
    let direction = a.s("direction").unwrap_or_else(|| "forward".into());
    let gates = match op {
        "LSTM" => 4,
        "GRU" => 3,
        _ => 1,
    };
    if w.shape()[1] != gates * hidden || r.shape()[1] != gates * hidden || r.shape()[0] != dirs {
        return Err(format!(
            "{op}: W {:?} / R {:?} do not fit hidden_size {hidden}",
            w.shape(),
            r.shape()
        ));
    }
    let linear_before_reset = a.i("linear_before_reset", 0) != 0;
    let state = |i: usize| -> Option<Tensor> {
        args.get(i).and_then(Option::as_ref).map(|s| {
            if batch_major {
                s.transpose(0, 1)
            } else {
                s.clone()
            }
        })
    };
    let (h0, c0) = (state(5), state(6));
    let gate = |t: &Tensor, g: usize| t.narrow(-1, g * hidden, hidden);
    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for d in 0..dirs {
        let reverse = direction == "reverse" || (direction == "bidirectional" && d == 1);
        let (wd, rd) = (w.select(0, d), r.select(0, d));
        let zeros = Tensor::zeros(&[2 * gates * hidden], x.dtype(), &x.device());
        let b = args
            .get(3)
            .and_then(Option::as_ref)
            .map(|b| b.select(0, d))
            .unwrap_or(zeros);
        let (wb, rb) = (
            b.narrow(0, 0, gates * hidden),
            b.narrow(0, gates * hidden, gates * hidden),
        );
        // Input projections of every step at once: [T, N, G*H].
        let xw = x.matmul(&wd.t()).add(&wb);
        let mut h = h0
            .as_ref()
            .map(|s| s.select(0, d))
            .unwrap_or_else(|| Tensor::zeros(&[n, hidden], x.dtype(), &x.device()));
        let mut c = c0
            .as_ref()
            .map(|s| s.select(0, d))
            .unwrap_or_else(|| Tensor::zeros(&[n, hidden], x.dtype(), &x.device()));
        let mut out = vec![None; t_len];
        for step in 0..t_len {
            let t = if reverse { t_len - 1 - step } else { step };
            let xt = xw.select(0, t);
            match op {
                "LSTM" => {
                    let z = xt.add(&h.matmul(&rd.t())).add(&rb);
                    let (i, o, f, g) = (
                        gate(&z, 0).sigmoid(),
                        gate(&z, 1).sigmoid(),
                        gate(&z, 2).sigmoid(),
                        gate(&z, 3).tanh(),
                    );
                    c = f.mul(&c).add(&i.mul(&g));
                    h = o.mul(&c.tanh());
                }
                "GRU" => {
                    let hr = h.matmul(&rd.t());
                    let zr = gate(&xt, 0).add(&gate(&hr, 0)).add(&gate(&rb, 0)).sigmoid();
                    let rr = gate(&xt, 1).add(&gate(&hr, 1)).add(&gate(&rb, 1)).sigmoid();
                    let cand = if linear_before_reset {
                        gate(&xt, 2).add(&rr.mul(&gate(&hr, 2).add(&gate(&rb, 2))))
                    } else {
                        let rh = rr.mul(&h).matmul(&gate(&rd, 2).t());
                        gate(&xt, 2).add(&rh).add(&gate(&rb, 2))
                    }
                    .tanh();
                    h = zr.rsub_scalar(1.0).mul(&cand).add(&zr.mul(&h));
                }
                _ => {
                    let z = xt.add(&h.matmul(&rd.t())).add(&rb);
                    h = if relu { z.relu() } else { z.tanh() };
                }
            }
            out[t] = Some(h.clone());
        }
        let steps: Vec<Tensor> = out.into_iter().flatten().collect();
        let refs: Vec<&Tensor> = steps.iter().collect();
        ys.push(Tensor::stack(&refs, 0));
        hs.push(h);
        cs.push(c);
    }
    let stack = |v: &[Tensor], axis: isize| Tensor::stack(&v.iter().collect::<Vec<_>>(), axis);
    // Y [T, dirs, N, H] (layout 1: [N, T, dirs, H]); states [dirs, N, H] ([N, dirs, H]).
    let y = stack(&ys, 1);
    let (y, yh, yc) = if batch_major {
        (
            y.permute(&[2, 0, 1, 3]).contiguous(),
            stack(&hs, 1),
            stack(&cs, 1),
        )
    } else {
        (y, stack(&hs, 0), stack(&cs, 0))
    };
    let mut outs = vec![y, yh];
    if op == "LSTM" {
        outs.push(yc);
    }
    Ok(outs)
}
