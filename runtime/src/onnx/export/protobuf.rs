//! Building ONNX protobuf messages: nodes, tensors, value infos and attributes.

use super::*;

pub(super) fn unsupported_err(rec: &Record, detail: String) -> OnnxError {
    OnnxError::UnsupportedOp {
        op: rec.op.name(),
        location: rec.location.to_string(),
        detail,
    }
}

pub(super) fn op_stem(op: &Op) -> String {
    op.name()
        .to_lowercase()
        .replace(' ', "_")
        .replace(['(', ')'], "")
}

/// The dtype of a binary op's result (both inputs are cast to it).
pub(super) fn promote(rec: &Record) -> DType {
    let out = rec.outputs[0].dtype();
    if out == DType::Bool {
        DType::promote(rec.inputs[0].dtype(), rec.inputs[1].dtype())
    } else {
        out
    }
}

pub(super) fn finfo_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => 0.000_976_562_5,
        DType::BF16 => 0.007_812_5,
        _ => f32::EPSILON as f64,
    }
}

pub(super) fn same_values(a: &Tensor, b: &Tensor) -> bool {
    if a.numel() > 1 << 20 {
        return true;
    }
    a.to_dtype(DType::F64).to_vec::<f64>() == b.to_dtype(DType::F64).to_vec::<f64>()
}

pub(super) fn to_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// ONNX `pads`: all begins, then all ends.
pub(super) fn pads(symmetric: &[usize]) -> Vec<i64> {
    to_i64(symmetric)
        .into_iter()
        .chain(to_i64(symmetric))
        .collect()
}

pub(crate) fn onnx_dtype(d: DType) -> Result<DataType, OnnxError> {
    Ok(match d {
        DType::F32 => DataType::Float,
        DType::F64 => DataType::Double,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bfloat16,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::Uint8,
        DType::Bool => DataType::Bool,
        #[allow(unreachable_patterns)]
        other => {
            return Err(OnnxError::Export(format!(
                "dtype {other:?} has no ONNX mapping"
            )));
        }
    })
}

/// A node named `name` of type `op`.
pub(crate) fn node_proto(
    name: String,
    op: &str,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attrs: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        input: inputs,
        output: outputs,
        name: Some(name),
        op_type: Some(op.to_string()),
        attribute: attrs,
        ..Default::default()
    }
}

pub(super) fn tensor_proto(
    name: &str,
    dt: DataType,
    dims: &[i64],
    raw: Vec<u8>,
) -> pb::TensorProto {
    pb::TensorProto {
        dims: dims.to_vec(),
        data_type: Some(dt as i32),
        name: Some(name.to_string()),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// An initializer holding `t`'s elements (little-endian raw data).
pub(crate) fn tensor_from(name: &str, t: &Tensor) -> Result<pb::TensorProto, OnnxError> {
    let t = t
        .detach()
        .to_device(&crate::Device::Cpu)
        .map_err(|e| OnnxError::Export(format!("copying `{name}` to the host: {e}")))?
        .contiguous();
    let raw = crate::checkpoint::le_bytes(&t);
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    Ok(tensor_proto(name, onnx_dtype(t.dtype())?, &dims, raw))
}

pub(super) fn value_info(
    name: &str,
    dtype: DType,
    shape: &[usize],
    dynamic: &[Option<String>],
) -> Result<pb::ValueInfoProto, OnnxError> {
    use pb::tensor_shape_proto::dimension::Value;
    let dims = shape.iter().zip(dynamic).map(|(&d, n)| {
        Some(match n {
            Some(n) => Value::DimParam(n.clone()),
            None => Value::DimValue(d as i64),
        })
    });
    tensor_value_info(name, dtype, dims)
}

/// A tensor value's type: element type and dims (a size, a `dim_param`, or unknown).
pub(crate) fn tensor_value_info(
    name: &str,
    dtype: DType,
    dims: impl IntoIterator<Item = Option<pb::tensor_shape_proto::dimension::Value>>,
) -> Result<pb::ValueInfoProto, OnnxError> {
    let dim = dims
        .into_iter()
        .map(|value| pb::tensor_shape_proto::Dimension {
            denotation: None,
            value,
        })
        .collect();
    Ok(pb::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(pb::TypeProto {
            denotation: None,
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(onnx_dtype(dtype)? as i32),
                shape: Some(pb::TensorShapeProto { dim }),
            })),
        }),
        ..Default::default()
    })
}

pub(super) fn attr(name: &str, ty: AttributeType) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(ty as i32),
        ..Default::default()
    }
}

pub(crate) fn attr_i(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        i: Some(v),
        ..attr(name, AttributeType::Int)
    }
}

pub(crate) fn attr_f(name: &str, v: f64) -> pb::AttributeProto {
    pb::AttributeProto {
        f: Some(v as f32),
        ..attr(name, AttributeType::Float)
    }
}

pub(crate) fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        ints: v.to_vec(),
        ..attr(name, AttributeType::Ints)
    }
}

pub(crate) fn attr_s(name: &str, v: &str) -> pb::AttributeProto {
    pb::AttributeProto {
        s: Some(v.as_bytes().to_vec()),
        ..attr(name, AttributeType::String)
    }
}

pub(super) fn attr_strings(name: &str, v: &[&str]) -> pb::AttributeProto {
    pb::AttributeProto {
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..attr(name, AttributeType::Strings)
    }
}

pub(super) fn attr_t(name: &str, t: pb::TensorProto) -> pb::AttributeProto {
    pb::AttributeProto {
        t: Some(t),
        ..attr(name, AttributeType::Tensor)
    }
}
