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

    /// `relu`, `gelu`, `gelu_tanh`, `tanh`, `sigmoid`, `silu` and `leaky_relu` by
    /// `network!`'s names (GELU as its formula: opset 17 has no `Gelu`).
    pub fn activation(&mut self, name: &str, x: &Value, negative_slope: f64) -> Value {
        match name {
            "relu" => self.unary("Relu", x),
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

impl GraphWriter {
    /// `nn::MultiheadAttention` (`field`) on `q`, `k`, `v` without a mask: projections,
    /// heads split with `Reshape`/`Transpose`, scaled scores, softmax, the output
    /// projection; its parameters under their state-dict names.
    pub fn multihead_attention(
        &mut self,
        m: &crate::nn::MultiheadAttention,
        field: &str,
        q: &Value,
        k: &Value,
        v: &Value,
        causal: bool,
    ) -> Value {
        self.scope.push(field.to_string());
        let out = self.attention_in_scope(m, q, k, v, causal);
        self.scope.pop();
        out
    }

    fn attention_in_scope(
        &mut self,
        m: &crate::nn::MultiheadAttention,
        q: &Value,
        k: &Value,
        v: &Value,
        causal: bool,
    ) -> Value {
        if causal {
            self.unsupported("MultiheadAttention", "a causal mask (`is_causal`) has no lowering from `network!` yet; export with `onnx::export` (traced)");
            return q.clone();
        }
        if m.training && m.dropout > 0.0 {
            self.unsupported(
                "MultiheadAttention",
                &format!(
                    "dropout {} in training mode; call `eval()` before exporting",
                    m.dropout
                ),
            );
            return q.clone();
        }
        let (e, h) = (m.embed_dim, m.num_heads);
        let d = e / h;
        let dtype = q.dtype;
        // Batch-first inside.
        let bf = |g: &mut Self, x: &Value| {
            if m.batch_first {
                x.clone()
            } else {
                g.permute(x, &[1, 0, 2])
            }
        };
        let (q, k, v) = (bf(self, q), bf(self, k), bf(self, v));
        let bias = m
            .in_proj_bias
            .as_ref()
            .map(|b| self.param("in_proj_bias", b));
        let slice = |g: &mut Self, t: &str, i: usize| {
            let (s, e_) = (
                g.const_i64(&[(i * e) as i64]),
                g.const_i64(&[((i + 1) * e) as i64]),
            );
            let axis = g.const_i64(&[0]);
            g.node("Slice", &[t, &s, &e_, &axis], &[], Vec::new(), dtype)
                .name
        };
        let packed = m
            .in_proj_weight
            .as_ref()
            .map(|w| self.param("in_proj_weight", w));
        let mut heads = Vec::new();
        for (i, (x, own)) in [
            (&q, &m.q_proj_weight),
            (&k, &m.k_proj_weight),
            (&v, &m.v_proj_weight),
        ]
        .into_iter()
        .enumerate()
        {
            let w = match (&packed, own) {
                (Some(p), _) => slice(self, p, i),
                (None, Some(w)) => {
                    self.param(["q_proj_weight", "k_proj_weight", "v_proj_weight"][i], w)
                }
                (None, None) => {
                    self.unsupported("MultiheadAttention", "no projection weights");
                    return q.clone();
                }
            };
            let wt = self.node(
                "Transpose",
                &[&w],
                &[("perm", Attr::Ints(vec![1, 0]))],
                Vec::new(),
                dtype,
            );
            let mut y = self.node("MatMul", &[&x.name, &wt.name], &[], Vec::new(), dtype);
            if let Some(b) = &bias {
                let b = slice(self, b, i);
                y = self.node("Add", &[&y.name, &b], &[], Vec::new(), dtype);
            }
            // [N, L, E] → [N, L, H, D] → [N, H, L, D]
            let split = self.const_i64(&[0, 0, h as i64, d as i64]);
            let y = self.node("Reshape", &[&y.name, &split], &[], Vec::new(), dtype);
            heads.push(self.node(
                "Transpose",
                &[&y.name],
                &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
                Vec::new(),
                dtype,
            ));
        }
        let kt = self.node(
            "Transpose",
            &[&heads[1].name],
            &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
            Vec::new(),
            dtype,
        );
        let scores = self.node(
            "MatMul",
            &[&heads[0].name, &kt.name],
            &[],
            Vec::new(),
            dtype,
        );
        let scale = self.const_scalar(1.0 / (d as f64).sqrt(), dtype);
        let scores = self.node("Mul", &[&scores.name, &scale], &[], Vec::new(), dtype);
        let p = self.softmax(&scores, -1, false);
        let o = self.node("MatMul", &[&p.name, &heads[2].name], &[], Vec::new(), dtype);
        let o = self.node(
            "Transpose",
            &[&o.name],
            &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
            Vec::new(),
            dtype,
        );
        let merge = self.const_i64(&[0, 0, e as i64]);
        let o = self.node("Reshape", &[&o.name, &merge], &[], Vec::new(), dtype);
        let y = self.layer(&m.out_proj, "out_proj", &[&o]).remove(0);
        bf(self, &y)
    }
}

impl NodeSink for GraphWriter {
    fn fresh(&mut self, stem: &str) -> String {
        GraphWriter::fresh(self, stem)
    }
    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    ) {
        let name = format!("{}_node", self.fresh(op));
        self.nodes.push(node_proto(
            name,
            op,
            inputs.to_vec(),
            outputs.to_vec(),
            attrs,
        ));
    }
    fn const_i64(&mut self, values: &[i64]) -> String {
        GraphWriter::const_i64(self, values)
    }
}

impl GraphWriter {
    /// `op` with `n` outputs of unknown shape.
    pub fn node_n(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        n: usize,
        dtype: DType,
    ) -> Vec<Value> {
        let first = self.node(op, inputs, attrs, Vec::new(), dtype);
        let mut outs = vec![first];
        let node = self.nodes.len() - 1;
        for _ in 1..n {
            let name = self.fresh(&format!("{op}_out"));
            self.nodes[node].output.push(name.clone());
            outs.push(Value {
                name,
                shape: Vec::new(),
                dtype,
            });
        }
        outs
    }

    /// `x.chunk(n, dim)`: `n` equal parts (ONNX `Split` without sizes).
    pub fn chunk(&mut self, x: &Value, n: usize, dim: isize) -> Vec<Value> {
        self.node_n(
            "Split",
            &[&x.name],
            &[("axis", Attr::Int(dim as i64))],
            n,
            x.dtype,
        )
    }
}

impl ExportLayer for Recurrent {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let (mode, config, params, training) = self.export_parts();
        let why = if inputs.is_empty() || inputs.len() > 3 {
            Some("takes the sequence and optionally h0 (and c0)")
        } else if config.proj_size > 0 {
            Some("an LSTM with proj_size")
        } else if training && config.dropout > 0.0 && config.num_layers > 1 {
            Some("dropout between layers in training mode; call `eval()` first")
        } else {
            None
        };
        if let Some(why) = why {
            g.unsupported("Recurrent", why);
            return inputs.to_vec();
        }
        let lstm = mode == RnnMode::Lstm;
        let x = &inputs[0];
        let mut ins: Vec<String> = inputs.iter().map(|v| v.name.clone()).collect();
        ins.extend(params.iter().map(|(name, t)| g.param(name, t)));
        let outs: Vec<String> = (0..2 + lstm as usize)
            .map(|i| g.fresh(&format!("rnn_out{i}")))
            .collect();
        let c = RnnExport {
            mode: match mode {
                RnnMode::Tanh => RnnKind::Tanh,
                RnnMode::Relu => RnnKind::Relu,
                RnnMode::Lstm => RnnKind::Lstm,
                RnnMode::Gru => RnnKind::Gru,
            },
            layers: config.num_layers,
            hidden: config.hidden_size,
            dirs: if config.bidirectional { 2 } else { 1 },
            batch_first: config.batch_first,
            bias: config.bias,
            has_state: inputs.len() > 1,
            unbatched: x.rank() == 2,
        };
        rnn_nodes(g, &c, &ins, &outs);
        outs.into_iter()
            .map(|name| Value {
                name,
                shape: Vec::new(),
                dtype: x.dtype,
            })
            .collect()
    }
}

