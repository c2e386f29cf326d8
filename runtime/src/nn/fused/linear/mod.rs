//! Fused linear layer on the host: `x @ W^T + b` as one product with the bias added to
//! each output row while it is in cache, and one autograd node whose backward is three
//! products-and-sums (`g W`, `g^T x`, `Σ g`). The unfused form is five nodes (a reshape,
//! a transpose, the product, a broadcast add and a reshape back) with a separate pass for
//! the bias, and its weight gradient arrives transposed. CPU kernel:
//! `ferrograd_kernels::cpu::linear`; on a CUDA device the caller multiplies with cuBLAS and
//! adds the bias.

use crate::Tensor;
use crate::autograd::{SavedTensor, record};
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::{Dims, Element, Layout, with_float_dtype};

/// `input @ weight^T + bias` for `input` `[*, k]`, `weight` `[n, k]` and `bias` `[n]`, all
/// float tensors of one dtype on the host; `None` (having done nothing) for anything else,
/// which the caller runs as a product and an add (and which reports a shape mistake).
pub(crate) fn linear(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Option<Tensor> {
    let dtype = input.dtype();
    let host = |t: &Tensor| !t.device().is_cuda() && t.dtype() == dtype;
    if !dtype.is_float()
        || input.dim() < 2
        || weight.dim() != 2
        || !host(input)
        || !host(weight)
        || !bias.is_none_or(|b| host(b) && b.dim() == 1 && b.shape()[0] == weight.shape()[0])
    {
        return None;
    }
    let (n, k) = (weight.shape()[0], weight.shape()[1]);
    let shape = input.shape();
    if shape[shape.len() - 1] != k {
        return None;
    }
    let m = input.numel() / k.max(1);
    if k == 0 || m == 0 || n == 0 {
        return None;
    }
    // Rows as they lie when the leading dims merge into one stride, else a copy.
    let (x, x_layout) = match input.layout().reshape(&[m, k]) {
        Some(l) => (input.detach(), l),
        None => (input.detach().contiguous(), Layout::contiguous(&[m, k])),
    };
    let b = bias.map(|b| b.detach().contiguous());
    let op = "linear";
    let y = x.with_cpu(op, |xs, _| {
        weight.with_cpu(op, |ws, w_layout| {
            let run = |bs: Option<&CpuStorage>| {
                with_float_dtype!(dtype, T => {
                    let bias = bs.zip(b.as_ref()).map(|(s, b)| {
                        &s.typed::<T>()[b.layout().contiguous_range().expect("contiguous bias")]
                    });
                    T::into_storage(ferrograd_kernels::cpu::linear(
                        xs.typed::<T>(),
                        &x_layout,
                        ws.typed::<T>(),
                        w_layout,
                        bias,
                    ))
                }, else unreachable!("linear takes floats"))
            };
            match &b {
                Some(b) => b.with_cpu(op, |bs, _| run(Some(bs))),
                None => run(None),
            }
        })
    });
    let mut out_shape = Dims::from_slice(&shape[..shape.len() - 1]);
    out_shape.push(n);
    let y = Tensor::from_cpu(y, &out_shape);
    let mut inputs = vec![input, weight];
    inputs.extend(bias);
    let has_b = bias.is_some();
    let in_shape = Dims::from_slice(shape);
    Some(record(y, "linear", &inputs, || {
        let (sx, sw) = (SavedTensor::new(input), SavedTensor::new(weight));
        move |ctx, g: &Tensor| {
            let g2 = g.reshape(&[m, n]);
            let mut grads = vec![
                ctx.needs(0)
                    .then(|| g2.matmul(&sw.get("linear")).reshape(&in_shape)),
                ctx.needs(1)
                    .then(|| g2.t().matmul(&sx.get("linear").reshape(&[m, k]))),
            ];
            if has_b {
                grads.push(ctx.needs(2).then(|| g2.sum(&[0], false)));
            }
            grads
        }
    }))
}
