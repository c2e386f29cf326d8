//! `network!`: generated modules behave like hand-written ones.

use ferrograd::nn::Module;
use ferrograd::prelude::*;

network! {
    /// LeNet-5 for 28x28 digits.
    pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2),
        relu,
        max_pool2d(2),
        conv2: Conv2d(6 -> 16, kernel = 5),
        relu,
        max_pool2d(2) => [N, 16, 5, 5],
        flatten,
        fc1: Linear(400 -> 120), relu,
        fc2: Linear(120 -> 84), relu,
        fc3: Linear(84 -> 10),
    }
}

network! {
    /// An MLP whose hidden width is a const generic, checked symbolically.
    pub struct Mlp<const H: usize>(x: [B, 784]) -> [B, 10] {
        fc1: Linear(784 -> H),
        gelu,
        norm: LayerNorm(H),
        drop: Dropout(0.1),
        fc2: Linear(H -> 10),
        log_softmax,
    }
}

fn hand_written_lenet(m: &LeNet, x: &Tensor) -> Tensor {
    let y = F::conv2d(
        x,
        &m.conv1.weight,
        m.conv1.bias.as_ref(),
        &F::Conv2dArgs::default().padding(2),
    )
    .relu();
    let y = F::max_pool2d(&y, 2);
    let y = F::conv2d(
        &y,
        &m.conv2.weight,
        m.conv2.bias.as_ref(),
        &F::Conv2dArgs::default(),
    )
    .relu();
    let y = F::max_pool2d(&y, 2).reshape(&[x.size(0), 400]);
    let y = F::linear(&y, &m.fc1.weight, m.fc1.bias.as_ref()).relu();
    let y = F::linear(&y, &m.fc2.weight, m.fc2.bias.as_ref()).relu();
    F::linear(&y, &m.fc3.weight, m.fc3.bias.as_ref())
}

#[test]
fn generated_forward_equals_the_hand_written_one() {
    manual_seed(1);
    let net = LeNet::new(&Device::Cpu);
    let x = Tensor::randn(&[3, 1, 28, 28], DType::F32, &Device::Cpu);
    let y = net.forward(&x);
    assert_eq!(y.shape(), &[3, 10]);
    assert!(y.allclose(&hand_written_lenet(&net, &x), 1e-6, 1e-6));
    y.sum_all().backward();
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
}

#[test]
fn parameter_names_and_counts() {
    let net = LeNet::new(&Device::Cpu);
    let keys: Vec<String> = net.state_dict().into_keys().collect();
    let expected = include_str!("fixtures/lenet_state_dict_keys.txt");
    let mut expected: Vec<&str> = expected.lines().collect();
    expected.sort_unstable();
    assert_eq!(
        keys, expected,
        "state_dict keys match PyTorch's for the same module"
    );
    assert_eq!(LeNet::NUM_PARAMETERS, 61_706);
    assert_eq!(net.num_parameters(), LeNet::NUM_PARAMETERS);
    let mlp = Mlp::<32>::new(&Device::Cpu);
    assert_eq!(
        Mlp::<32>::NUM_PARAMETERS,
        784 * 32 + 32 + 2 * 32 + 32 * 10 + 10
    );
    assert_eq!(mlp.num_parameters(), Mlp::<32>::NUM_PARAMETERS);
}

#[test]
fn summary_lists_layers_with_shapes_and_parameters() {
    let summary = LeNet::summary();
    assert!(
        summary.contains("conv2")
            && summary.contains("[N, 16, 10, 10]")
            && summary.contains("2416"),
        "{summary}"
    );
    assert!(
        summary.contains("Total trainable parameters: 61706"),
        "{summary}"
    );
}

#[test]
fn train_and_eval_reach_generated_children() {
    let mut mlp = Mlp::<16>::new(&Device::Cpu);
    assert!(mlp.drop.training);
    mlp.eval();
    assert!(!mlp.drop.training);
    let x = Tensor::randn(&[4, 784], DType::F32, &Device::Cpu);
    let a = mlp.forward(&x);
    assert!(
        a.allclose(&mlp.forward(&x), 0.0, 0.0),
        "eval mode is deterministic"
    );
    assert_eq!(a.shape(), &[4, 10]);
}

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(f).expect_err("expected a panic");
    err.downcast::<String>().map(|s| *s).unwrap_or_default()
}

#[test]
fn forward_checks_the_input_shape_at_run_time() {
    let net = LeNet::new(&Device::Cpu);
    let m = panic_message(|| {
        net.forward(&Tensor::zeros(&[2, 1, 32, 32], DType::F32, &Device::Cpu));
    });
    assert!(
        m.contains("LeNet.forward")
            && m.contains("dim 2")
            && m.contains("[N, 1, 28, 28]")
            && m.contains("[2, 1, 32, 32]"),
        "{m}"
    );
    let m = panic_message(|| {
        net.forward(&Tensor::zeros(&[28, 28], DType::F32, &Device::Cpu));
    });
    assert!(m.contains("rank 4"), "{m}");
}

network! {
    /// Two inputs, a residual connection and a concatenation.
    pub struct Fusion(image: [B, 32], text: [B, 16]) -> [B, 4] {
        fc1: Linear(32 -> 32),
        relu,
        let hidden,
        fc2: Linear(32 -> 32),
        + hidden,
        + image,
        cat(text, dim = 1) => [B, 48],
        norm: LayerNorm(48),
        head: Linear(48 -> 4),
    }
}

