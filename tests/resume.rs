//! Exact resume: training N steps straight equals training k steps, saving a
//! [`Checkpoint`], loading it in a fresh process and training N - k more, bit for bit,
//! with dropout (the global generator), a shuffling multi-worker DataLoader stopped
//! mid-epoch, AdamW with a cosine schedule and gradient clipping. Each phase runs in its
//! own child process (this test binary re-run with `FERROGRAD_RESUME_PHASE`), so nothing
//! of the first run's memory or random state leaks into the resumed one.

use ferrograd::checkpoint::{Checkpoint, read_state_dict, save_state_dict};
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{Dropout, Linear, Module, functional as F};
use ferrograd::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
use ferrograd::optim::utils::clip_grad_norm_;
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use std::path::{Path, PathBuf};

const N: u64 = 15;
const K: u64 = 8; // mid-epoch: 6 batches per epoch

#[derive(Module)]
struct Net {
    fc1: Linear,
    drop: Dropout,
    fc2: Linear,
}

impl Net {
    fn new() -> Self {
        Net {
            fc1: Linear::new(8, 32, &Device::Cpu),
            drop: Dropout::new(0.3),
            fc2: Linear::new(32, 3, &Device::Cpu),
        }
    }
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc2
            .forward(&self.drop.forward(&self.fc1.forward(x).relu()))
    }
}

type Loader = DataLoader<TensorDataset<Vec<Tensor>>>;

/// Everything a run builds, from the global generator as it stands.
fn setup() -> (Net, AdamW, Scheduler, Loader) {
    let mut data_rng = Generator::new(42);
    let x = Tensor::randn_with(&[96, 8], DType::F32, &Device::Cpu, &mut data_rng);
    let y = x.sum(&[1], false).gt_scalar(0.0).to_dtype(DType::I64)
        + x.narrow(1, 0, 1)
            .reshape(&[96])
            .gt_scalar(1.0)
            .to_dtype(DType::I64);
    let net = Net::new();
    let mut opt = AdamW::named(net.named_parameters(), AdamConfig::default().lr(0.01));
    let sched = Scheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: N,
            eta_min: 1e-4,
        },
    );
    let loader = DataLoader::builder(TensorDataset::new(vec![x, y]))
        .batch_size(16)
        .shuffle(true)
        .num_workers(2)
        .build();
    (net, opt, sched, loader)
}

/// Trains from step `from` to `to`, epoch after epoch of `loader`.
fn train(
    net: &Net,
    opt: &mut AdamW,
    sched: &mut Scheduler,
    loader: &mut Loader,
    from: u64,
    to: u64,
) {
    let mut step = from;
    while step < to {
        for batch in loader.iter() {
            let batch = batch.unwrap();
            opt.zero_grad();
            F::cross_entropy(&net.forward(&batch[0]), &batch[1]).backward();
            clip_grad_norm_(&opt.params(), 1.0, 2.0, false).unwrap();
            opt.step();
            sched.step(opt);
            step += 1;
            if step == to {
                break;
            }
        }
    }
}

fn phase(name: &str, dir: &Path) {
    match name {
        "straight" => {
            manual_seed(7);
            let (net, mut opt, mut sched, mut loader) = setup();
            train(&net, &mut opt, &mut sched, &mut loader, 0, N);
            save_state_dict(&net.state_dict(), dir.join("straight.safetensors"), None).unwrap();
        }
        "first" => {
            manual_seed(7);
            let (net, mut opt, mut sched, mut loader) = setup();
            train(&net, &mut opt, &mut sched, &mut loader, 0, K);
            Checkpoint::new(&net)
                .optimizer(&opt)
                .scheduler(&sched)
                .loader(loader.state())
                .step(K)
                .save(dir.join("ckpt.safetensors"))
                .unwrap();
        }
        "resumed" => {
            manual_seed(12345); // another initialisation, another loader seed
            let (mut net, mut opt, mut sched, mut loader) = setup();
            let ckpt = Checkpoint::load(dir.join("ckpt.safetensors")).unwrap();
            ckpt.restore_model(&mut net, true).unwrap();
            ckpt.restore_optimizer(&mut opt).unwrap();
            ckpt.restore_scheduler(&mut sched).unwrap();
            loader.load_state(&ckpt.loader.unwrap());
            ckpt.restore_rng().unwrap();
            assert_eq!(ckpt.step, K);
            train(&net, &mut opt, &mut sched, &mut loader, ckpt.step, N);
            save_state_dict(&net.state_dict(), dir.join("resumed.safetensors"), None).unwrap();
        }
        other => panic!("unknown phase {other}"),
    }
}

fn run_phase(name: &str, dir: &Path) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "resuming_in_a_fresh_process_is_bit_identical",
            "--nocapture",
        ])
        .env("FERROGRAD_RESUME_PHASE", name)
        .env("FERROGRAD_RESUME_DIR", dir)
        .status()
        .unwrap();
    assert!(status.success(), "phase {name} failed");
}

#[test]
fn resuming_in_a_fresh_process_is_bit_identical() {
    if let (Some(name), Some(dir)) = (
        std::env::var_os("FERROGRAD_RESUME_PHASE"),
        std::env::var_os("FERROGRAD_RESUME_DIR"),
    ) {
        phase(name.to_str().unwrap(), Path::new(&dir));
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("ferrograd-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["straight", "first", "resumed"] {
        run_phase(name, &dir);
    }
    let straight = read_state_dict(dir.join("straight.safetensors")).unwrap();
    let resumed = read_state_dict(dir.join("resumed.safetensors")).unwrap();
    assert_eq!(
        straight.keys().collect::<Vec<_>>(),
        resumed.keys().collect::<Vec<_>>()
    );
    for (k, v) in &straight {
        assert_eq!(
            v.to_vec::<f32>(),
            resumed[k].to_vec::<f32>(),
            "{k} differs after resuming"
        );
    }
    // And the training moved the weights: a resume of nothing would also "match".
    let first = Checkpoint::load(dir.join("ckpt.safetensors")).unwrap();
    assert_ne!(
        first.model["fc1.weight"].to_vec::<f32>(),
        straight["fc1.weight"].to_vec::<f32>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
