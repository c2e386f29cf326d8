//! `network!` blocks declared in one invocation (and module) used as layers of a network
//! declared in another, without annotations: checked through the fetched declaration.

use ferrograd::nn::Module;
use ferrograd::prelude::*;

mod blocks {
    use ferrograd::prelude::*;

    network! {
        /// A residual MLP block whose width is a const parameter.
        pub struct ResBlock<const C: usize>(x: [N, C]) -> [N, C] {
            let y = x -> fc1: Linear(C -> C) -> relu -> fc2: Linear(C -> C);
            relu(y + x)
        }
    }

    network! {
        /// A stride-2 convolution block.
        pub struct Down<const CIN: usize, const COUT: usize>(x: [N, CIN, H, W])
            -> [N, COUT, (H + 1) / 2, (W + 1) / 2] {
            conv: Conv2d(CIN -> COUT, kernel = 3, stride = 2, padding = 1),
            bn: BatchNorm2d(COUT),
            relu,
        }
    }
}

mod model {
    use super::blocks::{Down, ResBlock};
    use ferrograd::prelude::*;

    network! {
        /// Uses blocks from another module and another invocation.
        pub struct Tower(x: [B, 32]) -> [B, 10] {
            fc: Linear(32 -> 64),
            block: ResBlock<64>,
            more: [ResBlock<64>; 2],
            head: Linear(64 -> 10),
        }
    }

    network! {
        /// Two different fetched declarations in one network, over symbolic sizes.
        pub struct Encoder(x: [N, 3, H, W]) -> [N, 32, ((H + 1) / 2 + 1) / 2, ((W + 1) / 2 + 1) / 2] {
            let y = x -> d1: Down<3, 16> -> d2: Down<16, 32>;
            y
        }
    }
}

network! {
    /// A later invocation in the same module as its block.
    struct Local<const D: usize>(x: [N, D]) -> [N, D] {
        fc: Linear(D -> D),
    }
}

network! {
    struct UsesLocal(x: [N, 8]) -> [N, 8] {
        a: Local<8>,
        b: (Local<8>, Local<8>),
    }
}

#[test]
fn blocks_from_another_invocation_are_layers() {
    let dev = Device::Cpu;
    let tower = model::Tower::new(&dev);
    let x = Tensor::randn(&[5, 32], DType::F32, &dev);
    let h = tower.fc.forward(&x);
    let h = tower.block.forward(&h);
    let h = tower.more[1].forward(&tower.more[0].forward(&h));
    let want = tower.head.forward(&h);
    let got = tower.forward(&x);
    assert_eq!(got.shape(), &[5, 10]);
    assert!(got.allclose(&want, 0.0, 0.0));
    let keys: Vec<String> = tower
        .named_parameters()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for k in [
        "fc.weight",
        "block.fc1.weight",
        "block.fc2.bias",
        "more.0.fc1.weight",
        "more.1.fc2.bias",
        "head.bias",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
    let block = blocks::ResBlock::<64>::NUM_PARAMETERS;
    assert_eq!(block, 2 * (64 * 64 + 64));
    assert_eq!(
        model::Tower::NUM_PARAMETERS,
        32 * 64 + 64 + 3 * block + 64 * 10 + 10
    );
    assert_eq!(tower.num_parameters(), model::Tower::NUM_PARAMETERS);
}

#[test]
fn fetched_blocks_keep_symbolic_sizes() {
    let dev = Device::Cpu;
    let enc = model::Encoder::new(&dev);
    let x = Tensor::randn(&[2, 3, 13, 9], DType::F32, &dev);
    let y = enc.forward(&x);
    // 13 -> 7 -> 4, 9 -> 5 -> 3.
    assert_eq!(y.shape(), &[2, 32, 4, 3]);
    let want = enc.d2.forward(&enc.d1.forward(&x));
    assert!(y.allclose(&want, 0.0, 0.0));
}

#[test]
fn a_block_from_an_earlier_invocation_in_the_same_module() {
    let dev = Device::Cpu;
    let m = UsesLocal::new(&dev);
    let x = Tensor::randn(&[3, 8], DType::F32, &dev);
    let want = m.b.1.forward(&m.b.0.forward(&m.a.forward(&x)));
    assert!(m.forward(&x).allclose(&want, 0.0, 0.0));
    assert_eq!(UsesLocal::NUM_PARAMETERS, 3 * (8 * 8 + 8));
}

/// Re-exporting a network publicly re-exports its struct (its declaration macro stays
/// crate-wide).
pub use blocks::ResBlock as PublicBlock;
pub mod reexport {
    pub use super::blocks::Down;
}

/// A hand-written module declaring its shapes through the derive: its count is given
/// (it holds built-in layers, whose sizes the derive cannot see) and checked when a
/// network builds it.
#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = [N, 4], parameters = 8 * 4 + 4)]
pub struct Head {
    fc: ferrograd::nn::Linear,
}

impl Head {
    pub fn new(device: &Device) -> Self {
        Head {
            fc: ferrograd::nn::Linear::new(8, 4, device),
        }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x).relu()
    }
}

