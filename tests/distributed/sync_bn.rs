//! SyncBatchNorm: training equals one process on the whole batch, and the input's
//! gradient matches the reference.

use super::*;

// ---- SyncBatchNorm -----------------------------------------------------------------------

#[derive(Module)]
pub(super) struct SyncCnn {
    conv: Conv2d,
    bn: SyncBatchNorm,
    fc: Linear,
}

#[derive(Module)]
pub(super) struct Cnn {
    conv: Conv2d,
    bn: BatchNorm2d,
    fc: Linear,
}

pub(super) fn cnn(seed: u64) -> Cnn {
    manual_seed(seed);
    Cnn {
        // No bias before a batch norm (as in ResNets): its true gradient is zero, and Adam
        // would turn the rounding noise of that zero into full-size steps.
        conv: Conv2d::new(2, 4, 3, ConvOptions::default().bias(false), &Device::Cpu),
        bn: BatchNorm2d::new(4, &Device::Cpu),
        fc: Linear::new(64, 3, &Device::Cpu),
    }
}

impl Forward<&Tensor> for SyncCnn {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc
            .forward(&self.bn.forward(&self.conv.forward(x)).relu().flatten(1, -1))
    }
}

impl Forward<&Tensor> for Cnn {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc
            .forward(&self.bn.forward(&self.conv.forward(x)).relu().flatten(1, -1))
    }
}

pub(super) fn image_batch(step: usize, rows: usize) -> (Tensor, Tensor) {
    let rng = &mut Generator::new(2000 + step as u64);
    let x = Tensor::randn_with(&[rows, 2, 6, 6], DType::F32, &Device::Cpu, rng) * 2.0 + 0.5;
    let y = Tensor::randn_with(&[rows, 3], DType::F32, &Device::Cpu, rng);
    (x, y)
}

pub(super) fn ddp_sync_batchnorm(g: &ProcessGroup) -> Result<(), String> {
    for adamw in [false, true] {
        let Cnn { conv, bn, fc } = cnn(20 + g.rank() as u64);
        let model = SyncCnn {
            conv,
            bn: SyncBatchNorm::from_batch_norm(bn, Some(g)),
            fc,
        };
        ddp_sync_batchnorm_with(g, model, adamw)?;
        // The whole-model conversion: the plain CNN's BatchNorm2d, found and synchronised.
        let mut model = cnn(20 + g.rank() as u64);
        let converted = distributed::convert_sync_batchnorm(&mut model, Some(g));
        ensure(converted == 1 && model.bn.sync_stats, || {
            format!("convert_sync_batchnorm converted {converted} layers")
        })?;
        ddp_sync_batchnorm_with(g, model, adamw)?;
    }
    Ok(())
}

pub(super) fn ddp_sync_batchnorm_with<M>(
    g: &ProcessGroup,
    model: M,
    adamw: bool,
) -> Result<(), String>
where
    M: Module + for<'a> Forward<&'a Tensor, Output = Tensor>,
{
    let (w, b) = (g.size(), 3);
    let ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default()).map_err(|e| e.to_string())?;
    let mut reference = cnn(99);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let mut opt = optimizer(adamw, ddp.parameters());
    let mut opt_ref = optimizer(adamw, reference.parameters());
    for step in 0..5 {
        let (x, y) = image_batch(step, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        opt.zero_grad();
        mse(&ddp.forward(&xs), &ys).backward();
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        identical_across_ranks(g, &ddp.parameters())?;
        let ours = ddp.module().state_dict();
        for (name, r) in reference.state_dict().iter() {
            if r.dtype() != DType::F32 {
                continue; // num_batches_tracked
            }
            let (a, e) = (ours[name].to_vec::<f32>(), r.to_vec::<f32>());
            ensure(close(&a, &e, 1e-5, 1e-6), || {
                let worst = a
                    .iter()
                    .zip(&e)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                format!(
                    "step {step}: {name} differs from BatchNorm2d on the whole batch by {worst:e}"
                )
            })?;
        }
    }
    Ok(())
}