impl ExportLayer for crate::nn::TransformerEncoderLayer {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(src) = one(g, "TransformerEncoderLayer", inputs) else {
            return inputs.to_vec();
        };
        let c = &self.config;
        if self.training && c.dropout > 0.0 {
            g.unsupported(
                "TransformerEncoderLayer",
                &format!(
                    "dropout {} in training mode; call `eval()` before exporting",
                    c.dropout
                ),
            );
            return vec![src.clone()];
        }
        let sa = |g: &mut GraphWriter, x: &Value| {
            g.multihead_attention(&self.self_attn, "self_attn", x, x, x, false)
        };
        let ff = |g: &mut GraphWriter, x: &Value| {
            let h = g.layer(&self.linear1, "linear1", &[x]).remove(0);
            let name = match c.activation {
                crate::nn::Activation::Relu => "relu",
                crate::nn::Activation::Gelu => "gelu",
            };
            let h = g.activation(name, &h, 0.0);
            g.layer(&self.linear2, "linear2", &[&h]).remove(0)
        };
        let norm = |g: &mut GraphWriter, n: &LayerNorm, field: &str, x: &Value| {
            g.layer(n, field, &[x]).remove(0)
        };
        let out = if c.norm_first {
            let n1 = norm(g, &self.norm1, "norm1", src);
            let a = sa(g, &n1);
            let x = g.binary("Add", src, &a);
            let n2 = norm(g, &self.norm2, "norm2", &x);
            let f = ff(g, &n2);
            g.binary("Add", &x, &f)
        } else {
            let a = sa(g, src);
            let x = g.binary("Add", src, &a);
            let x = norm(g, &self.norm1, "norm1", &x);
            let f = ff(g, &x);
            let y = g.binary("Add", &x, &f);
            norm(g, &self.norm2, "norm2", &y)
        };
        vec![out]
    }
}

