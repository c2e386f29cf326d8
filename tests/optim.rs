//! Optimizers: parameter trajectories match PyTorch's `torch.optim` (fixtures from
//! `tests/fixtures/make_optim_fixtures.py`) on every device, in f64 and f32; half-precision
//! parameters track the f32 update; the bookkeeping (skipped steps, duplicates, views,
//! validation) follows PyTorch.

mod common;

use ferrograd::nn::Module;
use ferrograd::optim::{
    Adadelta, AdadeltaConfig, Adagrad, AdagradConfig, Adam, AdamConfig, AdamW, Adamax,
    AdamaxConfig, Lbfgs, LbfgsConfig, LineSearch, NAdam, NAdamConfig, Optimizer, ParamGroup, RAdam,
    RAdamConfig, RMSprop, RMSpropConfig, Sgd, SgdConfig,
};
use ferrograd::prelude::*;
use ferrograd::testing::{assert_close, test_device};
use std::collections::HashMap;

#[path = "optim/lbfgs.rs"]
mod lbfgs;
#[path = "optim/state.rs"]
mod state;

const STEPS: usize = 20;

fn fixtures() -> HashMap<String, Tensor> {
    // Embedded, so the test binary runs anywhere (the GPU machine has no checkout path).
    common::f64_tensors(include_bytes!("fixtures/torch_optim.safetensors"))
}

type Make = fn(Vec<Tensor>) -> Box<dyn Optimizer>;

