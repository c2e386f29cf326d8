//! DistributedDataParallel: equivalence with one process on the whole batch (SGD, AdamW,
//! views), `no_sync`, unused parameters, the initial broadcast and mismatched models.

use super::*;

// ---- DistributedDataParallel -------------------------------------------------------------

/// The whole batch of step `step` (the same on every rank) and its targets.
pub(super) fn global_batch(step: usize, rows: usize) -> (Tensor, Tensor) {
    ddp_model::global_batch(step, rows, &Device::Cpu)
}

pub(super) fn close(a: &[f32], b: &[f32], rtol: f32, atol: f32) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= atol + rtol * y.abs())
}

/// Every parameter of `model` within 1e-5 (relative) of `reference`'s, by name.
pub(super) fn parameters_match(
    model: &impl Module,
    reference: &impl Module,
    when: &str,
) -> Result<(), String> {
    for ((name, p), (_, q)) in model
        .named_parameters()
        .iter()
        .zip(reference.named_parameters())
    {
        let (a, r) = (p.to_vec::<f32>(), q.to_vec::<f32>());
        ensure(close(&a, &r, 1e-5, 1e-6), || {
            let worst = a
                .iter()
                .zip(&r)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            format!("{when}{name} differs from the single-process run by {worst:e}")
        })?;
    }
    Ok(())
}

/// Every rank's copy of `params` must be bitwise equal to rank 0's.
pub(super) fn identical_across_ranks(g: &ProcessGroup, params: &[Tensor]) -> Result<(), String> {
    for p in params {
        let mine = p.detach().contiguous();
        let theirs = mine.deep_copy();
        g.broadcast(&theirs, 0).map_err(|e| e.to_string())?;
        let (a, b) = (mine.to_vec::<f32>(), theirs.to_vec::<f32>());
        ensure(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            || {
                format!(
                    "rank {} differs from rank 0 in a parameter of shape {:?}",
                    g.rank(),
                    p.shape()
                )
            },
        )?;
    }
    Ok(())
}

/// The two optimizers the equivalence checks run: AdamW with weight decay, or SGD with
/// momentum.
pub(super) fn optimizer(adamw: bool, params: Vec<Tensor>) -> Box<dyn Optimizer> {
    if adamw {
        Box::new(AdamW::new(
            params,
            AdamConfig::default().lr(0.01).weight_decay(0.01),
        ))
    } else {
        Box::new(Sgd::new(params, SgdConfig::new(0.05).momentum(0.9)))
    }
}