/// Its children all declare shapes, so the derive sums their counts at compile time.
#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = [N, 8])]
pub struct TwoBlocks {
    a: Local<8>,
    b: Local<8>,
}

impl TwoBlocks {
    pub fn new(device: &Device) -> Self {
        TwoBlocks {
            a: Local::new(device),
            b: Local::new(device),
        }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.b.forward(&self.a.forward(x))
    }
}

network! {
    struct UsesDerived(x: [N, 8]) -> [N, 4] {
        blocks: TwoBlocks,
        head: Head,
    }
}

#[test]
fn derive_types_with_declared_shapes_are_checked_layers() {
    use ferrograd::nn::DeclaredShapes;
    assert_eq!(TwoBlocks::PARAMETERS, 2 * Local::<8>::NUM_PARAMETERS);
    assert_eq!(Head::PARAMETERS, 36);
    assert_eq!(
        UsesDerived::NUM_PARAMETERS,
        2 * (8 * 8 + 8) + 36,
        "{}",
        UsesDerived::summary()
    );
    let dev = Device::Cpu;
    let m = UsesDerived::new(&dev);
    assert_eq!(m.num_parameters(), UsesDerived::NUM_PARAMETERS);
    let x = Tensor::randn(&[3, 8], DType::F32, &dev);
    let want = m.head.forward(&m.blocks.forward(&x));
    assert!(m.forward(&x).allclose(&want, 0.0, 0.0));
    let keys: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&"blocks.a.fc.weight".to_string()), "{keys:?}");
    assert!(keys.contains(&"head.fc.bias".to_string()), "{keys:?}");
}

/// A given count that disagrees with the fields.
#[derive(ferrograd::nn::Module)]
#[module(input = [N, 8], output = [N, 8], parameters = 64)]
pub struct Miscounted {
    fc: ferrograd::nn::Linear,
}

impl Miscounted {
    pub fn new(device: &Device) -> Self {
        Miscounted {
            fc: ferrograd::nn::Linear::new(8, 8, device),
        }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

network! {
    struct UsesMiscounted(x: [N, 8]) -> [N, 8] {
        inner: Miscounted,
    }
}

#[test]
fn a_wrong_given_count_is_caught_when_the_network_is_built() {
    let Err(err) = std::panic::catch_unwind(|| UsesMiscounted::new(&Device::Cpu)) else {
        panic!("built a network whose block miscounts its parameters");
    };
    let m = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        m.contains("`Miscounted` declares 64 parameters") && m.contains("hold 72"),
        "{m}"
    );
}

mod ctor {
    use super::blocks::ResBlock;
    use ferrograd::prelude::*;

