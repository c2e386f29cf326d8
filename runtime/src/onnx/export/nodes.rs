//! Node-writing helpers of the exporter: casts, elementwise lowerings, attention,
//! constants and the symbolic shapes of dynamic dims.

use super::*;

impl Builder<'_> {
    /// `input` cast to `dtype` when the traced tensor has another dtype.
    pub(super) fn cast_to(&mut self, input: &str, traced: &Tensor, dtype: DType) -> String {
        if traced.dtype() == dtype {
            return input.to_string();
        }
        let to = onnx_dtype(dtype).unwrap_or(DataType::Float) as i64;
        self.op1("Cast", &[input.to_string()], vec![attr_i("to", to)])
    }

    /// A recurrent layer as ONNX `RNN`/`LSTM`/`GRU` nodes, one per layer.
    pub(super) fn binary(&mut self, op: Binary, a: &str, b: &str, out: &str) {
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

    pub(super) fn unary(
        &mut self,
        u: Unary,
        x: &str,
        out: &str,
        dtype: DType,
    ) -> Result<(), OnnxError> {
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

    pub(super) fn attention(
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

    pub(super) fn const_fill(
        &mut self,
        value: f64,
        n: usize,
        dtype: DType,
    ) -> Result<String, OnnxError> {
        self.const_fill_shape(value, &[n], dtype, n)
    }

    pub(super) fn const_fill_shape(
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
    pub(super) fn monomial(&self, per: &[usize]) -> Option<(i64, Vec<usize>)> {
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
    pub(super) fn resolve(
        &self,
        per: &[usize],
        near: &[String],
        rec: &Record,
    ) -> Result<Dim, OnnxError> {
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

    pub(super) fn resolve_all(
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
    pub(super) fn reshape_target(
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
    pub(super) fn materialize(&mut self, dims: &[Dim]) -> String {
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
    pub(super) fn dim_of(&mut self, value: &str, axis: usize) -> String {
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
