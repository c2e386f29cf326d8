//! Attention (`torch.nn.functional.scaled_dot_product_attention`).

use crate::nn::fused::{AttnMask, attention};
use crate::{DType, Tensor};

/// `softmax(q @ k^T * scale + mask) @ v` over the last two dims, batched over the leading
/// ones (broadcast between `q`, `k` and `v`), as one fused op
/// (`F.scaled_dot_product_attention`): `q [..., L, E]`, `k [..., S, E]`, `v [..., S, Ev]`
/// give `[..., L, Ev]`.
///
/// - `attn_mask`: boolean (`true` takes part) or additive float, broadcastable to
///   `[..., L, S]` (a key-padding mask `[B, 1, 1, S]` is read through strides, never
///   expanded); a float mask that requires grad gets its gradient.
/// - `dropout_p`: dropout on the probabilities (always applied when positive, as PyTorch's
///   functional form; pass 0 in eval).
/// - `is_causal`: query `i` sees keys `0..=i` (top-left aligned); not with `attn_mask`.
/// - `scale`: default `1 / sqrt(E)`.
///
/// No `[L, S]` matrix is kept for the backward: it recomputes the probabilities from each
/// row's saved log-sum-exp. A row whose every key is masked gives zeros. Half-precision
/// operands compute in f32.
///
/// # Panics
/// On operands of fewer than 2 dims, mismatched `E` or `S`, batch dims that do not
/// broadcast, different dtypes or devices, a mask together with `is_causal`, a mask
/// that does not broadcast, or `dropout_p` outside `[0, 1)`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let q = Tensor::randn(&[2, 4, 8, 16], DType::F32, &Device::Cpu); // [batch, heads, L, E]
/// let k = Tensor::randn(&[2, 4, 10, 16], DType::F32, &Device::Cpu);
/// let v = Tensor::randn(&[2, 4, 10, 32], DType::F32, &Device::Cpu);
/// let y = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None);
/// assert_eq!(y.shape(), &[2, 4, 8, 32]);
/// // Query 0 sees only key 0: its output is value 0.
/// assert!((y.narrow(2, 0, 1).sub(&v.narrow(2, 0, 1))).abs().max_all().item::<f32>() < 1e-6);
/// ```
#[track_caller]
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> Tensor {
    let entered = crate::dispatch::enter();
    let out =
        scaled_dot_product_attention_untraced(q, k, v, attn_mask, dropout_p, is_causal, scale);
    crate::dispatch::finish_opt(
        entered,
        &[Some(q), Some(k), Some(v), attn_mask],
        || crate::dispatch::Op::Attention {
            causal: is_causal,
            scale,
            dropout: dropout_p,
        },
        out,
    )
}

#[track_caller]
fn scaled_dot_product_attention_untraced(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> Tensor {
    let op = "scaled_dot_product_attention";
    for (name, t) in [("query", q), ("key", k), ("value", v)] {
        assert!(
            t.dim() >= 2,
            "{op}: {name} must have at least 2 dims ([..., len, features]), got shape {:?}",
            t.shape()
        );
        assert!(
            t.dtype().is_float(),
            "{op}: {name} must be floating point, got {:?}",
            t.dtype()
        );
    }
    assert!(
        q.dtype() == k.dtype() && q.dtype() == v.dtype(),
        "{op}: query, key and value dtypes differ ({:?}, {:?}, {:?})",
        q.dtype(),
        k.dtype(),
        v.dtype()
    );
    assert!(
        q.device() == k.device() && q.device() == v.device(),
        "{op}: query, key and value are on {}, {} and {}",
        q.device(),
        k.device(),
        v.device()
    );
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    assert!(
        qs[qs.len() - 1] == ks[ks.len() - 1],
        "{op}: query {qs:?} and key {ks:?} differ in the feature dim (axis -1)"
    );
    assert!(
        ks[ks.len() - 2] == vs[vs.len() - 2],
        "{op}: key {ks:?} and value {vs:?} differ in the sequence dim (axis -2)"
    );
    let batch = ferrograd_kernels::broadcast_shapes(&qs[..qs.len() - 2], &ks[..ks.len() - 2])
        .and_then(|b| ferrograd_kernels::broadcast_shapes(&b, &vs[..vs.len() - 2]));
    let Ok(batch) = batch else {
        panic!("{op}: the batch dims of query {qs:?}, key {ks:?} and value {vs:?} do not broadcast")
    };
    assert!(
        (0.0..1.0).contains(&dropout_p),
        "{op}: dropout_p must be in [0, 1), got {dropout_p}"
    );
    assert!(
        !(is_causal && attn_mask.is_some()),
        "{op}: an explicit attn_mask should not be set when is_causal=True"
    );
    let half = q.dtype().is_half();
    let widen = |t: &Tensor| {
        if half {
            t.to_dtype(DType::F32)
        } else {
            t.clone()
        }
    };
    let (qw, kw, vw) = (widen(q), widen(k), widen(v));
    let mask = match attn_mask {
        None if is_causal => AttnMask::Causal,
        None => AttnMask::None,
        Some(m) => {
            assert!(
                m.device() == q.device(),
                "{op}: attn_mask is on {}, the query on {}",
                m.device(),
                q.device()
            );
            let mut full = batch.to_vec();
            full.extend([qs[qs.len() - 2], ks[ks.len() - 2]]);
            assert!(
                ferrograd_kernels::broadcast_shapes(m.shape(), &full)
                    .is_ok_and(|b| b[..] == full[..]),
                "{op}: attn_mask of shape {:?} does not broadcast to {full:?}",
                m.shape()
            );
            if m.dtype() == DType::Bool {
                AttnMask::Tensor(m.clone())
            } else {
                assert!(
                    m.dtype().is_float(),
                    "{op}: attn_mask must be bool or floating point, got {:?}",
                    m.dtype()
                );
                AttnMask::Tensor(m.to_dtype(qw.dtype()))
            }
        }
    };
    let scale = scale.unwrap_or(1.0 / (qs[qs.len() - 1] as f64).sqrt());
    let y = attention(&qw, &kw, &vw, mask, dropout_p, scale);
    if half { y.to_dtype(q.dtype()) } else { y }
}
