//! Optimizer state: every optimizer resumes exactly from its state dict, state dicts follow
//! parameter names, and parameter groups keep their own options.

use super::*;

/// Makes every fixture optimizer over (a, b), runs `k` steps, and returns it with its
/// parameters.
pub(super) fn stepped(
    make: Make,
    fx: &HashMap<String, Tensor>,
    k: usize,
) -> (Box<dyn Optimizer>, Tensor, Tensor) {
    let a = fx["init_a"].deep_copy().requires_grad(true);
    let b = fx["init_b"].deep_copy().requires_grad(true);
    let mut opt = make(vec![a.clone(), b.clone()]);
    for i in 0..k {
        a.set_grad(Some(fx[&format!("g{i}_a")].clone()));
        b.set_grad(fx.get(&format!("g{i}_b")).cloned());
        opt.step();
    }
    (opt, a, b)
}

/// For every optimizer: 10 steps, a state dict through its flat (checkpoint) form into
/// a fresh optimizer over copies of the parameters, 10 more steps; the result equals 20
/// straight steps bit for bit.
#[test]
fn every_optimizer_resumes_exactly_from_its_state_dict() {
    let fx = fixtures();
    for (name, make) in configs() {
        let (mut straight, a, b) = stepped(make, &fx, 10);
        let (tensors, groups) = straight.state_dict().to_flat();
        let restored = ferrograd::optim::OptimizerState::from_flat(&tensors, &groups).unwrap();
        let (a2, b2) = (
            a.detach().deep_copy().requires_grad(true),
            b.detach().deep_copy().requires_grad(true),
        );
        // A fresh optimizer with other options: the state dict brings them back.
        let mut resumed = make(vec![a2.clone(), b2.clone()]);
        resumed.set_lr(123.0);
        resumed.load_state_dict(&restored).unwrap();
        assert_eq!(resumed.lr(), straight.lr(), "{name}");
        for i in 10..STEPS {
            for (p, q, which) in [(&a, &a2, "a"), (&b, &b2, "b")] {
                let g = fx.get(&format!("g{i}_{which}")).cloned();
                p.set_grad(g.clone());
                q.set_grad(g);
            }
            straight.step();
            resumed.step();
        }
        assert_eq!(a.to_vec::<f64>(), a2.to_vec::<f64>(), "{name}: a");
        assert_eq!(b.to_vec::<f64>(), b2.to_vec::<f64>(), "{name}: b");
    }
}

/// State is keyed by parameter name: an optimizer over the same named parameters in
/// another order loads it; a state dict naming an unknown parameter or mis-shaped state
/// is an error that leaves the optimizer unchanged.
#[test]
fn state_dicts_follow_parameter_names() {
    let make = |names: [&str; 2], shapes: [&[usize]; 2]| {
        let ps: Vec<(String, Tensor)> = names
            .iter()
            .zip(shapes)
            .map(|(n, s)| {
                (
                    n.to_string(),
                    Tensor::ones(s, DType::F64, &Device::Cpu).requires_grad(true),
                )
            })
            .collect();
        for (_, p) in &ps {
            p.set_grad(Some(Tensor::full(p.shape(), 0.5, DType::F64, &Device::Cpu)));
        }
        (Adam::named(ps.clone(), AdamConfig::default()), ps)
    };
    let (mut opt, _) = make(["fc.weight", "fc.bias"], [&[2, 3], &[2]]);
    opt.step();
    let sd = opt.state_dict();
    assert_eq!(
        sd.state.keys().collect::<Vec<_>>(),
        ["fc.bias", "fc.weight"]
    );
    assert_eq!(sd.param_groups[0].params, ["fc.weight", "fc.bias"]);
    let (mut reordered, _) = make(["fc.bias", "fc.weight"], [&[2], &[2, 3]]);
    reordered.load_state_dict(&sd).unwrap();
    assert_eq!(reordered.state(1).unwrap().step, 1);
    assert_eq!(
        reordered
            .state(1)
            .unwrap()
            .buffer("exp_avg")
            .unwrap()
            .shape(),
        &[2, 3]
    );

    let (mut other, _) = make(["head.weight", "head.bias"], [&[2, 3], &[2]]);
    let err = other.load_state_dict(&sd).unwrap_err();
    assert!(err.to_string().contains("parameter group 0 holds"), "{err}");
    assert!(other.state(0).is_none());

    let (mut misshaped, _) = make(["fc.weight", "fc.bias"], [&[3, 2], &[2]]);
    let err = misshaped.load_state_dict(&sd).unwrap_err();
    assert!(err.to_string().contains("has shape [2, 3]"), "{err}");
    assert!(misshaped.state(0).is_none());

    let mut bad = sd.clone();
    bad.param_groups[0]
        .hyper
        .insert("momentum".into(), ferrograd::optim::Hyper::Float(0.9));
    let err = opt.load_state_dict(&bad).unwrap_err();
    assert!(err.to_string().contains("\"momentum\""), "{err}");
    assert!(ferrograd::optim::OptimizerState::from_flat(&Default::default(), "{").is_err());
}

/// "No weight decay on biases and norms": two groups from `named_parameters`, each with
/// its own weight decay and learning rate; `add_param_group` and per-group `set_group_lr`.
#[test]
fn parameter_groups_have_their_own_options() {
    network! {
        struct Net(x: [N, 4]) -> [N, 2] {
            fc: Linear(4 -> 2),
        }
    }
    let net = Net::new(&Device::Cpu);
    let (decay, no_decay): (Vec<_>, Vec<_>) = net
        .named_parameters()
        .into_iter()
        .partition(|(n, _)| n.ends_with("weight"));
    let base = AdamConfig::default().lr(0.1);
    let mut opt = AdamW::with_groups(vec![ParamGroup::named(
        decay,
        base.clone().weight_decay(0.5),
    )]);
    opt.add_param_group(ParamGroup::named(no_decay, base.weight_decay(0.0)));
    assert_eq!(opt.num_groups(), 2);
    assert_eq!(opt.param_groups()[1].names, ["fc.bias"]);
    let bias = net.fc.bias.clone().unwrap();
    let (w0, b0) = (net.fc.weight.deep_copy(), bias.deep_copy());
    // Zero gradients: only decoupled decay moves a parameter.
    for p in opt.params() {
        p.set_grad(Some(Tensor::zeros(p.shape(), DType::F32, &Device::Cpu)));
    }
    opt.set_group_lr(1, 0.0);
    opt.step();
    assert_close(&net.fc.weight, &(&w0 * (1.0 - 0.1 * 0.5)), DType::F32);
    assert_eq!(bias.to_vec::<f32>(), b0.to_vec::<f32>());
    assert_eq!(opt.group_lr(1), 0.0);
    let sd = opt.state_dict();
    assert_eq!(sd.param_groups.len(), 2);
    assert_eq!(
        sd.param_groups[0].hyper["weight_decay"],
        ferrograd::optim::Hyper::Float(0.5)
    );
}

#[test]
#[should_panic(expected = "some parameters appear in more than one parameter group")]
fn a_parameter_in_two_groups_is_refused() {
    let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    Sgd::with_groups(vec![
        ParamGroup::new(vec![w.clone()], SgdConfig::new(0.1)),
        ParamGroup::new(vec![w], SgdConfig::new(0.2)),
    ]);
}
