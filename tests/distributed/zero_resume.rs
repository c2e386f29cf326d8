//! ZeRO-1 (ZeroRedundancyOptimizer) against AdamW, bit-exact stop and resume of a DDP run,
//! and the Trainer under DDP.

use super::*;

// ---- ZeRO-1 ------------------------------------------------------------------------------

pub(super) fn zero_adamw(g: &ProcessGroup) -> Result<(), String> {
    let (w, b) = (g.size(), 4);
    let ddp = DistributedDataParallel::new(Mlp::new(7, &Device::Cpu), g, DdpConfig::default())
        .map_err(|e| e.to_string())?;
    let mut reference = Mlp::new(99, &Device::Cpu);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let cfg = AdamConfig::default().lr(0.01).weight_decay(0.01);
    let c = cfg.clone();
    let mut opt = ZeroRedundancyOptimizer::new(ddp.parameters(), g, move |shard| {
        Box::new(AdamW::named(shard, c))
    });
    let mut opt_ref = AdamW::new(reference.parameters(), cfg.clone());
    for step in 0..5 {
        let (x, y) = global_batch(200 + step, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        opt.zero_grad();
        mse(&ddp.forward(&xs), &ys).backward();
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        identical_across_ranks(g, &ddp.parameters())?;
        for (p, q) in ddp.parameters().iter().zip(reference.parameters()) {
            ensure(
                close(&p.to_vec::<f32>(), &q.to_vec::<f32>(), 1e-5, 1e-6),
                || format!("step {step}"),
            )?;
        }
    }
    // Each rank keeps only its shard's state: about 1 / world of it.
    let elements = |s: &ferrograd::optim::OptimizerState| -> usize {
        s.state
            .values()
            .flat_map(|m| m.values())
            .map(|t| t.numel())
            .sum()
    };
    let whole = elements(&opt_ref.state_dict());
    let local = Tensor::from_vec(vec![elements(&opt.state_dict()) as i64], &[1]);
    let largest = ddp
        .parameters()
        .iter()
        .map(|p| p.numel())
        .max()
        .unwrap_or(0);
    let mine = local.to_vec::<i64>()[0] as usize;
    ensure(mine <= whole / w + 2 * largest + 8, || {
        format!("rank holds {mine} of {whole} state elements")
    })?;
    g.all_reduce(&local, ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    ensure(local.to_vec::<i64>()[0] as usize == whole, || {
        "the shards make up the whole state".into()
    })?;
    // Consolidated on rank 0, it equals the unsharded optimizer's state.
    let consolidated = opt.consolidate_state_dict(0).map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        let c = consolidated.ok_or("rank 0 gets the state")?;
        let r = opt_ref.state_dict();
        ensure(c.state.len() == r.state.len(), || "same parameters".into())?;
        for (k, entries) in &r.state {
            for (name, t) in entries {
                let ours = &c.state[k][name];
                let (a, e) = (
                    ours.to_dtype(DType::F64).to_vec::<f64>(),
                    t.to_dtype(DType::F64).to_vec::<f64>(),
                );
                ensure(
                    a.iter()
                        .zip(&e)
                        .all(|(x, y)| (x - y).abs() <= 1e-6 + 1e-4 * y.abs()),
                    || format!("state {k}.{name} differs"),
                )?;
            }
        }
        opt.load_state_dict(&c).map_err(|e| e.to_string())?;
    } else {
        ensure(consolidated.is_none(), || {
            "only rank 0 gets the state".into()
        })?;
    }
    Ok(())
}

// ---- stop and resume ---------------------------------------------------------------------

#[derive(Module)]
pub(super) struct DropMlp {
    fc1: Linear,
    drop: ferrograd::nn::Dropout,
    fc2: Linear,
}

impl Forward<&Tensor> for DropMlp {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc2
            .forward(&self.drop.forward(&self.fc1.forward(x).relu()))
    }
}