/// The configs of the fixture script, built with our API.
fn configs() -> Vec<(&'static str, Make)> {
    vec![
        ("sgd_plain", |p| Box::new(Sgd::new(p, SgdConfig::new(0.1)))),
        ("sgd_momentum", |p| {
            Box::new(Sgd::new(
                p,
                SgdConfig::new(0.1)
                    .momentum(0.9)
                    .dampening(0.1)
                    .weight_decay(0.01),
            ))
        }),
        ("sgd_nesterov", |p| {
            Box::new(Sgd::new(
                p,
                SgdConfig::new(0.05)
                    .momentum(0.9)
                    .nesterov(true)
                    .weight_decay(0.001),
            ))
        }),
        ("sgd_maximize", |p| {
            Box::new(Sgd::new(
                p,
                SgdConfig::new(0.1).momentum(0.5).maximize(true),
            ))
        }),
        ("adam", |p| {
            Box::new(Adam::new(p, AdamConfig::default().lr(0.01)))
        }),
        ("adam_wd_amsgrad", |p| {
            Box::new(Adam::new(
                p,
                AdamConfig::default()
                    .lr(0.01)
                    .betas(0.8, 0.99)
                    .eps(1e-6)
                    .weight_decay(0.1)
                    .amsgrad(true),
            ))
        }),
        ("adamw", |p| {
            Box::new(AdamW::new(p, AdamConfig::default().lr(0.01)))
        }),
        ("adamw_amsgrad_maximize", |p| {
            Box::new(AdamW::new(
                p,
                AdamConfig::default()
                    .lr(0.02)
                    .weight_decay(0.05)
                    .amsgrad(true)
                    .maximize(true),
            ))
        }),
        ("rmsprop", |p| {
            Box::new(RMSprop::new(p, RMSpropConfig::default().lr(0.01)))
        }),
        ("rmsprop_centered_momentum", |p| {
            Box::new(RMSprop::new(
                p,
                RMSpropConfig::default()
                    .lr(0.01)
                    .alpha(0.9)
                    .momentum(0.8)
                    .centered(true)
                    .weight_decay(0.05),
            ))
        }),
        ("rmsprop_maximize", |p| {
            Box::new(RMSprop::new(
                p,
                RMSpropConfig::default()
                    .lr(0.005)
                    .momentum(0.5)
                    .maximize(true),
            ))
        }),
        ("adagrad", |p| {
            Box::new(Adagrad::new(p, AdagradConfig::default().lr(0.1)))
        }),
        ("adagrad_decay_init", |p| {
            Box::new(Adagrad::new(
                p,
                AdagradConfig::default()
                    .lr(0.1)
                    .lr_decay(0.05)
                    .weight_decay(0.1)
                    .initial_accumulator_value(0.5),
            ))
        }),
        ("adagrad_maximize", |p| {
            Box::new(Adagrad::new(
                p,
                AdagradConfig::default().lr(0.05).maximize(true),
            ))
        }),
        ("adadelta", |p| {
            Box::new(Adadelta::new(p, AdadeltaConfig::default()))
        }),
        ("adadelta_wd", |p| {
            Box::new(Adadelta::new(
                p,
                AdadeltaConfig::default()
                    .lr(0.5)
                    .rho(0.8)
                    .eps(1e-5)
                    .weight_decay(0.1),
            ))
        }),
        ("adadelta_maximize", |p| {
            Box::new(Adadelta::new(
                p,
                AdadeltaConfig::default().lr(2.0).maximize(true),
            ))
        }),
        ("adamax", |p| {
            Box::new(Adamax::new(p, AdamaxConfig::default().lr(0.02)))
        }),
        ("adamax_wd", |p| {
            Box::new(Adamax::new(
                p,
                AdamaxConfig::default()
                    .lr(0.02)
                    .betas((0.8, 0.95))
                    .eps(1e-6)
                    .weight_decay(0.1),
            ))
        }),
        ("adamax_maximize", |p| {
            Box::new(Adamax::new(
                p,
                AdamaxConfig::default().lr(0.01).maximize(true),
            ))
        }),
        ("nadam", |p| {
            Box::new(NAdam::new(p, NAdamConfig::default().lr(0.01)))
        }),
        ("nadam_wd", |p| {
            Box::new(NAdam::new(
                p,
                NAdamConfig::default()
                    .lr(0.01)
                    .betas((0.8, 0.99))
                    .weight_decay(0.1)
                    .momentum_decay(0.01),
            ))
        }),
        ("nadam_decoupled_maximize", |p| {
            Box::new(NAdam::new(
                p,
                NAdamConfig::default()
                    .lr(0.01)
                    .weight_decay(0.1)
                    .decoupled_weight_decay(true)
                    .maximize(true),
            ))
        }),
        ("radam", |p| {
            Box::new(RAdam::new(p, RAdamConfig::default().lr(0.01)))
        }),
        ("radam_wd", |p| {
            Box::new(RAdam::new(
                p,
                RAdamConfig::default()
                    .lr(0.01)
                    .betas((0.8, 0.9))
                    .weight_decay(0.1),
            ))
        }),
        ("radam_decoupled_maximize", |p| {
            Box::new(RAdam::new(
                p,
                RAdamConfig::default()
                    .lr(0.01)
                    .betas((0.9, 0.9))
                    .weight_decay(0.1)
                    .decoupled_weight_decay(true)
                    .maximize(true),
            ))
        }),
        ("adamw_groups", |p| {
            let mut it = p.into_iter();
            let (a, b) = (it.next().unwrap(), it.next().unwrap());
            let base = AdamConfig::default();
            Box::new(AdamW::with_groups(vec![
                ParamGroup::new(vec![a], base.clone().lr(0.01).weight_decay(0.1)),
                ParamGroup::new(vec![b], base.lr(0.05).weight_decay(0.0)),
            ]))
        }),
        ("sgd_groups", |p| {
            let mut it = p.into_iter();
            let (a, b) = (it.next().unwrap(), it.next().unwrap());
            Box::new(Sgd::with_groups(vec![
                ParamGroup::new(vec![a], SgdConfig::new(0.1).momentum(0.9)),
                ParamGroup::new(vec![b], SgdConfig::new(0.01).momentum(0.5).nesterov(true)),
            ]))
        }),
    ]
}

/// Replays every fixture config in `dtype` on `device` and compares each step.
fn replay(device: &Device, dtype: DType) {
    let fx = fixtures();
    // deep_copy: converting to the same dtype and device shares the fixture's buffer.
    let on = |t: &Tensor| t.to_dtype(dtype).to_device(device).unwrap().deep_copy();
    for (name, make) in configs() {
        let a = on(&fx["init_a"]).requires_grad(true);
        let b = on(&fx["init_b"]).requires_grad(true);
        let mut opt = make(vec![a.clone(), b.clone()]);
        for k in 0..STEPS {
            a.set_grad(Some(on(&fx[&format!("g{k}_a")])));
            b.set_grad(fx.get(&format!("g{k}_b")).map(on));
            opt.step();
            for (p, which) in [(&a, "a"), (&b, "b")] {
                let expected = &fx[&format!("{name}.p{k}_{which}")];
                let result =
                    std::panic::catch_unwind(|| assert_close(p, &expected.to_dtype(dtype), dtype));
                if let Err(e) = result {
                    panic!(
                        "{name}, step {k}, parameter {which}, {dtype:?} on {device}: {}",
                        e.downcast_ref::<String>().cloned().unwrap_or_default()
                    );
                }
            }
        }
    }
}

