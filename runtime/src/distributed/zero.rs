//! `ZeroRedundancyOptimizer`: ZeRO stage 1, optimizer state sharded across ranks.

use super::{DistError, ProcessGroup};
use crate::optim::{GroupRecord, OptimError, Optimizer, OptimizerState};
use crate::{DType, Device, Tensor};
use std::collections::BTreeMap;

/// An optimizer whose state is split across the ranks of a group
/// (`torch.distributed.optim.ZeroRedundancyOptimizer`, ZeRO stage 1): each rank keeps the
/// state (Adam's moments, SGD's momentum) of its own shard of the parameters and updates
/// only those; after the step every parameter is broadcast from the rank that owns it,
/// so all replicas stay identical. Each rank then holds about `1 / world` of the state.
///
/// Parameters are assigned as PyTorch does: largest first, each to the rank with the
/// fewest elements so far. The gradients must already be averaged (DistributedDataParallel
/// does that). [`ZeroRedundancyOptimizer::consolidate_state_dict`] gathers the whole state
/// on one rank for a checkpoint; [`Optimizer::load_state_dict`] takes such a whole state
/// back (each rank keeps its shard).
///
/// ```no_run
/// # use ferrograd_runtime::distributed::*;
/// # use ferrograd_runtime::nn::{Linear, Module};
/// # use ferrograd_runtime::optim::{AdamConfig, AdamW, Optimizer};
/// # use ferrograd_runtime::prelude::*;
/// let world = init_process_group(Backend::Mpi).unwrap();
/// let model = DistributedDataParallel::new(Linear::new(4, 2, &Device::Cpu), &world, DdpConfig::default()).unwrap();
/// let mut opt = ZeroRedundancyOptimizer::new(model.parameters(), &world, |shard| {
///     Box::new(AdamW::named(shard, AdamConfig::default().lr(1e-3)))
/// });
/// opt.step(); // updates this rank's shard, then broadcasts every parameter
/// ```
pub struct ZeroRedundancyOptimizer {
    group: ProcessGroup,
    params: Vec<Tensor>,
    /// The group rank that owns each parameter.
    owner: Vec<usize>,
    local: Box<dyn Optimizer>,
}

impl ZeroRedundancyOptimizer {
    /// Shards `params` over `group`; `make` builds the local optimizer from this rank's
    /// shard, given as (global position as a string, parameter) pairs so that state-dict
    /// keys are the same positions on every rank.
    pub fn new(
        params: Vec<Tensor>,
        group: &ProcessGroup,
        make: impl FnOnce(Vec<(String, Tensor)>) -> Box<dyn Optimizer>,
    ) -> Self {
        let w = group.size();
        let mut order: Vec<usize> = (0..params.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(params[i].numel()));
        let mut load = vec![0usize; w];
        let mut owner = vec![0usize; params.len()];
        for i in order {
            let r = (0..w).min_by_key(|&r| load[r]).unwrap_or(0);
            owner[i] = r;
            load[r] += params[i].numel();
        }
        let me = group.group_rank().unwrap_or(0);
        let shard: Vec<(String, Tensor)> = (0..params.len())
            .filter(|&i| owner[i] == me)
            .map(|i| (i.to_string(), params[i].clone()))
            .collect();
        ZeroRedundancyOptimizer {
            group: group.clone(),
            params,
            owner,
            local: make(shard),
        }
    }

    /// The group rank that owns (updates, and keeps the state of) each parameter.
    pub fn owners(&self) -> &[usize] {
        &self.owner
    }

    /// The optimizer over this rank's shard.
    pub fn local_optimizer(&self) -> &dyn Optimizer {
        self.local.as_ref()
    }

