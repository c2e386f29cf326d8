//! `network!`: parse the DSL, infer and check every shape, generate the module.

mod expand;
pub(crate) mod parse;
mod shape;

use proc_macro2::TokenStream;

pub(crate) fn network(net: parse::Network) -> syn::Result<TokenStream> {
    let mut errors = shape::Errors::default();
    let layers = shape::infer(&net, &mut errors);
    let code = expand::expand(&net, &layers, &mut errors);
    errors.finish()?;
    Ok(code)
}