/// A layer that writes itself into an ONNX graph: the built-in layers, and every
/// one-output network of `network!` (whose impl the macro writes from its graph).
pub trait ExportLayer {
    /// Writes the layer applied to `inputs`, returning its outputs. Parameters go in with
    /// [`GraphWriter::param`]; what cannot be written is recorded with
    /// [`GraphWriter::unsupported`].
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value>;
}

#[doc(hidden)]
/// Which export a layer of `network!` takes, by autoref specialisation (the generated
/// code calls `(&&&Probe(&layer)).export_call(..)`, or `TraceProbe` for a one-in,
/// one-out layer): [`ExportLayer`] when its type has it; else, for a module with a
/// hand-written `forward(&Tensor) -> Tensor` (a `#[derive(Module)]` struct), that one
/// layer traced ([`GraphWriter::traced`]); else an unsupported-op error naming the type
/// and the layer.
pub struct Probe<'a, T: ?Sized>(pub &'a T);

impl<T: ExportLayer + ?Sized> ViaExportLayer for &&Probe<'_, T> {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value> {
        g.layer(self.0, field, inputs)
    }
}

#[doc(hidden)]
pub trait ViaExportLayer {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value>;
}

#[doc(hidden)]
/// A one-in, one-out layer with its forward as a closure, so a type without
/// [`ExportLayer`] is traced through it ([`GraphWriter::traced`]); a forward of another
/// signature makes the closure's type miss the bound, and the call falls back to the
/// unsupported-op error.
pub struct TraceProbe<'a, T: ?Sized, F>(pub &'a T, pub F);

impl<T: ExportLayer + ?Sized, F> ViaExportLayer for &&TraceProbe<'_, T, F> {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value> {
        g.layer(self.0, field, inputs)
    }
}

#[doc(hidden)]
pub trait ViaTrace {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value>;
}