    /// Gathers every rank's shard of the state into one [`OptimizerState`] keyed by
    /// parameter position, returned on group rank `to` (`None` elsewhere). Every rank
    /// must call it (`consolidate_state_dict`).
    pub fn consolidate_state_dict(&self, to: usize) -> Result<Option<OptimizerState>, DistError> {
        let mine = self.local.state_dict();
        let me = self.group.rank();
        let mut state: BTreeMap<String, BTreeMap<String, Tensor>> = BTreeMap::new();
        for i in 0..self.params.len() {
            let src = self.group.ranks()[self.owner[i]];
            let key = i.to_string();
            // The owner announces the entries (name, shape, dtype), then sends each.
            let header = if self.owner[i] == me {
                let entries: Vec<(String, Vec<usize>, String)> = mine
                    .state
                    .get(&key)
                    .map(|m| {
                        m.iter()
                            .map(|(k, t)| {
                                (k.clone(), t.shape().to_vec(), t.dtype().name().to_string())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::to_vec(&entries).map_err(|e| DistError::Engine(e.to_string()))?
            } else {
                Vec::new()
            };
            let len = Tensor::from_vec(vec![header.len() as i64], &[1]);
            self.group.broadcast(&len, src)?;
            let n = len.to_vec::<i64>()[0] as usize;
            let bytes = if self.owner[i] == me {
                Tensor::from_vec(header, &[n])
            } else {
                Tensor::zeros(&[n], DType::U8, &Device::Cpu)
            };
            self.group.broadcast(&bytes, src)?;
            let entries: Vec<(String, Vec<usize>, String)> =
                serde_json::from_slice(&bytes.to_vec::<u8>())
                    .map_err(|e| DistError::Engine(format!("consolidate_state_dict: {e}")))?;
            let mut per = BTreeMap::new();
            for (name, shape, dtype) in entries {
                let t = if self.owner[i] == me {
                    mine.state[&key][&name]
                        .to_device(&Device::Cpu)
                        .map_err(|e| DistError::Engine(e.to_string()))?
                        .contiguous()
                } else {
                    let dtype = dtype_named(&dtype).ok_or_else(|| {
                        DistError::Engine(format!("consolidate_state_dict: unknown dtype {dtype}"))
                    })?;
                    Tensor::zeros(&shape, dtype, &Device::Cpu)
                };
                self.group.broadcast(&t, src)?;
                per.insert(name, t);
            }
            if !per.is_empty() {
                state.insert(key, per);
            }
        }
        if me != to {
            return Ok(None);
        }
        let hyper = mine
            .param_groups
            .first()
            .map(|g| g.hyper.clone())
            .unwrap_or_default();
        Ok(Some(OptimizerState {
            state,
            param_groups: vec![GroupRecord {
                hyper,
                params: (0..self.params.len()).map(|i| i.to_string()).collect(),
            }],
        }))
    }
}

impl Optimizer for ZeroRedundancyOptimizer {
    /// Steps this rank's shard, then broadcasts every parameter from its owner.
    fn step(&mut self) {
        self.local.step();
        let works: Vec<_> = self
            .params
            .iter()
            .zip(&self.owner)
            .map(|(p, &o)| {
                self.group
                    .broadcast_async(p, self.group.ranks()[o])
                    .unwrap_or_else(|e| panic!("ZeroRedundancyOptimizer::step: {e}"))
            })
            .collect();
        for w in works {
            w.wait()
                .unwrap_or_else(|e| panic!("ZeroRedundancyOptimizer::step: {e}"));
        }
    }

    fn zero_grad(&mut self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    fn params(&self) -> Vec<Tensor> {
        self.params.clone()
    }

    fn num_groups(&self) -> usize {
        self.local.num_groups()
    }

    fn group_lr(&self, group: usize) -> f64 {
        self.local.group_lr(group)
    }

    fn set_group_lr(&mut self, group: usize, lr: f64) {
        self.local.set_group_lr(group, lr)
    }

    fn group_momentum(&self, group: usize) -> Option<f64> {
        self.local.group_momentum(group)
    }

    fn set_group_momentum(&mut self, group: usize, momentum: f64) {
        self.local.set_group_momentum(group, momentum)
    }

    /// This rank's shard of the state (use `consolidate_state_dict` for the whole).
    fn state_dict(&self) -> OptimizerState {
        self.local.state_dict()
    }

    /// Takes a consolidated (whole) state or this rank's shard; keeps this rank's part.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<(), OptimError> {
        let me = self.group.group_rank().unwrap_or(0);
        let mine: Vec<String> = (0..self.params.len())
            .filter(|&i| self.owner[i] == me)
            .map(|i| i.to_string())
            .collect();
        let shard = OptimizerState {
            state: state
                .state
                .iter()
                .filter(|(k, _)| mine.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            param_groups: state
                .param_groups
                .iter()
                .map(|g| GroupRecord {
                    hyper: g.hyper.clone(),
                    params: g
                        .params
                        .iter()
                        .filter(|p| mine.contains(p))
                        .cloned()
                        .collect(),
                })
                .collect(),
        };
        self.local.load_state_dict(&shard)
    }
}

fn dtype_named(name: &str) -> Option<DType> {
    [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::U8,
        DType::Bool,
    ]
    .into_iter()
    .find(|d| d.name() == name)
}