fn torch_trajectories_f64(device: &Device) {
    replay(device, DType::F64);
}
test_device!(torch_trajectories_f64);

fn torch_trajectories_f32(device: &Device) {
    replay(device, DType::F32);
}
test_device!(torch_trajectories_f32);

/// f16/bf16 parameters (state kept in the parameter's dtype, math in f32) follow the f32
/// trajectory within the half types' tolerance. Centred RMSprop is left out in f16: its
/// variance `square_avg - grad_avg^2` of small gradients underflows f16 state (PyTorch
/// fails the same way), which is what mixed precision's f32 master weights are for.
fn half_parameters_track_f32(device: &Device) {
    for dtype in [DType::F16, DType::BF16] {
        for (name, make) in configs() {
            if name.ends_with("_groups") || (dtype == DType::F16 && name.contains("centered")) {
                continue;
            }
            let init = Tensor::randn_with(&[64], DType::F32, &Device::Cpu, &mut Generator::new(3));
            let full = init.to_device(device).unwrap().requires_grad(true);
            let low = init
                .to_dtype(dtype)
                .to_device(device)
                .unwrap()
                .requires_grad(true);
            let (mut opt_full, mut opt_low) = (make(vec![full.clone()]), make(vec![low.clone()]));
            let mut rng = Generator::new(9);
            for _ in 0..3 {
                let g = Tensor::randn_with(&[64], DType::F32, &Device::Cpu, &mut rng);
                full.set_grad(Some(g.to_device(device).unwrap()));
                low.set_grad(Some(g.to_dtype(dtype).to_device(device).unwrap()));
                opt_full.step();
                opt_low.step();
            }
            assert_eq!(low.dtype(), dtype, "{name}");
            let result = std::panic::catch_unwind(|| assert_close(&low, &full, dtype));
            assert!(result.is_ok(), "{name} in {dtype:?} on {device} drifted");
        }
    }
}
test_device!(half_parameters_track_f32);

/// A large parameter takes the parallel CPU path / many CUDA blocks; it must give the
/// same update as the same elements in small pieces.
fn large_and_small_parameters_agree(device: &Device) {
    let n = 100_003;
    let init = Tensor::randn_with(&[n], DType::F32, &Device::Cpu, &mut Generator::new(5));
    let grad = Tensor::randn_with(&[n], DType::F32, &Device::Cpu, &mut Generator::new(6));
    let big = init.to_device(device).unwrap().requires_grad(true);
    let pieces: Vec<Tensor> = (0..n)
        .step_by(10_000)
        .map(|s| {
            init.narrow(0, s, 10_000.min(n - s))
                .contiguous()
                .to_device(device)
                .unwrap()
                .requires_grad(true)
        })
        .collect();
    let cfg = AdamConfig::default()
        .lr(0.01)
        .weight_decay(0.1)
        .amsgrad(true);
    let mut opt_big = AdamW::new(vec![big.clone()], cfg.clone());
    let mut opt_pieces = AdamW::new(pieces.clone(), cfg);
    for _ in 0..3 {
        big.set_grad(Some(grad.to_device(device).unwrap()));
        for (i, p) in pieces.iter().enumerate() {
            let s = i * 10_000;
            let g = grad.narrow(0, s, p.numel()).contiguous();
            p.set_grad(Some(g.to_device(device).unwrap()));
        }
        opt_big.step();
        opt_pieces.step();
    }
    let joined = Tensor::cat(&pieces.iter().collect::<Vec<_>>(), 0);
    assert_close(&big, &joined, DType::F32);
}
test_device!(large_and_small_parameters_agree);

fn skipped_parameters_keep_their_own_step_count(device: &Device) {
    let a = Tensor::ones(&[2], DType::F32, device).requires_grad(true);
    let b = Tensor::ones(&[2], DType::F32, device).requires_grad(true);
    let mut opt = Adam::new(vec![a.clone(), b.clone()], AdamConfig::default());
    a.set_grad(Some(Tensor::ones(&[2], DType::F32, device)));
    opt.step();
    opt.step(); // b has no gradient: untouched, no state
    assert!(opt.state(1).is_none());
    assert_eq!(
        b.to_device(&Device::Cpu).unwrap().to_vec::<f32>(),
        vec![1.0, 1.0]
    );
    assert_eq!(opt.state(0).unwrap().step, 2);
    opt.zero_grad();
    assert!(a.grad().is_none());
}
test_device!(skipped_parameters_keep_their_own_step_count);

