//! Procedural macros for ferrograd.
//!
//! - `#[derive(Module)]` implements `ferrograd::nn::Module` for a struct from its fields:
//!   `#[param]` tensors are trained, `#[buffer]` tensors are saved but not trained,
//!   `#[module(skip)]` fields are plain data, `#[module(training)]` marks the `bool` that
//!   `train()`/`eval()` set, and every other field must itself be a module (containers
//!   `Vec`, `Option`, arrays and `Box` of modules included). `#[module(rename = "self")]`
//!   gives a field another state-dict key (a checkpoint's name that is no Rust identifier).
//!
//! Misuse is a compile error on the offending token.
#![warn(missing_docs)]

mod derive_module;
mod network;

use proc_macro::TokenStream;

/// Implements `ferrograd::nn::Module` for a struct. See the crate docs for the
/// attributes.
///
/// ```ignore
/// #[derive(Module)]
/// struct Block {
///     fc: Linear,
///     #[param]
///     scale: Tensor,
///     #[buffer]
///     steps: Tensor,
///     #[module(skip)]
///     name: String,
/// }
/// ```
#[proc_macro_derive(Module, attributes(param, buffer, module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    derive_module::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Declares networks whose shapes are checked at compile time (the grammar: the book's
/// chapter "Modules and the `network!` DSL", `docs/src/dsl.md`).
///
/// ```ignore
/// network! {
///     /// LeNet-5 for 28x28 digits.
///     pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
///         conv1: Conv2d(1 -> 6, kernel = 5, padding = 2),
///         relu,
///         max_pool2d(2),
///         conv2: Conv2d(6 -> 16, kernel = 5),
///         relu,
///         max_pool2d(2) => [N, 16, 5, 5],
///         flatten,
///         fc1: Linear(400 -> 120), relu,
///         fc2: Linear(120 -> 84), relu,
///         fc3: Linear(84 -> 10),
///     }
/// }
/// ```
///
/// Each network generates its struct (deriving `Module`, one field per named layer),
/// `new(&Device)`, `forward(&self, inputs..)`, `summary()` and `NUM_PARAMETERS`. The chain
/// form above applies steps in turn; the graph form names values
/// (`let y = x -> fc: Linear(4 -> 2) -> relu;`), applies layers to any of them
/// (`relu(y + x)`, `down: Conv2d(8 -> 16, kernel = 1)(x)`), and returns its last
/// expression (a tuple for several outputs). Networks declared in the same `network!` are
/// layers of each other (`block: ResBlock<64>`, `blocks: [ResBlock<64>; 3]`), sizes are
/// symbolic (`[N, C, (H + 1) / 2]`), and every mistake is a compile error on the token to
/// change.
#[proc_macro]
pub fn network(input: TokenStream) -> TokenStream {
    let tokens = proc_macro2::TokenStream::from(input.clone());
    let net = syn::parse_macro_input!(input as network::parse::Networks);
    network::network(net, tokens)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Declares that the listed types join `network!` through a hand-written
/// `nn::DeclaredShapes` (a type with its own `impl Module`, or a network of another
/// crate, whose declaration is private to that crate): a layer of such a type is written
/// with its output annotated, `field: Type => [dims]`, and the annotation and the value
/// reaching the layer are checked against the declared shapes by constant evaluation.
/// Networks and `#[derive(Module)]` structs of the same crate need no such line, and an
/// annotated layer needs none either: `field: Type => [dims]` joins through any type's
/// `nn::DeclaredShapes` impl. Listed, a layer written without its output is told to add it.
///
/// ```ignore
/// use other_crate::Encoder;
/// ferrograd::declared_shapes!(Encoder);
/// network! {
///     struct Tower(x: [N, 32]) -> [N, 64] {
///         enc: Encoder => [N, 64],
///     }
/// }
/// ```
#[proc_macro]
pub fn declared_shapes(input: TokenStream) -> TokenStream {
    let names = syn::parse_macro_input!(
        input with syn::punctuated::Punctuated::<syn::Ident, syn::Token![,]>::parse_terminated
    );
    let names: Vec<syn::Ident> = names.into_iter().collect();
    network::declared_elsewhere(&names).into()
}
