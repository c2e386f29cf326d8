//! Traced export: run the forward with the tracer on, once at the example inputs and once
//! per named dynamic dimension with that dimension doubled, and turn the records into an
//! ONNX graph.
//!
//! The extra traces are how a dimension stays symbolic: a reshape target, a slice bound or
//! an output size that changes when `batch` doubles is written as a function of the
//! input's runtime shape (`Shape` → `Gather` → `Mul`), never as the example's number.

use super::OnnxError;
use super::proto::{self as pb, attribute_proto::AttributeType, tensor_proto::DataType};
use super::trace::{self, Binary, Op, PadKind, Record, Reduce, RnnKind, Unary};
use crate::nn::{Module, TensorKind};
use crate::{DType, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

mod nodes;
mod protobuf;
mod records;
mod rnn;

use protobuf::*;
pub(crate) use protobuf::{
    attr_f, attr_i, attr_ints, attr_s, node_proto, onnx_dtype, tensor_from, tensor_value_info,
};
pub(crate) use rnn::{NodeSink, RnnExport, rnn_nodes};

/// The opset the exporter writes (ONNX 1.12+ runtimes, onnxruntime ≥ 1.13, tract).
pub const OPSET: i64 = 17;
/// The IR version that goes with [`OPSET`].
pub const IR_VERSION: i64 = 8;

/// How to export: names of the graph's inputs and outputs and which of their axes are
/// dynamic (`torch.onnx.export`'s `input_names`, `output_names`, `dynamic_axes`).
///
/// ```
/// use ferrograd_runtime::onnx::ExportOptions;
/// let opts = ExportOptions::new()
///     .input_names(["input_ids"])
///     .output_names(["logits"])
///     .dynamic_axis("input_ids", 0, "batch")
///     .dynamic_axis("input_ids", 1, "seq")
///     .dynamic_axis("logits", 0, "batch");
/// assert_eq!(opts.dynamic_axes["input_ids"][&1], "seq");
/// ```
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// One name per example input; `input`, `input_1`, … when empty.
    pub input_names: Vec<String>,
    /// One name per output; `output`, `output_1`, … when empty.
    pub output_names: Vec<String>,
    /// Per input or output name, the axes that are symbolic and their `dim_param` names.
    /// The same name on two inputs (say `batch`) is one dimension.
    pub dynamic_axes: BTreeMap<String, BTreeMap<usize, String>>,
    /// Written as the graph's name.
    pub graph_name: Option<String>,
}

impl ExportOptions {
    /// Default names, every axis static.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the graph inputs, in the order of the example inputs.
    pub fn input_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.input_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Names the graph outputs, in the order the forward returns them.
    pub fn output_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.output_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Makes `axis` of the input or output `tensor` symbolic, named `dim`.
    pub fn dynamic_axis(mut self, tensor: &str, axis: usize, dim: &str) -> Self {
        self.dynamic_axes
            .entry(tensor.to_string())
            .or_default()
            .insert(axis, dim.to_string());
        self
    }
}

/// An exported ONNX model: the protobuf, ready to save or inspect.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::Linear;
/// use ferrograd_runtime::onnx;
/// let model = Linear::new(4, 2, &Device::Cpu);
/// let x = Tensor::ones(&[3, 4], DType::F32, &Device::Cpu);
/// let exported = onnx::export_module(&model, &x, &onnx::ExportOptions::new().dynamic_axis("input", 0, "batch")).unwrap();
/// let ops: Vec<_> = exported.op_types();
/// assert_eq!(ops, ["Gemm"]);
/// assert_eq!(exported.initializer_names(), ["weight", "bias"]);
/// ```
#[derive(Clone, Debug)]
pub struct Exported {
    /// The model as ONNX protobuf messages.
    pub model: pb::ModelProto,
}

