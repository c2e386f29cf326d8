//! `network!`: parse the DSL (`parse`), check every value's shape through each layer
//! kind's rule (`check`, `kinds`, over symbolic `dim`s), generate the module (`expand`).

mod check;
mod dim;
mod expand;
mod kinds;
pub(crate) mod parse;

use proc_macro2::TokenStream;

pub(crate) fn network(net: parse::Network) -> syn::Result<TokenStream> {
    let mut errors = check::Errors::default();
    let checked = check::check(&net, &mut errors);
    let code = expand::expand(&net, &checked);
    errors.finish()?;
    Ok(code)
}
