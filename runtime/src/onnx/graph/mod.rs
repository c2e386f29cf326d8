//! Export from `network!`'s compile-time graph: no example input, no tracing.
//!
//! `network!` knows every value of a network and its symbolic shape when it expands, so
//! it writes, beside `forward`, an [`ExportLayer`] impl whose body is the same dataflow
//! over [`Value`]s: each call becomes ONNX nodes through a [`GraphWriter`], each value
//! gets its declared shape (the DSL's size names, `N`, `T`, become `dim_param`s), and each
//! layer writes its parameters as initializers under their state-dict names. Built-in
//! layers (`Linear`, `Conv2d`, `BatchNorm2d`, …) implement [`ExportLayer`] here; a
//! network used as a layer nests (its initializers under its field's name). A call with
//! no ONNX lowering records an error naming the op and the layer's path: the export is
//! an `Err`, never a partial file.

use super::OnnxError;
use super::export::{
    Exported, NodeSink, RnnExport, attr_f, attr_i, attr_ints, attr_s, node_proto, rnn_nodes,
    tensor_from, tensor_value_info,
};
use super::proto as pb;
use super::trace::RnnKind;
use crate::nn::{
    BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, Dropout, Embedding,
    GroupNorm, LayerNorm, Linear, Module, PaddingMode, RMSNorm,
};
use crate::nn::{Recurrent, RnnMode};
use crate::{DType, Tensor};
use std::collections::HashMap;
use std::path::Path;

mod layers;
mod network;
mod sequence;

use layers::{one, value_info};
pub use network::{
    ExportLayer, ExportNetwork, Probe, TraceProbe, ViaExportLayer, ViaTrace, ViaUnsupported,
    export_onnx, network_graph,
};

/// One dimension of a value's shape as `network!` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymDim {
    /// A size known when the network is built (a literal, a const or constructor
    /// parameter).
    Fixed(usize),
    /// A size of the network's inputs (`N`, `T`): a `dim_param` of the ONNX graph.
    Named(&'static str),
    /// An expression of input sizes (`N * T`, `H / 2`): known to the runtime only.
    Expr(String),
}

/// A tensor of the graph being written: its ONNX name, declared shape and element type.
#[derive(Clone, Debug)]
pub struct Value {
    name: String,
    shape: Vec<SymDim>,
    dtype: DType,
}

impl Value {
    /// The value's ONNX name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its shape as declared.
    pub fn shape(&self) -> &[SymDim] {
        &self.shape
    }
    /// Its rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

/// The attribute values a node takes.
#[derive(Clone, Debug)]
pub enum Attr {
    /// An integer (`axis`).
    Int(i64),
    /// A float (`epsilon`, `alpha`).
    Float(f64),
    /// Integers (`perm`, `kernel_shape`).
    Ints(Vec<i64>),
    /// A string (`mode`).
    Str(String),
}

/// What the generated export of a network (or a hand-written one) writes into.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::Linear;
/// use ferrograd_runtime::onnx::{GraphWriter, SymDim};
/// let fc = Linear::new(4, 2, &Device::Cpu);
/// let mut g = GraphWriter::new("tiny");
/// let x = g.input("x", DType::F32, &[SymDim::Named("N"), SymDim::Fixed(4)]);
/// let y = g.layer(&fc, "fc", &[&x]).remove(0);
/// g.output(&y, "y", &[SymDim::Named("N"), SymDim::Fixed(2)]);
/// let model = g.finish().unwrap();
/// assert_eq!(model.op_types(), ["Gemm"]);
/// assert_eq!(model.initializer_names(), ["fc.weight", "fc.bias"]);
/// ```
pub struct GraphWriter {
    name: String,
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    inputs: Vec<pb::ValueInfoProto>,
    outputs: Vec<pb::ValueInfoProto>,
    value_info: Vec<pb::ValueInfoProto>,
    counter: usize,
    /// The state-dict path of the layer being written.
    scope: Vec<String>,
    /// Per network level: where each size name is read from (value, axis).
    frames: Vec<HashMap<&'static str, (String, usize)>>,
    error: Option<OnnxError>,
}

impl GraphWriter {
    /// An empty graph named `name`.
    pub fn new(name: &str) -> Self {
        GraphWriter {
            name: name.to_string(),
            nodes: Vec::new(),
            initializers: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            value_info: Vec::new(),
            counter: 0,
            scope: Vec::new(),
            frames: vec![HashMap::new()],
            error: None,
        }
    }

