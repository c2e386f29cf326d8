//! Procedural macros for ferrograd.
//!
//! - `#[derive(Module)]` implements `ferrograd::nn::Module` for a struct from its fields:
//!   `#[param]` tensors are trained, `#[buffer]` tensors are saved but not trained,
//!   `#[module(skip)]` fields are plain data, `#[module(training)]` marks the `bool` that
//!   `train()`/`eval()` set, and every other field must itself be a module (containers
//!   `Vec`, `Option`, arrays and `Box` of modules included).
//!
//! Misuse is a compile error on the offending token.

mod derive_module;

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
