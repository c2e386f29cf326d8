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

    fn emit_record(&mut self, r: usize) -> Result<(), OnnxError> {
        let rec = &self.traces[0].records[r];
        let recs: Vec<&Record> = self.traces.iter().map(|t| &t.records[r]).collect();
        // Constants must not change with a dynamic dim.
        for (i, t) in rec.inputs.iter().enumerate() {
            let p = ptr(t);
            if !self.values.contains_key(&p)
                && !self.params.contains_key(&p)
                && t.grad_fn().is_none()
            {
                for other in &recs[1..] {
                    let o = &other.inputs[i];
                    if o.shape() != t.shape() || !same_values(o, t) {
                        return Err(OnnxError::Export(format!(
                            "`{}` at {} reads a constant tensor of shape {:?} that changes with a dynamic dim or with the input values (shape {:?} in another trace): it was computed from the inputs by an op the tracer does not record, or from a size; build it with traced ops",
                            rec.op.name(),
                            rec.location,
                            t.shape(),
                            o.shape()
                        )));
                    }
                }
            }
        }
        let mut ins = Vec::with_capacity(rec.inputs.len());
        for (i, t) in rec.inputs.iter().enumerate() {
            ins.push(self.lookup(t, Some(rec), &format!("input {i} of `{}`", rec.op.name()))?);
        }
        let outs: Vec<String> = (0..rec.outputs.len())
            .map(|o| format!("/{}_{r}_{o}", op_stem(&rec.op)))
            .collect();
        for (o, name) in outs.iter().enumerate() {
            let t = rec.outputs[o].clone();
            self.name_value(&t, name, |tr| &tr.records[r].outputs[o]);
        }
        let unsupported = |detail: String| OnnxError::UnsupportedOp {
            op: rec.op.name(),
            location: rec.location.to_string(),
            detail,
        };
        let x = ins.first().cloned().unwrap_or_default();
        let dtype = rec.outputs.first().map(|t| t.dtype()).unwrap_or(DType::F32);
        match &rec.op {
            Op::Identity
            | Op::Dropout {
                training: false, ..
            } => self.node("Identity", &ins[..1], &outs, vec![]),
            Op::Dropout { training: true, p } => {
                return Err(unsupported(format!(
                    ": dropout with p={p} in training mode; call `eval()` (`set_training(false)`) before exporting"
                )));
            }
            Op::Unary(u) => self.unary(*u, &x, &outs[0], dtype)?,
            Op::Binary(b) => {
                let (a, bb) = (
                    self.cast_to(&ins[0], &rec.inputs[0], promote(rec)),
                    self.cast_to(&ins[1], &rec.inputs[1], promote(rec)),
                );
                self.binary(*b, &a, &bb, &outs[0]);
            }
            Op::Scalar {
                op,
                value,
                reversed,
            } => {
                // Computed in the result's dtype (an int tensor times 0.5 is float).
                let in_dtype = dtype;
                let xs = self.cast_to(&x, &rec.inputs[0], in_dtype);
                let c = self.const_scalar(*value, in_dtype)?;
                let (a, b) = if *reversed { (c, xs) } else { (xs, c) };
                self.binary(*op, &a, &b, &outs[0]);
            }
            Op::Cast(to) => self.node(
                "Cast",
                &ins,
                &outs,
                vec![attr_i("to", onnx_dtype(*to)? as i64)],
            ),
            Op::MatMul => self.node("MatMul", &ins, &outs, vec![]),
            Op::Linear => {
                if rec.inputs[0].dim() == 2 {
                    self.node("Gemm", &ins, &outs, vec![attr_i("transB", 1)]);
                } else {
                    let wt = self.op1("Transpose", &ins[1..2], vec![attr_ints("perm", &[1, 0])]);
                    if ins.len() == 3 {
                        let mm = self.op1("MatMul", &[x.clone(), wt], vec![]);
                        self.node("Add", &[mm, ins[2].clone()], &outs, vec![]);
                    } else {
                        self.node("MatMul", &[x.clone(), wt], &outs, vec![]);
                    }
                }
            }
            Op::Conv {
                stride,
                padding,
                dilation,
                groups,
                transposed,
                output_padding,
            } => {
                let kernel: Vec<i64> = rec.inputs[1].shape()[2..]
                    .iter()
                    .map(|&k| k as i64)
                    .collect();
                let mut attrs = vec![
                    attr_ints("kernel_shape", &kernel),
                    attr_ints("strides", &to_i64(stride)),
                    attr_ints("pads", &pads(padding)),
                    attr_ints("dilations", &to_i64(dilation)),
                    attr_i("group", *groups as i64),
                ];
                if *transposed {
                    attrs.push(attr_ints("output_padding", &to_i64(output_padding)));
                    self.node("ConvTranspose", &ins, &outs, attrs);
                } else {
                    self.node("Conv", &ins, &outs, attrs);
                }
            }
            Op::BatchNorm {
                eps,
                training,
                has_weight,
                has_bias,
                has_stats,
            } => {
                if *training || !has_stats {
                    return Err(unsupported(
                        ": batch norm computing batch statistics (training mode, or no running stats); call `eval()` before exporting".into(),
                    ));
                }
                let c = rec.inputs[0].shape()[1];
                // inputs: x, mean, var, weight?, bias?
                let scale = if *has_weight {
                    ins[3].clone()
                } else {
                    self.const_fill(1.0, c, dtype)?
                };
                let bias = if *has_bias {
                    ins[3 + *has_weight as usize].clone()
                } else {
                    self.const_fill(0.0, c, dtype)?
                };
                self.node(
                    "BatchNormalization",
                    &[x.clone(), scale, bias, ins[1].clone(), ins[2].clone()],
                    &outs,
                    vec![attr_f("epsilon", *eps)],
                );
            }
            Op::LayerNorm {
                ndim,
                eps,
                has_weight,
                has_bias,
            } => {
                let norm: usize = rec.inputs[0].shape()[rec.inputs[0].dim() - ndim..]
                    .iter()
                    .product();
                let shape: Vec<usize> =
                    rec.inputs[0].shape()[rec.inputs[0].dim() - ndim..].to_vec();
                let scale = if *has_weight {
                    ins[1].clone()
                } else {
                    self.const_fill_shape(1.0, &shape, dtype, norm)?
                };
                let mut inputs = vec![x.clone(), scale];
                if *has_bias {
                    inputs.push(ins[1 + *has_weight as usize].clone());
                }
                self.node(
                    "LayerNormalization",
                    &inputs,
                    &outs,
                    vec![attr_i("axis", -(*ndim as i64)), attr_f("epsilon", *eps)],
                );
            }
            Op::GroupNorm {
                groups,
                eps,
                has_weight,
                has_bias,
            } => {
                // [N, C, *] -> [N, G, -1], instance-normalised per group, back, then affine.
                let xs = &rec.inputs[0];
                let g = *groups;
                let grouped_shape = self.const_i64(&[0, g as i64, -1]);
                let grouped = self.op1("Reshape", &[x.clone(), grouped_shape], vec![]);
                let ones = self.const_fill(1.0, g, dtype)?;
                let zeros = self.const_fill(0.0, g, dtype)?;
                let normed = self.op1(
                    "InstanceNormalization",
                    &[grouped, ones, zeros],
                    vec![attr_f("epsilon", *eps)],
                );
                let shape = self.op1("Shape", std::slice::from_ref(&x), vec![]);
                let mut cur = self.op1("Reshape", &[normed, shape], vec![]);
                let affine_shape: Vec<i64> = std::iter::once(xs.shape()[1] as i64)
                    .chain(std::iter::repeat_n(1, xs.dim() - 2))
                    .collect();
                let affine_shape = self.const_i64(&affine_shape);
                if *has_weight {
                    let w = self.op1("Reshape", &[ins[1].clone(), affine_shape.clone()], vec![]);
                    cur = self.op1("Mul", &[cur, w], vec![]);
                }
                if *has_bias {
                    let b = self.op1(
                        "Reshape",
                        &[ins[1 + *has_weight as usize].clone(), affine_shape],
                        vec![],
                    );
                    cur = self.op1("Add", &[cur, b], vec![]);
                }
                self.node("Identity", &[cur], &outs, vec![]);
            }
            Op::RmsNorm {
                ndim,
                eps,
                has_weight,
            } => {
                let rank = rec.inputs[0].dim() as i64;
                let axes: Vec<i64> = ((rank - *ndim as i64)..rank).collect();
                let eps = eps.unwrap_or(finfo_eps(dtype));
                let sq = self.op1("Mul", &[x.clone(), x.clone()], vec![]);
                let ms = self.op1(
                    "ReduceMean",
                    &[sq],
                    vec![attr_ints("axes", &axes), attr_i("keepdims", 1)],
                );
                let e = self.const_scalar(eps, dtype)?;
                let ms = self.op1("Add", &[ms, e], vec![]);
                let rms = self.op1("Sqrt", &[ms], vec![]);
                let y = self.op1("Div", &[x.clone(), rms], vec![]);
                if *has_weight {
                    self.node("Mul", &[y, ins[1].clone()], &outs, vec![]);
                } else {
                    self.node("Identity", &[y], &outs, vec![]);
                }
            }
            Op::MaxPool {
                kernel,
                stride,
                padding,
                dilation,
                ceil_mode,
            } => {
                let attrs = vec![
                    attr_ints("kernel_shape", &to_i64(kernel)),
                    attr_ints("strides", &to_i64(stride)),
                    attr_ints("pads", &pads(padding)),
                    attr_ints("dilations", &to_i64(dilation)),
                    attr_i("ceil_mode", *ceil_mode as i64),
                ];
                // MaxPool's second output is ONNX's flattened index, not PyTorch's.
                if outs.len() > 1 {
                    return Err(unsupported(
                        ": max pooling that also returns indices".into(),
                    ));
                }
                self.node("MaxPool", &ins, &outs, attrs);
            }
            Op::AvgPool {
                kernel,
                stride,
                padding,
                ceil_mode,
                count_include_pad,
                divisor_override,
            } => {
                if divisor_override.is_some() {
                    return Err(unsupported(": avg pooling with divisor_override".into()));
                }
                let attrs = vec![
                    attr_ints("kernel_shape", &to_i64(kernel)),
                    attr_ints("strides", &to_i64(stride)),
                    attr_ints("pads", &pads(padding)),
                    attr_i("ceil_mode", *ceil_mode as i64),
                    attr_i("count_include_pad", *count_include_pad as i64),
                ];
                self.node("AveragePool", &ins, &outs, attrs);
            }
            Op::AdaptiveAvgPool { output } | Op::AdaptiveMaxPool { output } => {
                let max = matches!(rec.op, Op::AdaptiveMaxPool { .. });
                if output.iter().all(|&o| o == 1) {
                    self.node(
                        if max {
                            "GlobalMaxPool"
                        } else {
                            "GlobalAveragePool"
                        },
                        &ins,
                        &outs,
                        vec![],
                    );
                } else {
                    // Exact as a fixed pooling only when every size divides, in every trace.
                    let mut kernel = Vec::new();
                    for (d, &o) in output.iter().enumerate() {
                        let sizes: Vec<usize> =
                            recs.iter().map(|r| r.inputs[0].shape()[2 + d]).collect();
                        if sizes.iter().any(|&s| s != sizes[0] || s % o != 0) {
                            return Err(unsupported(format!(
                                ": adaptive pooling to {output:?} from a size that is dynamic or not a multiple ({sizes:?})"
                            )));
                        }
                        kernel.push((sizes[0] / o) as i64);
                    }
                    let attrs = vec![
                        attr_ints("kernel_shape", &kernel),
                        attr_ints("strides", &kernel),
                    ];
                    self.node(
                        if max { "MaxPool" } else { "AveragePool" },
                        &ins,
                        &outs,
                        attrs,
                    );
                }
            }
            Op::Softmax { axis, log } => {
                self.node(
                    if *log { "LogSoftmax" } else { "Softmax" },
                    &ins,
                    &outs,
                    vec![attr_i("axis", *axis as i64)],
                );
            }
            Op::Reshape => {
                let per_trace: Vec<Vec<usize>> =
                    recs.iter().map(|r| r.outputs[0].shape().to_vec()).collect();
                let target = self.reshape_target(&x, &per_trace, rec)?;
                self.node("Reshape", &[x.clone(), target], &outs, vec![]);
            }
            Op::Permute { perm } => self.node(
                "Transpose",
                &ins,
                &outs,
                vec![attr_ints("perm", &to_i64(perm))],
            ),
            Op::Expand => {
                let per_trace: Vec<Vec<usize>> =
                    recs.iter().map(|r| r.outputs[0].shape().to_vec()).collect();
                let dims = self.resolve_all(&per_trace, std::slice::from_ref(&x), rec)?;
                let shape = self.materialize(&dims);
                self.node("Expand", &[x.clone(), shape], &outs, vec![]);
            }
            Op::Slice { axis, step, .. } => {
                let starts: Vec<usize> = recs
                    .iter()
                    .map(|r| match r.op {
                        Op::Slice { start, .. } => start,
                        _ => 0,
                    })
                    .collect();
                let ends: Vec<usize> = recs
                    .iter()
                    .map(|r| match r.op {
                        Op::Slice { end, .. } => end,
                        _ => 0,
                    })
                    .collect();
                let start = self.resolve(&starts, std::slice::from_ref(&x), rec)?;
                let end = self.resolve(&ends, std::slice::from_ref(&x), rec)?;
                let s = self.materialize(&[start]);
                let e = self.materialize(&[end]);
                let a = self.const_i64(&[*axis as i64]);
                let st = self.const_i64(&[*step as i64]);
                self.node("Slice", &[x.clone(), s, e, a, st], &outs, vec![]);
            }
            Op::Select { axis, index } => {
                // A fixed index, or one fixed distance from the end (`x.select(1, t - 1)`).
                let per: Vec<(i64, i64)> = recs
                    .iter()
                    .map(|r| match r.op {
                        Op::Select { index, .. } => {
                            (index as i64, r.inputs[0].shape()[*axis] as i64)
                        }
                        _ => (0, 0),
                    })
                    .collect();
                let index = if per.iter().all(|p| p.0 == per[0].0) {
                    *index as i64
                } else if per.iter().all(|p| p.1 - p.0 == per[0].1 - per[0].0) {
                    per[0].0 - per[0].1
                } else {
                    return Err(unsupported(format!(
                        ": the index changes with a dynamic dim in a way the exporter cannot express ({per:?} as (index, size) per trace)"
                    )));
                };
                let idx = self.const_i64(&[index]);
                let g = self.op1(
                    "Gather",
                    &[x.clone(), idx],
                    vec![attr_i("axis", *axis as i64)],
                );
                let ax = self.const_i64(&[*axis as i64]);
                self.node("Squeeze", &[g, ax], &outs, vec![]);
            }
            Op::Cat { axis } => {
                let cast: Vec<String> = (0..ins.len())
                    .map(|i| self.cast_to(&ins[i], &rec.inputs[i], dtype))
                    .collect();
                self.node("Concat", &cast, &outs, vec![attr_i("axis", *axis as i64)]);
            }
            Op::Split { axis, .. } => {
                let per_trace: Vec<Vec<usize>> = recs
                    .iter()
                    .map(|r| r.outputs.iter().map(|o| o.shape()[*axis]).collect())
                    .collect();
                let dims = self.resolve_all(&per_trace, std::slice::from_ref(&x), rec)?;
                let sizes = self.materialize(&dims);
                self.node(
                    "Split",
                    &[x.clone(), sizes],
                    &outs,
                    vec![attr_i("axis", *axis as i64)],
                );
            }
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => {
                let axes_i = to_i64(axes);
                let keep = attr_i("keepdims", *keepdim as i64);
                // Sums of bool or narrow ints are taken in the result's dtype.
                let x = if matches!(kind, Reduce::Sum | Reduce::Mean) {
                    self.cast_to(&x, &rec.inputs[0], dtype)
                } else {
                    x.clone()
                };
                let ins = [x.clone()];
                match kind {
                    Reduce::Sum => {
                        let a = self.const_i64(&axes_i);
                        self.node("ReduceSum", &[x.clone(), a], &outs, vec![keep]);
                    }
                    Reduce::Mean | Reduce::Max | Reduce::Min => {
                        let op = match kind {
                            Reduce::Mean => "ReduceMean",
                            Reduce::Max => "ReduceMax",
                            _ => "ReduceMin",
                        };
                        self.node(
                            op,
                            &ins[..1],
                            &outs[..1],
                            vec![attr_ints("axes", &axes_i), keep.clone()],
                        );
                        if outs.len() == 2 {
                            let arg = if matches!(kind, Reduce::Max) {
                                "ArgMax"
                            } else {
                                "ArgMin"
                            };
                            self.node(
                                arg,
                                &ins[..1],
                                &outs[1..],
                                vec![
                                    attr_i("axis", axes_i[0]),
                                    keep,
                                    attr_i("select_last_index", 0),
                                ],
                            );
                        }
                    }
                    Reduce::ArgMax | Reduce::ArgMin => {
                        let op = if matches!(kind, Reduce::ArgMax) {
                            "ArgMax"
                        } else {
                            "ArgMin"
                        };
                        self.node(op, &ins[..1], &outs, vec![attr_i("axis", axes_i[0]), keep]);
                    }
                }
            }
            Op::Embedding => {
                // inputs: indices, weight
                self.node(
                    "Gather",
                    &[ins[1].clone(), ins[0].clone()],
                    &outs,
                    vec![attr_i("axis", 0)],
                );
            }
            Op::Attention {
                causal,
                scale,
                dropout,
            } => {
                if *dropout > 0.0 {
                    return Err(unsupported(format!(
                        ": attention dropout p={dropout}; pass 0 in eval mode"
                    )));
                }
                self.attention(rec, &ins, &outs[0], *causal, *scale, dtype)?;
            }
            Op::Fill { value, dtype } => {
                let per_trace: Vec<Vec<usize>> =
                    recs.iter().map(|r| r.outputs[0].shape().to_vec()).collect();
                let dims = self.resolve_all(&per_trace, &[], rec)?;
                let shape = self.materialize(&dims);
                let v = tensor_from(
                    "value",
                    &Tensor::from_vec(vec![*value], &[1]).to_dtype(*dtype),
                )?;
                self.node("ConstantOfShape", &[shape], &outs, vec![attr_t("value", v)]);
            }
            Op::Arange {
                start,
                end,
                step,
                dtype,
            } => {
                let ends: Vec<usize> = recs
                    .iter()
                    .map(|r| match r.op {
                        Op::Arange { end, .. } => end.max(0.0) as usize,
                        _ => 0,
                    })
                    .collect();
                if ends.iter().all(|&e| e == ends[0]) {
                    let (s, l, d) = (
                        self.const_scalar(*start, *dtype)?,
                        self.const_scalar(*end, *dtype)?,
                        self.const_scalar(*step, *dtype)?,
                    );
                    self.node("Range", &[s, l, d], &outs, vec![]);
                } else if *start == 0.0 && *step == 1.0 {
                    // `arange(0, n)` with a dynamic n, as cumsum(ones[n]) - 1: Range over
                    // a shape-derived limit is not supported by every runtime (tract).
                    let n = self.resolve(&ends, &[], rec)?;
                    let shape = self.materialize(&[n]);
                    let one = tensor_from(
                        "value",
                        &Tensor::from_vec(vec![1.0f64], &[1]).to_dtype(*dtype),
                    )?;
                    let ones = self.op1("ConstantOfShape", &[shape], vec![attr_t("value", one)]);
                    let axis = self.const_scalar(0.0, DType::I64)?;
                    let cum = self.op1("CumSum", &[ones, axis], vec![]);
                    let c1 = self.const_scalar(1.0, *dtype)?;
                    self.node("Sub", &[cum, c1], &outs, vec![]);
                } else {
                    return Err(unsupported(format!(
                        ": arange({start}, n, {step}) with n a dynamic size; only arange(0, n) can follow a dynamic dim"
                    )));
                }
            }
            Op::Rnn {
                mode,
                layers,
                hidden,
                bidirectional,
                batch_first,
                bias,
                has_state,
                unbatched,
                unsupported,
            } => {
                if let Some(why) = unsupported {
                    return Err(unsupported_err(rec, format!(": {why}")));
                }
                let cfg = RnnExport {
                    mode: *mode,
                    layers: *layers,
                    hidden: *hidden,
                    dirs: if *bidirectional { 2 } else { 1 },
                    batch_first: *batch_first,
                    bias: *bias,
                    has_state: *has_state,
                    unbatched: *unbatched,
                };
                rnn_nodes(self, &cfg, &ins, &outs);
            }
            Op::MaskedFill { value } => {
                let c = self.const_scalar(*value, dtype)?;
                self.node("Where", &[ins[1].clone(), c, x.clone()], &outs, vec![]);
            }
            Op::Where => {
                let a = self.cast_to(&ins[1], &rec.inputs[1], dtype);
                let b = self.cast_to(&ins[2], &rec.inputs[2], dtype);
                self.node("Where", &[ins[0].clone(), a, b], &outs, vec![]);
            }
            Op::Pad {
                pads: p,
                value,
                mode,
            } => {
                let rank = rec.inputs[0].dim();
                let mut begin = vec![0i64; rank];
                let mut end = vec![0i64; rank];
                for (i, pair) in p.chunks(2).enumerate() {
                    begin[rank - 1 - i] = pair[0] as i64;
                    end[rank - 1 - i] = pair[1] as i64;
                }
                let all: Vec<i64> = begin.into_iter().chain(end).collect();
                let pads_c = self.const_i64(&all);
                let (m, inputs) = match mode {
                    PadKind::Constant => {
                        let v = self.const_scalar(*value, dtype)?;
                        ("constant", vec![x.clone(), pads_c, v])
                    }
                    PadKind::Reflect => ("reflect", vec![x.clone(), pads_c]),
                    PadKind::Replicate => ("edge", vec![x.clone(), pads_c]),
                    PadKind::Circular => {
                        return Err(unsupported(
                            ": circular padding (ONNX has `wrap` only from opset 19)".into(),
                        ));
                    }
                };
                self.node("Pad", &inputs, &outs, vec![attr_s("mode", m)]);
            }
        }
        Ok(())
    }

    /// `input` cast to `dtype` when the traced tensor has another dtype.
    fn cast_to(&mut self, input: &str, traced: &Tensor, dtype: DType) -> String {
        if traced.dtype() == dtype {
            return input.to_string();
        }
        let to = onnx_dtype(dtype).unwrap_or(DataType::Float) as i64;
        self.op1("Cast", &[input.to_string()], vec![attr_i("to", to)])
    }

    /// A recurrent layer as ONNX `RNN`/`LSTM`/`GRU` nodes, one per layer.
    fn binary(&mut self, op: Binary, a: &str, b: &str, out: &str) {
        let (a, b, out) = (a.to_string(), b.to_string(), out.to_string());
        let (name, swap, negate) = match op {
            Binary::Add => ("Add", false, false),
            Binary::Sub => ("Sub", false, false),
            Binary::Mul => ("Mul", false, false),
            Binary::Div => ("Div", false, false),
            Binary::Pow => ("Pow", false, false),
            Binary::Max => ("Max", false, false),
            Binary::Min => ("Min", false, false),
            Binary::Eq => ("Equal", false, false),
            Binary::Ne => ("Equal", false, true),
            Binary::Lt => ("Less", false, false),
            Binary::Le => ("LessOrEqual", false, false),
            Binary::Gt => ("Greater", false, false),
            Binary::Ge => ("GreaterOrEqual", false, false),
            Binary::And => ("And", false, false),
        };
        let inputs = if swap { [b, a] } else { [a, b] };
        if negate {
            let eq = self.op1(name, &inputs, vec![]);
            self.node("Not", &[eq], &[out], vec![]);
        } else {
            self.node(name, &inputs, &[out], vec![]);
        }
    }

    fn unary(&mut self, u: Unary, x: &str, out: &str, dtype: DType) -> Result<(), OnnxError> {
        let (x, out) = (x.to_string(), out.to_string());
        let simple = |name: &'static str| Some(name);
        let direct = match u {
            Unary::Relu => simple("Relu"),
            Unary::Sigmoid => simple("Sigmoid"),
            Unary::Tanh => simple("Tanh"),
            Unary::Exp => simple("Exp"),
            Unary::Log => simple("Log"),
            Unary::Sqrt => simple("Sqrt"),
            Unary::Neg => simple("Neg"),
            Unary::Abs => simple("Abs"),
            Unary::Erf => simple("Erf"),
            Unary::Sin => simple("Sin"),
            Unary::Cos => simple("Cos"),
            Unary::HardSwish => simple("HardSwish"),
            Unary::LogicalNot => simple("Not"),
            _ => None,
        };
        if let Some(name) = direct {
            self.node(name, &[x], &[out], vec![]);
            return Ok(());
        }
        match u {
            Unary::Rsqrt => {
                let s = self.op1("Sqrt", &[x], vec![]);
                self.node("Reciprocal", &[s], &[out], vec![]);
            }
            Unary::Gelu => {
                // 0.5 x (1 + erf(x / √2)), as torch.onnx writes GELU before opset 20.
                let r2 = self.const_scalar(std::f64::consts::SQRT_2, dtype)?;
                let d = self.op1("Div", &[x.clone(), r2], vec![]);
                let e = self.op1("Erf", &[d], vec![]);
                let one = self.const_scalar(1.0, dtype)?;
                let p = self.op1("Add", &[e, one], vec![]);
                let m = self.op1("Mul", &[x, p], vec![]);
                let half = self.const_scalar(0.5, dtype)?;
                self.node("Mul", &[m, half], &[out], vec![]);
            }
            Unary::GeluTanh => {
                // 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))
                let three = self.const_scalar(3.0, dtype)?;
                let cube = self.op1("Pow", &[x.clone(), three], vec![]);
                let k = self.const_scalar(0.044715, dtype)?;
                let kc = self.op1("Mul", &[cube, k], vec![]);
                let inner = self.op1("Add", &[x.clone(), kc], vec![]);
                let c = self.const_scalar((2.0 / std::f64::consts::PI).sqrt(), dtype)?;
                let s = self.op1("Mul", &[inner, c], vec![]);
                let t = self.op1("Tanh", &[s], vec![]);
                let one = self.const_scalar(1.0, dtype)?;
                let p = self.op1("Add", &[t, one], vec![]);
                let m = self.op1("Mul", &[x, p], vec![]);
                let half = self.const_scalar(0.5, dtype)?;
                self.node("Mul", &[m, half], &[out], vec![]);
            }
            Unary::Silu => {
                let s = self.op1("Sigmoid", std::slice::from_ref(&x), vec![]);
                self.node("Mul", &[x, s], &[out], vec![]);
            }
            Unary::Mish => {
                let sp = self.op1("Softplus", std::slice::from_ref(&x), vec![]);
                let t = self.op1("Tanh", &[sp], vec![]);
                self.node("Mul", &[x, t], &[out], vec![]);
            }
            Unary::HardSigmoid => {
                self.node(
                    "HardSigmoid",
                    &[x],
                    &[out],
                    vec![attr_f("alpha", 1.0 / 6.0), attr_f("beta", 0.5)],
                );
            }
            Unary::Softplus { beta, threshold } => {
                // softplus(βx)/β where βx ≤ threshold, x elsewhere (PyTorch's linear regime).
                let b = self.const_scalar(beta, dtype)?;
                let bx = self.op1("Mul", &[x.clone(), b.clone()], vec![]);
                let sp = self.op1("Softplus", std::slice::from_ref(&bx), vec![]);
                let y = self.op1("Div", &[sp, b], vec![]);
                let th = self.const_scalar(threshold, dtype)?;
                let big = self.op1("Greater", &[bx, th], vec![]);
                self.node("Where", &[big, x, y], &[out], vec![]);
            }
            Unary::LeakyRelu(alpha) => {
                self.node("LeakyRelu", &[x], &[out], vec![attr_f("alpha", alpha)])
            }
            Unary::Elu(alpha) => self.node("Elu", &[x], &[out], vec![attr_f("alpha", alpha)]),
            Unary::Clamp(lo, hi) => {
                let lo = match lo {
                    Some(v) => self.const_scalar(v, dtype)?,
                    None => String::new(),
                };
                let mut inputs = vec![x, lo];
                if let Some(v) = hi {
                    inputs.push(self.const_scalar(v, dtype)?);
                }
                self.node("Clip", &inputs, &[out], vec![]);
            }
            _ => unreachable!("direct unary ops are handled above"),
        }
        Ok(())
    }

    fn attention(
        &mut self,
        rec: &Record,
        ins: &[String],
        out: &str,
        causal: bool,
        scale: Option<f64>,
        dtype: DType,
    ) -> Result<(), OnnxError> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let e = *rec.inputs[0].shape().last().unwrap_or(&1);
        let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
        let rank = rec.inputs[1].dim() as i64;
        let mut perm: Vec<i64> = (0..rank).collect();
        perm.swap((rank - 1) as usize, (rank - 2) as usize);
        let kt = self.op1(
            "Transpose",
            std::slice::from_ref(k),
            vec![attr_ints("perm", &perm)],
        );
        let s = self.const_scalar(scale, dtype)?;
        let qs = self.op1("Mul", &[q.clone(), s], vec![]);
        let mut scores = self.op1("MatMul", &[qs, kt], vec![]);
        if causal {
            // A lower-triangular [L, S] mask built from the runtime sizes.
            let shape = self.op1("Shape", std::slice::from_ref(&scores), vec![]);
            let (start, end) = (self.const_i64(&[-2]), self.const_i64(&[i64::MAX]));
            let ls = self.op1("Slice", &[shape, start, end], vec![]);
            let one = pb::TensorProto {
                dims: vec![1],
                data_type: Some(DataType::Bool as i32),
                raw_data: Some(vec![1]),
                ..Default::default()
            };
            let ones = self.op1("ConstantOfShape", &[ls], vec![attr_t("value", one)]);
            // Trilu keeps the lower triangle of the bool ones (upper=0).
            let tril = self.op1("Trilu", &[ones], vec![attr_i("upper", 0)]);
            let ninf = self.const_scalar(f64::NEG_INFINITY, dtype)?;
            scores = self.op1("Where", &[tril, scores, ninf], vec![]);
        }
        if ins.len() > 3 {
            let mask = &rec.inputs[3];
            if mask.dtype() == DType::Bool {
                let ninf = self.const_scalar(f64::NEG_INFINITY, dtype)?;
                scores = self.op1("Where", &[ins[3].clone(), scores, ninf], vec![]);
            } else {
                let m = self.cast_to(&ins[3], mask, dtype);
                scores = self.op1("Add", &[scores, m], vec![]);
            }
        }
        let p = self.op1("Softmax", &[scores], vec![attr_i("axis", -1)]);
        self.node("MatMul", &[p, v.clone()], &[out.to_string()], vec![]);
        Ok(())
    }

    fn const_fill(&mut self, value: f64, n: usize, dtype: DType) -> Result<String, OnnxError> {
        self.const_fill_shape(value, &[n], dtype, n)
    }

    fn const_fill_shape(
        &mut self,
        value: f64,
        shape: &[usize],
        dtype: DType,
        n: usize,
    ) -> Result<String, OnnxError> {
        let name = self.fresh("const");
        let t = Tensor::from_vec(vec![value; n], shape).to_dtype(dtype);
        self.initializers.push(tensor_from(&name, &t)?);
        Ok(name)
    }

    /// The exponents of each symbol for per-trace values `per`, if a monomial fits.
    fn monomial(&self, per: &[usize]) -> Option<(i64, Vec<usize>)> {
        let v0 = per[0] as i64;
        if v0 == 0 {
            return None;
        }
        let mut syms = Vec::new();
        let mut denom: i64 = 1;
        for (s, sym) in self.symbols.iter().enumerate() {
            let v = per[s + 1] as i64;
            if v % v0 != 0 {
                return None;
            }
            let ratio = v / v0;
            if !(ratio as u64).is_power_of_two() {
                return None;
            }
            let e = ratio.trailing_zeros();
            let (i, a) = sym.occurrences[0];
            let base = self.traces[0].inputs[i].shape()[a] as i64;
            for _ in 0..e {
                syms.push(s);
                denom *= base;
            }
        }
        (v0 % denom == 0).then(|| (v0 / denom, syms))
    }

    /// One dim of a shape argument: fixed, an axis of one of `near` (the op's inputs), or a
    /// product of dynamic dims.
    fn resolve(&self, per: &[usize], near: &[String], rec: &Record) -> Result<Dim, OnnxError> {
        if per.iter().all(|&v| v == per[0]) {
            return Ok(Dim::Fixed(per[0] as i64));
        }
        for name in near {
            if let Some(shapes) = self.shapes.get(name) {
                for a in 0..shapes[0].len() {
                    if shapes.iter().zip(per).all(|(s, &v)| s[a] == v) {
                        return Ok(Dim::Of(name.clone(), a));
                    }
                }
            }
        }
        if let Some((coef, syms)) = self.monomial(per) {
            return Ok(Dim::Monomial(coef, syms));
        }
        Err(OnnxError::Export(format!(
            "`{}` at {} takes a size ({} at the example) that changes with a dynamic dim in a way the exporter cannot express (sizes per trace: {per:?})",
            rec.op.name(),
            rec.location,
            per[0]
        )))
    }

    fn resolve_all(
        &self,
        per_trace: &[Vec<usize>],
        near: &[String],
        rec: &Record,
    ) -> Result<Vec<Dim>, OnnxError> {
        (0..per_trace[0].len())
            .map(|i| {
                let per: Vec<usize> = per_trace.iter().map(|s| s[i]).collect();
                self.resolve(&per, near, rec)
            })
            .collect()
    }

    /// A reshape target: one dynamic dim is `-1`, several are computed from the runtime
    /// shapes (not ONNX's `0`, copy-from-input, which tract mis-infers in some graphs).
    fn reshape_target(
        &mut self,
        x: &str,
        per_trace: &[Vec<usize>],
        rec: &Record,
    ) -> Result<String, OnnxError> {
        let n = per_trace[0].len();
        let mut dims: Vec<Option<Dim>> = vec![None; n];
        let mut unresolved = Vec::new();
        for (i, dim) in dims.iter_mut().enumerate() {
            let per: Vec<usize> = per_trace.iter().map(|s| s[i]).collect();
            if per.iter().all(|&v| v == per[0]) {
                *dim = Some(Dim::Fixed(per[0] as i64));
            } else {
                unresolved.push(i);
            }
        }
        if unresolved.len() == 1 {
            dims[unresolved[0]] = Some(Dim::Fixed(-1));
        } else {
            for &i in &unresolved {
                let per: Vec<usize> = per_trace.iter().map(|s| s[i]).collect();
                dims[i] = Some(self.resolve(&per, &[x.to_string()], rec)?);
            }
        }
        let dims: Vec<Dim> = dims
            .into_iter()
            .map(|d| d.unwrap_or(Dim::Fixed(-1)))
            .collect();
        Ok(self.materialize(&dims))
    }

    /// A 1-D int64 tensor of the dims: a constant when all are fixed.
    fn materialize(&mut self, dims: &[Dim]) -> String {
        if dims.iter().all(|d| matches!(d, Dim::Fixed(_))) {
            let v: Vec<i64> = dims
                .iter()
                .map(|d| if let Dim::Fixed(v) = d { *v } else { 0 })
                .collect();
            return self.const_i64(&v);
        }
        let mut parts = Vec::new();
        for d in dims {
            let part = match d {
                Dim::Fixed(v) => self.const_i64(&[*v]),
                Dim::Of(value, axis) => self.dim_of(value, *axis),
                Dim::Monomial(coef, syms) => {
                    let mut acc: Option<String> = None;
                    for &s in syms {
                        let (i, a) = self.symbols[s].occurrences[0];
                        let input = self.input_names[i].clone();
                        let g = self.dim_of(&input, a);
                        acc = Some(match acc {
                            None => g,
                            Some(prev) => self.op1("Mul", &[prev, g], vec![]),
                        });
                    }
                    let acc = acc.unwrap_or_else(|| self.const_i64(&[1]));
                    if *coef == 1 {
                        acc
                    } else {
                        let c = self.const_i64(&[*coef]);
                        self.op1("Mul", &[acc, c], vec![])
                    }
                }
            };
            parts.push(part);
        }
        if parts.len() == 1 {
            return parts.pop().unwrap_or_default();
        }
        self.op1("Concat", &parts, vec![attr_i("axis", 0)])
    }

    /// `Shape(value)[axis]` as a 1-element int64 tensor.
    fn dim_of(&mut self, value: &str, axis: usize) -> String {
        let shape = match self.shape_of.get(value) {
            Some(s) => s.clone(),
            None => {
                let s = self.op1("Shape", &[value.to_string()], vec![]);
                self.shape_of.insert(value.to_string(), s.clone());
                s
            }
        };
        let idx = self.const_i64(&[axis as i64]);
        self.op1("Gather", &[shape, idx], vec![attr_i("axis", 0)])
    }
}

