//! Code generation for `network!`: the struct, its constructor, `forward`, `summary`,
//! `NUM_PARAMETERS` and, for one input and one output, `nn::DeclaredShapes`.

use super::check::{Checked, Errors, shape_dims, show};
use super::dim::{Dim, onnx_shape, symbol_tokens};
use super::parse::{DKind, Network};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};

/// A shape as a `&[DeclaredDim]` constant expression (compound dims by their text).
pub(crate) fn declared_dims(shape: &[Dim], krate: &TokenStream) -> TokenStream {
    let dims = shape.iter().map(|d| match d.as_lit() {
        Some(v) => {
            let v = v.max(0) as usize;
            quote!(#krate::nn::DeclaredDim::Lit(#v))
        }
        None => {
            let s = d.to_string();
            quote!(#krate::nn::DeclaredDim::Sym(#s))
        }
    });
    quote!(&[#(#dims),*])
}

/// Generates everything.
pub(crate) fn expand(net: &Network, c: &Checked) -> TokenStream {
    let krate = quote!(::ferrograd);
    let Network {
        attrs,
        vis,
        name,
        generics,
        ..
    } = net;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // Const and constructor parameters render as themselves (constructor parameters
    // are locals of `new`, and bound from their fields in `forward` and `summary`).
    let consts: Vec<String> = generics
        .const_params()
        .map(|p| p.ident.to_string())
        .chain(
            net.ctor
                .iter()
                .filter(|p| p.value.is_none())
                .map(|p| p.name.to_string()),
        )
        .collect();
    let local = |p: &crate::network::parse::CtorParam| {
        syn::Ident::new(&p.name.to_string(), proc_macro2::Span::call_site())
    };
    let ctor: Vec<syn::Ident> = net
        .ctor
        .iter()
        .filter(|p| p.value.is_none())
        .map(local)
        .collect();
    // Number and activation parameters (`p: f64`, `act: Activation`): given to `new`
    // after the sizes, kept as fields.
    let (values, value_tys): (Vec<syn::Ident>, Vec<TokenStream>) = net
        .ctor
        .iter()
        .filter_map(|p| {
            let ty = match p.value.as_ref()? {
                crate::network::parse::ValueParam::Number(_) => quote!(f64),
                crate::network::parse::ValueParam::Activation => quote!(#krate::nn::Activation),
                crate::network::parse::ValueParam::Bool(_) => quote!(bool),
            };
            Some((local(p), ty))
        })
        .unzip();
    // Switches (`bias: bool`) take part in the count, as 0 or 1.
    let bools: Vec<syn::Ident> = net
        .ctor
        .iter()
        .filter(|p| matches!(p.value, Some(crate::network::parse::ValueParam::Bool(_))))
        .map(local)
        .collect();
    // Activations are read in `forward` and the graph export (`-> act`).
    let acts: Vec<syn::Ident> = net
        .ctor
        .iter()
        .filter(|p| matches!(p.value, Some(crate::network::parse::ValueParam::Activation)))
        .map(local)
        .collect();
    let net_name = name.to_string();
    let sym = |s: &str| symbol_tokens(s, !consts.iter().any(|c| c == s));
    // Shapes as written; their mistakes were reported by the check.
    let mut quiet = Errors::default();

    // Input checks: rank and dtype; plain size names bind on first use, and every other
    // dim (literals, const parameters, arithmetic, later uses) is compared.
    let mut bound: Vec<String> = Vec::new();
    let mut binds = Vec::new();
    let mut checks = Vec::new();
    // Required inputs first: they bind the sizes; an optional input's are only compared
    // (the checker made sure a required input has each of them).
    let mut ordered: Vec<&crate::network::parse::Input> = net.inputs.iter().collect();
    ordered.sort_by_key(|i| i.optional);
    for input in ordered {
        let (outer_binds, outer_checks) = (binds.len(), checks.len());
        let ident = &input.name;
        let input_name = ident.to_string();
        let shape = shape_dims(&input.shape, &mut quiet);
        let declared = show(&shape);
        let rank = shape.len();
        let (kind, dtype_name) = match input.dtype.1 {
            DKind::Float => (quote!(Float), input.dtype.0.to_string()),
            DKind::Int => (quote!(Int), input.dtype.0.to_string()),
            DKind::Bool => (quote!(Bool), input.dtype.0.to_string()),
        };
        let checks_mod = quote!(#krate::nn::input_checks);
        binds.push(quote! {
            #checks_mod::rank_and_dtype(#net_name, #input_name, &#ident, #declared, #rank, #checks_mod::Kind::#kind, #dtype_name);
        });
        for (i, d) in shape.iter().enumerate() {
            if let Some(s) = d.as_sym()
                && !input.optional
                && !consts.iter().any(|c| c == s)
                && !bound.iter().any(|b| b == s)
            {
                let var = format_ident!("__dim_{}", s);
                binds.push(quote!(let #var = #ident.shape()[#i];));
                bound.push(s.to_string());
                continue;
            }
            if let Some((c, s)) = d.as_scaled_sym()
                && c > 1
                && !input.optional
                && !consts.iter().any(|k| k == s)
                && !bound.iter().any(|b| b == s)
            {
                // `4*H`: H is the size divided by 4, which must divide it.
                let var = format_ident!("__dim_{}", s);
                let (c, text) = (c as usize, d.to_string());
                binds.push(quote! {
                    if #ident.shape()[#i] % #c != 0 {
                        panic!("{}.forward: input `{}` must have a multiple of {} at dim {} (declared {} there, shape {}), got shape {:?}", #net_name, #input_name, #c, #i, #text, #declared, #ident.shape());
                    }
                    let #var = #ident.shape()[#i] / #c;
                });
                bound.push(s.to_string());
                continue;
            }
            let want = d.tokens(&sym);
            let text = d.to_string();
            let elsewhere = d.as_sym().is_some_and(|s| bound.iter().any(|b| b == s));
            checks.push(quote! {
                #checks_mod::dim(#net_name, #input_name, &#ident, #declared, #i, #want, #text, #elsewhere);
            });
        }
        checks.push(quote! {
            #checks_mod::device(#net_name, #input_name, &#ident, #krate::nn::Module::device(self));
        });
        if input.optional {
            // Every check of an optional input runs when it is given, after the sizes
            // are bound.
            let own: Vec<TokenStream> = binds
                .drain(outer_binds..)
                .chain(checks.drain(outer_checks..))
                .collect();
            checks.push(quote! {
                if let ::core::option::Option::Some(#ident) = #ident {
                    #(#own)*
                }
            });
        }
    }
    let bound_vars: Vec<TokenStream> = bound.iter().map(|s| sym(s)).collect();
    let params: Vec<&syn::Ident> = net.inputs.iter().map(|i| &i.name).collect();
    let param_tys: Vec<TokenStream> = net
        .inputs
        .iter()
        .map(|i| {
            if i.optional {
                quote!(::core::option::Option<&#krate::Tensor>)
            } else {
                quote!(&#krate::Tensor)
            }
        })
        .collect();
    let clone_inputs: Vec<TokenStream> = net
        .inputs
        .iter()
        .map(|i| {
            let ident = &i.name;
            if i.optional {
                quote!(#ident.cloned())
            } else {
                quote!(#ident.clone())
            }
        })
        .collect();
    let n_inputs = net.inputs.len();
    let input_vars: Vec<syn::Ident> = (0..net.inputs.len())
        .map(|k| format_ident!("__input{}", k))
        .collect();

    let mut const_checks = Vec::new();
    for u in &c.users {
        let (ty, span) = (&u.ty_tokens, u.ty.span());
        let (actual, claimed) = (
            declared_dims(&u.input, &krate),
            declared_dims(&u.output, &krate),
        );
        let accepts_prefix = format!(
            "`{}` is given {} by {}, but `{}` declares its input as ",
            u.desc,
            show(&u.input),
            u.origin,
            u.ty
        );
        let produces_prefix = format!(
            "the annotation after `{}` says {}, but for this input `{}` declares its output as ",
            u.desc,
            show(&u.output),
            u.ty
        );
        let produces_suffix = " (with its input's sizes bound to this input's)";
        const_checks.push(quote_spanned! {span=>
            const _: () = {
                if !#krate::nn::shapes_fit(<#ty as #krate::nn::DeclaredShapes>::INPUT, #actual) {
                    let m = #krate::nn::ShapeMessage::new(#accepts_prefix, <#ty as #krate::nn::DeclaredShapes>::INPUT, "");
                    panic!("{}", m.as_str());
                }
                if !#krate::nn::output_is(<#ty as #krate::nn::DeclaredShapes>::INPUT, <#ty as #krate::nn::DeclaredShapes>::OUTPUT, #actual, #claimed) {
                    let m = #krate::nn::ShapeMessage::new(#produces_prefix, <#ty as #krate::nn::DeclaredShapes>::OUTPUT, #produces_suffix);
                    panic!("{}", m.as_str());
                }
            };
        });
    }

    let fields = c
        .fields
        .iter()
        .map(|f| {
            let (n, t, doc) = (&f.name, &f.ty, &f.doc);
            quote!(#[doc = #doc] pub #n: #t)
        })
        .chain(ctor.iter().map(|p| {
            quote! {
                /// A constructor parameter.
                pub #p: usize
            }
        }))
        .chain(values.iter().zip(&value_tys).map(|(p, t)| {
            quote! {
                /// A constructor parameter.
                pub #p: #t
            }
        }));
    // `nn::Module` from the layer fields: one traversal call per method.
    let (names, members): (Vec<String>, Vec<&syn::Ident>) =
        c.fields.iter().map(|f| (f.key.clone(), &f.name)).unzip();
    let module_impl = quote! {
        impl #impl_generics #krate::nn::Module for #name #ty_generics #where_clause {
            fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &#krate::Tensor, #krate::nn::TensorKind)) {
                #krate::nn::visit_children(prefix, f, &[#((#names, &self.#members)),*]);
            }
            fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut #krate::Tensor, #krate::nn::TensorKind)) {
                #krate::nn::visit_children_mut(prefix, f, &mut [#((#names, &mut self.#members)),*]);
            }
            fn set_training(&mut self, training: bool) {
                #krate::nn::set_training_children(training, &mut [#((#names, &mut self.#members)),*]);
            }
            fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn ::core::any::Any)) {
                #(#krate::nn::Module::for_each_module_mut(&mut self.#members, f);)*
            }
        }
    };
    let inits = c.fields.iter().map(|f| {
        let (n, i) = (&f.name, &f.init);
        quote!(#n: #i)
    });
    let stmts = &with_drops(&c.stmts, &c.result);
    let result = &c.result;
    let rows: Vec<TokenStream> = c
        .rows
        .iter()
        .map(|r| {
            let (label, kind, out, params) = (&r.label, &r.kind, &r.out, &r.params);
            quote!((#label, #kind, #out, #params))
        })
        .collect();
    let row_count = rows.len();
    // The table: one literal when every count is known here, else rows filled in.
    let head = format!(
        "{net_name} (input {}, output {})\n{:<12} {:<42} {:<20} {:>10}\n",
        net.inputs
            .iter()
            .map(|i| show(&shape_dims(&i.shape, &mut quiet)))
            .collect::<Vec<_>>()
            .join(", "),
        net.outputs
            .iter()
            .map(|o| show(&shape_dims(o, &mut quiet)))
            .collect::<Vec<_>>()
            .join(", "),
        "Layer",
        "Kind",
        "Output shape",
        "Params"
    );
    let table = match c
        .rows
        .iter()
        .map(|r| r.params_lit)
        .collect::<Option<Vec<i64>>>()
    {
        Some(counts) => {
            let text: String = c
                .rows
                .iter()
                .zip(counts)
                .map(|(r, n)| format!("{:<12} {:<42} {:<20} {:>10}\n", r.label, r.kind, r.out, n))
                .collect();
            quote!(out.push_str(#text);)
        }
        None => quote! {
            let rows: [(&str, &str, &str, usize); #row_count] = [#(#rows),*];
            for (label, kind, shape, params) in rows {
                out.push_str(&::std::format!("{:<12} {:<42} {:<20} {:>10}\n", label, kind, shape, params));
            }
        },
    };
    // A literal when every count is known here; otherwise one statement per layer (no
    // deep expression, so thousands of layers compile).
    let num_parameters = match c.rows.iter().map(|r| r.params_lit).sum::<Option<i64>>() {
        Some(total) => {
            let total = total.max(0) as usize;
            quote!(#total)
        }
        None => {
            let terms = c.rows.iter().map(|r| &r.params);
            quote!({
                let mut __n = 0usize;
                #(__n += #terms;)*
                __n
            })
        }
    };
    // Without constructor parameters the count is a constant; with them, a `const fn`
    // of them (so an enclosing network's count stays a constant).
    let (count_item, summary_self, total) = if ctor.is_empty() && bools.is_empty() {
        (
            quote! {
                /// The number of trainable parameters, computed at compile time.
                pub const NUM_PARAMETERS: usize = #num_parameters;
            },
            quote!(),
            quote!(Self::NUM_PARAMETERS),
        )
    } else {
        (
            quote! {
                /// The number of trainable parameters for these constructor arguments
                /// (a `const fn`).
                #[allow(unused_variables, clippy::too_many_arguments)]
                pub const fn num_parameters_for(#(#ctor: usize,)* #(#bools: bool),*) -> usize {
                    #(let #bools = #bools as usize;)*
                    #num_parameters
                }
            },
            quote!(&self),
            quote!(Self::num_parameters_for(#(#ctor,)* #(#bools != 0),*)),
        )
    };
    let output_ty = if net.tuple_output {
        let parts = net.outputs.iter().map(|_| quote!(#krate::Tensor));
        quote!((#(#parts),*))
    } else {
        quote!(#krate::Tensor)
    };

    let shapes_impl = (net.inputs.len() == 1
        && !net.tuple_output
        && ctor.is_empty()
        && values.is_empty())
    .then(|| {
        let (input, output) = (
            declared_dims(&shape_dims(&net.inputs[0].shape, &mut quiet), &krate),
            declared_dims(&shape_dims(&net.outputs[0], &mut quiet), &krate),
        );
        quote! {
            impl #impl_generics #krate::nn::DeclaredShapes for #name #ty_generics #where_clause {
                const INPUT: &'static [#krate::nn::DeclaredDim] = #input;
                const OUTPUT: &'static [#krate::nn::DeclaredDim] = #output;
                const PARAMETERS: usize = Self::NUM_PARAMETERS;
            }
        }
    });

    // A one-tensor-in, one-tensor-out network is a `Layer`: it goes into a `Sequential`,
    // and `onnx::export` takes it.
    let forward_impl = (net.inputs.len() == 1 && !net.tuple_output).then(|| {
        let mut with_lifetime = generics.clone();
        with_lifetime
            .params
            .insert(0, syn::parse_quote!('__input));
        let (fwd_impl_generics, _, _) = with_lifetime.split_for_impl();
        quote! {
            impl #fwd_impl_generics #krate::nn::Forward<&'__input #krate::Tensor> for #name #ty_generics #where_clause {
                type Output = #krate::Tensor;
                #[track_caller]
                fn forward(&self, x: &'__input #krate::Tensor) -> #krate::Tensor {
                    #name::forward(self, x)
                }
            }
        }
    });

    // ONNX export from the compile-time graph: the same dataflow over `onnx::Value`s.
    let runtime_syms: Vec<String> = net
        .inputs
        .iter()
        .flat_map(|i| shape_dims(&i.shape, &mut quiet))
        .flat_map(|d| d.symbols())
        .filter(|s| !consts.contains(s))
        .collect();
    let input_shapes: Vec<TokenStream> = net
        .inputs
        .iter()
        .map(|i| onnx_shape(&shape_dims(&i.shape, &mut quiet), &runtime_syms, &krate))
        .collect();
    let output_shapes: Vec<TokenStream> = net
        .outputs
        .iter()
        .map(|o| onnx_shape(&shape_dims(o, &mut quiet), &runtime_syms, &krate))
        .collect();
    let input_names: Vec<String> = net.inputs.iter().map(|i| i.name.to_string()).collect();
    let input_dtypes: Vec<TokenStream> = net
        .inputs
        .iter()
        .map(|i| {
            let d = match i.dtype.0.to_string().as_str() {
                "f16" => quote!(F16),
                "bf16" => quote!(BF16),
                "f64" => quote!(F64),
                "i64" => quote!(I64),
                "u8" => quote!(U8),
                "bool" => quote!(Bool),
                _ => quote!(F32),
            };
            quote!(#krate::DType::#d)
        })
        .collect();
    let input_index = 0..net.inputs.len();
    let onnx_stmts = &c.onnx_stmts;
    let result_vars = &c.result_vars;
    let onnx_impl = quote! {
        impl #impl_generics #krate::onnx::ExportLayer for #name #ty_generics #where_clause {
            #[allow(unused_variables, unused_imports, non_snake_case, clippy::all)]
            fn export_layer(
                &self,
                __g: &mut #krate::onnx::GraphWriter,
                __inputs: &[#krate::onnx::Value],
            ) -> ::std::vec::Vec<#krate::onnx::Value> {
                use #krate::onnx::{ViaExportLayer as _, ViaTrace as _, ViaUnsupported as _};
                #(let #ctor = self.#ctor;)*
                #(let #acts = self.#acts;)*
                if __inputs.len() != #n_inputs {
                    __g.unsupported(#net_name, &::std::format!("takes {} inputs, got {}", #n_inputs, __inputs.len()));
                    return __inputs.to_vec();
                }
                let __entered = __g.enter(__inputs, &[#(#input_shapes),*]);
                #(let #input_vars = __entered[#input_index].clone();)*
                #(#onnx_stmts)*
                __g.leave();
                ::std::vec![#(#result_vars),*]
            }
        }

        impl #impl_generics #krate::onnx::ExportNetwork for #name #ty_generics #where_clause {
            #[allow(unused_variables)]
            fn onnx_inputs(&self) -> ::std::vec::Vec<(&'static str, #krate::DType, ::std::vec::Vec<#krate::onnx::SymDim>)> {
                #(let #ctor = self.#ctor;)*
                ::std::vec![#((#input_names, #input_dtypes, (#input_shapes).to_vec())),*]
            }
            #[allow(unused_variables)]
            fn onnx_outputs(&self) -> ::std::vec::Vec<::std::vec::Vec<#krate::onnx::SymDim>> {
                #(let #ctor = self.#ctor;)*
                ::std::vec![#((#output_shapes).to_vec()),*]
            }
            fn onnx_name(&self) -> &'static str {
                #net_name
            }
        }
    };

    quote! {
        #(#const_checks)*
        #shapes_impl
        #forward_impl
        #onnx_impl

        #module_impl

        #(#attrs)*
        #vis struct #name #generics #where_clause {
            #(#fields,)*
        }

        impl #impl_generics #name #ty_generics #where_clause {
            #count_item

            /// Builds the network on `device` with PyTorch's default initialisation.
            #[allow(unused_variables, clippy::too_many_arguments)]
            pub fn new(device: &#krate::Device #(, #ctor: usize)* #(, #values: #value_tys)*) -> Self {
                Self { #(#ctor,)* #(#values,)* #(#inits,)* }
            }

            /// Runs the network. Panics (naming the network, the dim and both shapes)
            /// when an input does not have its declared shape or dtype, or sits on
            /// another device than the network.
            #[track_caller]
            #[allow(unused_variables, non_snake_case, clippy::let_and_return)]
            pub fn forward(&self, #(#params: #param_tys),*) -> #output_ty {
                #(let #ctor = self.#ctor;)*
                #(let #acts = self.#acts;)*
                #(#binds)*
                #(#checks)*
                #(let _ = #bound_vars;)*
                // Owned handles (an `Arc` clone each), so inputs and values read alike.
                #(let #input_vars = #clone_inputs;)*
                #(#stmts)*
                #result
            }

            /// A torchinfo-style table: each layer, its kind, output shape (checked at
            /// compile time) and parameter count.
            #[allow(unused_variables)]
            pub fn summary(#summary_self) -> ::std::string::String {
                #(let #ctor = self.#ctor;)*
                #(let #bools = self.#bools as usize;)*
                let mut out = ::std::string::String::from(#head);
                #table
                out.push_str(&::std::format!("Total trainable parameters: {}\n", #total));
                out
            }
        }
    }
}

/// `stmts` with each intermediate value (`__vN`) dropped right after the statement that
/// last reads it, as a hand-written chain (or `nn.Sequential`) frees an activation once
/// the next layer has it: without this every activation lived until `forward` returned,
/// so a deep block held all of them at once (MobileNetV2's expanded activations: more
/// memory touched, fewer buffers reused). A value is dropped only where every read of it
/// is a borrow (`&v`) or a method call (`v.op(..)`, ops take `&self`); one moved (`let b =
/// v;`, a tuple, a by-value argument) is left to its new owner. Values in `result` are
/// returned.
fn with_drops(stmts: &[TokenStream], result: &TokenStream) -> Vec<TokenStream> {
    use proc_macro2::TokenTree;
    use std::collections::HashMap;
    /// Every `__v` identifier of `ts`, with whether that occurrence only borrows it.
    fn reads(ts: TokenStream, out: &mut Vec<(String, bool)>) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        for (i, t) in tokens.iter().enumerate() {
            match t {
                TokenTree::Group(g) => reads(g.stream(), out),
                TokenTree::Ident(id) if id.to_string().starts_with("__v") => {
                    let after_amp = i > 0
                        && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '&');
                    let before_dot = matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '.');
                    out.push((id.to_string(), after_amp || before_dot));
                }
                _ => {}
            }
        }
    }
    let mut last: HashMap<String, usize> = HashMap::new();
    let mut moved: Vec<String> = Vec::new();
    for (i, s) in stmts.iter().enumerate() {
        // `let PATTERN = EXPR;`: the pattern defines, the expression reads.
        let tokens: Vec<TokenTree> = s.clone().into_iter().collect();
        let eq = tokens
            .iter()
            .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == '='));
        let (pattern, expr) = match (tokens.first(), eq) {
            (Some(TokenTree::Ident(l)), Some(eq)) if l == "let" => {
                (tokens[1..eq].to_vec(), tokens[eq + 1..].to_vec())
            }
            _ => (Vec::new(), tokens),
        };
        let mut defs = Vec::new();
        reads(pattern.into_iter().collect(), &mut defs);
        for (v, _) in defs {
            last.insert(v, i);
        }
        let mut uses = Vec::new();
        reads(expr.into_iter().collect(), &mut uses);
        for (v, borrowed) in uses {
            if !borrowed {
                moved.push(v.clone());
            }
            last.insert(v, i);
        }
    }
    let mut kept = Vec::new();
    reads(result.clone(), &mut kept);
    let mut out = Vec::with_capacity(stmts.len() * 2);
    for (i, s) in stmts.iter().enumerate() {
        out.push(s.clone());
        let mut done: Vec<&String> = last
            .iter()
            .filter(|(v, at)| **at == i && !moved.contains(v) && !kept.iter().any(|(k, _)| k == *v))
            .map(|(v, _)| v)
            .collect();
        done.sort();
        for v in done {
            let v = syn::Ident::new(v, proc_macro2::Span::call_site());
            out.push(quote!(::core::mem::drop(#v);));
        }
    }
    out
}
