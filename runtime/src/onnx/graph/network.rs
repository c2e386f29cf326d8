//! How a layer or a whole `network!` writes itself: `ExportLayer`, `ExportNetwork`, the
//! probes the macro's code dispatches through, traced sub-modules, and `network_graph`.

use super::*;

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
    /// network): that one layer is traced ([`super::super::export_with`]) at an input of its
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
        let mut opts = super::super::ExportOptions::new();
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
        let sub = match super::super::export_with(
            module,
            &[example],
            |xs| vec![forward(&xs[0])],
            &opts,
        ) {
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