/// Trains 2 epochs of 6 batches per rank; with `stop_at`, saves a checkpoint after that
/// many steps and returns; with `resume`, starts from the checkpoint. Returns the final
/// parameters.
pub(super) fn resumable_run(
    g: &ProcessGroup,
    stop_at: Option<usize>,
    resume: Option<&std::path::Path>,
    path: &std::path::Path,
) -> Result<Vec<Vec<f32>>, String> {
    use ferrograd::data::{DataLoader, DistributedSampler, TensorDataset};
    let w = g.size();
    let n = 24 * w; // 6 batches of 4 per rank and epoch
    let rng = &mut Generator::new(4242);
    let x = Tensor::randn_with(&[n, 6], DType::F32, &Device::Cpu, rng);
    let y = Tensor::randint_with(0, 3, &[n], &Device::Cpu, rng);
    // Different weights and random streams per rank, and per run.
    manual_seed(100 + g.rank() as u64 + if resume.is_some() { 50 } else { 0 });
    let model = DropMlp {
        fc1: Linear::new(6, 16, &Device::Cpu),
        drop: ferrograd::nn::Dropout::new(0.3),
        fc2: Linear::new(16, 3, &Device::Cpu),
    };
    let mut ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default()).map_err(|e| e.to_string())?;
    let mut opt = AdamW::named(
        ddp.module().named_parameters(),
        AdamConfig::default().lr(0.01),
    );
    let sampler =
        DistributedSampler::new(n, w, g.rank(), true, 9, false).map_err(|e| e.to_string())?;
    let mut loader = DataLoader::builder(TensorDataset::new((x, y)))
        .batch_size(4)
        .sampler(sampler)
        .build();
    let mut step = 0usize;
    let mut first_epoch = 0;
    if let Some(p) = resume {
        let ckpt = distributed::load_checkpoint(g, p).map_err(|e| e.to_string())?;
        ckpt.restore_model(ddp.module_mut(), true)
            .map_err(|e| e.to_string())?;
        ckpt.restore_optimizer(&mut opt)
            .map_err(|e| e.to_string())?;
        ckpt.restore_rng().map_err(|e| e.to_string())?;
        let state = ckpt
            .loader
            .ok_or("the checkpoint has this rank's loader position")?;
        loader.load_state(&state);
        first_epoch = state.epoch as usize;
        step = ckpt.step as usize;
    }
    for _epoch in first_epoch..2 {
        let mut stop = false;
        for batch in loader.iter() {
            let (xb, yb) = batch.map_err(|e| e.to_string())?;
            opt.zero_grad();
            F::cross_entropy(&ddp.forward(&xb), &yb).backward();
            opt.step();
            step += 1;
            if stop_at == Some(step) {
                stop = true;
                break;
            }
        }
        if stop {
            let ckpt = ferrograd::checkpoint::Checkpoint::new(ddp.module())
                .optimizer(&opt)
                .step(step as u64);
            distributed::save_checkpoint(g, ckpt, Some(loader.state()), path)
                .map_err(|e| e.to_string())?;
            return Ok(Vec::new());
        }
    }
    Ok(ddp.parameters().iter().map(|p| p.to_vec::<f32>()).collect())
}

pub(super) fn ddp_resume_bitwise(g: &ProcessGroup) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("ferrograd-ddp-resume-w{}.safetensors", g.size()));
    let unstopped = resumable_run(g, None, None, &path)?;
    resumable_run(g, Some(8), None, &path)?; // mid-way through the second epoch
    let resumed = resumable_run(g, None, Some(&path), &path)?;
    ensure(unstopped.len() == resumed.len(), || {
        "same parameters".into()
    })?;
    for (a, b) in unstopped.iter().zip(&resumed) {
        ensure(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            || "the resumed run's parameters differ from the unstopped run's".into(),
        )?;
    }
    // A checkpoint of another world size is refused.
    if g.size() > 1 {
        let sub = distributed::new_group(&[0]).map_err(|e| e.to_string())?;
        if g.rank() == 0 {
            ensure(distributed::load_checkpoint(&sub, &path).is_err(), || {
                "world size check".into()
            })?;
        }
    }
    g.barrier().map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

