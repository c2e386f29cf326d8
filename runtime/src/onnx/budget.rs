//! Bounded work for [`super::OnnxModel::run`]: before a node runs, the bytes it is about
//! to allocate are estimated from its inputs' shapes and values and checked, together
//! with what the run already holds, against the model's limit. A graph whose shapes come
//! from its inputs (`ConstantOfShape` of a value read from a tensor, an `Expand` to a
//! computed shape, two broadcast operands whose product is huge) then fails that run with
//! an ordinary error, as onnxruntime's does, instead of asking the allocator for terabytes
//! (an allocation failure aborts the process; no `catch_unwind` can stop it).

use super::import::{Attrs, ints_of};
use crate::Tensor;

/// The default limit on the bytes one [`super::OnnxModel::run`] may hold at once: half of
/// the machine's physical memory (`/proc/meminfo`'s `MemTotal`), or 8 GiB where that
/// cannot be read.
///
/// ```
/// let limit = ferrograd_runtime::onnx::default_max_run_bytes();
/// assert!(limit >= 1 << 20);
/// ```
pub fn default_max_run_bytes() -> u64 {
    static LIMIT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
            .map(|kb| kb * 1024 / 2)
            .unwrap_or(8 << 30)
    })
}

/// Bytes a tensor's elements take (views counted in full: an upper bound).
pub(crate) fn tensor_bytes(t: &Tensor) -> u128 {
    t.numel() as u128 * t.dtype().size_in_bytes() as u128
}

fn numel(shape: &[u128]) -> u128 {
    shape.iter().fold(1u128, |a, &d| a.saturating_mul(d))
}

fn shape_of(t: &Tensor) -> Vec<u128> {
    t.shape().iter().map(|&d| d as u128).collect()
}

/// NumPy broadcasting of several shapes, by size only (a mismatch is the op's to report;
/// here the larger size counts).
fn broadcast(shapes: &[Vec<u128>]) -> Vec<u128> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            shapes
                .iter()
                .filter_map(|s| (i + s.len()).checked_sub(rank).map(|j| s[j]))
                .max()
                .unwrap_or(1)
        })
        .collect()
}

/// A value read from a tensor as a size: negative ones count as 0 (the op rejects them).
fn dims_of(t: &Tensor) -> Vec<u128> {
    ints_of(t).into_iter().map(|v| v.max(0) as u128).collect()
}

