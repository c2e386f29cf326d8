//! The ONNX runtime's run path under hostile shapes: 600 random graphs whose shapes come
//! from their inputs (`ConstantOfShape`, `Expand`, `Range`, `Pad`, `Reshape`, broadcasting
//! arithmetic, `MatMul`, `Gather`, `Concat`), run on inputs whose values reach 2⁴⁰. Every
//! run returns `Ok` or `Err` within the model's byte limit: never a panic that escapes, an
//! abort (an allocation of terabytes kills the test process) or a hang. The graphs are
//! drawn from a seeded generator, so a failure repeats; `FERROGRAD_FUZZ_CASES` sets the
//! count.

use ferrograd::onnx::OnnxModel;
use ferrograd::onnx::proto as pb;
use ferrograd::prelude::*;

/// A small deterministic generator (xorshift), so the cases do not depend on a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const INT: i32 = pb::tensor_proto::DataType::Int64 as i32;
const FLOAT: i32 = pb::tensor_proto::DataType::Float as i32;

fn value_info(name: &str, elem: i32, dims: &[i64]) -> pb::ValueInfoProto {
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| pb::tensor_shape_proto::Dimension {
                            value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(
    op: &str,
    inputs: &[String],
    output: &str,
    attrs: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        op_type: Some(op.into()),
        input: inputs.to_vec(),
        output: vec![output.into()],
        attribute: attrs,
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(pb::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    }
}

/// A random graph over inputs `s` (int64 `[2]`, shape-like values) and `x` (float
/// `[2, 3]`), and the name of its output.
fn graph(rng: &mut Rng) -> Vec<u8> {
    let mut ints = vec!["s".to_string()];
    let mut floats = vec!["x".to_string()];
    let mut nodes = Vec::new();
    let steps = 1 + rng.below(5);
    for i in 0..steps {
        let out = format!("v{i}");
        let pick = |rng: &mut Rng, v: &[String]| v[rng.below(v.len())].clone();
        match rng.below(9) {
            0 => {
                nodes.push(node("ConstantOfShape", &[pick(rng, &ints)], &out, vec![]));
                floats.push(out);
            }
            1 => {
                let (a, s) = (pick(rng, &floats), pick(rng, &ints));
                nodes.push(node("Expand", &[a, s], &out, vec![]));
                floats.push(out);
            }
            2 => {
                let (a, b) = (pick(rng, &floats), pick(rng, &floats));
                let op = ["Add", "Mul", "Sub", "Div"][rng.below(4)];
                nodes.push(node(op, &[a, b], &out, vec![]));
                floats.push(out);
            }
            3 => {
                let (a, b) = (pick(rng, &floats), pick(rng, &floats));
                nodes.push(node("MatMul", &[a, b], &out, vec![]));
                floats.push(out);
            }
            4 => {
                let (a, b) = (pick(rng, &ints), pick(rng, &ints));
                nodes.push(node("Concat", &[a, b], &out, vec![int_attr("axis", 0)]));
                ints.push(out);
            }
            5 => {
                let (a, s) = (pick(rng, &floats), pick(rng, &ints));
                nodes.push(node("Reshape", &[a, s], &out, vec![]));
                floats.push(out);
            }
            6 => {
                // Range(0, limit, 1) with a limit read from an int value.
                let s = pick(rng, &ints);
                let (zero, one, limit) = (format!("z{i}"), format!("o{i}"), format!("l{i}"));
                nodes.push(node(
                    "ReduceMax",
                    &[s],
                    &limit,
                    vec![int_attr("keepdims", 0)],
                ));
                nodes.push(node("Sub", &[limit.clone(), limit.clone()], &zero, vec![]));
                nodes.push(node("Div", &[limit.clone(), limit.clone()], &one, vec![]));
                nodes.push(node("Range", &[zero, limit, one], &out, vec![]));
                ints.push(out);
            }
            7 => {
                let (a, s) = (pick(rng, &floats), pick(rng, &ints));
                nodes.push(node("Gather", &[a, s], &out, vec![int_attr("axis", 0)]));
                floats.push(out);
            }
            _ => {
                let (a, p) = (pick(rng, &floats), pick(rng, &ints));
                nodes.push(node("Pad", &[a, p], &out, vec![]));
                floats.push(out);
            }
        }
    }
    let last = nodes.last().map(|n| n.output[0].clone()).expect("a node");
    let elem = if ints.contains(&last) { INT } else { FLOAT };
    let model = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(pb::GraphProto {
            node: nodes,
            input: vec![value_info("s", INT, &[2]), value_info("x", FLOAT, &[2, 3])],
            output: vec![pb::ValueInfoProto {
                name: Some(last),
                r#type: Some(pb::TypeProto {
                    value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                        elem_type: Some(elem),
                        shape: None,
                    })),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    prost::Message::encode_to_vec(&model)
}

#[test]
fn hostile_shapes_fail_runs_cleanly_within_the_limit() {
    let cases: usize = std::env::var("FERROGRAD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let limit = 64u64 << 20;
    let values = [
        [2i64, 3],
        [3, 2],
        [1 << 20, 1 << 20],
        [1 << 40, 1],
        [-1, 6],
        [0, 5],
        [i64::MAX, 2],
        [7, -3],
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut refused) = (0, 0);
    for case in 0..cases {
        let bytes = graph(&mut rng);
        let model = match OnnxModel::from_bytes(&bytes) {
            Ok(m) => m.with_max_run_bytes(limit),
            Err(_) => continue,
        };
        let s = values[rng.below(values.len())];
        let inputs = [
            Tensor::from_vec(s.to_vec(), &[2]),
            Tensor::randn(&[2, 3], DType::F32, &Device::Cpu),
        ];
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.run(&inputs)));
        match run {
            Ok(Ok(outs)) => {
                ok += 1;
                let bytes: usize = outs
                    .iter()
                    .map(|t| t.numel() * t.dtype().size_in_bytes())
                    .sum();
                assert!(
                    bytes as u64 <= limit,
                    "case {case}: an output of {bytes} bytes"
                );
            }
            Ok(Err(_)) => refused += 1,
            Err(_) => panic!("case {case} (values {s:?}): the run panicked instead of an Err"),
        }
    }
    eprintln!("{cases} graphs: {ok} ran, {refused} refused");
    assert!(ok > 0 && refused > 0, "{ok} ran, {refused} refused");
}
