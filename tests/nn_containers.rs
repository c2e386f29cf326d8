//! Sequential, ModuleList and ModuleDict: PyTorch's state-dict keys, forward as the chain
//! of its layers, train/eval reaching every child, and derived modules joining in.

use ferrograd::nn::{
    Conv2d, Dropout, Flatten, Forward, Layer, Linear, MaxPool2d, Module, ModuleDict, ModuleList,
    ReLU, ReLU6, Sequential,
};
use ferrograd::prelude::*;

fn keys(m: &impl Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(k, _)| k).collect()
}

/// `nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Sequential(nn.Flatten(),
/// nn.Linear(4 * 13 * 13, 10)))`: parameter names in PyTorch's order.
fn small_cnn() -> Sequential {
    small_cnn_seeded(3)
}

/// [`small_cnn`] initialised from `seed`.
fn small_cnn_seeded(seed: u64) -> Sequential {
    manual_seed(seed);
    Sequential::new()
        .append(Conv2d::new(
            1,
            4,
            [3, 3],
            F::Conv2dArgs::default(),
            &Device::Cpu,
        ))
        .append(ReLU)
        .append(MaxPool2d::new(2))
        .append(
            Sequential::new()
                .append(Flatten::default())
                .append(Linear::new(4 * 13 * 13, 10, &Device::Cpu)),
        )
}

#[test]
fn sequential_names_children_by_position_as_pytorch() {
    let net = small_cnn();
    assert_eq!(
        keys(&net),
        ["0.weight", "0.bias", "3.1.weight", "3.1.bias"],
        "torch.nn.Sequential's named_parameters order"
    );
    assert_eq!(net.num_parameters(), 4 * 9 + 4 + 4 * 13 * 13 * 10 + 10);
}

#[test]
fn sequential_forward_is_the_chain_of_its_layers() {
    let net = small_cnn();
    let x = Tensor::randn_with(
        &[2, 1, 28, 28],
        DType::F32,
        &Device::Cpu,
        &mut Generator::new(1),
    );
    let by_hand = {
        let conv = net[0].forward(&x);
        let h = F::max_pool2d(&conv.relu(), 2);
        net[3].forward(&h)
    };
    let y = net.forward(&x);
    assert_eq!(y.shape(), &[2, 10]);
    assert_eq!(y.to_vec::<f32>(), by_hand.to_vec::<f32>());
    // Through the trait too, and an empty chain is the identity.
    assert_eq!(
        Forward::forward(&net, &x).to_vec::<f32>(),
        y.to_vec::<f32>()
    );
    assert_eq!(
        Sequential::new().forward(&x).to_vec::<f32>(),
        x.to_vec::<f32>()
    );
}

#[test]
fn eval_reaches_layers_inside_a_sequential() {
    let mut net = Sequential::new()
        .append(Linear::new(8, 8, &Device::Cpu))
        .append(Dropout::new(0.5));
    let x = Tensor::ones(&[4, 8], DType::F32, &Device::Cpu);
    net.eval();
    let (a, b) = (net.forward(&x), net.forward(&x));
    assert_eq!(a.to_vec::<f32>(), b.to_vec::<f32>(), "eval: dropout is off");
    net.train();
    let zeros = net
        .forward(&x)
        .eq_scalar(0.0)
        .to_dtype(DType::F32)
        .sum_all()
        .item::<f32>();
    assert!(zeros > 0.0, "train: dropout zeroes some outputs");
}

#[test]
fn sequential_state_dict_round_trips_into_a_fresh_model() {
    let trained = small_cnn();
    let mut fresh = small_cnn_seeded(99);
    let x = Tensor::randn_with(
        &[1, 1, 28, 28],
        DType::F32,
        &Device::Cpu,
        &mut Generator::new(5),
    );
    assert_ne!(
        fresh.forward(&x).to_vec::<f32>(),
        trained.forward(&x).to_vec::<f32>()
    );
    fresh.load_state_dict(&trained.state_dict(), true).unwrap();
    assert_eq!(
        fresh.forward(&x).to_vec::<f32>(),
        trained.forward(&x).to_vec::<f32>()
    );
}

/// A residual block written as a derived struct with its own forward.
#[derive(Module)]
struct Residual {
    fc: Linear,
}

impl<'a> Forward<&'a Tensor> for Residual {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        &self.fc.forward(x).relu6() + x
    }
}

#[test]
fn a_derived_module_with_a_forward_joins_a_sequential() {
    let net = Sequential::new()
        .append(Residual {
            fc: Linear::new(3, 3, &Device::Cpu),
        })
        .append(ReLU6);
    assert_eq!(keys(&net), ["0.fc.weight", "0.fc.bias"]);
    let x = Tensor::from_vec(vec![-1.0f32, 2.0, 9.0], &[1, 3]);
    let block: &dyn Layer = &net[0];
    let want = block.forward(&x).relu6();
    assert_eq!(net.forward(&x).to_vec::<f32>(), want.to_vec::<f32>());
    // Gradients reach the block's parameters through the chain.
    net.forward(&x).sum_all().backward();
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
}