#[test]
fn a_parameter_listed_twice_is_updated_once() {
    let w = Tensor::ones(&[3], DType::F64, &Device::Cpu).requires_grad(true);
    let mut opt = Sgd::new(vec![w.clone(), w.clone()], SgdConfig::new(0.5));
    assert_eq!(opt.params().len(), 1);
    w.set_grad(Some(Tensor::ones(&[3], DType::F64, &Device::Cpu)));
    opt.step();
    assert_eq!(w.to_vec::<f64>(), vec![0.5; 3]);
}

#[test]
fn a_non_contiguous_parameter_is_updated_in_place() {
    let base = Tensor::arange(0.0, 6.0, 1.0, DType::F64, &Device::Cpu).reshape(&[2, 3]);
    let w = base.t().requires_grad(true);
    assert!(!w.is_contiguous());
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::new(1.0).momentum(0.9));
    w.set_grad(Some(Tensor::ones(&[3, 2], DType::F64, &Device::Cpu)));
    opt.step();
    opt.step();
    // buf = 1, then 0.9 + 1 = 1.9: each element moves by 2.9
    let expected: Vec<f64> = [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        .iter()
        .map(|v| v - 2.9)
        .collect();
    let got = w.to_vec::<f64>();
    assert!(
        got.iter()
            .zip(&expected)
            .all(|(a, b)| (a - b).abs() < 1e-12),
        "{got:?}"
    );
    assert_eq!(
        opt.state(0)
            .unwrap()
            .buffer("momentum_buffer")
            .unwrap()
            .shape(),
        &[3, 2]
    );
}

#[test]
fn set_lr_changes_the_next_step() {
    let w = Tensor::zeros(&[1], DType::F64, &Device::Cpu).requires_grad(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::new(1.0));
    opt.set_lr(0.25);
    assert_eq!(opt.lr(), 0.25);
    w.set_grad(Some(Tensor::ones(&[1], DType::F64, &Device::Cpu)));
    opt.step();
    assert_eq!(w.item::<f64>(), -0.25);
}

#[test]
fn a_model_trains_with_adam() {
    network! {
        struct Net(x: [N, 4]) -> [N, 1] {
            fc1: Linear(4 -> 16),
            tanh,
            fc2: Linear(16 -> 1),
        }
    }
    manual_seed(0);
    let net = Net::new(&Device::Cpu);
    let x = Tensor::randn(&[64, 4], DType::F32, &Device::Cpu);
    let y = x.sum(&[1], true).sin();
    let mut opt = Adam::new(net.parameters(), AdamConfig::default().lr(0.02));
    let loss_of = |net: &Net| F::mse_loss(&net.forward(&x), &y, F::Reduction::Mean);
    let first = loss_of(&net).item::<f32>();
    for _ in 0..200 {
        opt.zero_grad();
        loss_of(&net).backward();
        opt.step();
    }
    let last = loss_of(&net).item::<f32>();
    assert!(last < first * 0.05, "loss {first} -> {last}");
}

#[test]
#[should_panic(expected = "Adam: invalid beta parameter at index 1: 1")]
fn invalid_betas_are_refused() {
    let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    Adam::new(vec![w], AdamConfig::default().betas(0.9, 1.0));
}

#[test]
#[should_panic(expected = "SGD: Nesterov momentum requires a momentum and zero dampening")]
fn nesterov_without_momentum_is_refused() {
    let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    Sgd::new(vec![w], SgdConfig::new(0.1).nesterov(true));
}

#[test]
#[should_panic(expected = "parameters must be leaf tensors that require grad")]
fn a_tensor_without_grad_is_refused() {
    Sgd::new(
        vec![Tensor::zeros(&[1], DType::F32, &Device::Cpu)],
        SgdConfig::new(0.1),
    );
}