/// An upper estimate of the bytes `op` allocates for its outputs (and large temporaries)
/// given `args`; 0 for ops whose outputs are no larger than their inputs, which the run's
/// own accounting already covers.
pub(crate) fn node_bytes(
    node: &super::proto::NodeProto,
    op: &str,
    args: &[Option<Tensor>],
) -> u128 {
    let a = Attrs(node);
    let present: Vec<&Tensor> = args.iter().flatten().collect();
    let elem = present
        .iter()
        .map(|t| t.dtype().size_in_bytes() as u128)
        .max()
        .unwrap_or(4)
        .max(4);
    let arg = |i: usize| args.get(i).and_then(Option::as_ref);
    let elems: u128 = match op {
        "ConstantOfShape" => arg(0).map_or(0, |s| numel(&dims_of(s))),
        "Expand" => match (arg(0), arg(1)) {
            (Some(x), Some(s)) => numel(&broadcast(&[shape_of(x), dims_of(s)])),
            _ => 0,
        },
        "Tile" => match (arg(0), arg(1)) {
            (Some(x), Some(r)) => numel(&shape_of(x)).saturating_mul(numel(&dims_of(r))),
            _ => 0,
        },
        "Range" => match (arg(0), arg(1), arg(2)) {
            (Some(s), Some(l), Some(d)) => {
                let v = |t: &Tensor| {
                    t.to_dtype(crate::DType::F64)
                        .contiguous()
                        .to_vec::<f64>()
                        .first()
                        .copied()
                        .unwrap_or(0.0)
                };
                let n = ((v(l) - v(s)) / v(d)).ceil();
                if n.is_finite() && n > 0.0 {
                    n.min(u128::MAX as f64) as u128
                } else if n.is_nan() || n <= 0.0 {
                    0
                } else {
                    u128::MAX
                }
            }
            _ => 0,
        },
        "Pad" => match (arg(0), arg(1)) {
            (Some(x), Some(p)) => {
                let pads = dims_of(p);
                let r = x.dim();
                let shape: Vec<u128> = shape_of(x)
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| {
                        d.saturating_add(pads.get(i).copied().unwrap_or(0))
                            .saturating_add(pads.get(i + r).copied().unwrap_or(0))
                    })
                    .collect();
                numel(&shape)
            }
            _ => 0,
        },
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Max" | "Min" | "Equal" | "Less"
        | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Where" => {
            let shapes: Vec<Vec<u128>> = present.iter().map(|t| shape_of(t)).collect();
            // Broadcast operands may each be expanded to the full shape too.
            numel(&broadcast(&shapes)).saturating_mul(shapes.len().max(1) as u128)
        }
        "MatMul" | "Gemm" => match (arg(0), arg(1)) {
            (Some(x), Some(w)) => {
                let (xs, ws) = (shape_of(x), shape_of(w));
                let m = if xs.len() >= 2 { xs[xs.len() - 2] } else { 1 };
                let n = ws.last().copied().unwrap_or(1);
                let (m, n) = if op == "Gemm" {
                    let m = if a.i("transA", 0) != 0 {
                        xs.last().copied().unwrap_or(1)
                    } else {
                        m
                    };
                    let n = if a.i("transB", 0) != 0 {
                        ws.first().copied().unwrap_or(1)
                    } else {
                        n
                    };
                    (m, n)
                } else {
                    (m, n)
                };
                let batch = broadcast(&[
                    xs[..xs.len().saturating_sub(2)].to_vec(),
                    ws[..ws.len().saturating_sub(2)].to_vec(),
                ]);
                numel(&batch).saturating_mul(m).saturating_mul(n)
            }
            _ => 0,
        },
        "Gather" => match (arg(0), arg(1)) {
            (Some(x), Some(i)) => {
                let xs = shape_of(x);
                let axis = a.i("axis", 0);
                let axis = if axis < 0 {
                    axis + xs.len() as i64
                } else {
                    axis
                };
                let along = usize::try_from(axis)
                    .ok()
                    .and_then(|ax| xs.get(ax).copied())
                    .unwrap_or(1)
                    .max(1);
                (numel(&xs) / along).saturating_mul(numel(&shape_of(i)))
            }
            _ => 0,
        },
        "Conv" | "ConvTranspose" | "MaxPool" | "AveragePool" => match arg(0) {
            Some(x) => {
                let xs = shape_of(x);
                let k = xs.len().saturating_sub(2);
                let pads: Vec<u128> = a
                    .ints("pads")
                    .unwrap_or_default()
                    .iter()
                    .map(|&p| p.max(0) as u128)
                    .collect();
                let ones = vec![1i64; k];
                let strides = a.ints("strides").unwrap_or_else(|| ones.clone());
                let dil = a.ints("dilations").unwrap_or_else(|| ones.clone());
                let kernel: Vec<u128> = match (op, arg(1)) {
                    ("Conv" | "ConvTranspose", Some(w)) => {
                        shape_of(w).into_iter().skip(2).collect()
                    }
                    _ => a
                        .ints("kernel_shape")
                        .unwrap_or_default()
                        .iter()
                        .map(|&v| v.max(0) as u128)
                        .collect(),
                };
                let mut spatial = Vec::with_capacity(k);
                for i in 0..k {
                    let d = xs[2 + i];
                    let pad = pads
                        .get(i)
                        .copied()
                        .unwrap_or(0)
                        .saturating_add(pads.get(i + k).copied().unwrap_or(0));
                    let s = strides.get(i).copied().unwrap_or(1).max(1) as u128;
                    let dl = dil.get(i).copied().unwrap_or(1).max(1) as u128;
                    let kk = kernel.get(i).copied().unwrap_or(1);
                    spatial.push(if op == "ConvTranspose" {
                        d.saturating_mul(s)
                            .saturating_add(kk.saturating_mul(dl))
                            .saturating_add(pad)
                    } else {
                        // The padded input, and the unfolded columns of a convolution.
                        d.saturating_add(pad).saturating_mul(kk.max(1))
                    });
                }
                let channels = match (op, arg(1)) {
                    ("Conv", Some(w)) => shape_of(w).first().copied().unwrap_or(1).max(xs[1]),
                    ("ConvTranspose", Some(w)) => shape_of(w)
                        .get(1)
                        .copied()
                        .unwrap_or(1)
                        .saturating_mul(a.i("group", 1).max(1) as u128),
                    _ => xs.get(1).copied().unwrap_or(1),
                };
                xs.first()
                    .copied()
                    .unwrap_or(1)
                    .saturating_mul(channels)
                    .saturating_mul(numel(&spatial))
            }
            None => 0,
        },
        _ => 0,
    };
    elems.saturating_mul(elem)
}

/// The error for a node over the limit.
pub(crate) fn over_limit(need: u128, held: u128, limit: u64) -> String {
    format!(
        "the node would allocate about {need} bytes while the run holds {held}, over the model's limit of {limit} bytes (OnnxModel::with_max_run_bytes)"
    )
}
