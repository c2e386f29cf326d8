//! Shared by the decoder parity tests: the fixtures written by the scripts in
//! `fixtures/`, and comparisons.

#![allow(dead_code)]

use std::path::PathBuf;

/// `tests/fixtures`.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `fixtures/<name>.json`.
pub fn json(name: &str) -> serde_json::Value {
    let path = fixtures().join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The integers of a (nested) JSON array, flattened.
pub fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|x| match x.as_array() {
            Some(row) => row.iter().map(|y| y.as_i64().unwrap()).collect::<Vec<_>>(),
            None => vec![x.as_i64().unwrap()],
        })
        .collect()
}

/// The numbers of a (nested) JSON array, flattened, as f32.
pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    fn walk(v: &serde_json::Value, out: &mut Vec<f32>) {
        match v.as_array() {
            Some(a) => a.iter().for_each(|x| walk(x, out)),
            None => out.push(v.as_f64().unwrap() as f32),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    out
}

/// The largest elementwise difference.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
