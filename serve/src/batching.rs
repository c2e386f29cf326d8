//! Which axis a model's requests are batched along, and running a batch so that every
//! request gets exactly the answer (or the error) that running it alone would give.
//!
//! Batching is declared, never assumed. An ONNX model's inputs and outputs name their
//! symbolic dims (`torch.onnx.export(..., dynamic_axes={"input": {0: "batch"}})`,
//! [`ExportOptions::dynamic_axis`](ferrograd::onnx::ExportOptions::dynamic_axis)); the batch
//! axis is the symbolic dim that every input and every output has exactly once. With
//! [`Batching::Auto`] that dim must be named as a batch (`batch`, `batch_size`, `N`, `bs`,
//! or a name containing `batch`), so a sequence-first GRU exported with
//! `{0: "seq", 1: "batch"}` is batched along axis 1, and a model whose dims say nothing of
//! a batch (fixed shapes, or only `seq`) is served one request at a time.
//! [`Batching::Dim`] names the dim explicitly; [`Batching::Off`] turns batching off.

use ferrograd::onnx::{InputSpec, OnnxModel};
use ferrograd::{DType, Tensor};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// How a model's requests may share a run.
///
/// ```
/// use ferrograd_serve::Batching;
/// assert_eq!(Batching::default(), Batching::Auto);
/// let by_name = Batching::Dim("batch".into());
/// assert_ne!(by_name, Batching::Off);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Batching {
    /// Batch along the symbolic dim named as a batch that every input and output has
    /// once; serve unbatched when there is none.
    #[default]
    Auto,
    /// Batch along the symbolic dim of this name (it must be in every input and output).
    Dim(String),
    /// One request per run.
    Off,
}

/// Where the batch axis is in each input and output of a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchAxes {
    /// The symbolic dim's name.
    pub dim: String,
    /// Its position in each input.
    pub inputs: Vec<usize>,
    /// Its position in each output.
    pub outputs: Vec<usize>,
}

/// Names that declare a batch dim under [`Batching::Auto`].
fn batch_like(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "n" | "b" | "bs" | "batch" | "batch_size" | "batchsize"
    ) || n.contains("batch")
}

/// The position of the one dim named `dim` in `spec`, if it has exactly one.
fn position(spec: &InputSpec, dim: &str) -> Option<usize> {
    let dims = spec.dims.as_ref()?;
    let mut at = dims
        .iter()
        .enumerate()
        .filter(|(_, d)| matches!(d, Err(n) if n == dim))
        .map(|(i, _)| i);
    let first = at.next()?;
    at.next().is_none().then_some(first)
}

/// Resolves `batching` for `model`: `Ok(None)` means unbatched, an `Err` says why an
/// explicit [`Batching::Dim`] does not fit the model.
///
/// ```
/// use ferrograd::nn::Linear;
/// use ferrograd::onnx::{self, ExportOptions, OnnxModel};
/// use ferrograd::prelude::*;
/// use ferrograd_serve::{Batching, batch_axes};
/// let lin = Linear::new(4, 2, &Device::Cpu);
/// let x = Tensor::randn(&[3, 4], DType::F32, &Device::Cpu);
/// let opts = ExportOptions::new()
///     .dynamic_axis("input", 0, "batch")
///     .dynamic_axis("output", 0, "batch");
/// let model = OnnxModel::from_bytes(&onnx::export_module(&lin, &x, &opts).unwrap().to_bytes()).unwrap();
/// let axes = batch_axes(&model, &Batching::Auto).unwrap().unwrap();
/// assert_eq!((axes.inputs, axes.outputs), (vec![0], vec![0]));
/// assert!(batch_axes(&model, &Batching::Off).unwrap().is_none());
/// assert!(batch_axes(&model, &Batching::Dim("seq".into())).is_err());
/// ```
pub fn batch_axes(model: &OnnxModel, batching: &Batching) -> Result<Option<BatchAxes>, String> {
    let locate = |dim: &str| -> Option<BatchAxes> {
        let inputs: Option<Vec<usize>> = model
            .input_specs()
            .iter()
            .map(|s| position(s, dim))
            .collect();
        let outputs: Option<Vec<usize>> = model
            .output_specs()
            .iter()
            .map(|s| position(s, dim))
            .collect();
        match (inputs, outputs) {
            (Some(i), Some(o)) if !i.is_empty() && o.len() == model.output_names().len() => {
                Some(BatchAxes {
                    dim: dim.to_string(),
                    inputs: i,
                    outputs: o,
                })
            }
            _ => None,
        }
    };
    match batching {
        Batching::Off => Ok(None),
        Batching::Dim(dim) => locate(dim).map(Some).ok_or_else(|| {
            format!(
                "batch dim `{dim}` is not a symbolic dim of every input and output once (inputs {}; outputs {})",
                describe(model.input_specs()),
                describe(model.output_specs())
            )
        }),
        Batching::Auto => {
            let mut names: Vec<&str> = model
                .input_specs()
                .iter()
                .flat_map(|s| s.dims.iter().flatten())
                .filter_map(|d| d.as_ref().err().map(String::as_str))
                .filter(|n| batch_like(n))
                .collect();
            names.sort_unstable();
            names.dedup();
            let found: Vec<BatchAxes> = names.into_iter().filter_map(locate).collect();
            // Two dims that both look like a batch: ambiguous, so no batching.
            Ok(if found.len() == 1 {
                found.into_iter().next()
            } else {
                None
            })
        }
    }
}

