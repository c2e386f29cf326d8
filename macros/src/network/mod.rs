//! `network!`: parse the DSL (`parse`), check every value's shape through each layer
//! kind's rule (`check`, `kinds`, over symbolic `dim`s), generate the module (`expand`).

mod check;
mod dim;
mod expand;
mod kinds;
pub(crate) mod parse;

use proc_macro2::TokenStream;

pub(crate) fn network(nets: parse::Networks) -> syn::Result<TokenStream> {
    let mut errors = check::Errors::default();
    let sigs: Vec<check::Signature> = nets.0.iter().map(check::Signature::of).collect();
    let mut code = TokenStream::new();
    for net in &nets.0 {
        let checked = check::check(net, &sigs, &mut errors);
        code.extend(expand::expand(net, &checked));
    }
    errors.finish()?;
    Ok(code)
}