/// The options of a recurrent layer's export (traced, or from `network!`'s graph).
pub(crate) struct RnnExport {
    pub(crate) mode: RnnKind,
    pub(crate) layers: usize,
    pub(crate) hidden: usize,
    pub(crate) dirs: usize,
    pub(crate) batch_first: bool,
    pub(crate) bias: bool,
    pub(crate) has_state: bool,
    pub(crate) unbatched: bool,
}

/// Where a lowering shared by the traced exporter and [`super::GraphWriter`] writes its
/// nodes.
pub(crate) trait NodeSink {
    /// A fresh value name from `stem`.
    fn fresh(&mut self, stem: &str) -> String;
    /// A node with the given outputs.
    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    );
    /// An int64 1-D constant.
    fn const_i64(&mut self, values: &[i64]) -> String;
    /// A node with one fresh output, returned.
    fn op1(&mut self, op: &str, inputs: &[String], attrs: Vec<pb::AttributeProto>) -> String {
        let out = self.fresh(&format!("{op}_out"));
        self.node(op, inputs, std::slice::from_ref(&out), attrs);
        out
    }
    /// Size `axis` of `value` at run time, as a 1-element int64 tensor.
    fn dim_of(&mut self, value: &str, axis: usize) -> String {
        let shape = self.op1("Shape", &[value.to_string()], vec![]);
        let idx = self.const_i64(&[axis as i64]);
        self.op1("Gather", &[shape, idx], vec![attr_i("axis", 0)])
    }
}

