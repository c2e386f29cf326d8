//! Learning-rate schedules follow PyTorch's 30-step sequences to 1e-6 relative
//! (`tests/fixtures/make_scheduler_fixtures.py`, base rate 0.1 on SGD).

use ferrograd::optim::lr_scheduler::{
    CyclicMode, LrScheduler, ReduceLROnPlateau, Schedule, Scheduler,
};
use ferrograd::optim::{Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::sync::Arc;

const FIXTURE: &str = include_str!("fixtures/torch_schedulers.txt");

fn torch(name: &str) -> Vec<f64> {
    FIXTURE
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("no fixture for {name}"))
        .split(' ')
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect()
}

fn sgd() -> Sgd {
    let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    Sgd::new(vec![w], SgdConfig::new(0.1))
}

#[track_caller]
fn assert_sequence(name: &str, ours: &[f64]) {
    let want = torch(name);
    assert_eq!(ours.len(), want.len(), "{name}: length");
    for (i, (a, b)) in ours.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1e-12) + 1e-15,
            "{name}: step {i} gives {a}, PyTorch {b}"
        );
    }
}

#[test]
fn schedules_match_pytorch() {
    let cases: Vec<(&str, Schedule)> = vec![
        (
            "step",
            Schedule::Step {
                step_size: 4,
                gamma: 0.5,
            },
        ),
        (
            "multistep",
            Schedule::MultiStep {
                milestones: vec![3, 8, 20],
                gamma: 0.3,
            },
        ),
        ("exponential", Schedule::Exponential { gamma: 0.9 }),
        (
            "cosine",
            Schedule::CosineAnnealing {
                t_max: 12,
                eta_min: 0.01,
            },
        ),
        (
            "warm_restarts",
            Schedule::CosineAnnealingWarmRestarts {
                t_0: 4,
                t_mult: 2,
                eta_min: 0.001,
            },
        ),
        (
            "warm_restarts_flat",
            Schedule::CosineAnnealingWarmRestarts {
                t_0: 5,
                t_mult: 1,
                eta_min: 0.0,
            },
        ),
        (
            "linear",
            Schedule::Linear {
                start_factor: 0.25,
                end_factor: 1.0,
                total_iters: 8,
            },
        ),
        (
            "constant",
            Schedule::Constant {
                factor: 0.5,
                total_iters: 6,
            },
        ),
        (
            "polynomial",
            Schedule::Polynomial {
                total_iters: 20,
                power: 2.0,
            },
        ),
        (
            "lambda",
            Schedule::Lambda(Arc::new(|e| 1.0 / (1.0 + e as f64))),
        ),
        (
            "one_cycle",
            Schedule::OneCycle {
                max_lr: 0.5,
                total_steps: 31,
                pct_start: 0.3,
                div_factor: 25.0,
                final_div_factor: 1e4,
                momentum: None,
            },
        ),
        (
            "cyclic",
            Schedule::Cyclic {
                max_lr: 0.4,
                step_size_up: 5,
                step_size_down: None,
                mode: CyclicMode::Triangular,
                momentum: None,
            },
        ),
        (
            "cyclic_triangular2",
            Schedule::Cyclic {
                max_lr: 0.4,
                step_size_up: 3,
                step_size_down: Some(5),
                mode: CyclicMode::Triangular2,
                momentum: None,
            },
        ),
        (
            "cyclic_exp_range",
            Schedule::Cyclic {
                max_lr: 0.4,
                step_size_up: 4,
                step_size_down: None,
                mode: CyclicMode::ExpRange { gamma: 0.95 },
                momentum: None,
            },
        ),
    ];
    for (name, schedule) in cases {
        let mut opt = sgd();
        let mut sched = Scheduler::new(&mut opt, schedule);
        let mut lrs = vec![opt.lr()];
        for _ in 0..30 {
            opt.step();
            sched.step(&mut opt);
            lrs.push(opt.lr());
        }
        assert_sequence(name, &lrs);
        assert_eq!(sched.last_lr(), opt.lr());
    }
}

#[test]
fn reduce_on_plateau_matches_pytorch() {
    let metrics = [1.0, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8, 0.8].repeat(3);
    let mut opt = sgd();
    let mut plateau = ReduceLROnPlateau::new(0.5, 2);
    plateau.cooldown = 1;
    let mut lrs = vec![opt.lr()];
    for m in metrics {
        plateau.step(&mut opt, m);
        lrs.push(opt.lr());
    }
    assert_sequence("plateau", &lrs);
}