pub(super) fn ddp_equivalence(g: &ProcessGroup, adamw: bool, as_view: bool) -> Result<(), String> {
    let (w, b) = (g.size(), 5);
    // Ranks start from different weights: construction must make them rank 0's.
    let ddp = DistributedDataParallel::new(
        Mlp::new(10 + g.rank() as u64, &Device::Cpu),
        g,
        DdpConfig::default()
            .gradient_as_bucket_view(as_view)
            .first_bucket_cap_mb(0.0005), // several buckets even for this small model
    )
    .map_err(|e| e.to_string())?;
    ensure(ddp.buckets().len() >= 2, || {
        format!("buckets: {:?}", ddp.buckets())
    })?;
    let mut reference = Mlp::new(99, &Device::Cpu);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let mut opt = optimizer(adamw, ddp.parameters());
    let mut opt_ref = optimizer(adamw, reference.parameters());
    for step in 0..5 {
        let (x, y) = global_batch(step, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        opt.zero_grad();
        mse(&ddp.forward(&xs), &ys).backward();
        if as_view {
            for p in ddp.parameters() {
                ensure(p.grad().is_some(), || "grad set".into())?;
            }
        }
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        identical_across_ranks(g, &ddp.parameters())?;
        parameters_match(ddp.module(), &reference, &format!("step {step}: "))?;
    }
    Ok(())
}

pub(super) fn ddp_no_sync(g: &ProcessGroup) -> Result<(), String> {
    let (w, b, m) = (g.size(), 3, 3);
    let ddp = DistributedDataParallel::new(Mlp::new(3, &Device::Cpu), g, DdpConfig::default())
        .map_err(|e| e.to_string())?;
    let mut reference = Mlp::new(99, &Device::Cpu);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let mut opt = Sgd::new(ddp.parameters(), SgdConfig::new(0.1));
    let mut opt_ref = Sgd::new(reference.parameters(), SgdConfig::new(0.1));
    opt.zero_grad();
    opt_ref.zero_grad();
    for micro in 0..m {
        let (x, y) = global_batch(50 + micro, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        if micro + 1 < m {
            let _guard = ddp.no_sync();
            mse(&ddp.forward(&xs), &ys).backward();
        } else {
            mse(&ddp.forward(&xs), &ys).backward();
        }
        mse(&reference.forward(&x), &y).backward();
    }
    opt.step();
    opt_ref.step();
    identical_across_ranks(g, &ddp.parameters())?;
    for (p, q) in ddp.parameters().iter().zip(reference.parameters()) {
        ensure(
            close(&p.to_vec::<f32>(), &q.to_vec::<f32>(), 1e-5, 1e-6),
            || "no_sync".into(),
        )?;
    }
    Ok(())
}

#[derive(Module)]
pub(super) struct TwoHeads {
    trunk: Linear,
    a: Linear,
    b: Linear,
    never: Linear,
}

pub(super) struct UseB(bool);

impl<'a> Forward<(&'a Tensor, UseB)> for TwoHeads {
    type Output = Tensor;
    fn forward(&self, (x, use_b): (&'a Tensor, UseB)) -> Tensor {
        let h = self.trunk.forward(x).relu();
        let out = self.a.forward(&h);
        if use_b.0 {
            &out + &self.b.forward(&h)
        } else {
            out
        }
    }
}

pub(super) fn ddp_unused(g: &ProcessGroup) -> Result<(), String> {
    manual_seed(5);
    let model = TwoHeads {
        trunk: Linear::new(4, 8, &Device::Cpu),
        a: Linear::new(8, 2, &Device::Cpu),
        b: Linear::new(8, 2, &Device::Cpu),
        never: Linear::new(8, 2, &Device::Cpu),
    };
    let ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default().find_unused_parameters(true))
            .map_err(|e| e.to_string())?;
    // Only rank 0 uses head b; nobody uses `never`.
    let rng = &mut Generator::new(77 + g.rank() as u64);
    let x = Tensor::randn_with(&[3, 4], DType::F32, &Device::Cpu, rng);
    for _ in 0..2 {
        ddp.zero_grad();
        ddp.forward((&x, UseB(g.rank() == 0))).sum_all().backward();
        let m = ddp.module();
        ensure(m.never.weight.grad().is_none(), || {
            "a parameter no rank used keeps no grad".into()
        })?;
        // b's gradient: rank 0's, divided by the world size, on every rank.
        let local_b = if g.rank() == 0 {
            let h = m.trunk.forward(&x).relu();
            h.sum(&[0], false).to_vec::<f32>()
        } else {
            vec![0.0; 8]
        };
        let t = Tensor::from_vec(local_b, &[8]);
        g.all_reduce(&t, ReduceOp::Avg).map_err(|e| e.to_string())?;
        let expect = t.to_vec::<f32>();
        let got = m.b.weight.grad().ok_or("b has a gradient")?.to_vec::<f32>();
        ensure(close(&got[..8], &expect, 1e-5, 1e-6), || {
            format!("b grad {got:?} vs {expect:?}")
        })?;
    }
    Ok(())
}

pub(super) fn ddp_broadcast_and_mismatch(g: &ProcessGroup) -> Result<(), String> {
    let ddp = DistributedDataParallel::new(
        Mlp::new(40 + g.rank() as u64, &Device::Cpu),
        g,
        DdpConfig::default(),
    )
    .map_err(|e| e.to_string())?;
    identical_across_ranks(g, &ddp.parameters())?;
    let keys: Vec<String> = ddp.state_dict().keys().cloned().collect();
    ensure(keys.iter().any(|k| k == "module.fc1.weight"), || {
        format!("keys {keys:?}")
    })?;
    // A rank with another width: every rank gets an error naming the ranks.
    manual_seed(1);
    let width = if g.rank() == g.size() - 1 { 33 } else { 32 };
    let odd = Mlp {
        fc1: Linear::new(6, width, &Device::Cpu),
        fc2: Linear::new(width, 16, &Device::Cpu),
        head: Linear::new(16, 3, &Device::Cpu),
    };
    match DistributedDataParallel::new(odd, g, DdpConfig::default()) {
        Err(DistError::Mismatch(m)) => ensure(m.contains("different parameters"), || m.clone()),
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(_) => Err("a different model must be an error".into()),
    }
}