impl Exported {
    /// A model of `graph` at this exporter's opset and IR version.
    pub(crate) fn from_graph(graph: pb::GraphProto) -> Exported {
        Exported {
            model: pb::ModelProto {
                ir_version: Some(IR_VERSION),
                opset_import: vec![pb::OperatorSetIdProto {
                    domain: Some(String::new()),
                    version: Some(OPSET),
                }],
                producer_name: Some("ferrograd".into()),
                producer_version: Some(env!("CARGO_PKG_VERSION").into()),
                graph: Some(graph),
                ..Default::default()
            },
        }
    }

    /// The serialized model.
    pub fn to_bytes(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(&self.model)
    }

    /// Writes the model to `path` (through a temporary file, so a failed write leaves no
    /// partial model).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), OnnxError> {
        let path = path.as_ref();
        let io = |source| OnnxError::Io {
            path: path.to_path_buf(),
            source,
        };
        let tmp = path.with_extension("onnx.partial");
        std::fs::write(&tmp, self.to_bytes()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }

    /// The graph's node types in order (`["Conv", "Relu", …]`).
    pub fn op_types(&self) -> Vec<String> {
        self.graph()
            .node
            .iter()
            .map(|n| n.op_type.clone().unwrap_or_default())
            .collect()
    }

    /// The initializers' names: parameters and buffers keep their state-dict names.
    pub fn initializer_names(&self) -> Vec<String> {
        self.graph()
            .initializer
            .iter()
            .map(|t| t.name.clone().unwrap_or_default())
            .collect()
    }

    fn graph(&self) -> &pb::GraphProto {
        self.model
            .graph
            .as_ref()
            .expect("an exported model has a graph")
    }
}

/// Exports a one-input, one-output module traced at `example` (`torch.onnx.export`).
///
/// Put the module in eval mode first: a dropout or batch norm in training mode is an
/// error, as are ops without an ONNX mapping (the message names the op and the call site).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
/// use ferrograd_runtime::onnx;
/// let model = Sequential::new()
///     .append(Linear::new(4, 8, &Device::Cpu))
///     .append(ReLU)
///     .append(Linear::new(8, 2, &Device::Cpu));
/// let x = Tensor::ones(&[3, 4], DType::F32, &Device::Cpu);
/// let exported = onnx::export_module(&model, &x, &onnx::ExportOptions::new()).unwrap();
/// assert_eq!(exported.op_types(), ["Gemm", "Relu", "Gemm"]);
/// assert_eq!(exported.initializer_names()[0], "0.weight");
/// ```
pub fn export_module<M>(
    module: &M,
    example: &Tensor,
    options: &ExportOptions,
) -> Result<Exported, OnnxError>
where
    M: Module + for<'a> crate::nn::Forward<&'a Tensor, Output = Tensor>,
{
    export_with(
        module,
        std::slice::from_ref(example),
        |xs| vec![module.forward(&xs[0])],
        options,
    )
}

/// [`export_module`] straight to a file.
pub fn export<M>(
    module: &M,
    example: &Tensor,
    path: impl AsRef<Path>,
    options: &ExportOptions,
) -> Result<(), OnnxError>
where
    M: Module + for<'a> crate::nn::Forward<&'a Tensor, Output = Tensor>,
{
    export_module(module, example, options)?.save(path)
}