impl NodeSink for Builder<'_> {
    fn fresh(&mut self, stem: &str) -> String {
        Builder::fresh(self, stem)
    }
    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    ) {
        Builder::node(self, op, inputs, outputs, attrs)
    }
    fn const_i64(&mut self, values: &[i64]) -> String {
        Builder::const_i64(self, values)
    }
    fn dim_of(&mut self, value: &str, axis: usize) -> String {
        Builder::dim_of(self, value, axis)
    }
}

pub(crate) fn rnn_nodes<S: NodeSink>(g: &mut S, c: &RnnExport, ins: &[String], outs: &[String]) {
    let lstm = c.mode == RnnKind::Lstm;
    let (op, gates) = match c.mode {
        RnnKind::Tanh | RnnKind::Relu => ("RNN", 1),
        RnnKind::Lstm => ("LSTM", 4),
        RnnKind::Gru => ("GRU", 3),
    };
    // PyTorch's gate blocks → ONNX's: LSTM (i, f, g, o) → (i, o, f, c); GRU (r, z, n) → (z, r, h).
    let order: &[usize] = match c.mode {
        RnnKind::Lstm => &[0, 3, 1, 2],
        RnnKind::Gru => &[1, 0, 2],
        _ => &[0],
    };
    let n_state = if c.has_state { 1 + lstm as usize } else { 0 };
    let per_dir = 2 + 2 * c.bias as usize;
    // Time-major [T, N, F].
    let mut x = ins[0].clone();
    if c.unbatched {
        let ax = g.const_i64(&[1]);
        x = g.op1("Unsqueeze", &[x, ax], vec![]);
    } else if c.batch_first {
        x = g.op1("Transpose", &[x], vec![attr_ints("perm", &[1, 0, 2])]);
    }
    let mut h_parts = Vec::new();
    let mut c_parts = Vec::new();
    for layer in 0..c.layers {
        let mut w = Vec::new();
        let mut r = Vec::new();
        let mut b = Vec::new();
        for d in 0..c.dirs {
            let base = 1 + n_state + (layer * c.dirs + d) * per_dir;
            let reorder = |this: &mut S, t: &str| -> String {
                let sizes = this.const_i64(&vec![c.hidden as i64; gates]);
                let parts: Vec<String> = (0..gates)
                    .map(|g| this.fresh(&format!("gate{g}")))
                    .collect();
                this.node(
                    "Split",
                    &[t.to_string(), sizes],
                    &parts,
                    vec![attr_i("axis", 0)],
                );
                let ordered: Vec<String> = order.iter().map(|&i| parts[i].clone()).collect();
                this.op1("Concat", &ordered, vec![attr_i("axis", 0)])
            };
            let unsq = |this: &mut S, t: String| -> String {
                let ax = this.const_i64(&[0]);
                this.op1("Unsqueeze", &[t, ax], vec![])
            };
            let wi = reorder(g, &ins[base]);
            w.push(unsq(g, wi));
            let wh = reorder(g, &ins[base + 1]);
            r.push(unsq(g, wh));
            if c.bias {
                let bi = reorder(g, &ins[base + 2]);
                let bh = reorder(g, &ins[base + 3]);
                let cat = g.op1("Concat", &[bi, bh], vec![attr_i("axis", 0)]);
                b.push(unsq(g, cat));
            }
        }
        let stack = |this: &mut S, v: Vec<String>| -> String {
            if v.len() == 1 {
                v.into_iter().next().unwrap_or_default()
            } else {
                this.op1("Concat", &v, vec![attr_i("axis", 0)])
            }
        };
        let w = stack(g, w);
        let r = stack(g, r);
        let b = if c.bias { stack(g, b) } else { String::new() };
        let mut inputs = vec![x.clone(), w, r, b, String::new()];
        if c.has_state {
            // Rows layer*dirs .. (layer+1)*dirs of h0 (and c0).
            let (s, e, a) = (
                g.const_i64(&[(layer * c.dirs) as i64]),
                g.const_i64(&[((layer + 1) * c.dirs) as i64]),
                g.const_i64(&[0]),
            );
            let state_of = |this: &mut S, v: &str| -> String {
                let v = if c.unbatched {
                    let ax = this.const_i64(&[1]);
                    this.op1("Unsqueeze", &[v.to_string(), ax], vec![])
                } else {
                    v.to_string()
                };
                this.op1("Slice", &[v, s.clone(), e.clone(), a.clone()], vec![])
            };
            inputs.push(state_of(g, &ins[1]));
            if lstm {
                inputs.push(state_of(g, &ins[2]));
            }
        }
        while inputs.last().is_some_and(String::is_empty) {
            inputs.pop();
        }
        let y = g.fresh("rnn_y");
        let yh = g.fresh("rnn_h");
        let yc = g.fresh("rnn_c");
        let mut node_outs = vec![y.clone(), yh.clone()];
        if lstm {
            node_outs.push(yc.clone());
        }
        let mut attrs = vec![
            attr_i("hidden_size", c.hidden as i64),
            attr_s(
                "direction",
                if c.dirs == 2 {
                    "bidirectional"
                } else {
                    "forward"
                },
            ),
        ];
        match c.mode {
            RnnKind::Relu => attrs.push(attr_strings("activations", &vec!["Relu"; c.dirs])),
            RnnKind::Tanh => attrs.push(attr_strings("activations", &vec!["Tanh"; c.dirs])),
            RnnKind::Gru => attrs.push(attr_i("linear_before_reset", 1)),
            RnnKind::Lstm => {}
        }
        g.node(op, &inputs, &node_outs, attrs);
        h_parts.push(yh);
        c_parts.push(yc);
        // Y [T, dirs, N, H] → [T, N, dirs * H].
        let yt = g.op1("Transpose", &[y], vec![attr_ints("perm", &[0, 2, 1, 3])]);
        let t = g.dim_of(&yt, 0);
        let n = g.dim_of(&yt, 1);
        let f = g.const_i64(&[(c.dirs * c.hidden) as i64]);
        let shape = g.op1("Concat", &[t, n, f], vec![attr_i("axis", 0)]);
        x = g.op1("Reshape", &[yt, shape], vec![]);
    }
    // Outputs in PyTorch's layout.
    let y = if c.unbatched {
        let ax = g.const_i64(&[1]);
        g.op1("Squeeze", &[x, ax], vec![])
    } else if c.batch_first {
        g.op1("Transpose", &[x], vec![attr_ints("perm", &[1, 0, 2])])
    } else {
        x
    };
    g.node("Identity", &[y], &outs[..1], vec![]);
    let finish_state = |this: &mut S, parts: Vec<String>, out: &str| {
        let cat = if parts.len() == 1 {
            parts.into_iter().next().unwrap_or_default()
        } else {
            this.op1("Concat", &parts, vec![attr_i("axis", 0)])
        };
        if c.unbatched {
            let ax = this.const_i64(&[1]);
            this.node("Squeeze", &[cat, ax], &[out.to_string()], vec![]);
        } else {
            this.node("Identity", &[cat], &[out.to_string()], vec![]);
        }
    };
    finish_state(g, h_parts, &outs[1]);
    if lstm {
        finish_state(g, c_parts, &outs[2]);
    }
}

