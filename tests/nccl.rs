//! The NCCL engine on a GPU, at world size 1 (one process, no launcher): every collective
//! per dtype, sync and async, on contiguous, strided and host tensors, a sub-group, the
//! barrier, and DistributedDataParallel, SyncBatchNorm and ZeRO on CUDA tensors against
//! single-process training. Needs the `nccl` feature, a CUDA device and libnccl
//! (`bench/gpu.sh run` puts PyPI's on the library path); without them it says so and
//! skips. The several-rank suites run over MPI in `tests/distributed.rs`.
#![cfg(feature = "nccl")]

use ferrograd::distributed::{
    self, Backend, DdpConfig, DistError, DistributedDataParallel, InitOptions, ProcessGroup,
    ReduceOp, SyncBatchNorm, ZeroRedundancyOptimizer,
};
use ferrograd::nn::{BatchNorm2d, Forward, Module};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::sync::{Mutex, MutexGuard, OnceLock};

#[path = "common/ddp_model.rs"]
mod ddp_model;
use ddp_model::{Mlp, mse};

const DEV: Device = Device::Cuda(0);

/// The world group, started once for the binary; `None` (and a message) without a GPU or
/// libnccl.
fn world() -> Option<(ProcessGroup, MutexGuard<'static, ()>)> {
    static WORLD: OnceLock<Result<ProcessGroup, String>> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let world = WORLD.get_or_init(|| {
        if !ferrograd::cuda::is_available() {
            return Err("no CUDA device".into());
        }
        // A failed assertion fails its test, not the whole binary.
        let options = InitOptions {
            abort_on_panic: false,
            ..InitOptions::default()
        };
        distributed::init_process_group_with(Backend::Nccl, options).map_err(|e| e.to_string())
    });
    match world {
        Ok(g) => Some((g.clone(), LOCK.lock().unwrap_or_else(|e| e.into_inner()))),
        Err(why) => {
            eprintln!("skipped: the NCCL engine cannot run here ({why})");
            None
        }
    }
}

fn values(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| i as f64 - 2.0).collect();
    Tensor::from_vec(v, shape).to_dtype(dtype)
}

fn host(t: &Tensor) -> Vec<f64> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .to_vec::<f64>()
}

const DTYPES: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::U8,
];

#[test]
fn the_world_is_one_rank_on_the_gpu() {
    let Some((g, _lock)) = world() else { return };
    assert_eq!((g.rank(), g.size(), distributed::world_size()), (0, 1, 1));
    assert!(g.is_member());
    g.barrier().unwrap();
    assert!(matches!(
        distributed::init_process_group(Backend::Nccl),
        Err(DistError::AlreadyInitialized)
    ));
}

#[test]
fn every_collective_per_dtype_sync_and_async() {
    let Some((g, _lock)) = world() else { return };
    for dtype in DTYPES {
        let want = host(&values(dtype, &[2, 3]));
        let ops: &[ReduceOp] = if dtype.is_float() {
            &[
                ReduceOp::Sum,
                ReduceOp::Avg,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Product,
            ]
        } else {
            &[
                ReduceOp::Sum,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Product,
            ]
        };
        for &op in ops {
            let t = values(dtype, &[2, 3]).to_device(&DEV).unwrap();
            g.all_reduce(&t, op).unwrap();
            assert_eq!(host(&t), want, "{dtype} all_reduce {op:?}");
            let t = values(dtype, &[2, 3]).to_device(&DEV).unwrap();
            g.all_reduce_async(&t, op).unwrap().wait().unwrap();
            assert_eq!(host(&t), want, "{dtype} all_reduce_async {op:?}");
        }
        if !dtype.is_float() {
            let t = values(dtype, &[2, 3]).to_device(&DEV).unwrap();
            assert!(g.all_reduce(&t, ReduceOp::Avg).is_err(), "{dtype} Avg");
        }
        let t = values(dtype, &[2, 3]).to_device(&DEV).unwrap();
        g.broadcast(&t, 0).unwrap();
        assert_eq!(host(&t), want, "{dtype} broadcast");
        g.broadcast_async(&t, 0).unwrap().wait().unwrap();
        assert_eq!(host(&t), want, "{dtype} broadcast_async");

        // The collectives with an output: it starts as zeros, so a result that was never
        // written shows.
        let input = values(dtype, &[2, 3]).to_device(&DEV).unwrap();
        let parts = g.all_gather(&input).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].device(), DEV);
        assert_eq!(host(&parts[0]), want, "{dtype} all_gather");
        let out = Tensor::zeros(&[6], dtype, &DEV);
        g.all_gather_into_tensor_async(&out, &input)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(host(&out), want, "{dtype} all_gather_into_tensor");
        let out = Tensor::zeros(&[2, 3], dtype, &DEV);
        g.reduce_scatter_tensor(&out, &input, ReduceOp::Sum)
            .unwrap();
        assert_eq!(host(&out), want, "{dtype} reduce_scatter_tensor");
        let out = Tensor::zeros(&[2, 3], dtype, &DEV);
        g.all_to_all_single_async(&out, &input)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(host(&out), want, "{dtype} all_to_all_single");
    }
}