#[test]
fn a_scheduler_resumes_from_its_state() {
    let mut opt = sgd();
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: 10,
            eta_min: 0.0,
        },
    );
    for _ in 0..4 {
        sched.step(&mut opt);
    }
    let state = sched.state_dict();
    let mut opt2 = sgd();
    let mut resumed = Scheduler::new(
        &mut opt2,
        Schedule::CosineAnnealing {
            t_max: 10,
            eta_min: 0.0,
        },
    );
    resumed.load_state_dict(&state);
    sched.step(&mut opt);
    resumed.step(&mut opt2);
    assert_eq!((resumed.last_epoch(), opt2.lr()), (5, opt.lr()));
}

/// Runs `schedule` for 30 steps on SGD (momentum 0.9; with `second_lr`, a second group
/// of that rate) and returns `read(optimizer)` after each.
fn run_sgd(schedule: Schedule, second_lr: Option<f64>, read: impl Fn(&Sgd) -> f64) -> Vec<f64> {
    use ferrograd::optim::ParamGroup;
    let w = || Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    let mut groups = vec![ParamGroup::new(
        vec![w()],
        SgdConfig::new(0.1).momentum(0.9),
    )];
    if let Some(lr) = second_lr {
        groups.push(ParamGroup::new(vec![w()], SgdConfig::new(lr).momentum(0.9)));
    }
    let mut opt = Sgd::with_groups(groups);
    let mut sched = Scheduler::new(&mut opt, schedule);
    let mut out = vec![read(&opt)];
    for _ in 0..30 {
        opt.step();
        sched.step(&mut opt);
        out.push(read(&opt));
    }
    out
}

/// OneCycleLR and CyclicLR cycle the momentum against the rate; SequentialLR and
/// ChainedScheduler compose schedules; every group follows the schedule from its own
/// initial rate, ReduceLROnPlateau included.
#[test]
fn momentum_cycles_compositions_and_groups_match_pytorch() {
    let momentum = |o: &Sgd| o.group_momentum(0).unwrap();
    let one_cycle = Schedule::OneCycle {
        max_lr: 0.5,
        total_steps: 31,
        pct_start: 0.3,
        div_factor: 25.0,
        final_div_factor: 1e4,
        momentum: Some((0.85, 0.95)),
    };
    assert_sequence("one_cycle_momentum", &run_sgd(one_cycle, None, momentum));
    let cyclic = Schedule::Cyclic {
        max_lr: 0.4,
        step_size_up: 5,
        step_size_down: None,
        mode: CyclicMode::Triangular,
        momentum: Some((0.8, 0.9)),
    };
    assert_sequence("cyclic_momentum", &run_sgd(cyclic, None, momentum));
    let sequential = Schedule::Sequential {
        schedules: vec![
            Schedule::Linear {
                start_factor: 0.1,
                end_factor: 1.0,
                total_iters: 5,
            },
            Schedule::Exponential { gamma: 0.9 },
            Schedule::Step {
                step_size: 3,
                gamma: 0.5,
            },
        ],
        milestones: vec![5, 15],
    };
    assert_sequence("sequential", &run_sgd(sequential, None, |o| o.lr()));
    let chained = Schedule::Chained(vec![
        Schedule::Constant {
            factor: 0.1,
            total_iters: 4,
        },
        Schedule::Exponential { gamma: 0.9 },
    ]);
    assert_sequence("chained", &run_sgd(chained, None, |o| o.lr()));
    let cosine = Schedule::CosineAnnealing {
        t_max: 12,
        eta_min: 0.01,
    };
    assert_sequence(
        "cosine_second_group",
        &run_sgd(cosine, Some(0.3), |o| o.group_lr(1)),
    );

    let metrics = [1.0, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8, 0.8].repeat(3);
    let w = || Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    let mut opt = Sgd::with_groups(vec![
        ferrograd::optim::ParamGroup::new(vec![w()], SgdConfig::new(0.1)),
        ferrograd::optim::ParamGroup::new(vec![w()], SgdConfig::new(0.3)),
    ]);
    let mut plateau = ReduceLROnPlateau::new(0.5, 2);
    plateau.cooldown = 1;
    let mut lrs = vec![opt.group_lr(1)];
    for m in metrics {
        plateau.step(&mut opt, m);
        lrs.push(opt.group_lr(1));
    }
    assert_sequence("plateau_second_group", &lrs);
}