fn unsupported_err(rec: &Record, detail: String) -> OnnxError {
    OnnxError::UnsupportedOp {
        op: rec.op.name(),
        location: rec.location.to_string(),
        detail,
    }
}

fn op_stem(op: &Op) -> String {
    op.name()
        .to_lowercase()
        .replace(' ', "_")
        .replace(['(', ')'], "")
}

/// The dtype of a binary op's result (both inputs are cast to it).
fn promote(rec: &Record) -> DType {
    let out = rec.outputs[0].dtype();
    if out == DType::Bool {
        DType::promote(rec.inputs[0].dtype(), rec.inputs[1].dtype())
    } else {
        out
    }
}

fn finfo_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => 0.000_976_562_5,
        DType::BF16 => 0.007_812_5,
        _ => f32::EPSILON as f64,
    }
}

fn same_values(a: &Tensor, b: &Tensor) -> bool {
    if a.numel() > 1 << 20 {
        return true;
    }
    a.to_dtype(DType::F64).to_vec::<f64>() == b.to_dtype(DType::F64).to_vec::<f64>()
}

fn to_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// ONNX `pads`: all begins, then all ends.
fn pads(symmetric: &[usize]) -> Vec<i64> {
    to_i64(symmetric)
        .into_iter()
        .chain(to_i64(symmetric))
        .collect()
}