#[test]
fn strided_and_host_tensors_go_through_a_copy_that_is_written_back() {
    let Some((g, _lock)) = world() else { return };
    let base = Tensor::from_vec((0..12).map(|i| i as f32).collect::<Vec<_>>(), &[3, 4])
        .to_device(&DEV)
        .unwrap();
    let view = base.transpose(0, 1);
    g.all_reduce(&view, ReduceOp::Max).unwrap();
    let col = base.select(1, 2);
    g.broadcast(&col, 0).unwrap();
    assert_eq!(host(&col), vec![2.0, 6.0, 10.0]);
    assert_eq!(host(&base), (0..12).map(f64::from).collect::<Vec<_>>());
    // A host tensor travels to the group's device and back.
    let on_host = Tensor::from_vec(vec![1.5f32, -2.0, 4.0], &[3]);
    g.all_reduce(&on_host, ReduceOp::Sum).unwrap();
    assert_eq!(on_host.device(), Device::Cpu);
    assert_eq!(on_host.to_vec::<f32>(), vec![1.5, -2.0, 4.0]);
    let out = Tensor::zeros(&[3], DType::F32, &Device::Cpu);
    g.all_gather_into_tensor(&out, &on_host).unwrap();
    assert_eq!(out.to_vec::<f32>(), vec![1.5, -2.0, 4.0]);
}

#[test]
fn wrong_arguments_are_errors() {
    let Some((g, _lock)) = world() else { return };
    let t = Tensor::ones(&[3], DType::F32, &DEV);
    let bad_out = Tensor::zeros(&[4], DType::F32, &DEV);
    assert!(g.all_gather_into_tensor(&bad_out, &t).is_err());
    let f64_out = Tensor::zeros(&[3], DType::F64, &DEV);
    assert!(g.all_gather_into_tensor(&f64_out, &t).is_err());
    assert!(g.broadcast(&t, 3).is_err());
    // A send to this rank itself would wait for ever on the device: refused.
    assert!(matches!(g.send(&t, 0, 0), Err(DistError::Mismatch(_))));
    assert!(matches!(g.recv(&t, 0, 0), Err(DistError::Mismatch(_))));
    assert!(distributed::new_group(&[0, 0]).is_err());
    assert!(distributed::new_group(&[1]).is_err());
}

#[test]
fn a_sub_group_has_its_own_communicator() {
    let Some((g, _lock)) = world() else { return };
    let sub = g.new_group(&[0]).unwrap();
    assert!(sub.is_member());
    assert_eq!((sub.rank(), sub.size()), (0, 1));
    let t = values(DType::F32, &[4]).to_device(&DEV).unwrap();
    sub.all_reduce(&t, ReduceOp::Sum).unwrap();
    assert_eq!(host(&t), host(&values(DType::F32, &[4])));
    sub.barrier().unwrap();
}

fn batch(step: usize, rows: usize) -> (Tensor, Tensor) {
    ddp_model::global_batch(step, rows, &DEV)
}