    network! {
        /// A basic ResNet block whose sizes are constructor arguments, as PyTorch's
        /// `BasicBlock(inplanes, planes, stride)`: the output's spatial size divides by
        /// the `stride` parameter.
        pub struct Basic[cin -> cout, stride = 1](x: [N, cin, H, W])
            -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
            let y = x
                -> conv1: Conv2d(cin -> cout, kernel = 3, stride = stride, padding = 1, bias = false)
                -> bn1: BatchNorm2d(cout) -> relu
                -> conv2: Conv2d(cout -> cout, kernel = 3, padding = 1, bias = false)
                -> bn2: BatchNorm2d(cout);
            let short = x -> down: (Conv2d(cin -> cout, kernel = 1, stride = stride, bias = false), BatchNorm2d(cout));
            relu(y + short)
        }
    }

    network! {
        /// Const-generic width, using a block from another module.
        pub struct Stack<const D: usize>(x: [N, D]) -> [N, D] {
            a: ResBlock<D>,
            b: [ResBlock<D>; 2],
        }
    }
}

mod ctor_users {
    use super::ctor::{Basic, Stack};
    use ferrograd::prelude::*;

    network! {
        /// Uses constructor-argument blocks from another module.
        pub struct Stage(x: [N, 64, H, W]) -> [N, 128, (H + 1) / 2, (W + 1) / 2] {
            first: Basic(64 -> 128, stride = 2),
            second: Basic(128 -> 128),
        }
    }

    network! {
        /// A constructor parameter passed on to a block.
        pub struct Widths[c](x: [N, c, H, W]) -> [N, c, H, W] {
            block: Basic(c -> c, stride = 1),
        }
    }

    network! {
        pub struct Stacked(x: [N, 16]) -> [N, 16] {
            s: Stack<16>,
        }
    }
}

#[test]
fn constructor_argument_blocks() {
    let dev = Device::Cpu;
    let b = ctor::Basic::new(&dev, 8, 16, 2);
    assert_eq!((b.cin, b.cout, b.stride), (8, 16, 2));
    let x = Tensor::randn(&[2, 8, 9, 7], DType::F32, &dev);
    let y = b.forward(&x);
    assert_eq!(y.shape(), &[2, 16, 5, 4]);
    let conv = 8 * 16 * 9 + 16 * 16 * 9 + 8 * 16;
    let bn = 3 * 2 * 16;
    assert_eq!(ctor::Basic::num_parameters_for(8, 16, 2), conv + bn);
    assert_eq!(b.num_parameters(), conv + bn);
    assert!(b.summary().contains("Total trainable parameters"));
    let keys: Vec<String> = b.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&"down.0.weight".to_string()), "{keys:?}");
    assert!(keys.contains(&"down.1.bias".to_string()), "{keys:?}");

    let s = ctor_users::Stage::new(&dev);
    assert_eq!(s.first.stride, 2);
    assert_eq!(s.second.stride, 1);
    let x = Tensor::randn(&[1, 64, 10, 11], DType::F32, &dev);
    let y = s.forward(&x);
    assert_eq!(y.shape(), &[1, 128, 5, 6]);
    let want = s.second.forward(&s.first.forward(&x));
    assert!(y.allclose(&want, 0.0, 0.0));
    assert_eq!(
        ctor_users::Stage::NUM_PARAMETERS,
        ctor::Basic::num_parameters_for(64, 128, 2) + ctor::Basic::num_parameters_for(128, 128, 1)
    );
    assert_eq!(s.num_parameters(), ctor_users::Stage::NUM_PARAMETERS);

    let w = ctor_users::Widths::new(&dev, 4);
    let x = Tensor::randn(&[2, 4, 5, 5], DType::F32, &dev);
    assert_eq!(w.forward(&x).shape(), &[2, 4, 5, 5]);
    assert_eq!(
        ctor_users::Widths::num_parameters_for(4),
        ctor::Basic::num_parameters_for(4, 4, 1)
    );
    assert_eq!(
        w.num_parameters(),
        ctor_users::Widths::num_parameters_for(4)
    );

    let st = ctor_users::Stacked::new(&dev);
    let x = Tensor::randn(&[3, 16], DType::F32, &dev);
    let want = st.s.b[1].forward(&st.s.b[0].forward(&st.s.a.forward(&x)));
    assert!(st.forward(&x).allclose(&want, 0.0, 0.0));
}