pub(crate) fn onnx_dtype(d: DType) -> Result<DataType, OnnxError> {
    Ok(match d {
        DType::F32 => DataType::Float,
        DType::F64 => DataType::Double,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bfloat16,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::Uint8,
        DType::Bool => DataType::Bool,
        #[allow(unreachable_patterns)]
        other => {
            return Err(OnnxError::Export(format!(
                "dtype {other:?} has no ONNX mapping"
            )));
        }
    })
}

/// A node named `name` of type `op`.
pub(crate) fn node_proto(
    name: String,
    op: &str,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attrs: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        input: inputs,
        output: outputs,
        name: Some(name),
        op_type: Some(op.to_string()),
        attribute: attrs,
        ..Default::default()
    }
}

fn tensor_proto(name: &str, dt: DataType, dims: &[i64], raw: Vec<u8>) -> pb::TensorProto {
    pb::TensorProto {
        dims: dims.to_vec(),
        data_type: Some(dt as i32),
        name: Some(name.to_string()),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// An initializer holding `t`'s elements (little-endian raw data).
pub(crate) fn tensor_from(name: &str, t: &Tensor) -> Result<pb::TensorProto, OnnxError> {
    let t = t
        .detach()
        .to_device(&crate::Device::Cpu)
        .map_err(|e| OnnxError::Export(format!("copying `{name}` to the host: {e}")))?
        .contiguous();
    let raw = crate::checkpoint::le_bytes(&t);
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    Ok(tensor_proto(name, onnx_dtype(t.dtype())?, &dims, raw))
}

fn value_info(
    name: &str,
    dtype: DType,
    shape: &[usize],
    dynamic: &[Option<String>],
) -> Result<pb::ValueInfoProto, OnnxError> {
    use pb::tensor_shape_proto::dimension::Value;
    let dims = shape.iter().zip(dynamic).map(|(&d, n)| {
        Some(match n {
            Some(n) => Value::DimParam(n.clone()),
            None => Value::DimValue(d as i64),
        })
    });
    tensor_value_info(name, dtype, dims)
}

/// A tensor value's type: element type and dims (a size, a `dim_param`, or unknown).
pub(crate) fn tensor_value_info(
    name: &str,
    dtype: DType,
    dims: impl IntoIterator<Item = Option<pb::tensor_shape_proto::dimension::Value>>,
) -> Result<pb::ValueInfoProto, OnnxError> {
    let dim = dims
        .into_iter()
        .map(|value| pb::tensor_shape_proto::Dimension {
            denotation: None,
            value,
        })
        .collect();
    Ok(pb::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(pb::TypeProto {
            denotation: None,
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(onnx_dtype(dtype)? as i32),
                shape: Some(pb::TensorShapeProto { dim }),
            })),
        }),
        ..Default::default()
    })
}

fn attr(name: &str, ty: AttributeType) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(ty as i32),
        ..Default::default()
    }
}

pub(crate) fn attr_i(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        i: Some(v),
        ..attr(name, AttributeType::Int)
    }
}

pub(crate) fn attr_f(name: &str, v: f64) -> pb::AttributeProto {
    pb::AttributeProto {
        f: Some(v as f32),
        ..attr(name, AttributeType::Float)
    }
}

pub(crate) fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        ints: v.to_vec(),
        ..attr(name, AttributeType::Ints)
    }
}

pub(crate) fn attr_s(name: &str, v: &str) -> pb::AttributeProto {
    pb::AttributeProto {
        s: Some(v.as_bytes().to_vec()),
        ..attr(name, AttributeType::String)
    }
}

fn attr_strings(name: &str, v: &[&str]) -> pb::AttributeProto {
    pb::AttributeProto {
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..attr(name, AttributeType::Strings)
    }
}

fn attr_t(name: &str, t: pb::TensorProto) -> pb::AttributeProto {
    pb::AttributeProto {
        t: Some(t),
        ..attr(name, AttributeType::Tensor)
    }
}