/// Exports any forward: `forward` gets the inputs (the examples, or the examples with a
/// dynamic dimension doubled) and returns the outputs. `module` names the parameters: each
/// tensor of its state dict that the forward reads becomes an initializer of that name.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Embedding, Forward, Linear};
/// use ferrograd_runtime::onnx;
/// #[derive(Module)]
/// #[module(crate = ferrograd_runtime)]
/// struct Tagger { emb: Embedding, head: Linear }
/// let m = Tagger { emb: Embedding::new(10, 4, &Device::Cpu), head: Linear::new(4, 3, &Device::Cpu) };
/// let ids = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]);
/// let opts = onnx::ExportOptions::new().input_names(["ids"]).dynamic_axis("ids", 0, "batch").dynamic_axis("ids", 1, "seq");
/// let exported = onnx::export_with(&m, &[ids], |xs| vec![m.head.forward(&m.emb.forward(&xs[0]))], &opts).unwrap();
/// assert_eq!(exported.op_types()[0], "Gather");
/// ```
pub fn export_with<M: Module + ?Sized>(
    module: &M,
    examples: &[Tensor],
    forward: impl Fn(&[Tensor]) -> Vec<Tensor>,
    options: &ExportOptions,
) -> Result<Exported, OnnxError> {
    let input_names = names(&options.input_names, examples.len(), "input");
    let symbols = symbols(examples, &input_names, options)?;
    // Float inputs carry autograd history, so that a value computed from them by an op
    // the tracer does not know is recognised (it has a `grad_fn`) instead of being baked in.
    let prepare = |xs: Vec<Tensor>| -> Vec<Tensor> {
        xs.into_iter()
            .map(|x| {
                if x.dtype().is_float() {
                    x.detach().requires_grad(true)
                } else {
                    x
                }
            })
            .collect()
    };
    let mut traces = Vec::with_capacity(symbols.len() + 1);
    let base = prepare(examples.to_vec());
    traces.push(run_trace(&forward, base, "")?);
    for sym in &symbols {
        let doubled: Vec<Tensor> = examples
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let mut x = x.clone();
                for &(input, axis) in &sym.occurrences {
                    if input == i {
                        x = Tensor::cat(&[&x, &x], axis as isize);
                    }
                }
                x
            })
            .collect();
        let context = format!(" with dynamic dim `{}` doubled", sym.name);
        traces.push(run_trace(&forward, prepare(doubled), &context)?);
    }
    // One more trace with other input values (floats scaled and shifted, integer ids
    // reversed along every axis, so they stay valid): a value the forward computed from
    // the inputs with an op the tracer does not record shows up as a constant that
    // differs between traces, an error instead of a baked-in number.
    if !examples.is_empty() {
        let other: Vec<Tensor> = examples
            .iter()
            .map(|x| {
                if x.dtype().is_float() {
                    x.mul_scalar(1.25).add_scalar(0.125)
                } else if x.dim() == 0 {
                    x.clone()
                } else {
                    let all: Vec<isize> = (0..x.dim() as isize).collect();
                    x.flip(&all)
                }
            })
            .collect();
        traces.push(run_trace(
            &forward,
            prepare(other),
            " with other input values",
        )?);
    }
    let output_names = names(&options.output_names, traces[0].outputs.len(), "output");
    for name in options.dynamic_axes.keys() {
        if !input_names.contains(name) && !output_names.contains(name) {
            return Err(OnnxError::Export(format!(
                "dynamic_axes names `{name}`, which is neither an input ({input_names:?}) nor an output ({output_names:?})"
            )));
        }
    }
    let mut builder = Builder::new(module, &traces, symbols, input_names, output_names);
    builder.build(options)
}

/// One run of the forward under the tracer.
struct Trace {
    inputs: Vec<Tensor>,
    records: Vec<Record>,
    outputs: Vec<Tensor>,
}

fn run_trace(
    forward: &impl Fn(&[Tensor]) -> Vec<Tensor>,
    inputs: Vec<Tensor>,
    context: &str,
) -> Result<Trace, OnnxError> {
    let guard = trace::start();
    let result = catch_unwind(AssertUnwindSafe(|| forward(&inputs)));
    let records = guard.finish();
    match result {
        Ok(outputs) => Ok(Trace {
            inputs,
            records,
            outputs,
        }),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(OnnxError::ForwardPanicked {
                context: context.to_string(),
                message,
            })
        }
    }
}

fn names(given: &[String], n: usize, stem: &str) -> Vec<String> {
    (0..n)
        .map(|i| match given.get(i) {
            Some(name) => name.clone(),
            None if i == 0 => stem.to_string(),
            None => format!("{stem}_{i}"),
        })
        .collect()
}

