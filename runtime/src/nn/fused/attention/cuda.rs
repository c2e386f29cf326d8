//! The CUDA side of fused attention: the launch of `attention.cu` (kernels crate,
//! `fused/attention/`) for f32/f64 operands with query/value widths up to 128 and masks
//! whose batch dims are at most (batch, heads); other cases take the tensor-op path.

use super::AttnMask;
use crate::Tensor;
use crate::nn::fused::device::dispatch;
use ferrograd_kernels::fused::attention::{AttentionShape, AttnDropout};

dispatch! {
    /// Output `[bh, tq, dv]` and row log-sum-exp `[bh, tq]` of contiguous CUDA `q, k, v`,
    /// or `None` when the kernel does not take the case.
    fn attention_forward(q: &Tensor, k: &Tensor, v: &Tensor, mask: &AttnMask, shape: AttentionShape, scale: f64, dropout: Option<AttnDropout>) -> Option<(Tensor, Tensor)>;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::DType;
    use crate::nn::fused::device::*;

    /// `ATT_MAX_D` of attention.cu.
    const MAX_D: usize = 128;

    /// The mask's kind code, element offset and strides (outer batch, inner batch (heads),
    /// query, key) and the number of heads, when the kernel can read it.
    fn mask_geometry(
        mask: &AttnMask,
        dtype: DType,
    ) -> Option<(u64, Option<&Tensor>, [u64; 5], u64)> {
        match mask {
            AttnMask::None => Some((0, None, [0; 5], 1)),
            AttnMask::Causal => Some((1, None, [0; 5], 1)),
            AttnMask::Tensor(m) => {
                let kind = match m.dtype() {
                    DType::Bool => 2,
                    d if d == dtype => 3,
                    _ => return None,
                };
                let (shape, st) = (m.shape(), m.layout().strides());
                let n = shape.len();
                let (q_s, k_s) = (st[n - 2] as u64, st[n - 1] as u64);
                let off = m.layout().offset() as u64;
                match n {
                    2 => Some((kind, Some(m), [off, 0, 0, q_s, k_s], 1)),
                    3 => Some((kind, Some(m), [off, st[0] as u64, 0, q_s, k_s], 1)),
                    4 => Some((
                        kind,
                        Some(m),
                        [off, st[0] as u64, st[1] as u64, q_s, k_s],
                        shape[1] as u64,
                    )),
                    _ => None,
                }
            }
        }
    }

    #[track_caller]
    pub(super) fn attention_forward(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &AttnMask,
        s: AttentionShape,
        scale: f64,
        dropout: Option<AttnDropout>,
    ) -> Option<(Tensor, Tensor)> {
        let dtype = q.dtype();
        if !matches!(dtype, DType::F32 | DType::F64) || s.d > MAX_D || s.dv > MAX_D {
            return None;
        }
        let (kind, mask_t, geo, heads) = mask_geometry(mask, dtype)?;
        let d = devs([Some(q), Some(k), Some(v), mask_t])?;
        let (out, lse) = k::attention_forward(
            operand(&d[0], Some(q))?,
            operand(&d[1], Some(k))?,
            operand(&d[2], Some(v))?,
            d[3].as_ref().map(|m| m.get()),
            dtype,
            s,
            scale,
            kind,
            geo,
            heads,
            dropout,
        )
        .unwrap_or_else(|e| fail("scaled_dot_product_attention", e));
        Some((
            cuda_tensor(out, &[s.bh, s.tq, s.dv]),
            cuda_tensor(lse, &[s.bh, s.tq]),
        ))
    }

    /// The launch, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::CudaStorage;
        use crate::storage::cuda::launch::*;
        use cudarc::driver::LaunchConfig;
        use ferrograd_kernels::DType;
        use ferrograd_kernels::cuda as kernels;
        use ferrograd_kernels::fused::attention::{AttentionShape, AttnDropout};

        /// `ATT_ROWS` and `ATT_KEYS` of attention.cu.
        const ROWS: usize = 64;
        const KEYS: usize = 16;

        #[allow(clippy::too_many_arguments)]
        pub(crate) fn attention_forward(
            q: Operand<'_>,
            k: Operand<'_>,
            v: Operand<'_>,
            mask: Option<&CudaStorage>,
            dtype: DType,
            s: AttentionShape,
            scale: f64,
            kind: u64,
            [m_off, ms_outer, ms_inner, ms_q, ms_k]: [u64; 5],
            heads: u64,
            dropout: Option<AttnDropout>,
        ) -> Result<(CudaStorage, CudaStorage)> {
            let dev = q.0.device();
            let out = output(dev, dtype, s.bh * s.tq * s.dv)?;
            let lse = output(dev, acc_dtype(dtype), s.bh * s.tq)?;
            if s.bh * s.tq == 0 {
                return Ok((out, lse));
            }
            let (qa, ka, va) = (address(Some(q)), address(Some(k)), address(Some(v)));
            let (oa, la) = (out.address_of(0), lse.address_of(0));
            let ma = mask.map_or(0, |m| m.address_of(0));
            let (tq, tk, d, dv) = (s.tq as u64, s.tk as u64, s.d as u64, s.dv as u64);
            let (p, seed) = dropout.map_or((0.0, 0), |d| (d.p, d.seed));
            let acc = dtype.size_in_bytes().max(4);
            let cfg = LaunchConfig {
                grid_dim: (s.tq.div_ceil(ROWS) as u32, s.bh as u32, 1),
                block_dim: (ROWS as u32, 1, 1),
                shared_mem_bytes: (KEYS * (s.d + s.dv) * acc) as u32,
            };
            launch!(dev, &kernels::ATTENTION_FORWARD, dtype, cfg;
                qa, ka, va, oa, la, tq, tk, d, dv, scale, kind, ma, m_off, heads, ms_outer, ms_inner, ms_q, ms_k, p, seed)?;
            Ok((out, lse))
        }
    }
}