pub(super) fn sync_bn_input_grad(g: &ProcessGroup) -> Result<(), String> {
    // f64, no DDP: the gradient of the sum of every rank's loss w.r.t. this rank's input
    // equals the single-process gradient of the whole batch's loss, restricted to it.
    let (w, b) = (g.size(), 2);
    let rng = &mut Generator::new(31);
    let x = Tensor::randn_with(&[w * b, 3, 4, 4], DType::F64, &Device::Cpu, rng);
    let up = Tensor::randn_with(&[w * b, 3, 4, 4], DType::F64, &Device::Cpu, rng);
    let mut bn_ref = BatchNorm2d::new(3, &Device::Cpu);
    bn_ref.to_dtype(DType::F64);
    no_grad(|| {
        bn_ref
            .weight
            .as_ref()
            .unwrap()
            .copy_(&Tensor::from_vec(vec![0.5f64, 1.5, -1.0], &[3]));
    });
    let xr = x.detach().requires_grad(true);
    (&bn_ref.forward(&xr) * &up).sum_all().backward();
    let mut bn = BatchNorm2d::new(3, &Device::Cpu);
    bn.to_dtype(DType::F64);
    no_grad(|| {
        bn.weight
            .as_ref()
            .unwrap()
            .copy_(&Tensor::from_vec(vec![0.5f64, 1.5, -1.0], &[3]));
    });
    let sync = SyncBatchNorm::from_batch_norm(bn, Some(g));
    let xs = x
        .narrow(0, g.rank() * b, b)
        .contiguous()
        .requires_grad(true);
    let out = sync.forward(&xs);
    let expect_out = bn_ref_forward_rows(&bn_ref, &x, g.rank() * b, b);
    (&out * &up.narrow(0, g.rank() * b, b)).sum_all().backward();
    let got = xs.grad().ok_or("x has a gradient")?.to_vec::<f64>();
    let expect = xr
        .grad()
        .unwrap()
        .narrow(0, g.rank() * b, b)
        .contiguous()
        .to_vec::<f64>();
    let worst = got
        .iter()
        .zip(&expect)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, f64::max);
    ensure(worst < 1e-12, || {
        format!("input gradient differs by {worst:e}")
    })?;
    let (o, e) = (out.to_vec::<f64>(), expect_out);
    let worst = o
        .iter()
        .zip(&e)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    ensure(worst < 1e-12, || format!("output differs by {worst:e}"))?;
    let (rm, rv) = (
        sync.running_mean.as_ref().unwrap(),
        sync.running_var.as_ref().unwrap(),
    );
    let (erm, erv) = (
        bn_ref.running_mean.as_ref().unwrap(),
        bn_ref.running_var.as_ref().unwrap(),
    );
    let d = |a: &Tensor, b: &Tensor| {
        a.to_vec::<f64>()
            .iter()
            .zip(b.to_vec::<f64>())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    ensure(d(rm, erm) < 1e-12 && d(rv, erv) < 1e-12, || {
        "running statistics differ".into()
    })
}

/// The reference batch norm's training output for rows `start..start + n` of `x` (its
/// statistics over all of `x`), computed without touching its running statistics.
pub(super) fn bn_ref_forward_rows(
    bn: &BatchNorm2d,
    x: &Tensor,
    start: usize,
    n: usize,
) -> Vec<f64> {
    no_grad(|| {
        let mean = x.mean(&[0, 2, 3], true);
        let c = x - &mean;
        let var = (&c * &c).mean(&[0, 2, 3], true);
        let w = bn.weight.as_ref().unwrap().reshape(&[1, 3, 1, 1]);
        let b = bn.bias.as_ref().unwrap().reshape(&[1, 3, 1, 1]);
        let y = &(&(&c * &(&var + 1e-5).rsqrt()) * &w) + &b;
        y.narrow(0, start, n).contiguous().to_vec::<f64>()
    })
}