fn describe(specs: &[InputSpec]) -> String {
    specs
        .iter()
        .map(|s| {
            let dims = match &s.dims {
                None => "?".to_string(),
                Some(d) => d
                    .iter()
                    .map(|d| match d {
                        Ok(n) => n.to_string(),
                        Err(n) if n.is_empty() => "?".into(),
                        Err(n) => n.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            format!("`{}` [{dims}]", s.name)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Requests that can share a run: same dtypes and same dims but for the batch axis.
pub(crate) type BatchKey = Vec<(DType, Vec<usize>)>;

pub(crate) fn batch_key(inputs: &[Tensor], axes: &BatchAxes) -> BatchKey {
    inputs
        .iter()
        .zip(&axes.inputs)
        .map(|(x, &ax)| {
            let mut s = x.shape().to_vec();
            if ax < s.len() {
                s.remove(ax);
            }
            (x.dtype(), s)
        })
        .collect()
}

/// A request's rows along the batch axis: every input must agree.
pub(crate) fn rows_of(inputs: &[Tensor], axes: &BatchAxes) -> Result<usize, String> {
    let mut rows = None;
    for (x, &ax) in inputs.iter().zip(&axes.inputs) {
        let n = *x.shape().get(ax).ok_or_else(|| {
            format!(
                "an input of shape {:?} has no batch axis {ax} (`{}`)",
                x.shape(),
                axes.dim
            )
        })?;
        match rows {
            Some(r) if r != n => {
                return Err(format!(
                    "the inputs disagree on the batch dim `{}`: {r} and {n}",
                    axes.dim
                ));
            }
            _ => rows = Some(n),
        }
    }
    Ok(rows.unwrap_or(1))
}

/// The model on one request alone; a panic is that request's error.
pub(crate) fn run_one(model: &OnnxModel, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    match catch_unwind(AssertUnwindSafe(|| model.run(inputs))) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(p) => Err(format!(
            "the model run failed: {}",
            crate::panic_message(p.as_ref())
        )),
    }
}

/// Runs a group of compatible requests: concatenated along the batch axis and split
/// back when the batched run succeeds; otherwise each request alone, so a failing
/// request fails alone and every other gets its own answer.
pub(crate) fn run_group(
    model: &OnnxModel,
    axes: Option<&BatchAxes>,
    inputs: &[Vec<Tensor>],
    sizes: &[usize],
) -> Vec<Result<Vec<Tensor>, String>> {
    if let Some(axes) = axes
        && inputs.len() > 1
        && let Ok(per_request) = run_batched(model, axes, inputs, sizes)
    {
        return per_request.into_iter().map(Ok).collect();
    }
    inputs.iter().map(|r| run_one(model, r)).collect()
}

fn run_batched(
    model: &OnnxModel,
    axes: &BatchAxes,
    inputs: &[Vec<Tensor>],
    sizes: &[usize],
) -> Result<Vec<Vec<Tensor>>, String> {
    let batched: Vec<Tensor> = axes
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &ax)| {
            let parts: Vec<&Tensor> = inputs.iter().map(|r| &r[i]).collect();
            Tensor::cat(&parts, ax as isize)
        })
        .collect();
    let outputs = run_one(model, &batched)?;
    let total: usize = sizes.iter().sum();
    let mut per_request = vec![Vec::with_capacity(outputs.len()); sizes.len()];
    for (out, &ax) in outputs.iter().zip(&axes.outputs) {
        if out.shape().get(ax) != Some(&total) {
            return Err(format!(
                "an output of shape {:?} has no batch axis {ax} of {total} rows",
                out.shape()
            ));
        }
        let mut start = 0;
        for (r, &s) in sizes.iter().enumerate() {
            per_request[r].push(out.narrow(ax as isize, start, s).contiguous());
            start += s;
        }
    }
    Ok(per_request)
}
