//! Fused ops, one folder each: layer norm, cross-entropy, dropout, pooling, attention, the
//! CPU convolution (direct depthwise, tiled im2col + GEMM), eval-mode batch norm's per-channel affine pass and
//! inference's add + layer norm. A folder
//! holds the op's entry point (called by `nn::functional`), its autograd node (one per
//! op: backward runs the fused gradient kernel, or, when a graph of the backward itself is
//! wanted (`create_graph`), the same formula as tensor ops so that higher derivatives
//! exist), and in `cuda.rs` its CUDA launches. The CPU kernel and the `.cu` source sit in
//! the kernels crate's mirror folder, `ferrograd_kernels::fused::NAME`.

mod attention;
mod batch_norm;
mod conv;
mod cross_entropy;
pub(crate) mod device;
mod dropout;
mod layer_norm;
mod linear;
mod lstm_cell;
mod pool;

pub(crate) use attention::{AttnMask, attention};
pub(crate) use batch_norm::{batch_norm_train, channel_affine, channel_affine_relu};
pub(crate) use conv::{applies as conv2d_applies, conv_transpose2d, conv2d};
pub(crate) use cross_entropy::{CrossEntropyOpts, cross_entropy};
pub(crate) use dropout::dropout;
pub(crate) use layer_norm::{add_layer_norm, layer_norm};
pub(crate) use linear::linear;
pub(crate) use lstm_cell::{GraphBackward, LstmStep, lstm_sequence, lstm_step, lstm_step_backward};
pub(crate) use pool::pool2d;

use crate::Tensor;
use ferrograd_kernels::cpu::CpuStorage;
use std::ops::Range;

/// Whether an inference fusion (`F::add_layer_norm`, `F::bias_gelu`, eval-mode
/// `F::batch_norm_relu`) may run as its one pass on these operands (the absent ones skipped): host tensors of one dtype, f32 or
/// f64, none to differentiate (grad mode off, or none tracked), and no export being
/// traced (the tracer records the composite ops).
pub(crate) fn inference_fusable(operands: &[Option<&Tensor>]) -> bool {
    let mut present = operands.iter().flatten();
    let Some(dtype) = present.clone().next().map(|t| t.dtype()) else {
        return false;
    };
    matches!(dtype, crate::DType::F32 | crate::DType::F64)
        && !crate::onnx::is_tracing()
        && present
            .clone()
            .all(|t| t.device() == crate::Device::Cpu && t.dtype() == dtype)
        && !(crate::autograd::is_grad_enabled() && present.any(|t| t.requires_grad_flag()))
}

/// The element range of a contiguous operand.
fn range(t: &Tensor) -> Range<usize> {
    t.layout()
        .contiguous_range()
        .expect("fused kernels take contiguous operands")
}

/// Runs `f` on the host elements of the optional tensor (`None` when absent).
fn with_optional<R>(op: &str, t: Option<&Tensor>, f: impl FnOnce(Option<&CpuStorage>) -> R) -> R {
    match t {
        Some(t) => t.with_cpu(op, |s, _| f(Some(s))),
        None => f(None),
    }
}