#[test]
fn residual_connections_concatenation_and_several_inputs() {
    let net = Fusion::new(&Device::Cpu);
    let image = Tensor::randn(&[5, 32], DType::F32, &Device::Cpu);
    let text = Tensor::randn(&[5, 16], DType::F32, &Device::Cpu);
    let got = net.forward(&image, &text);
    let hidden = net.fc1.forward(&image).relu();
    let y = &(&net.fc2.forward(&hidden) + &hidden) + &image;
    let y = Tensor::cat(&[&y, &text], 1);
    let expected = net.head.forward(&net.norm.forward(&y));
    assert!(got.allclose(&expected, 1e-6, 1e-6));
    let m = panic_message(|| {
        net.forward(&image, &Tensor::randn(&[4, 16], DType::F32, &Device::Cpu));
    });
    assert!(
        m.contains("Fusion.forward") && m.contains("`text`") && m.contains("`B` is 5"),
        "{m}"
    );
}

network! {
    /// A residual block, used below as a layer of another network.
    pub struct ResBlock(x: [N, 64]) -> [N, 64] {
        fc1: Linear(64 -> 64),
        relu,
        fc2: Linear(64 -> 64),
        + x,
    }
}

network! {
    pub struct Tower(x: [B, 32]) -> [B, 10] {
        stem: Linear(32 -> 64),
        block1: ResBlock => [B, 64],
        block2: ResBlock => [B, 64],
        head: Linear(64 -> 10),
    }
}

#[test]
fn networks_nest_as_layers_with_checked_shapes() {
    let tower = Tower::new(&Device::Cpu);
    let x = Tensor::randn(&[3, 32], DType::F32, &Device::Cpu);
    let expected = tower.head.forward(
        &tower
            .block2
            .forward(&tower.block1.forward(&tower.stem.forward(&x))),
    );
    assert!(tower.forward(&x).allclose(&expected, 1e-6, 1e-6));
    let names: Vec<String> = tower
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        names.contains(&"block2.fc1.weight".to_string()),
        "{names:?}"
    );
    assert_eq!(
        Tower::NUM_PARAMETERS,
        32 * 64 + 64 + 2 * ResBlock::NUM_PARAMETERS + 64 * 10 + 10
    );
    assert!(Tower::summary().contains("ResBlock"));
}

/// A hand-written module joining `network!` through `DeclaredShapes`, with a wrong
/// parameter count.
#[derive(ferrograd::nn::Module)]
pub struct Liar {
    fc: ferrograd::nn::Linear,
}

impl Liar {
    pub fn new(device: &Device) -> Self {
        Liar {
            fc: ferrograd::nn::Linear::new(8, 8, device),
        }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

impl ferrograd::nn::DeclaredShapes for Liar {
    const INPUT: &'static [ferrograd::nn::DeclaredDim] = &[
        ferrograd::nn::DeclaredDim::Sym("N"),
        ferrograd::nn::DeclaredDim::Lit(8),
    ];
    const OUTPUT: &'static [ferrograd::nn::DeclaredDim] = &[
        ferrograd::nn::DeclaredDim::Sym("N"),
        ferrograd::nn::DeclaredDim::Lit(8),
    ];
    const PARAMETERS: usize = 64;
}

network! {
    pub struct UsesLiar(x: [N, 8]) -> [N, 8] {
        inner: Liar => [N, 8],
    }
}

#[test]
fn a_wrong_declared_parameter_count_is_caught_at_construction() {
    let m = panic_message(|| {
        UsesLiar::new(&Device::Cpu);
    });
    assert!(
        m.contains("`Liar` declares 64 parameters") && m.contains("hold 72"),
        "{m}"
    );
}

/// A module written entirely by hand (its own `impl Module`, as a type of another crate
/// would be), joining `network!` through `declared_shapes!`.
pub struct Doubler {
    scale: Tensor,
}

impl Doubler {
    pub fn new(device: &Device) -> Self {
        Doubler {
            scale: Tensor::full(&[4], 2.0, DType::F32, device).requires_grad(true),
        }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x * &self.scale
    }
}

impl ferrograd::nn::Module for Doubler {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, ferrograd::nn::TensorKind)) {
        f(
            &ferrograd::nn::join_path(prefix, "scale"),
            &self.scale,
            ferrograd::nn::TensorKind::Parameter,
        );
    }
    fn visit_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor, ferrograd::nn::TensorKind),
    ) {
        f(
            &ferrograd::nn::join_path(prefix, "scale"),
            &mut self.scale,
            ferrograd::nn::TensorKind::Parameter,
        );
    }
    fn set_training(&mut self, _training: bool) {}
}

impl ferrograd::nn::DeclaredShapes for Doubler {
    const INPUT: &'static [ferrograd::nn::DeclaredDim] = &[
        ferrograd::nn::DeclaredDim::Sym("N"),
        ferrograd::nn::DeclaredDim::Lit(4),
    ];
    const OUTPUT: &'static [ferrograd::nn::DeclaredDim] = &[
        ferrograd::nn::DeclaredDim::Sym("N"),
        ferrograd::nn::DeclaredDim::Lit(4),
    ];
    const PARAMETERS: usize = 4;
}

ferrograd::declared_shapes!(Doubler);

network! {
    pub struct UsesDoubler(x: [B, 4]) -> [B, 2] {
        double: Doubler => [B, 4],
        fc: Linear(4 -> 2),
    }
}

#[test]
fn a_hand_written_module_joins_through_declared_shapes() {
    let m = UsesDoubler::new(&Device::Cpu);
    assert_eq!(UsesDoubler::NUM_PARAMETERS, 4 + 4 * 2 + 2);
    let keys: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&"double.scale".to_string()), "{keys:?}");
    let x = Tensor::ones(&[3, 4], DType::F32, &Device::Cpu);
    let direct = m.fc.forward(&m.double.forward(&x));
    assert_eq!(m.forward(&x).to_vec::<f32>(), direct.to_vec::<f32>());
}