    /// Records the first error; the export fails with it at [`finish`](Self::finish).
    pub fn fail(&mut self, error: OnnxError) {
        self.error.get_or_insert(error);
    }

    /// The state-dict path of the layer being written (`encoder.0`), for messages.
    pub fn path(&self) -> String {
        self.scope.join(".")
    }

    /// An error for `op` of the layer being written.
    pub fn unsupported(&mut self, op: &str, detail: &str) {
        let location = match self.path() {
            p if p.is_empty() => "the network".to_string(),
            p => format!("layer `{p}`"),
        };
        self.fail(OnnxError::UnsupportedOp {
            op: op.to_string(),
            location,
            detail: format!(": {detail}"),
        });
    }

    /// A graph input of the declared shape; its named sizes are read from it.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[SymDim]) -> Value {
        let v = Value {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
        };
        self.bind_sizes(std::slice::from_ref(&v));
        match value_info(&v, true) {
            Ok(info) => self.inputs.push(info),
            Err(e) => self.fail(e),
        }
        v
    }

    /// Marks `v` as the graph output `name` with the declared shape.
    pub fn output(&mut self, v: &Value, name: &str, shape: &[SymDim]) {
        let out = Value {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype: v.dtype,
        };
        // The producer writes the output's name, unless the value is an input or has
        // another output's name already.
        let produced = self
            .nodes
            .iter_mut()
            .rev()
            .find(|n| n.output.contains(&v.name));
        let is_output = self
            .outputs
            .iter()
            .any(|o| o.name.as_deref() == Some(&v.name));
        match produced {
            Some(node) if !is_output => {
                for o in &mut node.output {
                    if *o == v.name {
                        o.clone_from(&out.name);
                    }
                }
                for n in &mut self.nodes {
                    for i in &mut n.input {
                        if *i == v.name {
                            i.clone_from(&out.name);
                        }
                    }
                }
                self.value_info
                    .retain(|i| i.name.as_deref() != Some(&v.name));
            }
            _ => {
                self.nodes.push(node_proto(
                    format!("/Identity_{}", self.counter),
                    "Identity",
                    vec![v.name.clone()],
                    vec![out.name.clone()],
                    Vec::new(),
                ));
                self.counter += 1;
            }
        }
        match value_info(&out, true) {
            Ok(info) => self.outputs.push(info),
            Err(e) => self.fail(e),
        }
    }