/// The Trainer with a process group: a DDP model on each rank's shard (DistributedSampler)
/// takes the steps the Trainer takes in one process on the whole batch; validation loss,
/// accuracy and AUROC are reduced over the ranks and equal the one-process values; rank 0 alone
/// writes the CSV and TensorBoard; the checkpoint is saved collectively and resumes.
pub(super) fn trainer_ddp(g: &ProcessGroup) -> Result<(), String> {
    use ferrograd::data::{DataLoader, DistributedSampler, TensorDataset};
    use ferrograd::train::metrics::{Accuracy, Auroc};
    use ferrograd::train::{ModelCheckpoint, StepOutput, Trainer, TrainerConfig};
    let (w, b) = (g.size(), 4);
    let (x, y) = global_batch(300, 8 * w * b);
    let (vx, vy) = global_batch(301, 4 * w * b);
    // Classes for the accuracy: which of the 3 targets is largest.
    let classes = |y: &Tensor| y.argmax(1, false);
    let ds = |x: &Tensor, y: &Tensor| TensorDataset::new(vec![x.clone(), y.clone(), classes(y)]);
    let step = |m: &mut dyn FnMut(&Tensor) -> Tensor, batch: Vec<Tensor>| {
        let out = m(&batch[0]);
        StepOutput::new(mse(&out, &batch[1])).with_predictions(out, batch[2].clone())
    };
    let err = |e: ferrograd::train::TrainError| e.to_string();
    // Every rank writes into the same run directory, as ranks on one machine do.
    let root = std::env::temp_dir().join(format!("ferrograd-trainer-ddp-{}", w));
    if g.rank() == 0 {
        std::fs::remove_dir_all(&root).ok();
    }
    g.barrier().map_err(|e| e.to_string())?;

    // One process, the whole batch (w * b rows, in the order the samplers interleave).
    let mut reference = Mlp::new(5, &Device::Cpu);
    // A copy: the state dict's tensors are the parameters, which training updates.
    let init: ferrograd::nn::StateDict = reference
        .state_dict()
        .into_iter()
        .map(|(k, v)| (k, v.deep_copy()))
        .collect();
    let mut opt_ref = Sgd::new(reference.parameters(), SgdConfig::new(0.05));
    let mut train_ref = DataLoader::builder(ds(&x, &y)).batch_size(w * b).build();
    let mut val_ref = DataLoader::builder(ds(&vx, &vy)).batch_size(w * b).build();
    let one = Trainer::new(TrainerConfig {
        max_epochs: 2,
        root_dir: root.join(format!("reference-{}", g.rank())),
        progress: false,
        tensorboard: false,
        ..Default::default()
    })
    .metric(Accuracy::new())
    .metric(Auroc::new())
    .fit(
        &mut reference,
        &mut opt_ref,
        None,
        &mut train_ref,
        Some(&mut val_ref),
        &mut |m: &mut Mlp, batch: Vec<Tensor>| step(&mut |x| m.forward(x), batch),
    )
    .map_err(err)?;

    let mut model = Mlp::new(50 + g.rank() as u64, &Device::Cpu);
    model
        .load_state_dict(&init, true)
        .map_err(|e| e.to_string())?;
    let mut ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default()).map_err(|e| e.to_string())?;
    let loaders = || -> Result<_, String> {
        let sampler = |n| DistributedSampler::new(n, w, g.rank(), false, 0, false);
        let train = DataLoader::builder(ds(&x, &y))
            .batch_size(b)
            .sampler(sampler(8 * w * b).map_err(|e| e.to_string())?)
            .build();
        let val = DataLoader::builder(ds(&vx, &vy))
            .batch_size(b)
            .sampler(sampler(4 * w * b).map_err(|e| e.to_string())?)
            .build();
        Ok((train, val))
    };
    // `epochs` in all, resuming from the collective checkpoint when asked.
    let fit = |ddp: &mut DistributedDataParallel<Mlp>, opt: &mut Sgd, epochs, resume: bool| {
        let (mut train, mut val) = loaders()?;
        Trainer::new(TrainerConfig {
            max_epochs: epochs,
            root_dir: root.clone(),
            progress: false,
            process_group: Some(g.clone()),
            resume_from: resume.then(|| root.join("checkpoints/last.safetensors")),
            ..Default::default()
        })
        .metric(Accuracy::new())
        .metric(Auroc::new())
        .callback(ModelCheckpoint::last_only())
        .fit(
            ddp,
            opt,
            None,
            &mut train,
            Some(&mut val),
            &mut |m: &mut DistributedDataParallel<Mlp>, batch: Vec<Tensor>| {
                step(&mut |x| m.forward(x), batch)
            },
        )
        .map_err(err)
    };
    let mut opt = Sgd::new(ddp.parameters(), SgdConfig::new(0.05));
    let many = fit(&mut ddp, &mut opt, 2, false)?;
    identical_across_ranks(g, &ddp.parameters())?;
    parameters_match(ddp.module(), &reference, "the Trainer: ")?;
    // AUROC's scores are gathered from every rank, not averaged.
    for key in ["val_loss", "val_accuracy", "val_auroc", "train_loss"] {
        let (a, r) = (many.metrics[key], one.metrics[key]);
        ensure((a - r).abs() <= 1e-6 * r.abs().max(1.0), || {
            format!("{key}: {a} under DDP, {r} in one process")
        })?;
    }
    g.barrier().map_err(|e| e.to_string())?;
    let csv = root.join("metrics.csv");
    ensure(csv.exists() && root.join("tensorboard").is_dir(), || {
        "rank 0 wrote no CSV or TensorBoard run".into()
    })?;
    let rows = std::fs::read_to_string(&csv).map_err(|e| e.to_string())?;
    ensure(rows.lines().count() == 3, || format!("metrics.csv: {rows}"))?;
    // Every rank has read the CSV before rank 0's resume rewrites it.
    g.barrier().map_err(|e| e.to_string())?;

    // Resume to a third epoch from the collective checkpoint.
    let resumed = fit(&mut ddp, &mut opt, 3, true)?;
    ensure(resumed.epochs == 3 && resumed.global_step == 24, || {
        format!(
            "resumed to epoch {} step {}",
            resumed.epochs, resumed.global_step
        )
    })?;
    identical_across_ranks(g, &ddp.parameters())?;
    g.barrier().map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        std::fs::remove_dir_all(&root).ok();
    }
    Ok(())
}