impl<T: Module, F: Fn(&Tensor) -> Tensor> ViaTrace for &TraceProbe<'_, T, F> {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value> {
        g.traced(self.0, field, inputs, &self.1)
    }
}

impl<T: ?Sized, F> ViaUnsupported for TraceProbe<'_, T, F> {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value> {
        Probe(self.0).export_call(g, field, inputs)
    }
}

#[doc(hidden)]
pub trait ViaUnsupported {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value>;
}

impl<T: ?Sized> ViaUnsupported for Probe<'_, T> {
    fn export_call(&self, g: &mut GraphWriter, field: &str, inputs: &[&Value]) -> Vec<Value> {
        g.scope.push(field.to_string());
        g.unsupported(
            std::any::type_name::<T>(),
            "this layer type has no ONNX lowering: implement `onnx::ExportLayer` for it, or export the model with `onnx::export` (traced)",
        );
        g.scope.pop();
        inputs.iter().map(|v| (*v).clone()).collect()
    }
}

impl GraphWriter {
    /// Writes a module whose `forward` is hand-written (a `#[derive(Module)]` layer of a
    /// network): that one layer is traced ([`super::export_with`]) at an input of its
    /// declared shape, each size of the input that is not fixed (`N`, `H`) taken at 8
    /// and doubled so it stays symbolic, and its nodes join the graph under `field`
    /// (its parameters under their state-dict keys, `field.conv.weight`).
    pub fn traced<M: Module + ?Sized>(
        &mut self,
        module: &M,
        field: &str,
        inputs: &[&Value],
        forward: &dyn Fn(&Tensor) -> Tensor,
    ) -> Vec<Value> {
        self.scope.push(field.to_string());
        let out = self.traced_in_scope(module, inputs, forward);
        self.scope.pop();
        out
    }

    fn traced_in_scope<M: Module + ?Sized>(
        &mut self,
        module: &M,
        inputs: &[&Value],
        forward: &dyn Fn(&Tensor) -> Tensor,
    ) -> Vec<Value> {
        let what = std::any::type_name::<M>();
        let [x] = inputs else {
            self.unsupported(
                what,
                &format!("a traced layer takes one input, got {}", inputs.len()),
            );
            return inputs.iter().map(|v| (*v).clone()).collect();
        };
        let mut opts = super::ExportOptions::new();
        let mut shape = Vec::with_capacity(x.rank());
        for (axis, d) in x.shape.iter().enumerate() {
            match d {
                SymDim::Fixed(v) => shape.push(*v),
                SymDim::Named(s) => {
                    shape.push(8);
                    opts = opts.dynamic_axis("input", axis, s);
                }
                SymDim::Expr(e) => {
                    shape.push(8);
                    opts = opts.dynamic_axis("input", axis, &e.replace(' ', ""));
                }
            }
        }
        let example = if x.dtype.is_float() {
            Tensor::randn(&shape, x.dtype, &crate::Device::Cpu)
        } else {
            Tensor::zeros(&shape, x.dtype, &crate::Device::Cpu)
        };
        let sub = match super::export_with(module, &[example], |xs| vec![forward(&xs[0])], &opts) {
            Ok(e) => e,
            Err(e) => {
                self.unsupported(what, &format!("tracing this layer at {shape:?}: {e}"));
                return vec![(*x).clone()];
            }
        };
        let Some(graph) = sub.model.graph else {
            return vec![(*x).clone()];
        };
        // Names: the input is `x`, the output a fresh value, the exporter's own values
        // (`/…`) get the layer's path in front, parameters their full state-dict key.
        let path = self.path();
        let out = self.fresh("traced_out");
        let rename = |n: &str| -> String {
            match n {
                "" => String::new(),
                "input" => x.name.clone(),
                "output" => out.clone(),
                n if n.starts_with('/') => format!("/{path}{n}"),
                n => crate::nn::join_path(&path, n),
            }
        };
        for mut init in graph.initializer {
            let name = rename(init.name.as_deref().unwrap_or_default());
            if self
                .initializers
                .iter()
                .any(|i| i.name.as_deref() == Some(&name))
            {
                continue;
            }
            init.name = Some(name);
            self.initializers.push(init);
        }
        for mut node in graph.node {
            node.input = node.input.iter().map(|n| rename(n)).collect();
            node.output = node.output.iter().map(|n| rename(n)).collect();
            node.name = node.name.map(|n| rename(&n));
            self.nodes.push(node);
        }
        vec![Value {
            name: out,
            shape: Vec::new(),
            dtype: x.dtype,
        }]
    }
}

