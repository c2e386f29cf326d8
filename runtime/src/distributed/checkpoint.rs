//! Checkpoints of a distributed run: written once (by rank 0), read by every rank, with
//! each rank's own random state and data position, so a resumed run at the same world
//! size continues exactly as the stopped one would have.

use super::{DistError, ProcessGroup};
use crate::checkpoint::{Checkpoint, RankState};
use crate::data::LoaderState;
use crate::{DType, Device, Tensor};
use std::path::Path;

/// Saves `checkpoint` for every rank of `group` (all ranks call it with the same model
/// and optimizer state, as DDP keeps them): each rank's global random state and its
/// `loader` position are gathered into [`Checkpoint::ranks`], then group rank 0 writes
/// the file (atomically) while the others wait for it.
///
/// ```no_run
/// # use ferrograd_runtime::distributed::*;
/// # use ferrograd_runtime::checkpoint::Checkpoint;
/// # use ferrograd_runtime::nn::Linear;
/// # use ferrograd_runtime::prelude::*;
/// let world = init_process_group(Backend::Mpi).unwrap();
/// let model = Linear::new(4, 2, &Device::Cpu);
/// save_checkpoint(&world, Checkpoint::new(&model).epoch(3), None, "run/ckpt.safetensors").unwrap();
/// let ckpt = load_checkpoint(&world, "run/ckpt.safetensors").unwrap(); // this rank's rng and loader
/// ckpt.restore_rng().unwrap();
/// ```
pub fn save_checkpoint(
    group: &ProcessGroup,
    mut checkpoint: Checkpoint,
    loader: Option<LoaderState>,
    path: impl AsRef<Path>,
) -> Result<(), DistError> {
    checkpoint.ranks = gather_rank_states(group, loader)?;
    let result = if group.rank() == 0 {
        checkpoint
            .save(path.as_ref())
            .map_err(|e| DistError::Checkpoint(e.to_string()))
    } else {
        Ok(())
    };
    // Every rank learns whether the file was written, so none goes on alone.
    let ok = Tensor::from_vec(vec![result.is_ok() as i64], &[1]);
    group.broadcast(&ok, group.ranks()[0])?;
    result?;
    if ok.to_vec::<i64>()[0] == 0 {
        return Err(DistError::Checkpoint(format!(
            "rank {} could not write {}",
            group.ranks()[0],
            path.as_ref().display()
        )));
    }
    Ok(())
}

/// Reads a checkpoint written by [`save_checkpoint`] on every rank and puts this rank's
/// own random state and loader position in [`Checkpoint::rng`] and [`Checkpoint::loader`]
/// (restore them with `restore_rng` and `DataLoader::load_state`). A checkpoint of
/// another world size is an error.
pub fn load_checkpoint(
    group: &ProcessGroup,
    path: impl AsRef<Path>,
) -> Result<Checkpoint, DistError> {
    let mut ckpt =
        Checkpoint::load(path.as_ref()).map_err(|e| DistError::Checkpoint(e.to_string()))?;
    if ckpt.ranks.len() != group.size() {
        return Err(DistError::Checkpoint(format!(
            "{} was saved by {} ranks; this group has {} (resume at the same world size)",
            path.as_ref().display(),
            ckpt.ranks.len(),
            group.size()
        )));
    }
    let mine = ckpt.ranks[group.rank()].clone();
    ckpt.rng = mine.rng;
    ckpt.loader = mine.loader;
    Ok(ckpt)
}

/// Every rank's random state and loader position, in group-rank order.
fn gather_rank_states(
    group: &ProcessGroup,
    loader: Option<LoaderState>,
) -> Result<Vec<RankState>, DistError> {
    let rng = crate::get_rng_state();
    let len = Tensor::from_vec(vec![rng.len() as i64], &[1]);
    let lens: Vec<i64> = group
        .all_gather(&len)?
        .iter()
        .map(|t| t.to_vec::<i64>()[0])
        .collect();
    if lens.iter().any(|&l| l != rng.len() as i64) {
        return Err(DistError::Mismatch(format!(
            "save_checkpoint: random states of different sizes {lens:?}"
        )));
    }
    let rngs = group.all_gather(&Tensor::from_vec(rng.clone(), &[rng.len()]))?;
    let pos = match loader {
        Some(l) => vec![1, l.seed as i64, l.epoch as i64, l.batch as i64],
        None => vec![0, 0, 0, 0],
    };
    let positions = Tensor::zeros(&[group.size(), 4], DType::I64, &Device::Cpu);
    group.all_gather_into_tensor(&positions, &Tensor::from_vec(pos, &[4]))?;
    let positions = positions.to_vec::<i64>();
    Ok((0..group.size())
        .map(|r| {
            let p = &positions[4 * r..4 * r + 4];
            RankState {
                rng: Some(rngs[r].to_vec::<u8>()),
                loader: (p[0] == 1).then(|| LoaderState {
                    seed: p[1] as u64,
                    epoch: p[2] as u64,
                    batch: p[3] as usize,
                }),
            }
        })
        .collect())
}