/// A named dynamic dimension and where it occurs among the inputs.
#[derive(Clone, Debug)]
struct Symbol {
    name: String,
    occurrences: Vec<(usize, usize)>,
}

fn symbols(
    examples: &[Tensor],
    input_names: &[String],
    options: &ExportOptions,
) -> Result<Vec<Symbol>, OnnxError> {
    let mut out: Vec<Symbol> = Vec::new();
    for (i, (x, name)) in examples.iter().zip(input_names).enumerate() {
        let Some(axes) = options.dynamic_axes.get(name) else {
            continue;
        };
        for (&axis, dim) in axes {
            if axis >= x.dim() {
                return Err(OnnxError::Export(format!(
                    "dynamic axis {axis} of input `{name}` is out of range for its shape {:?}",
                    x.shape()
                )));
            }
            match out.iter_mut().find(|s| &s.name == dim) {
                Some(sym) => {
                    let (j, a) = sym.occurrences[0];
                    if examples[j].shape()[a] != x.shape()[axis] {
                        return Err(OnnxError::Export(format!(
                            "dynamic dim `{dim}` is {} on `{}` axis {a} but {} on `{name}` axis {axis}",
                            examples[j].shape()[a],
                            input_names[j],
                            x.shape()[axis]
                        )));
                    }
                    sym.occurrences.push((i, axis));
                }
                None => out.push(Symbol {
                    name: dim.clone(),
                    occurrences: vec![(i, axis)],
                }),
            }
        }
    }
    Ok(out)
}

fn ptr(t: &Tensor) -> usize {
    Arc::as_ptr(&t.0) as usize
}

/// Where a record's input comes from, compared across traces.
#[derive(Clone, Debug, PartialEq)]
enum Source {
    Input(usize),
    Produced(usize, usize),
    Param(String),
    Const,
}

fn classify(trace: &Trace, params: &HashMap<usize, String>) -> Vec<Vec<Source>> {
    let mut produced: HashMap<usize, (usize, usize)> = HashMap::new();
    let inputs: HashMap<usize, usize> = trace
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| (ptr(t), i))
        .collect();
    let mut out = Vec::with_capacity(trace.records.len());
    for (r, rec) in trace.records.iter().enumerate() {
        out.push(
            rec.inputs
                .iter()
                .map(|t| {
                    let p = ptr(t);
                    if let Some(&(a, b)) = produced.get(&p) {
                        Source::Produced(a, b)
                    } else if let Some(&i) = inputs.get(&p) {
                        Source::Input(i)
                    } else if let Some(name) = params.get(&p) {
                        Source::Param(name.clone())
                    } else {
                        Source::Const
                    }
                })
                .collect(),
        );
        for (o, t) in rec.outputs.iter().enumerate() {
            produced.insert(ptr(t), (r, o));
        }
    }
    out
}

/// A dimension of a shape argument, resolved across the traces.
#[derive(Clone, Debug)]
enum Dim {
    Fixed(i64),
    /// Axis `axis` of the value named `value`.
    Of(String, usize),
    /// `coef` times the product of symbols.
    Monomial(i64, Vec<usize>),
}

struct Builder<'a> {
    traces: &'a [Trace],
    symbols: Vec<Symbol>,
    input_names: Vec<String>,
    output_names: Vec<String>,
    params: HashMap<usize, String>,
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    /// Value names of tensors of trace 0 by pointer.
    values: HashMap<usize, String>,
    /// Shapes per trace of named values (for resolving dynamic dims).
    shapes: HashMap<String, Vec<Vec<usize>>>,
    shape_of: HashMap<String, String>,
    consts: HashMap<usize, String>,
    counter: usize,
}