fn assert_close(a: &[Tensor], b: &[Tensor], when: &str) {
    for (p, q) in a.iter().zip(b) {
        let f32s = |t: &Tensor| t.to_dtype(DType::F32).to_vec::<f32>();
        let (x, y) = (f32s(p), f32s(q));
        for (u, v) in x.iter().zip(&y) {
            assert!((u - v).abs() <= 1e-6 + 1e-5 * v.abs(), "{when}: {u} vs {v}");
        }
    }
}

#[test]
fn ddp_on_cuda_trains_like_one_process() {
    let Some((g, _lock)) = world() else { return };
    for adamw in [false, true] {
        let ddp = DistributedDataParallel::new(
            Mlp::new(10, &DEV),
            &g,
            DdpConfig::default().first_bucket_cap_mb(0.0005),
        )
        .unwrap();
        assert!(ddp.buckets().len() >= 2, "{:?}", ddp.buckets());
        let reference = Mlp::new(10, &DEV);
        let make = |params: Vec<Tensor>| -> Box<dyn Optimizer> {
            if adamw {
                Box::new(AdamW::new(
                    params,
                    AdamConfig::default().lr(0.01).weight_decay(0.01),
                ))
            } else {
                Box::new(Sgd::new(params, SgdConfig::new(0.05).momentum(0.9)))
            }
        };
        let (mut opt, mut opt_ref) = (make(ddp.parameters()), make(reference.parameters()));
        for step in 0..5 {
            let (x, y) = batch(step, 8);
            opt.zero_grad();
            mse(&ddp.forward(&x), &y).backward();
            opt.step();
            opt_ref.zero_grad();
            mse(&reference.forward(&x), &y).backward();
            opt_ref.step();
            assert_close(
                &ddp.parameters(),
                &reference.parameters(),
                &format!("adamw {adamw}, step {step}"),
            );
        }
    }
}

#[test]
fn zero_on_cuda_equals_adamw() {
    let Some((g, _lock)) = world() else { return };
    let model = Mlp::new(7, &DEV);
    let reference = Mlp::new(7, &DEV);
    let cfg = AdamConfig::default().lr(0.01).weight_decay(0.01);
    let c = cfg.clone();
    let mut opt = ZeroRedundancyOptimizer::new(model.parameters(), &g, move |shard| {
        Box::new(AdamW::named(shard, c))
    });
    let mut opt_ref = AdamW::new(reference.parameters(), cfg);
    for step in 0..5 {
        let (x, y) = batch(200 + step, 8);
        opt.zero_grad();
        mse(&model.forward(&x), &y).backward();
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        assert_close(
            &model.parameters(),
            &reference.parameters(),
            &format!("step {step}"),
        );
    }
    let state = opt.consolidate_state_dict(0).unwrap();
    assert!(state.is_some(), "rank 0 holds the consolidated state");
}

#[test]
fn sync_batch_norm_on_cuda_equals_batch_norm() {
    let Some((g, _lock)) = world() else { return };
    manual_seed(5);
    let bn = BatchNorm2d::new(4, &DEV);
    let bn_ref = BatchNorm2d::new(4, &DEV);
    let sync = SyncBatchNorm::from_batch_norm(bn, Some(&g));
    let x = Tensor::randn(&[3, 4, 5, 5], DType::F32, &Device::Cpu);
    let up = Tensor::randn(&[3, 4, 5, 5], DType::F32, &Device::Cpu)
        .to_device(&DEV)
        .unwrap();
    let xs = x.to_device(&DEV).unwrap().requires_grad(true);
    let xr = x.to_device(&DEV).unwrap().requires_grad(true);
    let (out, out_ref) = (sync.forward(&xs), bn_ref.forward(&xr));
    (&out * &up).sum_all().backward();
    (&out_ref * &up).sum_all().backward();
    assert_close(&[out], &[out_ref], "forward");
    assert_close(&[xs.grad().unwrap()], &[xr.grad().unwrap()], "input grad");
    let buffers = |m: &dyn Fn() -> Vec<(String, Tensor)>| -> Vec<Tensor> {
        m().into_iter().map(|(_, t)| t).collect()
    };
    assert_close(
        &buffers(&|| sync.named_buffers()),
        &buffers(&|| bn_ref.named_buffers()),
        "running statistics",
    );
}
