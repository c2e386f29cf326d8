//! Networks declared in another `network!` invocation, used as layers without
//! annotations.
//!
//! Each network also expands to a hidden `macro_rules!` named after its struct (the
//! macro namespace is separate from the type namespace, so `use blocks::ResBlock;`
//! imports both). When a network uses a layer kind that is neither built in nor declared
//! in the same invocation, `network!` expands to a call of that macro with its own input;
//! the macro calls `network!` again with the declaration's header in front
//! (`@declared { struct ResBlock<const C: usize>(x: [N, C, H, W]) -> [N, C, H, W] {} }`),
//! and the layer is then checked like a sibling. One declaration is fetched per round.

use super::kinds;
use super::parse::{Body, Call, Expr, Network, Step};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};

/// The hidden declaration macro of `net`, and its import beside the struct.
pub(crate) fn declaration(net: &Network) -> TokenStream {
    declaration_macro(&net.name, &net.vis, &net.header)
}

/// The hidden macro `name` that hands `header` (a network's declaration without its
/// body) to `network!`, in a module of its own, imported beside the struct.
pub(crate) fn declaration_macro(
    name: &syn::Ident,
    vis: &syn::Visibility,
    header: &TokenStream,
) -> TokenStream {
    let module = format_ident!("__ferrograd_network_{}", name);
    // A `macro_rules!` re-exports at most crate-wide.
    let vis = match vis {
        syn::Visibility::Public(_) => quote!(pub(crate)),
        other => quote!(#other),
    };
    quote! {
        #[doc(hidden)]
        #[allow(non_snake_case)]
        mod #module {
            #[allow(unused_macros)]
            macro_rules! #name {
                (@ferrograd_declaration { $($rest:tt)* }) => {
                    ::ferrograd::network! { @declared { #header } $($rest)* }
                };
            }
            pub(crate) use #name;
        }
        #[allow(unused_imports)]
        #vis use #module::#name;
    }
}

/// Calls `f` on every call of `net` with whether it is annotated (`=> [..]`), whether
/// it stands for a field (it is named, or an item of a named sequence), and the number of
/// values it is applied to.
fn each_call(net: &Network, f: &mut dyn FnMut(&Call, bool, bool, usize)) {
    fn call(c: &Call, annotated: bool, values: usize, f: &mut dyn FnMut(&Call, bool, bool, usize)) {
        if c.items.is_empty() {
            f(c, annotated, c.name.is_some(), values);
        }
        for item in &c.items {
            if item.items.is_empty() {
                f(item, false, true, 1);
            } else {
                call(item, false, 1, f);
            }
        }
    }
    fn expr(e: &Expr, annotated: bool, f: &mut dyn FnMut(&Call, bool, bool, usize)) {
        match e {
            Expr::Value(_) | Expr::Scalar(..) => {}
            Expr::Apply(c, inputs, _) => {
                for i in inputs {
                    expr(i, false, f);
                }
                call(c, annotated, inputs.len(), f);
            }
            Expr::Pipe(from, c) => {
                expr(from, false, f);
                call(c, annotated, 1, f);
            }
            Expr::Binary(a, _, b, _) => {
                expr(a, false, f);
                expr(b, false, f);
            }
            Expr::Tuple(items, _) => {
                for i in items {
                    expr(i, false, f);
                }
            }
            Expr::Annotated(inner, _) => expr(inner, true, f),
        }
    }
    match &net.body {
        Body::Chain(steps) => {
            for s in steps {
                if let Step::Call(c, annotation) = s {
                    call(c, annotation.is_some(), 1, f);
                }
            }
        }
        Body::Graph(stmts, output) => {
            for s in stmts {
                expr(&s.expr, false, f);
            }
            expr(output, false, f);
        }
    }
}

/// The first layer kind of `nets` that names a network declared elsewhere whose
/// declaration has not been fetched yet: a named call of a kind that is not built in,
/// not in `known` (this invocation's networks and the fetched declarations), and, when
/// it has arguments (constructor arguments, `Block(64 -> 128, stride = 2)`), not a
/// misspelling of a built-in kind, nor a built-in op spelled as PyTorch's module class
/// (`act: ReLU`), nor the network's own activation parameter (`act: Activation`).
///
/// A layer applied to one value with its output written and no constructor arguments
/// (`up: Up64at8 => [..]`, `block: BasicBlock<16, 16> => [..]`) is not fetched: whatever
/// its type — a network, a derived module with declared shapes, a hand-written module, a
/// type alias or a generic type — it joins through its `nn::DeclaredShapes` impl, and the
/// value reaching it and the annotation are checked by constant evaluation.
pub(crate) fn undeclared(
    nets: &[Network],
    known: &[String],
) -> Option<(Option<TokenStream>, syn::Ident)> {
    let mut found = None;
    for net in nets {
        each_call(net, &mut |c, annotated, field, values| {
            let kind = c.kind.to_string();
            if found.is_some()
                || !field
                || (annotated && values == 1 && c.args_span.is_none() && c.repeat.is_none())
                || known.contains(&kind)
            {
                return;
            }
            // A kind written with its path is the user's type, whatever its name.
            if c.path.is_some() {
                found = Some((c.path.clone(), c.kind.clone()));
                return;
            }
            if kinds::find(&kind).is_some()
                || (c.args_span.is_some() && kinds::suggest(&kind, kinds::all_names()).is_some())
                || kinds::op_named_like_a_module(&kind).is_some()
                || net.ctor.iter().any(|p| {
                    matches!(p.value, Some(crate::network::parse::ValueParam::Activation))
                        && p.name == kind
                })
            {
                return;
            }
            found = Some((None, c.kind.clone()));
        });
    }
    found
}

/// `declared_shapes!(A, B)`: declarations for types whose shapes are only a hand-written
/// `nn::DeclaredShapes` (or a network of another crate, whose declaration macro is
/// crate-private), so `network!` checks them by constant evaluation against the layer's
/// annotation.
pub(crate) fn declared_elsewhere(names: &[syn::Ident]) -> TokenStream {
    names
        .iter()
        .map(|name| {
            declaration_macro(
                name,
                &syn::Visibility::Inherited,
                &quote!(#[module(elsewhere)] struct #name (x: [N]) -> [N] {}),
            )
        })
        .collect()
}

/// The expansion that fetches `kind`'s declaration: a call of its declaration macro
/// (spanned on the user's token, so a kind that is no network reads "cannot find macro
/// `Kind`" there) with the whole `network!` input.
pub(crate) fn fetch(
    path: Option<&TokenStream>,
    kind: &syn::Ident,
    input: TokenStream,
) -> TokenStream {
    quote_spanned!(kind.span()=> #path #kind! { @ferrograd_declaration { #input } })
}
