//! Optimizer state dicts (`optimizer.state_dict()`): per-parameter state keyed by
//! parameter name, and the parameter groups' options, with a flat form (tensors plus one
//! JSON string) that a safetensors checkpoint holds.

use crate::Tensor;
use std::collections::BTreeMap;

/// One option of a parameter group as a state dict holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Hyper {
    /// A number (`lr`, `eps`, `weight_decay`, …).
    Float(f64),
    /// A flag (`amsgrad`, `nesterov`, …).
    Bool(bool),
    /// A pair (`betas`).
    Pair(f64, f64),
}

/// One parameter group of a state dict: its options under PyTorch's keys and the names
/// of its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupRecord {
    /// The options (`lr`, `betas`, …).
    pub hyper: BTreeMap<String, Hyper>,
    /// The parameters' names, in the group's order.
    pub params: Vec<String>,
}

/// An optimizer's state dict, as PyTorch's `{"state": …, "param_groups": …}` but keyed by
/// parameter name (positions "0", "1", … for optimizers made from bare tensors).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::{Optimizer, Sgd, SgdConfig};
/// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
/// let mut opt = Sgd::named([("w".to_string(), w.clone())], SgdConfig::new(0.1).momentum(0.9));
/// w.set_grad(Some(Tensor::ones(&[2], DType::F32, &Device::Cpu)));
/// opt.step();
/// let sd = opt.state_dict();
/// assert!(sd.state["w"].contains_key("momentum_buffer"));
/// let (tensors, groups) = sd.to_flat();
/// assert!(tensors.contains_key("state.w.momentum_buffer"));
/// let back = ferrograd_runtime::optim::OptimizerState::from_flat(&tensors, &groups).unwrap();
/// let mut other = Sgd::named([("w".to_string(), w.clone())], SgdConfig::new(0.5).momentum(0.9));
/// other.load_state_dict(&back).unwrap();
/// assert_eq!(other.lr(), 0.1); // options come back with the state
/// ```
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// Per-parameter state: `step`, buffers, scalars (0-d tensors for the numbers).
    pub state: BTreeMap<String, BTreeMap<String, Tensor>>,
    /// The parameter groups.
    pub param_groups: Vec<GroupRecord>,
}

/// Why a state dict does not fit an optimizer, or cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum OptimError {
    /// The groups differ in number or in the parameters they hold.
    #[error("optimizer state dict: {0}")]
    Groups(String),
    /// An option this optimizer does not have, or of the wrong kind.
    #[error(
        "optimizer state dict: parameter group {group} has option {key:?} = {value:?}, which this optimizer does not take"
    )]
    Hyper {
        /// The group.
        group: usize,
        /// The option.
        key: String,
        /// Its value.
        value: Hyper,
    },
    /// State for a parameter the optimizer does not hold.
    #[error("optimizer state dict: state for unknown parameter {0:?}")]
    UnknownParameter(String),
    /// A parameter's state is incomplete or mis-shaped.
    #[error("optimizer state dict: state of {param:?}: {reason}")]
    State {
        /// The parameter.
        param: String,
        /// What is wrong.
        reason: String,
    },
    /// The flat form is malformed (bad JSON, a key outside `state.`).
    #[error("optimizer state dict: {0}")]
    Format(String),
}

impl OptimizerState {
    /// The flat form: tensors under `state.{param}.{key}` and the groups as a JSON string
    /// (`[{"lr": 0.1, "betas": [0.9, 0.999], …, "params": ["fc.weight", …]}]`).
    pub fn to_flat(&self) -> (BTreeMap<String, Tensor>, String) {
        let mut tensors = BTreeMap::new();
        for (param, entry) in &self.state {
            for (key, t) in entry {
                tensors.insert(format!("state.{param}.{key}"), t.clone());
            }
        }
        let groups: Vec<serde_json::Value> = self
            .param_groups
            .iter()
            .map(|g| {
                let mut m = serde_json::Map::new();
                for (k, v) in &g.hyper {
                    m.insert(
                        k.clone(),
                        match v {
                            Hyper::Float(x) => serde_json::json!(x),
                            Hyper::Bool(b) => serde_json::json!(b),
                            Hyper::Pair(a, b) => serde_json::json!([a, b]),
                        },
                    );
                }
                m.insert("params".into(), serde_json::json!(g.params));
                serde_json::Value::Object(m)
            })
            .collect();
        (tensors, serde_json::Value::Array(groups).to_string())
    }

    /// Reads the flat form back (the inverse of [`OptimizerState::to_flat`]).
    ///
    /// # Errors
    /// [`OptimError::Format`] on malformed JSON, a non-finite option, or a tensor key
    /// outside `state.{param}.{key}`.
    pub fn from_flat(
        tensors: &BTreeMap<String, Tensor>,
        param_groups: &str,
    ) -> Result<Self, OptimError> {
        let bad = |m: String| OptimError::Format(m);
        let mut state: BTreeMap<String, BTreeMap<String, Tensor>> = BTreeMap::new();
        for (k, t) in tensors {
            let (param, key) = k
                .strip_prefix("state.")
                .and_then(|r| r.rsplit_once('.'))
                .filter(|(p, k)| !p.is_empty() && !k.is_empty())
                .ok_or_else(|| bad(format!("tensor key {k:?} is not state.<param>.<key>")))?;
            state
                .entry(param.to_string())
                .or_default()
                .insert(key.to_string(), t.clone());
        }
        let json: serde_json::Value = serde_json::from_str(param_groups)
            .map_err(|e| bad(format!("param_groups is not JSON: {e}")))?;
        let groups = json
            .as_array()
            .ok_or_else(|| bad("param_groups is not a list".into()))?;
        let mut records = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let obj = g
                .as_object()
                .ok_or_else(|| bad(format!("param group {i} is not an object")))?;
            let mut rec = GroupRecord {
                hyper: BTreeMap::new(),
                params: Vec::new(),
            };
            for (k, v) in obj {
                let num = |v: &serde_json::Value| {
                    v.as_f64()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| bad(format!("param group {i}: {k:?} = {v} is not a number")))
                };
                if k == "params" {
                    rec.params = v
                        .as_array()
                        .and_then(|a| {
                            a.iter()
                                .map(|n| n.as_str().map(str::to_string))
                                .collect::<Option<Vec<_>>>()
                        })
                        .ok_or_else(|| {
                            bad(format!("param group {i}: params is not a list of names"))
                        })?;
                    continue;
                }
                let h = match v {
                    serde_json::Value::Bool(b) => Hyper::Bool(*b),
                    serde_json::Value::Array(a) if a.len() == 2 => {
                        Hyper::Pair(num(&a[0])?, num(&a[1])?)
                    }
                    other => Hyper::Float(num(other)?),
                };
                rec.hyper.insert(k.clone(), h);
            }
            records.push(rec);
        }
        Ok(OptimizerState {
            state,
            param_groups: records,
        })
    }
}