/// A network that exports without an example input: `network!` implements it for a
/// one-output network, with the declared input and output shapes.
pub trait ExportNetwork: ExportLayer + Module {
    /// The graph's inputs: name, element type, declared shape.
    fn onnx_inputs(&self) -> Vec<(&'static str, DType, Vec<SymDim>)>;
    /// The declared output shapes.
    fn onnx_outputs(&self) -> Vec<Vec<SymDim>>;
    /// The network's name.
    fn onnx_name(&self) -> &'static str;
}

/// The ONNX model of a `network!` network, from its compile-time graph: inputs named as
/// declared, their size names (`N`) as `dim_param`s, parameters under their state-dict
/// names. Put the model in eval mode first.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module};
/// use ferrograd_runtime::onnx::{self, ExportLayer, ExportNetwork, GraphWriter, SymDim, Value};
/// // What `network!` writes for `input x: [N, 4]; fc: Linear(4 -> 2)`, by hand:
/// #[derive(Module)]
/// #[module(crate = ferrograd_runtime)]
/// struct Net { fc: Linear }
/// impl ExportLayer for Net {
///     fn export_layer(&self, g: &mut GraphWriter, x: &[Value]) -> Vec<Value> {
///         g.layer(&self.fc, "fc", &[&x[0]])
///     }
/// }
/// impl ExportNetwork for Net {
///     fn onnx_inputs(&self) -> Vec<(&'static str, DType, Vec<SymDim>)> {
///         vec![("x", DType::F32, vec![SymDim::Named("N"), SymDim::Fixed(4)])]
///     }
///     fn onnx_outputs(&self) -> Vec<Vec<SymDim>> {
///         vec![vec![SymDim::Named("N"), SymDim::Fixed(2)]]
///     }
///     fn onnx_name(&self) -> &'static str { "Net" }
/// }
/// let net = Net { fc: Linear::new(4, 2, &Device::Cpu) };
/// let model = onnx::network_graph(&net).unwrap();
/// assert_eq!(model.initializer_names(), ["fc.weight", "fc.bias"]);
/// ```
pub fn network_graph<M: ExportNetwork + ?Sized>(model: &M) -> Result<Exported, OnnxError> {
    let mut g = GraphWriter::new(model.onnx_name());
    let inputs: Vec<Value> = model
        .onnx_inputs()
        .into_iter()
        .map(|(name, dtype, shape)| g.input(name, dtype, &shape))
        .collect();
    let outputs = model.export_layer(&mut g, &inputs);
    let declared = model.onnx_outputs();
    if outputs.len() != declared.len() && g.error.is_none() {
        return Err(OnnxError::Export(format!(
            "`{}` yields {} values but declares {} outputs",
            model.onnx_name(),
            outputs.len(),
            declared.len()
        )));
    }
    for (k, (v, shape)) in outputs.iter().zip(&declared).enumerate() {
        let name = if declared.len() == 1 {
            "output".to_string()
        } else {
            format!("output_{k}")
        };
        g.output(v, &name, shape);
    }
    g.finish()
}

/// [`network_graph`] saved to `path` (`torch.onnx.export` without an example input).
///
/// ```no_run
/// # use ferrograd_runtime::onnx::{self, ExportNetwork};
/// # fn save(model: &impl ExportNetwork) -> Result<(), onnx::OnnxError> {
/// onnx::export_onnx(model, "model.onnx")?;
/// # Ok(()) }
/// ```
pub fn export_onnx<M: ExportNetwork + ?Sized>(
    model: &M,
    path: impl AsRef<Path>,
) -> Result<(), OnnxError> {
    network_graph(model)?.save(path)
}

/// A value's type for the graph: on its inputs and outputs a size name is a `dim_param`
/// (`N`, and an expression by its text, `4*H`); inside, sizes of the inputs are left
/// unknown (a runtime given concrete input shapes infers them: a named one would have
/// to unify with a number).
fn value_info(v: &Value, io: bool) -> Result<pb::ValueInfoProto, OnnxError> {
    use pb::tensor_shape_proto::dimension::Value as D;
    let dims = v.shape.iter().map(|d| match d {
        SymDim::Fixed(n) => Some(D::DimValue(*n as i64)),
        SymDim::Named(s) if io => Some(D::DimParam(s.to_string())),
        SymDim::Expr(e) if io => Some(D::DimParam(e.replace(' ', ""))),
        SymDim::Named(_) | SymDim::Expr(_) => None,
    });
    tensor_value_info(&v.name, v.dtype, dims)
}

/// The one input of a one-input layer (an error for another count).
fn one<'a>(g: &mut GraphWriter, layer: &str, inputs: &'a [Value]) -> Option<&'a Value> {
    if inputs.len() != 1 {
        g.unsupported(layer, &format!("takes one input, got {}", inputs.len()));
        return None;
    }
    inputs.first()
}

