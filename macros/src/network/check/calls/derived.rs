//! The code of a call to a layer whose `new` and `forward` are the user's (a
//! `#[derive(Module)]` or hand-written type): its construction, with the declared
//! parameter count compared with the built module's, and its forward, with the result's
//! type checked, each reported on the layer's token.

use proc_macro2::{Span, TokenStream};
use quote::quote;

/// `field.forward(x)` of a layer whose `forward` is the user's, called at the layer's
/// token (`at`) and its result checked to be a `Tensor`, or a tuple of `tuple` tensors
/// (`tuple > 0`), as the layer declares: a `forward` of another signature or result is
/// reported on the layer.
pub(super) fn forward_checked(
    field: &TokenStream,
    x: &TokenStream,
    at: Span,
    tuple: usize,
    desc: &str,
    kind: &str,
) -> TokenStream {
    let ty = match tuple {
        0 => quote!(::ferrograd::Tensor),
        n => {
            let each = (0..n).map(|_| quote!(::ferrograd::Tensor));
            quote!((#(#each),*))
        }
    };
    let wanted = match tuple {
        0 => "one tensor".to_string(),
        n => format!("a tuple of {n} tensors"),
    };
    // The output goes through a local trait implemented only for the declared type, so
    // a `forward` that returns anything else is reported with the layer's name.
    let message = format!(
        "`{desc}`: `{kind}::forward` returns `{{Self}}`, but the network takes {wanted} from it"
    );
    let label = format!("`{kind}::forward` returns `{{Self}}` here");
    let note = match tuple {
        0 => format!(
            "a layer written `{desc} => [..]` (or declared with one output) yields one tensor: return one from `{kind}::forward`, or declare its outputs on the module (`#[module(input = [..], output = ([..], [..]))]`) and take them apart with `let (a, b) = ...`"
        ),
        _ => format!("declare `{kind}`'s outputs as its `forward` returns them"),
    };
    let forward = syn::Ident::new("forward", at);
    let convert = quote::quote_spanned!(at=> __DeclaredOutput::__declared(__layer_output));
    quote!({
        #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
        trait __DeclaredOutput {
            fn __declared(self) -> #ty;
        }
        #[diagnostic::do_not_recommend]
        impl __DeclaredOutput for #ty {
            fn __declared(self) -> #ty {
                self
            }
        }
        let __layer_output = #field.#forward(&#x);
        #convert
    })
}

/// Builds a module whose `nn::DeclaredShapes::PARAMETERS` may be hand-written, comparing
/// that count with the built module's once, when the network is constructed.
///
/// `new` is called with `args` then the device, spanned on the layer's token (`span`), so
/// a `new` of another signature is reported there.
pub(super) fn param_count_checked(
    ty: &TokenStream,
    text: &str,
    span: Span,
    args: &[TokenStream],
    desc: &str,
) -> TokenStream {
    let declared = (
        quote!(<#ty as ::ferrograd::nn::DeclaredShapes>::PARAMETERS),
        "nn::DeclaredShapes::PARAMETERS",
    );
    count_checked(ty, text, span, args, desc, declared)
}

/// [`param_count_checked`] with the declared count as an expression (`declared.0`, named
/// `declared.1` in the message): `num_parameters_for(sizes)` of a derived module whose
/// shapes depend on its constructor arguments.
pub(super) fn count_checked(
    ty: &TokenStream,
    text: &str,
    span: Span,
    args: &[TokenStream],
    desc: &str,
    declared: (TokenStream, &str),
) -> TokenStream {
    let at = Span::call_site().located_at(span);
    let new = if args.is_empty() {
        new_from_device(ty, text, desc, at)
    } else {
        quote::quote_spanned!(at=> <#ty>::new(#(#args,)* device))
    };
    let (count, source) = declared;
    let message = format!("`{{}}` declares {{}} parameters ({source}) but its fields hold {{}}");
    quote!({
        let __module = #new;
        let __declared = #count;
        let __actual = ::ferrograd::nn::Module::num_parameters(&__module);
        assert!(__declared == __actual, #message, #text, __declared, __actual);
        __module
    })
}

/// `<ty>::new(device)` for a layer written without arguments. A `new` that takes more
/// than the device is told apart without an error of its own (autoref specialisation:
/// the device-only impl applies only to functions of the device alone), and the value it
/// leaves then fails a local trait whose message names the layer, `new`, and what to
/// write — instead of rustc's bare count of arguments.
pub(super) fn new_from_device(ty: &TokenStream, text: &str, desc: &str, at: Span) -> TokenStream {
    let message = format!("`{desc}`: `{text}::new` takes more than the device");
    let label = format!("`{text}::new` is called here with the device alone");
    let note = format!(
        "write `new`'s other arguments after the layer's kind, as `{desc}(..)`: `{desc}(64)` for `{text}::new(64, device)`"
    );
    quote::quote_spanned!(at=> {
        struct __NewFn<F>(::core::cell::Cell<::core::option::Option<F>>);
        struct __Built<M>(M);
        struct __NeedsArguments;
        trait __ByDevice<M> {
            fn __pick(&self, device: &::ferrograd::Device) -> __Built<M>;
        }
        impl<F: FnOnce(&::ferrograd::Device) -> M, M> __ByDevice<M> for __NewFn<F> {
            fn __pick(&self, device: &::ferrograd::Device) -> __Built<M> {
                let new = self.0.take().expect("called once");
                __Built(new(device))
            }
        }
        trait __OtherArguments {
            fn __pick(&self, _device: &::ferrograd::Device) -> __NeedsArguments {
                __NeedsArguments
            }
        }
        impl<F> __OtherArguments for &__NewFn<F> {}
        #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
        trait __Module<M> {
            fn __module(self) -> M;
        }
        #[diagnostic::do_not_recommend]
        impl<M> __Module<M> for __Built<M> {
            fn __module(self) -> M {
                self.0
            }
        }
        fn __module<M, B: __Module<M>>(built: B) -> M {
            built.__module()
        }
        let __new = __NewFn(::core::cell::Cell::new(::core::option::Option::Some(<#ty>::new)));
        let __picked = (&__new).__pick(device);
        __module(__picked)
    })
}
