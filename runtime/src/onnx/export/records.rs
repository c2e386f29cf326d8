//! The exporter's mapping of each op schema to ONNX nodes: one arm per [`Op`] variant.

use super::*;

impl Builder<'_> {
    pub(super) fn emit_record(&mut self, r: usize) -> Result<(), OnnxError> {
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
}