/// `clip_grad_norm_` matches PyTorch's formula for p = 1, 2, 3 and inf, returns the
/// norm before clipping, leaves small gradients alone (up to the 1e-6 guard), and with
/// `error_if_nonfinite` refuses a NaN norm without touching the gradients.
fn clip_grad_norm_matches_the_formula(device: &Device) {
    use ferrograd::optim::utils::{clip_grad_norm_, clip_grad_value_};
    let mut rng = Generator::new(11);
    let ps: Vec<Tensor> = [&[3usize, 4][..], &[5]]
        .iter()
        .map(|s| Tensor::zeros(s, DType::F64, device).requires_grad(true))
        .collect();
    for p_norm in [1.0, 2.0, 3.0, f64::INFINITY] {
        let grads: Vec<Vec<f64>> = ps
            .iter()
            .map(|p| {
                Tensor::randn_with(p.shape(), DType::F64, &Device::Cpu, &mut rng).to_vec::<f64>()
            })
            .collect();
        for (p, g) in ps.iter().zip(&grads) {
            p.set_grad(Some(
                Tensor::from_vec(g.clone(), p.shape())
                    .to_device(device)
                    .unwrap(),
            ));
        }
        let all: Vec<f64> = grads.iter().flatten().copied().collect();
        let total = if p_norm.is_infinite() {
            all.iter().fold(0.0f64, |m, v| m.max(v.abs()))
        } else {
            all.iter()
                .map(|v| v.abs().powf(p_norm))
                .sum::<f64>()
                .powf(1.0 / p_norm)
        };
        let got = clip_grad_norm_(&ps, 0.5, p_norm, true).unwrap();
        assert!(
            (got.item::<f64>() - total).abs() < 1e-12 * total,
            "p = {p_norm}"
        );
        let coef = (0.5 / (total + 1e-6)).min(1.0);
        for (p, g) in ps.iter().zip(&grads) {
            let expected =
                Tensor::from_vec(g.iter().map(|v| v * coef).collect::<Vec<_>>(), p.shape());
            assert_close(&p.grad().unwrap(), &expected, DType::F64);
        }
    }
    ps[0].set_grad(Some(Tensor::full(&[3, 4], f64::NAN, DType::F64, device)));
    let err = clip_grad_norm_(&ps, 1.0, 2.0, true).unwrap_err();
    assert!(err.to_string().contains("NaN"), "{err}");
    assert!(
        ps[1]
            .grad()
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap()
            .to_vec::<f64>()
            .iter()
            .all(|v| v.is_finite())
    );
    clip_grad_value_(&ps[1..], 0.01);
    let g = ps[1]
        .grad()
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap()
        .to_vec::<f64>();
    assert!(g.iter().all(|v| v.abs() <= 0.01));
}
test_device!(clip_grad_norm_matches_the_formula);

/// EMA and SWA of a model's weights follow their recurrences; `copy_to` loads them.
#[test]
fn averaged_models_follow_their_recurrences() {
    use ferrograd::nn::Linear;
    use ferrograd::optim::utils::{AveragedModel, Averaging};
    let model = Linear::new(2, 1, &Device::Cpu);
    let mut ema = AveragedModel::new(&model, Averaging::Ema { decay: 0.9 }, false);
    let mut swa = AveragedModel::new(&model, Averaging::Swa, false);
    let values = [1.0f32, 2.0, 4.0];
    let (mut e, mut s) = (0.0f32, 0.0f32);
    for (i, v) in values.iter().enumerate() {
        model
            .weight
            .detach()
            .copy_(&Tensor::full(&[1, 2], *v as f64, DType::F32, &Device::Cpu));
        ema.update_parameters(&model);
        swa.update_parameters(&model);
        e = if i == 0 { *v } else { 0.9 * e + 0.1 * v };
        s = (s * i as f32 + v) / (i as f32 + 1.0);
    }
    assert!((ema.state_dict()["weight"].to_vec::<f32>()[0] - e).abs() < 1e-6);
    assert!((swa.state_dict()["weight"].to_vec::<f32>()[0] - s).abs() < 1e-6);
    let mut other = Linear::new(2, 1, &Device::Cpu);
    swa.copy_to(&mut other).unwrap();
    assert!((other.weight.to_vec::<f32>()[1] - 7.0 / 3.0).abs() < 1e-6);
}

/// Momentum switched on between steps (as OneCycleLR does to SGD) starts a momentum
/// buffer from that step's gradient, as PyTorch's lazily created buffer does.
#[test]
fn momentum_switched_on_later_starts_its_buffer() {
    let w = Tensor::zeros(&[2], DType::F64, &Device::Cpu).requires_grad(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::new(0.1));
    w.set_grad(Some(Tensor::ones(&[2], DType::F64, &Device::Cpu)));
    opt.step();
    assert!(opt.state(0).unwrap().buffer("momentum_buffer").is_none());
    opt.set_group_momentum(0, 0.9);
    opt.step(); // buffer = g: the step is lr * g
    opt.step(); // buffer = 0.9 g + g
    let expected = -(0.1 + 0.1 + 0.1 * 1.9);
    assert!(
        w.to_vec::<f64>()
            .iter()
            .all(|v| (v - expected).abs() < 1e-12)
    );
}
