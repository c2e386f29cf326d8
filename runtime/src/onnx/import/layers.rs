//! The layer ops of the interpreter: convolutions, pooling and recurrent layers.

use super::*;

pub(super) fn conv(op: &str, a: &Attrs, args: &[Option<Tensor>]) -> Result<Vec<Tensor>, String> {
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

pub(super) fn pool(op: &str, a: &Attrs, x: &Tensor) -> Result<Vec<Tensor>, String> {
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
pub(super) struct Attrs2<'a, 'b> {
    kernel: Vec<usize>,
    inner: &'a Attrs<'b>,
}

pub(super) fn pool2d(op: &str, a: &Attrs2, x: &Tensor) -> Result<Tensor, String> {
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
pub(super) fn recurrent(
    op: &str,
    a: &Attrs,
    args: &[Option<Tensor>],
) -> Result<Vec<Tensor>, String> {
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
