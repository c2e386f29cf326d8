//! Validation and testing: the loop over a validation or test loader (`validate`,
//! `test`, and the validation `fit` runs between epochs or every few batches), and
//! its values to TensorBoard.

use super::*;

impl Trainer {
    pub(super) fn run_validation<M, D2, C2, S, B>(
        &mut self,
        model: &mut M,
        loader: &mut DataLoader<D2, C2>,
        step: &mut S,
    ) -> Result<Validated, TrainError>
    where
        M: Module,
        D2: Dataset + 'static,
        C2: Collate<D2::Item, Batch = B>,
        S: TrainStep<M, B>,
    {
        let mut limit = loader.len();
        if let Some(l) = self.config.limit_val_batches {
            limit = limit.min(l);
        }
        if self.config.fast_dev_run {
            limit = limit.min(1);
        }
        model.eval();
        for m in &mut self.metrics {
            m.reset();
        }
        let mut loss = Mean::new("val_loss");
        let mut user = StepLogs::default();
        let result = no_grad(|| -> Result<(), TrainError> {
            for batch in loader.iter().take(limit) {
                let out = step.validation_step(model, batch?);
                loss.add(out.loss.item_f64(), out.batch_size as f64);
                user.add(&out.logs, out.batch_size as f64);
                if let Some((scores, targets)) = &out.predictions {
                    for m in &mut self.metrics {
                        m.update(scores, targets);
                    }
                }
            }
            Ok(())
        });
        model.train();
        result?;
        if let Some(g) = &self.config.process_group {
            // Every rank's shard: the loss's sums and each metric's counts, added up.
            let [l, w] = all_reduce_sums(g, [mean_sum(&loss), loss.weight()])?;
            loss = Mean::new("val_loss");
            loss.add(l / w, w);
            user.all_reduce(g)?;
            for m in &mut self.metrics {
                let state = m.sync_state();
                if !state.is_empty() {
                    let n = state.len();
                    let t = Tensor::from_vec(state, &[n]);
                    g.all_reduce(&t, crate::distributed::ReduceOp::Sum)?;
                    m.load_sync_state(&t.to_vec::<f64>());
                }
                if let Some(mine) = m.gather_state() {
                    m.load_gathered_state(&all_gather_varlen(g, &mine)?);
                }
            }
        }
        let mut values = BTreeMap::new();
        values.insert("val_loss".to_string(), loss.value());
        for m in &self.metrics {
            values.insert(format!("val_{}", m.name()), m.compute());
        }
        let user = user
            .epoch_values(true)
            .into_iter()
            .map(|(tag, _, v)| (tag, v))
            .collect();
        Ok((values, user))
    }

    /// Runs the validation loop alone (no training): `val_loss` and the metrics.
    pub fn validate<M, D, C, S>(
        &mut self,
        model: &mut M,
        loader: &mut DataLoader<D, C>,
        step: &mut S,
    ) -> Result<BTreeMap<String, f64>, TrainError>
    where
        M: Module,
        D: Dataset + 'static,
        C: Collate<D::Item>,
        S: TrainStep<M, C::Batch>,
    {
        let (mut values, user) = self.run_validation(model, loader, step)?;
        values.extend(user);
        Ok(values)
    }

    /// [`validate`](Self::validate) on a test set, the names prefixed `test_`.
    pub fn test<M, D, C, S>(
        &mut self,
        model: &mut M,
        loader: &mut DataLoader<D, C>,
        step: &mut S,
    ) -> Result<BTreeMap<String, f64>, TrainError>
    where
        M: Module,
        D: Dataset + 'static,
        C: Collate<D::Item>,
        S: TrainStep<M, C::Batch>,
    {
        let (values, user) = self.run_validation(model, loader, step)?;
        Ok(values
            .into_iter()
            .map(|(k, v)| (k.replacen("val_", "test_", 1), v))
            .chain(user)
            .collect())
    }
}

/// A validation's values to TensorBoard at `step`: `val/loss`, the metrics
/// (`val_accuracy` as `val/accuracy`) and what the validation steps logged.
pub(super) fn write_validation(
    w: &mut RunLog,
    metrics: &BTreeMap<String, f64>,
    metric_names: &[String],
    logged: &[(String, f64)],
    step: u64,
) -> Result<(), TrainError> {
    let own = std::iter::once(("val_loss", "val/loss".to_string())).chain(
        metric_names
            .iter()
            .map(|n| (n.as_str(), n.replacen('_', "/", 1))),
    );
    for (name, tag) in own {
        if let Some(v) = metrics.get(name) {
            w.scalar(&tag, *v, step)?;
        }
    }
    for (name, value) in logged {
        w.scalar(name, *value, step)?;
    }
    Ok(())
}
