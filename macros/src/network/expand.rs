//! Code generation for `network!`: the struct, its constructor, `forward`, `summary`.

use super::parse::{DimExpr, Network, dim_text};
use super::shape::{Dim, Errors, Layer, Op, dim_tokens, param_count, shape_of, show};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use std::collections::HashMap;

/// The field type and constructor of a layer with parameters.
fn module_parts(op: &Op, krate: &TokenStream) -> Option<(TokenStream, TokenStream)> {
    Some(match op {
        Op::Linear { inp, out } => {
            let (i, o) = (dim_tokens(inp), dim_tokens(out));
            (
                quote!(#krate::nn::Linear),
                quote!(#krate::nn::Linear::new(#i, #o, device)),
            )
        }
        Op::Conv {
            dims,
            inp,
            out,
            kernel,
            stride,
            padding,
            dilation,
            groups,
        } => {
            let (i, o) = (dim_tokens(inp), dim_tokens(out));
            if *dims == 1 {
                (
                    quote!(#krate::nn::Conv1d),
                    quote!(#krate::nn::Conv1d::new(#i, #o, #kernel, #krate::nn::functional::Conv1dArgs { stride: [#stride], padding: [#padding], dilation: [#dilation], groups: #groups }, device)),
                )
            } else {
                (
                    quote!(#krate::nn::Conv2d),
                    quote!(#krate::nn::Conv2d::new(#i, #o, [#kernel, #kernel], #krate::nn::functional::Conv2dArgs { stride: [#stride; 2], padding: [#padding; 2], dilation: [#dilation; 2], groups: #groups }, device)),
                )
            }
        }
        Op::BatchNorm { dims, channels } => {
            let c = dim_tokens(channels);
            let ty = if *dims == 1 {
                quote!(#krate::nn::BatchNorm1d)
            } else {
                quote!(#krate::nn::BatchNorm2d)
            };
            (ty.clone(), quote!(#ty::new(#c, device)))
        }
        Op::LayerNorm { size } => {
            let s = dim_tokens(size);
            (
                quote!(#krate::nn::LayerNorm),
                quote!(#krate::nn::LayerNorm::new(&[#s], device)),
            )
        }
        Op::Dropout { p } => (
            quote!(#krate::nn::Dropout),
            quote!(#krate::nn::Dropout::new(#p)),
        ),
        Op::Embedding { num, dim } => {
            let (n, d) = (dim_tokens(num), dim_tokens(dim));
            (
                quote!(#krate::nn::Embedding),
                quote!(#krate::nn::Embedding::new(#n, #d, device)),
            )
        }
        Op::User { ty, .. } => (quote!(#ty), quote!(#ty::new(device))),
        _ => return None,
    })
}

/// A shape as a `&[DeclaredDim]` constant expression.
fn declared_dims(shape: &[Dim], krate: &TokenStream) -> TokenStream {
    let dims = shape.iter().map(|d| match d {
        Dim::Lit(v) => quote!(#krate::nn::DeclaredDim::Lit(#v)),
        Dim::Sym(s) => quote!(#krate::nn::DeclaredDim::Sym(#s)),
    });
    quote!(&[#(#dims),*])
}

/// Generates everything; errors about symbols `reshape` cannot resolve go to `errors`.
pub(crate) fn expand(net: &Network, layers: &[Layer], errors: &mut Errors) -> TokenStream {
    let krate = quote!(::ferrograd);
    let Network {
        attrs,
        vis,
        name,
        generics,
        ..
    } = net;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let const_params: Vec<String> = generics
        .const_params()
        .map(|c| c.ident.to_string())
        .collect();
    let net_name = name.to_string();

    // Input checks, for every input: ranks, literal dims, const generics; free symbols
    // bind on first use and must agree afterwards, across inputs too.
    let mut bound: HashMap<String, syn::Ident> = HashMap::new();
    let mut checks = Vec::new();
    for input in &net.inputs {
        let ident = &input.name;
        let input_name = ident.to_string();
        let declared = show(&shape_of(&input.shape));
        let rank = input.shape.dims.len();
        checks.push(quote! {
            let shape = #ident.shape();
            if shape.len() != #rank {
                panic!("{}.forward: input `{}` must have rank {} (declared {}), got shape {:?}", #net_name, #input_name, #rank, #declared, shape);
            }
        });
        for (i, d) in input.shape.dims.iter().enumerate() {
            match d {
                DimExpr::Lit(v, _) => checks.push(quote! {
                    if shape[#i] != #v {
                        panic!("{}.forward: input `{}` must have size {} at dim {} (declared {}), got shape {:?}", #net_name, #input_name, #v, #i, #declared, shape);
                    }
                }),
                DimExpr::Sym(s) if const_params.contains(&s.to_string()) => checks.push(quote! {
                    if shape[#i] != #s {
                        panic!("{}.forward: input `{}` must have size {} = {} at dim {} (declared {}), got shape {:?}", #net_name, #input_name, stringify!(#s), #s, #i, #declared, shape);
                    }
                }),
                DimExpr::Sym(s) => match bound.get(&s.to_string()) {
                    Some(var) => checks.push(quote! {
                        if shape[#i] != #var {
                            panic!("{}.forward: input `{}` has {} at dim {} but `{}` is {} elsewhere (declared {}), got shape {:?}", #net_name, #input_name, shape[#i], #i, stringify!(#s), #var, #declared, shape);
                        }
                    }),
                    None => {
                        let var = format_ident!("dim_{}", s);
                        checks.push(quote! { let #var = shape[#i]; });
                        bound.insert(s.to_string(), var);
                    }
                },
            }
        }
        checks.push(quote! {
            if let ::core::option::Option::Some(device) = #krate::nn::Module::device(self) {
                if #ident.device() != device {
                    panic!("{}.forward: input `{}` is on {} but the network is on {}; move one with `to_device`", #net_name, #input_name, #ident.device(), device);
                }
            }
        });
    }
    let declared = show(&shape_of(&net.inputs[0].shape));
    let bound_vars: Vec<&syn::Ident> = bound.values().collect();
    let params: Vec<&syn::Ident> = net.inputs.iter().map(|i| &i.name).collect();
    let first = &net.inputs[0].name;

    let (mut fields, mut inits, mut steps, mut rows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut const_checks = Vec::new();
    for layer in layers {
        let span = layer.step.kind.span();
        if let Op::User { ty, input } = &layer.op {
            // The two networks were expanded separately: compare their shapes when the
            // constants are evaluated, with the error on the user's type name.
            let (actual, claimed) = (
                declared_dims(input, &krate),
                declared_dims(&layer.output, &krate),
            );
            let desc = layer.step.describe();
            let accepts = format!(
                "`{desc}`: `{ty}` does not accept {} (the shape reaching it); compare with the input `{ty}` declares",
                show(input)
            );
            let produces = format!(
                "`{desc}`: `{ty}` does not produce {} for this input; compare with the output `{ty}` declares",
                show(&layer.output)
            );
            const_checks.push(quote_spanned! {span=>
                const _: () = {
                    if !#krate::nn::shapes_fit(<#ty as #krate::nn::DeclaredShapes>::INPUT, #actual) {
                        panic!(#accepts);
                    }
                    if !#krate::nn::output_is(<#ty as #krate::nn::DeclaredShapes>::INPUT, <#ty as #krate::nn::DeclaredShapes>::OUTPUT, #actual, #claimed) {
                        panic!(#produces);
                    }
                };
            });
        }
        if let (Some(field), Some((ty, init))) = (&layer.step.name, module_parts(&layer.op, &krate))
        {
            fields.push(quote!(pub #field: #ty));
            inits.push(quote!(#field: #init));
            steps.push(quote_spanned!(span=> let __value = self.#field.forward(&__value);));
        } else {
            steps.push(match &layer.op {
                Op::Activation(a) => {
                    let method = format_ident!("{}", a);
                    quote_spanned!(span=> let __value = __value.#method();)
                }
                Op::Softmax { log: false } => quote_spanned!(span=> let __value = __value.softmax(-1);),
                Op::Softmax { log: true } => quote_spanned!(span=> let __value = __value.log_softmax(-1);),
                Op::Flatten => quote_spanned!(span=> let __value = __value.flatten(1, -1);),
                Op::Reshape(dims) => {
                    let sizes: Vec<TokenStream> = dims
                        .iter()
                        .map(|d| match d {
                            DimExpr::Lit(v, _) => quote!(#v),
                            DimExpr::Sym(s) if const_params.contains(&s.to_string()) => quote!(#s),
                            DimExpr::Sym(s) => match bound.get(&s.to_string()) {
                                Some(var) => quote!(#var),
                                None => {
                                    errors.push(s.span(), format!("`{s}` in `reshape` is neither a dim of the input {declared} nor a const parameter"));
                                    quote!(0usize)
                                }
                            },
                        })
                        .collect();
                    quote_spanned!(span=> let __value = __value.reshape(&[#(#sizes),*]);)
                }
                Op::Pool { max, kernel, stride, padding } => {
                    let f = if *max { quote!(max_pool2d_with) } else { quote!(avg_pool2d_with) };
                    quote_spanned!(span=> let __value = #krate::nn::functional::#f(&__value, &#krate::nn::functional::Pool2dArgs { kernel: [#kernel; 2], stride: [#stride; 2], padding: [#padding; 2], dilation: [1; 2], ..#krate::nn::functional::Pool2dArgs::new(1) });)
                }
                Op::AdaptiveAvgPool { out } => {
                    let [h, w] = *out;
                    quote_spanned!(span=> let __value = #krate::nn::functional::adaptive_avg_pool2d(&__value, [#h, #w]);)
                }
                Op::Save(value) => quote_spanned!(span=> let #value = __value.clone();),
                Op::Add(value) => quote_spanned!(span=> let __value = &__value + &#value;),
                Op::Cat { value, dim } => {
                    let dim = *dim as isize;
                    quote_spanned!(span=> let __value = #krate::Tensor::cat(&[&__value, &#value], #dim);)
                }
                _ => quote!(),
            });
        }
        let label = layer
            .step
            .name
            .as_ref()
            .map_or_else(|| layer.step.kind.to_string(), |n| n.to_string());
        let kind = layer.step.describe();
        let kind = kind
            .split_once(": ")
            .map_or(kind.clone(), |(_, k)| k.to_string());
        let out = show(&layer.output);
        let params = param_count(&layer.op);
        rows.push(quote!((#label, #kind, #out, #params)));
    }
    let row_count = rows.len();
    let params_total: Vec<TokenStream> = layers.iter().map(|l| param_count(&l.op)).collect();
    let declared_out = show(&shape_of(&net.output));
    let output_dims: Vec<String> = net.output.dims.iter().map(dim_text).collect();
    let _ = output_dims;

    let shapes_impl = (net.inputs.len() == 1).then(|| {
        let (input, output) = (
            declared_dims(&shape_of(&net.inputs[0].shape), &krate),
            declared_dims(&shape_of(&net.output), &krate),
        );
        quote! {
            impl #impl_generics #krate::nn::DeclaredShapes for #name #ty_generics #where_clause {
                const INPUT: &'static [#krate::nn::DeclaredDim] = #input;
                const OUTPUT: &'static [#krate::nn::DeclaredDim] = #output;
                const PARAMETERS: usize = Self::NUM_PARAMETERS;
            }
        }
    });

    quote! {
        #(#const_checks)*
        #shapes_impl

        #(#attrs)*
        #[derive(#krate::nn::Module)]
        #vis struct #name #generics #where_clause {
            #(#fields,)*
        }

        impl #impl_generics #name #ty_generics #where_clause {
            /// The number of trainable parameters, computed at compile time.
            pub const NUM_PARAMETERS: usize = 0 #(+ #params_total)*;

            /// Builds the network on `device` with PyTorch's default initialisation.
            #[allow(unused_variables)]
            pub fn new(device: &#krate::Device) -> Self {
                Self { #(#inits,)* }
            }

            /// Runs the network. Panics (naming the network, the dim and both shapes)
            /// when the input does not have the declared shape, or sits on another
            /// device than the network.
            #[track_caller]
            #[allow(unused_variables, non_snake_case)]
            pub fn forward(&self, #(#params: &#krate::Tensor),*) -> #krate::Tensor {
                #(#checks)*
                #(let _ = #bound_vars;)*
                // Owned handles (an `Arc` clone each), so inputs and `let` values read alike.
                #(let #params = #params.clone();)*
                let __value = #first.clone();
                #(#steps)*
                __value
            }

            /// A torchinfo-style table: each layer, its kind, output shape (checked at
            /// compile time) and parameter count.
            pub fn summary() -> ::std::string::String {
                let rows: [(&str, &str, &str, usize); #row_count] = [#(#rows),*];
                let mut out = ::std::format!("{} (input {}, output {})\n", #net_name, #declared, #declared_out);
                out.push_str(&::std::format!("{:<12} {:<42} {:<20} {:>10}\n", "Layer", "Kind", "Output shape", "Params"));
                for (label, kind, shape, params) in rows {
                    out.push_str(&::std::format!("{:<12} {:<42} {:<20} {:>10}\n", label, kind, shape, params));
                }
                out.push_str(&::std::format!("Total trainable parameters: {}\n", Self::NUM_PARAMETERS));
                out
            }
        }
    }
}