impl ExportLayer for Linear {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(x) = one(g, "Linear", inputs) else {
            return inputs.to_vec();
        };
        let w = g.param("weight", &self.weight);
        let b = self.bias.as_ref().map(|b| g.param("bias", b));
        let mut shape = x.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = SymDim::Fixed(self.weight.shape()[0]);
        }
        if x.rank() == 2 {
            let mut ins = vec![x.name.as_str(), w.as_str()];
            ins.extend(b.as_deref());
            return vec![g.node("Gemm", &ins, &[("transB", Attr::Int(1))], shape, x.dtype)];
        }
        let wt = g.node(
            "Transpose",
            &[&w],
            &[("perm", Attr::Ints(vec![1, 0]))],
            Vec::new(),
            x.dtype,
        );
        let mm = g.node("MatMul", &[&x.name, &wt.name], &[], shape.clone(), x.dtype);
        vec![match b {
            Some(b) => g.node("Add", &[&mm.name, &b], &[], shape, x.dtype),
            None => mm,
        }]
    }
}

macro_rules! export_conv {
    ($($ty:ident => $d:literal),*) => {$(
        impl ExportLayer for $ty {
            fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
                let Some(x) = one(g, stringify!($ty), inputs) else {
                    return inputs.to_vec();
                };
                let o = &self.options;
                let kernel = &self.weight.shape()[2..];
                let (pads, _) = crate::nn::conv_padding(kernel, o);
                let mut x = x.clone();
                let mut onnx_pads: Vec<i64> = pads.iter().map(|p| p.0 as i64).collect();
                onnx_pads.extend(pads.iter().map(|p| p.1 as i64));
                if o.padding_mode != PaddingMode::Zeros && pads.iter().any(|p| p.0 + p.1 > 0) {
                    let mode = match o.padding_mode {
                        PaddingMode::Reflect => "reflect",
                        PaddingMode::Replicate => "edge",
                        _ => {
                            g.unsupported(stringify!($ty), "circular padding (ONNX `wrap` needs opset 19)");
                            return vec![x];
                        }
                    };
                    let mut full = vec![0i64, 0];
                    full.extend(&onnx_pads[..$d]);
                    full.extend([0i64, 0]);
                    full.extend(&onnx_pads[$d..]);
                    let p = g.const_i64(&full);
                    x = g.node("Pad", &[&x.name, &p], &[("mode", Attr::Str(mode.into()))], Vec::new(), x.dtype);
                    onnx_pads = vec![0; 2 * $d];
                }
                let w = g.param("weight", &self.weight);
                let b = self.bias.as_ref().map(|b| g.param("bias", b));
                let mut ins = vec![x.name.as_str(), w.as_str()];
                ins.extend(b.as_deref());
                let attrs = [
                    ("kernel_shape", Attr::Ints(kernel.iter().map(|&k| k as i64).collect())),
                    ("strides", Attr::Ints(o.stride.iter().map(|&s| s as i64).collect())),
                    ("pads", Attr::Ints(onnx_pads)),
                    ("dilations", Attr::Ints(o.dilation.iter().map(|&s| s as i64).collect())),
                    ("group", Attr::Int(o.groups as i64)),
                ];
                vec![g.node("Conv", &ins, &attrs, Vec::new(), x.dtype)]
            }
        }
    )*};
}
export_conv!(Conv1d => 1, Conv2d => 2);

