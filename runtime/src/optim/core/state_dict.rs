//! `state_dict`/`load_state_dict` of every fused optimizer: PyTorch's layout (`state`
//! by parameter index, `param_groups` with their options and indices), checked entry by
//! entry on load.

use super::{Core, ParamState, Rule};
use crate::optim::state::{GroupRecord, OptimError, OptimizerState};
use crate::{DType, Tensor};
use std::collections::BTreeMap;

impl<R: Rule> Core<R> {
    pub(crate) fn state_dict(&self) -> OptimizerState {
        let mut state = BTreeMap::new();
        for (group, states) in self.groups.iter().zip(&self.states) {
            for (name, s) in group.names.iter().zip(states) {
                let Some(s) = s else { continue };
                let mut entry = BTreeMap::new();
                entry.insert(
                    "step".to_string(),
                    Tensor::scalar(s.step as f64, DType::F64),
                );
                for (n, b) in s.buffers() {
                    entry.insert(n.to_string(), b.detach().deep_copy());
                }
                if let Some((n, v)) = s.scalar {
                    entry.insert(n.to_string(), Tensor::scalar(v, DType::F64));
                }
                state.insert(name.clone(), entry);
            }
        }
        let param_groups = self
            .groups
            .iter()
            .map(|g| GroupRecord {
                hyper: R::hypers(&g.config)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                params: g.names.clone(),
            })
            .collect();
        OptimizerState {
            state,
            param_groups,
        }
    }

    /// Restores options and state (`load_state_dict`): groups match by position, states
    /// by parameter name; buffers are converted to the parameter's dtype and device.
    /// Nothing changes unless the whole dict fits.
    pub(crate) fn load_state_dict(&mut self, dict: &OptimizerState) -> Result<(), OptimError> {
        if dict.param_groups.len() != self.groups.len() {
            return Err(OptimError::Groups(format!(
                "the state dict has {} parameter groups, this {} has {}",
                dict.param_groups.len(),
                R::NAME,
                self.groups.len()
            )));
        }
        let mut configs = Vec::new();
        for (i, (rec, g)) in dict.param_groups.iter().zip(&self.groups).enumerate() {
            let (mut mine, mut theirs) = (g.names.clone(), rec.params.clone());
            mine.sort();
            theirs.sort();
            if mine != theirs {
                return Err(OptimError::Groups(format!(
                    "parameter group {i} holds {:?} in the state dict but {:?} here",
                    rec.params, g.names
                )));
            }
            let mut c = g.config.clone();
            for (k, v) in &rec.hyper {
                if !R::set_hyper(&mut c, k, v) {
                    return Err(OptimError::Hyper {
                        group: i,
                        key: k.clone(),
                        value: v.clone(),
                    });
                }
            }
            configs.push(c);
        }
        let mut new_states = Vec::new();
        for (g, c) in self.groups.iter().zip(&configs) {
            let mut states = Vec::new();
            for (name, p) in g.names.iter().zip(&g.params) {
                states.push(match dict.state.get(name) {
                    None => None,
                    Some(entry) => Some(Self::restore(name, p, c, entry)?),
                });
            }
            new_states.push(states);
        }
        if let Some(name) = dict
            .state
            .keys()
            .find(|k| !self.groups.iter().any(|g| g.names.contains(k)))
        {
            return Err(OptimError::UnknownParameter(name.clone()));
        }
        for (g, c) in self.groups.iter_mut().zip(configs) {
            g.config = c;
        }
        self.states = new_states;
        Ok(())
    }

    fn restore(
        name: &str,
        p: &Tensor,
        c: &R::Config,
        entry: &BTreeMap<String, Tensor>,
    ) -> Result<ParamState, OptimError> {
        let scalar_of = |key: &str| -> Result<f64, OptimError> {
            let t = entry.get(key).ok_or_else(|| OptimError::State {
                param: name.to_string(),
                reason: format!("no {key:?}"),
            })?;
            if t.numel() != 1 {
                return Err(OptimError::State {
                    param: name.to_string(),
                    reason: format!("{key:?} has shape {:?}, not a scalar", t.shape()),
                });
            }
            Ok(t.to_dtype(DType::F64).item::<f64>())
        };
        let step = scalar_of("step")?;
        if !(step >= 0.0 && step.fract() == 0.0) {
            return Err(OptimError::State {
                param: name.to_string(),
                reason: format!("step {step} is not a count"),
            });
        }
        let mut s = Self::fresh_state(c, p);
        s.step = step as u64;
        let wanted = R::buffers(c);
        for (i, n) in R::BUFFERS.iter().enumerate() {
            s.buffers[i] = match (wanted[i], entry.get(*n)) {
                (None, _) => None,
                (Some(_), None) => {
                    return Err(OptimError::State {
                        param: name.to_string(),
                        reason: format!("no {n:?} buffer"),
                    });
                }
                (Some(_), Some(t)) => {
                    if t.shape() != p.shape() {
                        return Err(OptimError::State {
                            param: name.to_string(),
                            reason: format!(
                                "{n:?} has shape {:?}, the parameter {:?}",
                                t.shape(),
                                p.shape()
                            ),
                        });
                    }
                    let t = t
                        .detach()
                        .to_dtype(p.dtype())
                        .to_device(&p.device())
                        .map_err(|e| OptimError::State {
                            param: name.to_string(),
                            reason: e.to_string(),
                        })?
                        .deep_copy();
                    Some(t)
                }
            };
        }
        if let Some((n, _)) = R::SCALAR {
            s.scalar = Some((n, scalar_of(n)?));
        }
        Ok(s)
    }
}