impl<'a> Builder<'a> {
    fn new<M: Module + ?Sized>(
        module: &M,
        traces: &'a [Trace],
        symbols: Vec<Symbol>,
        input_names: Vec<String>,
        output_names: Vec<String>,
    ) -> Self {
        let mut params = HashMap::new();
        module.visit("", &mut |name, t, _kind: TensorKind| {
            params.entry(ptr(t)).or_insert_with(|| name.to_string());
        });
        Builder {
            traces,
            symbols,
            input_names,
            output_names,
            params,
            nodes: Vec::new(),
            initializers: Vec::new(),
            values: HashMap::new(),
            shapes: HashMap::new(),
            shape_of: HashMap::new(),
            consts: HashMap::new(),
            counter: 0,
        }
    }

    fn build(&mut self, options: &ExportOptions) -> Result<Exported, OnnxError> {
        let base = &self.traces[0];
        let classes: Vec<Vec<Vec<Source>>> = self
            .traces
            .iter()
            .map(|t| classify(t, &self.params))
            .collect();
        // The traces must take the same path.
        for (t, trace) in self.traces.iter().enumerate().skip(1) {
            let change = match self.symbols.get(t - 1) {
                Some(sym) => format!("dynamic dim `{}` changes", sym.name),
                None => "the input values change".to_string(),
            };
            let differs =
                trace.records.len() != base.records.len()
                    || trace.outputs.len() != base.outputs.len()
                    || trace.records.iter().zip(&base.records).any(|(a, b)| {
                        std::mem::discriminant(&a.op) != std::mem::discriminant(&b.op)
                    })
                    || classes[t] != classes[0];
            if differs {
                let at = trace
                    .records
                    .iter()
                    .zip(&base.records)
                    .position(|(a, b)| {
                        std::mem::discriminant(&a.op) != std::mem::discriminant(&b.op)
                    })
                    .map(|i| {
                        format!(
                            " (first difference: `{}` at {})",
                            base.records[i].op.name(),
                            base.records[i].location
                        )
                    })
                    .unwrap_or_default();
                return Err(OnnxError::Export(format!(
                    "the forward runs different ops when {change}{at}: its control flow depends on it, so it cannot be one ONNX graph"
                )));
            }
        }
        // Graph inputs.
        let mut graph_inputs = Vec::new();
        for (i, x) in base.inputs.iter().enumerate() {
            let name = self.input_names[i].clone();
            self.name_value(x, &name, |t| &t.inputs[i]);
            let dims: Vec<Option<String>> = (0..x.dim())
                .map(|a| {
                    options
                        .dynamic_axes
                        .get(&name)
                        .and_then(|m| m.get(&a).cloned())
                })
                .collect();
            graph_inputs.push(value_info(&name, x.dtype(), x.shape(), &dims)?);
        }
        for r in 0..base.records.len() {
            self.emit_record(r)?;
        }
        // Graph outputs: the names the user chose, through an Identity when an output is
        // also an input or another output.
        let mut graph_outputs = Vec::new();
        let mut renamed: Vec<String> = Vec::new();
        for (o, y) in base.outputs.iter().enumerate() {
            let name = self.output_names[o].clone();
            let src = self.lookup(y, None, &format!("output `{name}`"))?;
            let dyn_names = options.dynamic_axes.get(&name);
            let dims: Vec<Option<String>> = (0..y.dim())
                .map(|a| {
                    let per: Vec<usize> = self
                        .traces
                        .iter()
                        .map(|t| t.outputs[o].shape()[a])
                        .collect();
                    if per.iter().all(|&v| v == per[0]) {
                        None
                    } else if let Some(n) = dyn_names.and_then(|m| m.get(&a)) {
                        Some(n.clone())
                    } else {
                        Some(match self.monomial(&per) {
                            Some((1, syms)) if syms.len() == 1 => {
                                self.symbols[syms[0]].name.clone()
                            }
                            _ => format!("{name}_dim{a}"),
                        })
                    }
                })
                .collect();
            // The producing node writes the output name directly; an Identity only when
            // the output is a graph input, an initializer or already another output.
            let produced = self.nodes.iter().any(|n| n.output.contains(&src));
            if produced && !renamed.contains(&src) {
                for n in &mut self.nodes {
                    for v in n.input.iter_mut().chain(n.output.iter_mut()) {
                        if *v == src {
                            v.clone_from(&name);
                        }
                    }
                }
                for v in self.values.values_mut() {
                    if *v == src {
                        v.clone_from(&name);
                    }
                }
                renamed.push(name.clone());
            } else {
                self.node("Identity", &[src], std::slice::from_ref(&name), vec![]);
            }
            graph_outputs.push(value_info(&name, y.dtype(), y.shape(), &dims)?);
        }
        let graph = pb::GraphProto {
            node: std::mem::take(&mut self.nodes),
            name: Some(
                options
                    .graph_name
                    .clone()
                    .unwrap_or_else(|| "ferrograd".into()),
            ),
            initializer: std::mem::take(&mut self.initializers),
            input: graph_inputs,
            output: graph_outputs,
            ..Default::default()
        };
        Ok(Exported::from_graph(graph))
    }