macro_rules! export_conv_transpose {
    ($($ty:ident),*) => {$(
        impl ExportLayer for $ty {
            fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
                let Some(x) = one(g, stringify!($ty), inputs) else {
                    return inputs.to_vec();
                };
                let a = &self.options.args;
                let kernel = &self.weight.shape()[2..];
                let w = g.param("weight", &self.weight);
                let b = self.bias.as_ref().map(|b| g.param("bias", b));
                let mut ins = vec![x.name.as_str(), w.as_str()];
                ins.extend(b.as_deref());
                let ints = |v: &[usize]| Attr::Ints(v.iter().map(|&s| s as i64).collect());
                let pads: Vec<usize> = a.padding.iter().chain(a.padding.iter()).copied().collect();
                let attrs = [
                    ("kernel_shape", ints(kernel)),
                    ("strides", ints(&a.stride)),
                    ("pads", ints(&pads)),
                    ("output_padding", ints(&a.output_padding)),
                    ("dilations", ints(&a.dilation)),
                    ("group", Attr::Int(a.groups as i64)),
                ];
                vec![g.node("ConvTranspose", &ins, &attrs, Vec::new(), x.dtype)]
            }
        }
    )*};
}
export_conv_transpose!(ConvTranspose1d, ConvTranspose2d);

macro_rules! export_batch_norm {
    ($($ty:ident),*) => {$(
        impl ExportLayer for $ty {
            fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
                let Some(x) = one(g, stringify!($ty), inputs) else {
                    return inputs.to_vec();
                };
                let (Some(mean), Some(var), false) = (&self.running_mean, &self.running_var, self.training) else {
                    g.unsupported(stringify!($ty), "batch statistics (training mode, or no running stats); call `eval()` before exporting");
                    return vec![x.clone()];
                };
                let c = mean.shape()[0];
                let ones = Tensor::ones(&[c], mean.dtype(), &crate::Device::Cpu);
                let scale = match &self.weight {
                    Some(w) => g.param("weight", w),
                    None => g.constant(&ones),
                };
                let bias = match &self.bias {
                    Some(b) => g.param("bias", b),
                    None => g.constant(&Tensor::zeros_like(&ones)),
                };
                let (m, v) = (g.param("running_mean", mean), g.param("running_var", var));
                vec![g.same("BatchNormalization", x, &[&scale, &bias, &m, &v], &[("epsilon", Attr::Float(self.eps))])]
            }
        }
    )*};
}
export_batch_norm!(BatchNorm1d, BatchNorm2d);

impl ExportLayer for LayerNorm {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(x) = one(g, "LayerNorm", inputs) else {
            return inputs.to_vec();
        };
        let scale = match &self.weight {
            Some(w) => g.param("weight", w),
            None => g.constant(
                &Tensor::ones(&self.normalized_shape, DType::F32, &crate::Device::Cpu)
                    .to_dtype(x.dtype),
            ),
        };
        let b = self.bias.as_ref().map(|b| g.param("bias", b));
        let mut ins = vec![scale.as_str()];
        ins.extend(b.as_deref());
        let attrs = [
            ("axis", Attr::Int(-(self.normalized_shape.len() as i64))),
            ("epsilon", Attr::Float(self.eps)),
        ];
        vec![g.same("LayerNormalization", x, &ins, &attrs)]
    }
}

