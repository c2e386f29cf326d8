//! `network!`: parse the DSL (`parse`), check every value's shape through each layer
//! kind's rule (`check`, `kinds`, over symbolic `dim`s), generate the module (`expand`).

mod check;
mod declare;
mod dim;
mod expand;
mod kinds;
pub(crate) mod parse;

use proc_macro2::TokenStream;

pub(crate) use declare::{declaration_macro, declared_elsewhere};
pub(crate) use kinds::suggest;

/// A fresh error collection (for `#[derive(Module)]`'s declared shapes).
pub(crate) fn check_errors() -> check::Errors {
    check::Errors::default()
}

/// The collected errors, combined.
pub(crate) fn finish_errors(errors: check::Errors) -> syn::Result<()> {
    errors.finish()
}

/// A written shape as a `&[nn::DeclaredDim]` constant expression.
pub(crate) fn declared_tokens(
    shape: &parse::ShapeExpr,
    krate: &TokenStream,
    errors: &mut check::Errors,
) -> TokenStream {
    expand::declared_dims(&check::shape_dims(shape, errors), krate)
}

/// `input`: the invocation's tokens, passed on when a declaration from another
/// invocation must be fetched first.
pub(crate) fn network(nets: parse::Networks, input: TokenStream) -> syn::Result<TokenStream> {
    let known: Vec<String> = nets
        .declared
        .iter()
        .chain(&nets.nets)
        .map(|n| n.name.to_string())
        .collect();
    if let Some((path, kind)) = declare::undeclared(&nets.nets, &known) {
        return Ok(declare::fetch(path.as_ref(), &kind, input));
    }
    let mut errors = check::Errors::default();
    let sigs: Vec<check::Signature> = nets
        .declared
        .iter()
        .chain(&nets.nets)
        .map(check::Signature::of)
        .collect();
    let mut code = TokenStream::new();
    for net in &nets.nets {
        let checked = check::check(net, &sigs, &mut errors);
        code.extend(expand::expand(net, &checked));
        code.extend(declare::declaration(net));
    }
    errors.finish()?;
    Ok(code)
}