    /// Names trace 0's tensor `t` and remembers its shape in every trace.
    fn name_value(&mut self, t: &Tensor, name: &str, in_trace: impl Fn(&Trace) -> &Tensor) {
        self.values.insert(ptr(t), name.to_string());
        let shapes = self
            .traces
            .iter()
            .map(|tr| in_trace(tr).shape().to_vec())
            .collect();
        self.shapes.insert(name.to_string(), shapes);
    }

    fn fresh(&mut self, stem: &str) -> String {
        self.counter += 1;
        format!("/{stem}_{}", self.counter)
    }

    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    ) {
        let name = self.fresh(op);
        self.nodes.push(node_proto(
            name,
            op,
            inputs.to_vec(),
            outputs.to_vec(),
            attrs,
        ));
    }

    fn const_i64(&mut self, values: &[i64]) -> String {
        let name = self.fresh("const");
        self.initializers.push(tensor_proto(
            &name,
            DataType::Int64,
            &[values.len() as i64],
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
        name
    }

    /// A scalar constant of `dtype` (a float or integer type).
    fn const_scalar(&mut self, value: f64, dtype: DType) -> Result<String, OnnxError> {
        let name = self.fresh("const");
        let t = Tensor::from_vec(vec![value], &[]).to_dtype(dtype);
        self.initializers.push(tensor_from(&name, &t)?);
        Ok(name)
    }

    /// The ONNX name of trace 0's tensor `t`, adding it as an initializer when it is a
    /// parameter, a buffer or a constant.
    fn lookup(
        &mut self,
        t: &Tensor,
        rec: Option<&Record>,
        what: &str,
    ) -> Result<String, OnnxError> {
        let p = ptr(t);
        if let Some(name) = self.values.get(&p) {
            return Ok(name.clone());
        }
        if let Some(name) = self.params.get(&p).cloned() {
            self.initializers.push(tensor_from(&name, t)?);
            self.values.insert(p, name.clone());
            let shapes = vec![t.shape().to_vec(); self.traces.len()];
            self.shapes.insert(name.clone(), shapes);
            return Ok(name);
        }
        if let Some(producer) = t.grad_fn() {
            let location = rec
                .map(|r| r.location.to_string())
                .unwrap_or_else(|| "the end of the forward".into());
            return Err(OnnxError::UnsupportedOp {
                op: producer.to_string(),
                location,
                detail: format!(
                    ": {what} was computed from the inputs by `{producer}`, which the ONNX tracer does not record"
                ),
            });
        }
        if rec.is_none() {
            return Err(OnnxError::Export(format!(
                "{what} does not depend on the inputs through any traced op (a constant output cannot be exported)"
            )));
        }
        if let Some(name) = self.consts.get(&p) {
            return Ok(name.clone());
        }
        let name = self.fresh("constant");
        self.initializers.push(tensor_from(&name, t)?);
        self.consts.insert(p, name.clone());
        self.shapes
            .insert(name.clone(), vec![t.shape().to_vec(); self.traces.len()]);
        Ok(name)
    }
}