impl ExportLayer for RMSNorm {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(x) = one(g, "RMSNorm", inputs) else {
            return inputs.to_vec();
        };
        let rank = x.rank() as i64;
        let axes: Vec<i64> = (rank - self.normalized_shape.len() as i64..rank).collect();
        let eps = self.eps.unwrap_or(match x.dtype {
            DType::F64 => f64::EPSILON,
            _ => f32::EPSILON as f64,
        });
        let sq = g.same("Mul", x, &[&x.name], &[]);
        let ms = g.same(
            "ReduceMean",
            &sq,
            &[],
            &[("axes", Attr::Ints(axes)), ("keepdims", Attr::Int(1))],
        );
        let e = g.const_scalar(eps, x.dtype);
        let ms = g.same("Add", &ms, &[&e], &[]);
        let rms = g.unary("Sqrt", &ms);
        let y = g.same("Div", x, &[&rms.name], &[]);
        vec![match &self.weight {
            Some(w) => {
                let w = g.param("weight", w);
                g.same("Mul", &y, &[&w], &[])
            }
            None => y,
        }]
    }
}

impl ExportLayer for GroupNorm {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(x) = one(g, "GroupNorm", inputs) else {
            return inputs.to_vec();
        };
        // [N, C, *] → [N, G, -1], instance-normalised, back, then the affine per channel.
        let groups = self.num_groups;
        let grouped_shape = g.const_i64(&[0, groups as i64, -1]);
        let grouped = g.node(
            "Reshape",
            &[&x.name, &grouped_shape],
            &[],
            Vec::new(),
            x.dtype,
        );
        let ones =
            g.constant(&Tensor::ones(&[groups], DType::F32, &crate::Device::Cpu).to_dtype(x.dtype));
        let zeros = g
            .constant(&Tensor::zeros(&[groups], DType::F32, &crate::Device::Cpu).to_dtype(x.dtype));
        let normed = g.same(
            "InstanceNormalization",
            &grouped,
            &[&ones, &zeros],
            &[("epsilon", Attr::Float(self.eps))],
        );
        let shape = g.node("Shape", &[&x.name], &[], Vec::new(), DType::I64);
        let mut y = g.node(
            "Reshape",
            &[&normed.name, &shape.name],
            &[],
            x.shape.clone(),
            x.dtype,
        );
        let channels = self
            .weight
            .as_ref()
            .or(self.bias.as_ref())
            .map(|t| t.shape()[0]);
        if let Some(c) = channels {
            let affine: Vec<i64> = std::iter::once(c as i64)
                .chain(std::iter::repeat_n(1, x.rank().saturating_sub(2)))
                .collect();
            let affine = g.const_i64(&affine);
            for (local, op, t) in [("weight", "Mul", &self.weight), ("bias", "Add", &self.bias)] {
                if let Some(t) = t {
                    let p = g.param(local, t);
                    let p = g.node("Reshape", &[&p, &affine], &[], Vec::new(), x.dtype);
                    y = g.same(op, &y, &[&p.name], &[]);
                }
            }
        }
        vec![y]
    }
}

impl ExportLayer for Dropout {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        if self.training && self.p > 0.0 {
            g.unsupported(
                "Dropout",
                &format!(
                    "p={} in training mode; call `eval()` before exporting",
                    self.p
                ),
            );
        }
        inputs.to_vec()
    }
}

impl ExportLayer for Embedding {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(ids) = one(g, "Embedding", inputs) else {
            return inputs.to_vec();
        };
        if self.options.max_norm.is_some() {
            g.unsupported("Embedding", "`max_norm` renormalises rows in the forward");
        }
        let w = g.param("weight", &self.weight);
        let mut shape = ids.shape.clone();
        shape.push(SymDim::Fixed(self.weight.shape()[1]));
        vec![g.node("Gather", &[&w, &ids.name], &[], shape, self.weight.dtype())]
    }
}