    /// The model, or the first error recorded.
    pub fn finish(mut self) -> Result<Exported, OnnxError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let graph = pb::GraphProto {
            node: self.nodes,
            name: Some(self.name),
            initializer: self.initializers,
            input: self.inputs,
            output: self.outputs,
            value_info: self.value_info,
            ..Default::default()
        };
        Ok(Exported::from_graph(graph))
    }

    /// Writes `layer` on `inputs`, its parameters under `field` (`fc1`, `blocks.0`).
    pub fn layer<L: ExportLayer + ?Sized>(
        &mut self,
        layer: &L,
        field: &str,
        inputs: &[&Value],
    ) -> Vec<Value> {
        self.scope.push(field.to_string());
        let inputs: Vec<Value> = inputs.iter().map(|v| (*v).clone()).collect();
        let out = layer.export_layer(self, &inputs);
        self.scope.pop();
        out
    }

    /// Enters a network level whose inputs are `inputs` with the declared `shapes`: its
    /// size names (`N`, `T`) are read from them. Returns the inputs with those shapes;
    /// [`leave`](Self::leave) ends the level.
    pub fn enter(&mut self, inputs: &[Value], shapes: &[&[SymDim]]) -> Vec<Value> {
        let inputs: Vec<Value> = inputs
            .iter()
            .zip(shapes)
            .map(|(v, s)| Value {
                shape: s.to_vec(),
                ..v.clone()
            })
            .collect();
        self.frames.push(HashMap::new());
        self.bind_sizes(&inputs);
        inputs
    }

    /// Output `i` of a layer's outputs (an error when the layer yielded fewer: the
    /// export fails, so the placeholder returned is never written).
    pub fn nth(&mut self, outputs: &[Value], i: usize) -> Value {
        match outputs.get(i) {
            Some(v) => v.clone(),
            None => {
                if self.error.is_none() {
                    let path = self.path();
                    self.fail(OnnxError::Export(format!(
                        "layer `{path}` yielded {} values, but the network uses value {i}",
                        outputs.len()
                    )));
                }
                Value {
                    name: String::new(),
                    shape: Vec::new(),
                    dtype: DType::F32,
                }
            }
        }
    }

    /// `v` with `template`'s shape (a repeated layer keeps its input's shape).
    pub fn shaped_like(&self, v: Value, template: &Value) -> Value {
        Value {
            shape: template.shape.clone(),
            ..v
        }
    }

    /// `arange(T)`: the positions `0..T` as int64 `[T]` (ONNX `Range`).
    pub fn arange(&mut self, size: &SymDim) -> Value {
        let Some(n) = self.size(size) else {
            self.unsupported(
                "arange",
                &format!("size `{size:?}` is not an input size of this network"),
            );
            return self.nth(&[], 0);
        };
        let n = self.node("Squeeze", &[&n], &[], Vec::new(), DType::I64);
        let (zero, one) = (
            self.const_scalar(0.0, DType::I64),
            self.const_scalar(1.0, DType::I64),
        );
        self.node(
            "Range",
            &[&zero, &n.name, &one],
            &[],
            vec![size.clone()],
            DType::I64,
        )
    }

    /// Leaves the level [`enter`](Self::enter) began.
    pub fn leave(&mut self) {
        self.frames.pop();
    }

    fn bind_sizes(&mut self, inputs: &[Value]) {
        let frame = self.frames.last_mut().expect("a frame");
        for v in inputs {
            for (axis, d) in v.shape.iter().enumerate() {
                if let SymDim::Named(s) = d {
                    frame.entry(*s).or_insert((v.name.clone(), axis));
                }
            }
        }
    }

    /// `v` with the declared shape (and recorded as such in the graph's `value_info`).
    pub fn declare(&mut self, mut v: Value, shape: &[SymDim]) -> Value {
        if v.shape.len() == shape.len() || v.shape.is_empty() {
            v.shape = shape.to_vec();
        }
        if self.nodes.iter().any(|n| n.output.contains(&v.name))
            && let Ok(info) = value_info(&v, false)
        {
            self.value_info.push(info);
        }
        v
    }

    fn fresh(&mut self, stem: &str) -> String {
        self.counter += 1;
        let scope = self.path();
        if scope.is_empty() {
            format!("/{stem}_{}", self.counter)
        } else {
            format!("/{scope}/{stem}_{}", self.counter)
        }
    }

    /// A node of type `op` with one output, of `shape` and `dtype`.
    pub fn node(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        shape: Vec<SymDim>,
        dtype: DType,
    ) -> Value {
        let out = self.fresh(op);
        let attribute = attrs
            .iter()
            .map(|(name, a)| match a {
                Attr::Int(v) => attr_i(name, *v),
                Attr::Float(v) => attr_f(name, *v),
                Attr::Ints(v) => attr_ints(name, v),
                Attr::Str(v) => attr_s(name, v),
            })
            .collect();
        self.nodes.push(node_proto(
            format!("{out}_node"),
            op,
            inputs.iter().map(|s| s.to_string()).collect(),
            vec![out.clone()],
            attribute,
        ));
        Value {
            name: out,
            shape,
            dtype,
        }
    }

    /// A node whose output has `x`'s shape and dtype.
    fn same(&mut self, op: &str, x: &Value, others: &[&str], attrs: &[(&str, Attr)]) -> Value {
        let mut ins = vec![x.name.as_str()];
        ins.extend_from_slice(others);
        self.node(op, &ins, attrs, x.shape.clone(), x.dtype)
    }

    /// The parameter `t` of the current layer as an initializer named by its state-dict
    /// key (`fc1.weight` for `local` = `weight`).
    pub fn param(&mut self, local: &str, t: &Tensor) -> String {
        let name = crate::nn::join_path(&self.path(), local);
        if !self
            .initializers
            .iter()
            .any(|i| i.name.as_deref() == Some(&name))
        {
            match tensor_from(&name, t) {
                Ok(p) => self.initializers.push(p),
                Err(e) => self.fail(e),
            }
        }
        name
    }

    /// An int64 1-D constant.
    pub fn const_i64(&mut self, values: &[i64]) -> String {
        let t = Tensor::from_vec(values.to_vec(), &[values.len()]);
        self.constant(&t)
    }

    /// A scalar constant of `dtype`.
    pub fn const_scalar(&mut self, value: f64, dtype: DType) -> String {
        let t = Tensor::from_vec(vec![value], &[]).to_dtype(dtype);
        self.constant(&t)
    }

    fn constant(&mut self, t: &Tensor) -> String {
        let name = self.fresh("const");
        match tensor_from(&name, t) {
            Ok(p) => self.initializers.push(p),
            Err(e) => self.fail(e),
        }
        name
    }

    /// An elementwise op of one input (`Relu`, `Tanh`, `Sigmoid`, `Erf`, …).
    pub fn unary(&mut self, op: &str, x: &Value) -> Value {
        self.same(op, x, &[], &[])
    }

    /// `relu`, `relu6`, `gelu`, `gelu_tanh`, `tanh`, `sigmoid`, `silu` and `leaky_relu` by
    /// `network!`'s names (GELU as its formula: opset 17 has no `Gelu`).
    pub fn activation(&mut self, name: &str, x: &Value, negative_slope: f64) -> Value {
        match name {
            "relu" => self.unary("Relu", x),
            "relu6" => {
                let (lo, hi) = (
                    self.const_scalar(0.0, x.dtype),
                    self.const_scalar(6.0, x.dtype),
                );
                self.same("Clip", x, &[&lo, &hi], &[])
            }
            "tanh" => self.unary("Tanh", x),
            "sigmoid" => self.unary("Sigmoid", x),
            "leaky_relu" => self.same(
                "LeakyRelu",
                x,
                &[],
                &[("alpha", Attr::Float(negative_slope))],
            ),
            "silu" => {
                let s = self.unary("Sigmoid", x);
                self.same("Mul", x, &[&s.name], &[])
            }
            "gelu" => {
                // x · (1 + erf(x / √2)) / 2
                let r = self.const_scalar(std::f64::consts::FRAC_1_SQRT_2, x.dtype);
                let scaled = self.same("Mul", x, &[&r], &[]);
                let erf = self.unary("Erf", &scaled);
                self.half_x_one_plus(x, &erf)
            }
            "gelu_tanh" => {
                // x · (1 + tanh(√(2/π) · (x + 0.044715 x³))) / 2
                let c3 = self.const_scalar(0.044715, x.dtype);
                let sq = self.same("Mul", x, &[&x.name], &[]);
                let cube = self.same("Mul", &sq, &[&x.name], &[]);
                let term = self.same("Mul", &cube, &[&c3], &[]);
                let inner = self.same("Add", x, &[&term.name], &[]);
                let k = self.const_scalar((2.0 / std::f64::consts::PI).sqrt(), x.dtype);
                let arg = self.same("Mul", &inner, &[&k], &[]);
                let t = self.unary("Tanh", &arg);
                self.half_x_one_plus(x, &t)
            }
            other => {
                self.unsupported(other, "no ONNX lowering for this activation");
                x.clone()
            }
        }
    }

    fn half_x_one_plus(&mut self, x: &Value, t: &Value) -> Value {
        let one = self.const_scalar(1.0, x.dtype);
        let half = self.const_scalar(0.5, x.dtype);
        let p = self.same("Add", t, &[&one], &[]);
        let xp = self.same("Mul", x, &[&p.name], &[]);
        self.same("Mul", &xp, &[&half], &[])
    }

    /// `a op b` with broadcasting (`Add`, `Sub`, `Mul`, `Div`).
    pub fn binary(&mut self, op: &str, a: &Value, b: &Value) -> Value {
        let shape = if a.rank() >= b.rank() {
            a.shape.clone()
        } else {
            b.shape.clone()
        };
        self.node(op, &[&a.name, &b.name], &[], shape, a.dtype)
    }

    /// `x op s` (or `s op x` when `reversed`) with a scalar.
    pub fn scalar(&mut self, op: &str, x: &Value, s: f64, reversed: bool) -> Value {
        let c = self.const_scalar(s, x.dtype);
        if reversed {
            self.node(op, &[&c, &x.name], &[], x.shape.clone(), x.dtype)
        } else {
            self.same(op, x, &[&c], &[])
        }
    }

    /// Softmax (or log-softmax) along `dim`.
    pub fn softmax(&mut self, x: &Value, dim: isize, log: bool) -> Value {
        let op = if log { "LogSoftmax" } else { "Softmax" };
        self.same(op, x, &[], &[("axis", Attr::Int(dim as i64))])
    }

    /// `x.flatten(1, -1)`: `[N, …]` → `[N, ∏…]`.
    pub fn flatten(&mut self, x: &Value) -> Value {
        self.node(
            "Flatten",
            &[&x.name],
            &[("axis", Attr::Int(1))],
            Vec::new(),
            x.dtype,
        )
    }

    /// The size `d` as a 1-element int64 tensor: a constant, or read from the input that
    /// declares it.
    fn size(&mut self, d: &SymDim) -> Option<String> {
        match d {
            SymDim::Fixed(v) => Some(self.const_i64(&[*v as i64])),
            SymDim::Named(s) => {
                let (value, axis) = self.frames.iter().rev().find_map(|f| f.get(s))?.clone();
                let shape = self.node("Shape", &[&value], &[], vec![SymDim::Fixed(1)], DType::I64);
                let (start, end) = (
                    self.const_i64(&[axis as i64]),
                    self.const_i64(&[axis as i64 + 1]),
                );
                Some(
                    self.node(
                        "Slice",
                        &[&shape.name, &start, &end],
                        &[],
                        vec![SymDim::Fixed(1)],
                        DType::I64,
                    )
                    .name,
                )
            }
            SymDim::Expr(_) => None,
        }
    }

    /// `x.reshape(shape)`: named sizes are read from the inputs at run time, and one
    /// size expression (`N * T`) becomes `-1`.
    pub fn reshape(&mut self, x: &Value, shape: &[SymDim]) -> Value {
        let inferred = shape
            .iter()
            .filter(|d| matches!(d, SymDim::Expr(_)))
            .count();
        if inferred > 1 {
            self.unsupported(
                "reshape",
                &format!(
                    "the target {shape:?} has more than one size computed from the input's sizes"
                ),
            );
            return x.clone();
        }
        let target = if shape
            .iter()
            .all(|d| matches!(d, SymDim::Fixed(_) | SymDim::Expr(_)))
        {
            let dims: Vec<i64> = shape
                .iter()
                .map(|d| match d {
                    SymDim::Fixed(v) => *v as i64,
                    _ => -1,
                })
                .collect();
            self.const_i64(&dims)
        } else {
            let mut parts = Vec::new();
            for d in shape {
                match self.size(d) {
                    Some(p) => parts.push(p),
                    None if matches!(d, SymDim::Expr(_)) => parts.push(self.const_i64(&[-1])),
                    None => {
                        self.unsupported(
                            "reshape",
                            &format!("size `{d:?}` is not an input size of this network"),
                        );
                        return x.clone();
                    }
                }
            }
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            self.node(
                "Concat",
                &refs,
                &[("axis", Attr::Int(0))],
                vec![SymDim::Fixed(shape.len())],
                DType::I64,
            )
            .name
        };
        self.node("Reshape", &[&x.name, &target], &[], shape.to_vec(), x.dtype)
    }

    /// `x.permute(order)`.
    pub fn permute(&mut self, x: &Value, order: &[usize]) -> Value {
        let shape = order
            .iter()
            .filter_map(|&i| x.shape.get(i).cloned())
            .collect();
        let perm: Vec<i64> = order.iter().map(|&i| i as i64).collect();
        self.node(
            "Transpose",
            &[&x.name],
            &[("perm", Attr::Ints(perm))],
            shape,
            x.dtype,
        )
    }

    /// `x.transpose(a, b)` (negative dims count from the end).
    pub fn transpose(&mut self, x: &Value, a: isize, b: isize) -> Value {
        let rank = x.rank() as isize;
        let (a, b) = (
            a.rem_euclid(rank.max(1)) as usize,
            b.rem_euclid(rank.max(1)) as usize,
        );
        let mut order: Vec<usize> = (0..x.rank()).collect();
        order.swap(a, b);
        self.permute(x, &order)
    }

    /// `x.unsqueeze(d)`.
    pub fn unsqueeze(&mut self, x: &Value, d: isize) -> Value {
        let axes = self.const_i64(&[d as i64]);
        self.node("Unsqueeze", &[&x.name, &axes], &[], Vec::new(), x.dtype)
    }

    /// `x.squeeze(d)`.
    pub fn squeeze(&mut self, x: &Value, d: isize) -> Value {
        let axes = self.const_i64(&[d as i64]);
        self.node("Squeeze", &[&x.name, &axes], &[], Vec::new(), x.dtype)
    }

    /// `x.select(dim, index)`: the dim is removed.
    pub fn select(&mut self, x: &Value, dim: isize, index: i64) -> Value {
        let t = Tensor::from_vec(vec![index], &[]);
        let i = self.constant(&t);
        self.node(
            "Gather",
            &[&x.name, &i],
            &[("axis", Attr::Int(dim as i64))],
            Vec::new(),
            x.dtype,
        )
    }

    /// `Tensor::cat(xs, dim)`.
    pub fn cat(&mut self, xs: &[&Value], dim: isize) -> Value {
        let names: Vec<&str> = xs.iter().map(|v| v.name.as_str()).collect();
        let dtype = xs.first().map_or(DType::F32, |v| v.dtype);
        self.node(
            "Concat",
            &names,
            &[("axis", Attr::Int(dim as i64))],
            Vec::new(),
            dtype,
        )
    }

    /// `a.matmul(b)`.
    pub fn matmul(&mut self, a: &Value, b: &Value) -> Value {
        self.node("MatMul", &[&a.name, &b.name], &[], Vec::new(), a.dtype)
    }

    /// `x.mean(&[dim], keepdim)` or `x.sum(..)`.
    pub fn reduce(&mut self, x: &Value, dim: isize, keepdim: bool, mean: bool) -> Value {
        let keep = ("keepdims", Attr::Int(keepdim as i64));
        if mean {
            // ReduceMean takes its axes as an attribute until opset 18.
            self.node(
                "ReduceMean",
                &[&x.name],
                &[("axes", Attr::Ints(vec![dim as i64])), keep],
                Vec::new(),
                x.dtype,
            )
        } else {
            let axes = self.const_i64(&[dim as i64]);
            self.node("ReduceSum", &[&x.name, &axes], &[keep], Vec::new(), x.dtype)
        }
    }

    /// 2-D max or average pooling (`count_include_pad` as PyTorch's default).
    pub fn pool2d(
        &mut self,
        x: &Value,
        max: bool,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Value {
        let mut attrs = vec![
            ("kernel_shape", Attr::Ints(vec![kernel as i64; 2])),
            ("strides", Attr::Ints(vec![stride as i64; 2])),
            ("pads", Attr::Ints(vec![padding as i64; 4])),
        ];
        if !max {
            attrs.push(("count_include_pad", Attr::Int(1)));
        }
        let op = if max { "MaxPool" } else { "AveragePool" };
        self.node(op, &[&x.name], &attrs, Vec::new(), x.dtype)
    }

    /// `adaptive_avg_pool2d(x, [h, w])`: global pooling to 1×1, a fixed pooling when the
    /// input's declared spatial sizes are fixed multiples of the output's.
    pub fn adaptive_avg_pool2d(&mut self, x: &Value, out: [usize; 2]) -> Value {
        if out == [1, 1] {
            return self.node("GlobalAveragePool", &[&x.name], &[], Vec::new(), x.dtype);
        }
        let mut kernel = Vec::new();
        for (d, &o) in out.iter().enumerate() {
            match x.shape.get(2 + d) {
                Some(SymDim::Fixed(s)) if o > 0 && s % o == 0 => kernel.push((s / o) as i64),
                other => {
                    self.unsupported(
                        "adaptive_avg_pool2d",
                        &format!("pooling to {out:?} from a spatial size ({other:?}) that is not a fixed multiple"),
                    );
                    return x.clone();
                }
            }
        }
        self.node(
            "AveragePool",
            &[&x.name],
            &[
                ("kernel_shape", Attr::Ints(kernel.clone())),
                ("strides", Attr::Ints(kernel)),
            ],
            Vec::new(),
            x.dtype,
        )
    }

    /// Nearest-neighbour upsampling of `[N, C, H, W]` by an integer `scale`.
    pub fn upsample_nearest(&mut self, x: &Value, scale: usize) -> Value {
        let t = Tensor::from_vec(vec![1.0f32, 1.0, scale as f32, scale as f32], &[4]);
        let scales = self.constant(&t);
        self.node(
            "Resize",
            &[&x.name, "", &scales],
            &[
                ("mode", Attr::Str("nearest".into())),
                ("nearest_mode", Attr::Str("floor".into())),
                (
                    "coordinate_transformation_mode",
                    Attr::Str("asymmetric".into()),
                ),
            ],
            Vec::new(),
            x.dtype,
        )
    }
}
