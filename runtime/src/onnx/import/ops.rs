//! The interpreter of one node: one arm per supported ONNX op.

use super::*;

pub(super) fn run_node(
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
