//! A layer written with its output (`name: Type => [..]`) joins through its
//! `nn::DeclaredShapes` impl whatever its type is — a hand-written generic module, a
//! generic `#[derive(Module)]` struct, a generic network — also through a type alias,
//! and with no `declared_shapes!` listing.
use ferrograd::nn::{DeclaredDim, DeclaredShapes, Module, TensorKind};
use ferrograd::prelude::*;

/// Hand-written: nearest-neighbour 2x upsampling then a 1x1 convolution, `C` channels
/// at `S` x `S` in.
pub struct Upsample2x<const C: usize, const S: usize> {
    conv: ferrograd::nn::Conv2d,
}

impl<const C: usize, const S: usize> Upsample2x<C, S> {
    pub fn new(device: &Device) -> Self {
        Upsample2x { conv: ferrograd::nn::Conv2d::new(C, C, 1, ferrograd::nn::ConvOptions::default(), device) }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        use ferrograd::nn::functional::{InterpolateMode, InterpolateSize, interpolate};
        let up = interpolate(x, &InterpolateSize::Scale(vec![2.0, 2.0]), InterpolateMode::Nearest);
        self.conv.forward(&up)
    }
}

impl<const C: usize, const S: usize> Module for Upsample2x<C, S> {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        ferrograd::nn::visit_children(prefix, f, &[("conv", &self.conv)])
    }
    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        ferrograd::nn::visit_children_mut(prefix, f, &mut [("conv", &mut self.conv)])
    }
    fn set_training(&mut self, _training: bool) {}
}

impl<const C: usize, const S: usize> DeclaredShapes for Upsample2x<C, S> {
    const INPUT: &'static [DeclaredDim] =
        &[DeclaredDim::Sym("N"), DeclaredDim::Lit(C), DeclaredDim::Lit(S), DeclaredDim::Lit(S)];
    const OUTPUT: &'static [DeclaredDim] = &[
        DeclaredDim::Sym("N"),
        DeclaredDim::Lit(C),
        DeclaredDim::Lit(2 * S),
        DeclaredDim::Lit(2 * S),
    ];
    const PARAMETERS: usize = C * C + C;
}

type Up8at4 = Upsample2x<8, 4>;

/// Derived, generic, with declared shapes.
#[derive(ferrograd::nn::Module)]
#[module(input = [N, D], output = [N, D], parameters = D * D + D)]
pub struct Residual<const D: usize> {
    fc: ferrograd::nn::Linear,
}

impl<const D: usize> Residual<D> {
    pub fn new(device: &Device) -> Self {
        Residual { fc: ferrograd::nn::Linear::new(D, D, device) }
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x).relu().add(x)
    }
}

type Residual512 = Residual<512>;

network! {
    /// A generic network.
    pub struct Mlp<const D: usize>(x: [N, D]) -> [N, D] {
        fc1: Linear(D -> 2 * D),
        gelu,
        fc2: Linear(2 * D -> D),
    }

    pub struct Decoder(x: [N, 8, 4, 4]) -> [N, 10] {
        up: Up8at4 => [N, 8, 8, 8],
        flatten,
        res: Residual512 => [N, 512],
        block: Residual<512> => [N, 512],
        mlp: MlpAlias => [N, 512],
        head: Linear(512 -> 10),
    }
}

type MlpAlias = Mlp<512>;

fn main() {
    let net = Decoder::new(&Device::Cpu);
    let y = net.forward(&Tensor::randn(&[2, 8, 4, 4], DType::F32, &Device::Cpu));
    assert_eq!(y.shape(), &[2, 10]);
    let expected = (8 * 8 + 8)
        + 2 * (512 * 512 + 512)
        + (512 * 1024 + 1024 + 1024 * 512 + 512)
        + (512 * 10 + 10);
    assert_eq!(net.num_parameters(), expected);
    assert!(net.state_dict().contains_key("up.conv.weight"));
}
