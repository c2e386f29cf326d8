//! The built-in layers' lowerings (`Linear`, convolutions, norms, dropout, embedding).

use super::*;

/// A value's type for the graph: on its inputs and outputs a size name is a `dim_param`
/// (`N`, and an expression by its text, `4*H`); inside, sizes of the inputs are left
/// unknown (a runtime given concrete input shapes infers them: a named one would have
/// to unify with a number).
pub(super) fn value_info(v: &Value, io: bool) -> Result<pb::ValueInfoProto, OnnxError> {
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
pub(super) fn one<'a>(g: &mut GraphWriter, layer: &str, inputs: &'a [Value]) -> Option<&'a Value> {
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
