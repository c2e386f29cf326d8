//! Tensors in JSON: a request's inputs (a list in input order, or an object by input
//! name) decoded against the model's input specs, and outputs encoded.

use crate::ApiError;
use ferrograd::onnx::OnnxModel;
use ferrograd::{DType, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A request's tensor in JSON.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct JsonTensor {
    /// The input or output name (optional in requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The shape.
    pub shape: Vec<usize>,
    /// `float32` (default), `float64`, `int64` or `bool`.
    #[serde(default)]
    pub dtype: Option<String>,
    /// The elements, row-major.
    pub data: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Inputs {
    List(Vec<JsonTensor>),
    Named(BTreeMap<String, JsonTensor>),
}

#[derive(Deserialize)]
pub(crate) struct PredictRequest {
    pub(crate) inputs: Inputs,
}

#[derive(Serialize)]
pub(crate) struct PredictResponse {
    pub(crate) outputs: Vec<JsonTensor>,
}

pub(crate) fn decode_inputs(model: &OnnxModel, inputs: Inputs) -> Result<Vec<Tensor>, ApiError> {
    let list = match inputs {
        Inputs::List(v) => v,
        Inputs::Named(mut m) => {
            let mut v = Vec::new();
            for n in model.input_names() {
                v.push(
                    m.remove(n)
                        .ok_or_else(|| ApiError::bad(format!("missing input `{n}`")))?,
                );
            }
            if let Some(extra) = m.keys().next() {
                return Err(ApiError::bad(format!(
                    "unknown input `{extra}`; inputs are {:?}",
                    model.input_names()
                )));
            }
            v
        }
    };
    list.iter().enumerate().map(|(i, t)| decode(i, t)).collect()
}

fn decode(i: usize, t: &JsonTensor) -> Result<Tensor, ApiError> {
    let n = t
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| ApiError::bad(format!("input {i}: shape {:?} overflows", t.shape)))?;
    if n != t.data.len() {
        return Err(ApiError::bad(format!(
            "input {i}: shape {:?} needs {n} values, got {}",
            t.shape,
            t.data.len()
        )));
    }
    let dtype = t.dtype.as_deref().unwrap_or("float32");
    let bad_value =
        |v: &serde_json::Value| ApiError::bad(format!("input {i}: {v} is not a {dtype} value"));
    Ok(match dtype {
        "float32" | "float" | "f32" | "float64" | "double" | "f64" => {
            let v: Vec<f64> = t
                .data
                .iter()
                .map(|x| x.as_f64().ok_or_else(|| bad_value(x)))
                .collect::<Result<_, _>>()?;
            let x = Tensor::from_vec(v, &t.shape);
            if dtype.contains("64") || dtype == "double" {
                x
            } else {
                x.to_dtype(DType::F32)
            }
        }
        "int64" | "long" | "i64" => {
            let v: Vec<i64> = t
                .data
                .iter()
                .map(|x| x.as_i64().ok_or_else(|| bad_value(x)))
                .collect::<Result<_, _>>()?;
            Tensor::from_vec(v, &t.shape)
        }
        "bool" => {
            let v: Vec<bool> = t
                .data
                .iter()
                .map(|x| x.as_bool().ok_or_else(|| bad_value(x)))
                .collect::<Result<_, _>>()?;
            Tensor::from_vec(v, &t.shape)
        }
        other => {
            return Err(ApiError::bad(format!(
                "input {i}: dtype `{other}` is not supported (float32, float64, int64, bool)"
            )));
        }
    })
}

pub(crate) fn encode(name: &str, t: &Tensor) -> JsonTensor {
    let t = t.contiguous();
    let data: Vec<serde_json::Value> = match t.dtype() {
        DType::I64 | DType::U8 => t
            .to_dtype(DType::I64)
            .to_vec::<i64>()
            .into_iter()
            .map(Into::into)
            .collect(),
        DType::Bool => t.to_vec::<bool>().into_iter().map(Into::into).collect(),
        DType::F64 => t.to_vec::<f64>().into_iter().map(Into::into).collect(),
        _ => t
            .to_dtype(DType::F32)
            .to_vec::<f32>()
            .into_iter()
            .map(|v| serde_json::Value::from(v as f64))
            .collect(),
    };
    JsonTensor {
        name: Some(name.to_string()),
        shape: t.shape().to_vec(),
        dtype: Some(t.dtype().name().to_string()),
        data,
    }
}