#[test]
fn module_list_and_dict_key_by_index_and_name() {
    let mut list: ModuleList<Linear> = ModuleList::new();
    list.push(Linear::new(2, 2, &Device::Cpu));
    list.push(Linear::new(2, 3, &Device::Cpu));
    assert_eq!(keys(&list), ["0.weight", "0.bias", "1.weight", "1.bias"]);
    assert_eq!(list[1].weight.shape(), &[3, 2]);

    let mut boxed: ModuleList = ModuleList::new();
    boxed.push(Box::new(Linear::new(2, 2, &Device::Cpu)));
    boxed.push(Box::new(ReLU));
    assert_eq!(boxed.len(), 2);
    assert_eq!(keys(&boxed), ["0.weight", "0.bias"]);

    let mut heads: ModuleDict<Linear> = ModuleDict::new();
    assert!(
        heads
            .insert("cls", Linear::new(4, 10, &Device::Cpu))
            .is_none()
    );
    heads.insert("box", Linear::new(4, 4, &Device::Cpu));
    // Replacing keeps the position, as assignment to a ModuleDict key does.
    let old = heads
        .insert("cls", Linear::new(4, 5, &Device::Cpu))
        .unwrap();
    assert_eq!(old.weight.shape(), &[10, 4]);
    assert_eq!(heads.keys().collect::<Vec<_>>(), ["cls", "box"]);
    assert_eq!(
        keys(&heads),
        ["cls.weight", "cls.bias", "box.weight", "box.bias"]
    );
    assert_eq!(heads["cls"].weight.shape(), &[5, 4]);
    assert!(heads.remove("box").is_some() && heads.len() == 1);
}

#[test]
#[should_panic(expected = "module name can't be empty or contain \".\"")]
fn module_dict_refuses_a_dotted_name() {
    let mut d: ModuleDict<Linear> = ModuleDict::new();
    d.insert("a.b", Linear::new(1, 1, &Device::Cpu));
}

/// BatchNorm counts training batches in `num_batches_tracked` (so PyTorch state dicts load
/// strictly) and, with `momentum = None`, keeps PyTorch's cumulative average.
#[test]
fn batch_norm_tracks_batches_and_supports_a_cumulative_average() {
    use ferrograd::nn::BatchNorm1d;
    let batches: Vec<Tensor> = (0..3)
        .map(|i| Tensor::randn_with(&[16, 2], DType::F64, &Device::Cpu, &mut Generator::new(i)))
        .collect();
    let mean_of = |f: &dyn Fn(&Tensor) -> Tensor| -> Vec<f64> {
        let stats: Vec<Vec<f64>> = batches.iter().map(|b| f(b).to_vec::<f64>()).collect();
        (0..2)
            .map(|c| stats.iter().map(|s| s[c]).sum::<f64>() / 3.0)
            .collect()
    };
    let mut bn = BatchNorm1d::new(2, &Device::Cpu);
    bn.to_dtype(DType::F64);
    bn.momentum = None;
    for b in &batches {
        bn.forward(b);
    }
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().item::<i64>(), 3);
    assert_eq!(
        bn.num_batches_tracked.as_ref().unwrap().dtype(),
        DType::I64,
        "to_dtype leaves the count alone"
    );
    let want_mean = mean_of(&|b| b.mean(&[0], false));
    let want_var = mean_of(&|b| b.var(&[0], true, false));
    for (got, want) in bn
        .running_mean
        .as_ref()
        .unwrap()
        .to_vec::<f64>()
        .iter()
        .zip(&want_mean)
    {
        assert!(
            (got - want).abs() < 1e-12,
            "cumulative mean {got} vs {want}"
        );
    }
    for (got, want) in bn
        .running_var
        .as_ref()
        .unwrap()
        .to_vec::<f64>()
        .iter()
        .zip(&want_var)
    {
        assert!((got - want).abs() < 1e-12, "cumulative var {got} vs {want}");
    }
    // Eval does not count; the default momentum is PyTorch's 0.1.
    bn.eval();
    bn.forward(&batches[0]);
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().item::<i64>(), 3);
    let mut fresh = BatchNorm1d::new(2, &Device::Cpu);
    fresh.to_dtype(DType::F64);
    fresh.forward(&batches[0]);
    let first_mean = batches[0].mean(&[0], false).to_vec::<f64>();
    for (got, want) in fresh
        .running_mean
        .as_ref()
        .unwrap()
        .to_vec::<f64>()
        .iter()
        .zip(&first_mean)
    {
        assert!((got - 0.1 * want).abs() < 1e-12);
    }
    // The count is part of the state dict and loads strictly.
    let state = bn.state_dict();
    assert_eq!(state["num_batches_tracked"].shape(), &[] as &[usize]);
    fresh.load_state_dict(&state, true).unwrap();
    assert_eq!(fresh.num_batches_tracked.as_ref().unwrap().item::<i64>(), 3);
}
