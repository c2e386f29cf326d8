//! `#[derive(Module)]`: parse the field attributes, validate them, generate one traversal.

use crate::network::parse::ShapeExpr;
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Field, Fields, Type};

/// What a field is to the module.
enum Role {
    Parameter,
    Buffer,
    Child,
    Skip,
    Training,
}

/// Collects errors so that every mistake in a struct is reported in one compile.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

fn tokens_span(t: &proc_macro2::TokenTree) -> proc_macro2::Span {
    t.span()
}

/// Whether `ty` is `Tensor` or `Option<Tensor>` (by the last path segment), and which.
fn tensor_field(ty: &Type) -> Option<bool> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident == "Tensor" && last.arguments.is_empty() {
        return Some(false);
    }
    if last.ident == "Option"
        && let syn::PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(syn::GenericArgument::Type(inner)) = args.args.first()
        && tensor_field(inner) == Some(false)
    {
        return Some(true);
    }
    None
}

fn role_of(field: &Field, errors: &mut Errors) -> Role {
    let mut role: Option<(Role, &syn::Attribute)> = None;
    for attr in &field.attrs {
        let new_role = if attr.path().is_ident("param") || attr.path().is_ident("buffer") {
            if !matches!(attr.meta, syn::Meta::Path(_)) {
                errors.push(syn::Error::new_spanned(
                    attr,
                    "`#[param]` and `#[buffer]` take no arguments",
                ));
            }
            let kind = if attr.path().is_ident("param") {
                Role::Parameter
            } else {
                Role::Buffer
            };
            if tensor_field(&field.ty).is_none() {
                let ty = &field.ty;
                errors.push(syn::Error::new_spanned(
                    ty,
                    format!(
                        "`#[{}]` needs a field of type `Tensor` or `Option<Tensor>`, found `{}`",
                        attr.path()
                            .get_ident()
                            .map(|i| i.to_string())
                            .unwrap_or_default(),
                        quote!(#ty).to_string().replace(' ', "")
                    ),
                ));
            }
            Some(kind)
        } else if attr.path().is_ident("module") {
            let mut found = None;
            let parsed = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("skip") {
                    found = Some(Role::Skip);
                    Ok(())
                } else if meta.path.is_ident("training") {
                    found = Some(Role::Training);
                    Ok(())
                } else if meta.path.is_ident("rename") {
                    // The key, read by `key_of`; no role of its own.
                    meta.value()?.parse::<syn::LitStr>().map(drop)
                } else {
                    Err(meta.error(format!(
                        "unknown field attribute `module({})`: expected `module(skip)`, `module(training)` or `module(rename = \"key\")`",
                        meta.path.get_ident().map(|i| i.to_string()).unwrap_or_else(|| "..".into())
                    )))
                }
            });
            if let Err(e) = parsed {
                errors.push(e);
            }
            found
        } else {
            None
        };
        if let Some(r) = new_role {
            if let Some((_, first)) = &role {
                errors.push(syn::Error::new_spanned(
                    attr,
                    format!(
                        "a field has one role: this conflicts with `{}` above",
                        quote!(#first).to_string().replace(' ', "")
                    ),
                ));
            } else {
                role = Some((r, attr));
            }
        }
    }
    role.map(|(r, _)| r).unwrap_or(Role::Child)
}

/// A field's state-dict key given as `#[module(rename = "self")]` (a checkpoint's name
/// that is no Rust identifier, as Hugging Face BERT's `attention.self`).
fn key_of(field: &Field) -> Option<String> {
    let mut key = None;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("module")) {
        // Malformed attributes are reported by `role_of`.
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                key = Some(meta.value()?.parse::<syn::LitStr>()?.value());
            } else if meta.input.peek(syn::Token![=]) {
                meta.value()?.parse::<syn::Expr>()?;
            }
            Ok(())
        });
    }
    key
}

/// The container attributes: `#[module(crate = path)]`, and the declared shapes
/// `#[module(input = [..], output = [..], parameters = count)]` that make the type a
/// layer of `network!` without annotations.
struct Container {
    krate: syn::Path,
    /// The shapes, parsed and as written.
    input: Option<(ShapeExpr, proc_macro2::TokenTree)>,
    output: Option<(ShapeExpr, proc_macro2::TokenTree)>,
    parameters: Option<syn::Expr>,
    /// `new = [nx -> nf]`: constructor parameters the shapes use, as written.
    new: Option<proc_macro2::TokenTree>,
    /// `input = (x: [..], mask: Option<[..]: bool>)`: several inputs, as written (`input`
    /// then holds the first's shape).
    inputs: Option<proc_macro2::TokenTree>,
    /// The first of `input` and `output`, for errors about the declaration as a whole.
    attr: Option<proc_macro2::Span>,
}

fn container(input: &DeriveInput, errors: &mut Errors) -> Container {
    let mut c = Container {
        krate: syn::parse_quote!(::ferrograd),
        input: None,
        output: None,
        parameters: None,
        new: None,
        inputs: None,
        attr: None,
    };
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("module")) {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                c.krate = meta.value()?.parse()?;
            } else if meta.path.is_ident("input") || meta.path.is_ident("output") {
                c.attr.get_or_insert(meta.path.span());
                let value = meta.value()?;
                let tokens = value.fork().parse()?;
                // An output may be a tuple of shapes, `([N, T, D], [N, D])`, for a
                // `forward` that returns a tuple of tensors; the first stands for it in
                // `nn::DeclaredShapes::OUTPUT`.
                if meta.path.is_ident("input") && value.peek(syn::token::Paren) {
                    // Several inputs, named as a network's: `(x: [N, T, D], mask: Option<..>)`.
                    let group: proc_macro2::TokenTree = value.parse()?;
                    let header = quote!(struct __Inputs #group -> [N] {});
                    let parsed = syn::parse2::<crate::network::parse::Network>(header)
                        .map_err(|e| syn::Error::new(tokens_span(&tokens), e.to_string()))?;
                    let first = parsed.inputs[0].shape.clone();
                    let proc_macro2::TokenTree::Group(g) = &group else {
                        unreachable!("peeked a group")
                    };
                    let first_tokens = g
                        .stream()
                        .into_iter()
                        .find(|t| matches!(t, proc_macro2::TokenTree::Group(b) if b.delimiter() == proc_macro2::Delimiter::Bracket))
                        .ok_or_else(|| syn::Error::new(g.span(), "each input is `name: [dims]`"))?;
                    c.input = Some((first, first_tokens));
                    c.inputs = Some(group);
                    return Ok(());
                }
                let shape = if meta.path.is_ident("output") && value.peek(syn::token::Paren) {
                    let content;
                    syn::parenthesized!(content in value);
                    let shapes = syn::punctuated::Punctuated::<ShapeExpr, syn::Token![,]>::parse_terminated(&content)?;
                    let first = shapes.into_iter().next().ok_or_else(|| {
                        syn::Error::new(tokens_span(&tokens), "a tuple output lists at least one shape")
                    })?;
                    Some((first, tokens))
                } else {
                    Some((value.parse()?, tokens))
                };
                if meta.path.is_ident("input") {
                    c.input = shape;
                } else {
                    c.output = shape;
                }
            } else if meta.path.is_ident("parameters") {
                c.parameters = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("new") {
                let value = meta.value()?;
                if !value.peek(syn::token::Bracket) {
                    return Err(value.error("expected the constructor parameters in brackets, as `new = [nx -> nf]` for `new(nx, nf, device)`"));
                }
                c.new = Some(value.parse()?);
            } else {
                return Err(meta.error("unknown container attribute: expected `#[module(crate = path)]` or the declared shapes `#[module(input = [..], output = [..], parameters = count)]`, with `new = [a -> b, ..]` when they use `new`'s arguments"));
            }
            Ok(())
        });
        if let Err(e) = parsed {
            errors.push(e);
        }
    }
    c
}

/// With `#[module(input = .., output = ..)]`: `nn::DeclaredShapes` (the parameter count
/// given, or summed at compile time from the children's declared counts) and the
/// declaration `network!` fetches to check the type as a layer (see
/// `network::declare`).
fn declared(
    input: &DeriveInput,
    c: &Container,
    child_types: &[&Type],
    has_params: Option<proc_macro2::Span>,
    errors: &mut Errors,
) -> TokenStream {
    let krate = &c.krate;
    let (shape_in, shape_out) = match (&c.input, &c.output) {
        (None, None) => {
            if let Some(new) = &c.new {
                errors.push(syn::Error::new(
                    new.span(),
                    "`new = [..]` goes with the declared shapes that use it: add `input = [..], output = [..]`",
                ));
            }
            if let Some(p) = &c.parameters {
                let span = p.span();
                errors.push(syn::Error::new(
                    span,
                    "`parameters = ..` goes with the declared shapes: add `input = [..], output = [..]`",
                ));
            }
            // A declaration that says so, so that `network!` explains what to add
            // rather than failing to find it (only for users' crates).
            let default_krate = krate.leading_colon.is_some()
                && krate.segments.len() == 1
                && krate.segments[0].ident == "ferrograd";
            if !default_krate {
                return TokenStream::new();
            }
            let ident = &input.ident;
            return crate::network::declaration_macro(
                ident,
                &input.vis,
                &quote!(#[module(undeclared)] struct #ident (x: [N]) -> [N] {}),
            );
        }
        (Some((i, ti)), Some((o, to))) => ((i, ti), (o, to)),
        _ => {
            errors.push(syn::Error::new(
                c.attr.unwrap_or_else(|| input.ident.span()),
                "declare both shapes, as `#[module(input = [N, 64], output = [N, 10])]`",
            ));
            return TokenStream::new();
        }
    };
    if input.generics.type_params().next().is_some() || input.generics.lifetimes().next().is_some()
    {
        errors.push(syn::Error::new_spanned(
            &input.generics,
            "declared shapes work on structs whose only generics are const parameters",
        ));
        return TokenStream::new();
    }
    if let Some(new) = &c.new {
        return declared_with_new(input, c, new, (shape_in.1, shape_out.1), errors);
    }
    let parameters = match &c.parameters {
        Some(p) => quote!(#p),
        None if has_params.is_some() => {
            errors.push(syn::Error::new(
                has_params.unwrap_or_else(|| input.ident.span()),
                format!(
                    "`{}` holds `#[param]` tensors, whose sizes the derive cannot see: give the parameter count as `parameters = ..`",
                    input.ident
                ),
            ));
            return TokenStream::new();
        }
        None => {
            let terms = child_types.iter().map(|ty| {
                let span = ty.span();
                quote_spanned!(span=> + <#ty as #krate::nn::DeclaredShapes>::PARAMETERS)
            });
            quote!(0 #(#terms)*)
        }
    };
    let mut quiet = crate::network::check_errors();
    let dims = |shape: &ShapeExpr, quiet: &mut _| {
        crate::network::declared_tokens(shape, &quote!(#krate), quiet)
    };
    let (din, dout) = (dims(shape_in.0, &mut quiet), dims(shape_out.0, &mut quiet));
    let (shape_in, shape_out) = (shape_in.1, shape_out.1);
    if let Err(e) = crate::network::finish_errors(quiet) {
        errors.push(e);
    }
    let ident = &input.ident;
    let generics = &input.generics;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let inputs = match &c.inputs {
        Some(group) => quote!(#group),
        None => quote!((x: #shape_in)),
    };
    let declaration = crate::network::declaration_macro(
        ident,
        &input.vis,
        &quote!(#[module] struct #ident #generics #inputs -> #shape_out {}),
    );
    quote! {
        impl #impl_generics #krate::nn::DeclaredShapes for #ident #ty_generics #where_clause {
            const INPUT: &'static [#krate::nn::DeclaredDim] = #din;
            const OUTPUT: &'static [#krate::nn::DeclaredDim] = #dout;
            const PARAMETERS: usize = #parameters;
        }
        #declaration
    }
}

/// Declared shapes that use constructor parameters (`#[module(new = [nx -> nf], input =
/// [N, T, nx], output = [N, T, nf], parameters = nx * nf + nf)]`): no `nn::DeclaredShapes`
/// (its shapes are not constants), but the declaration `network!` fetches, with the
/// parameters in it, and `num_parameters_for(sizes..)`, the count as a `const fn` of the
/// size parameters.
fn declared_with_new(
    input: &DeriveInput,
    c: &Container,
    new: &proc_macro2::TokenTree,
    (shape_in, shape_out): (&proc_macro2::TokenTree, &proc_macro2::TokenTree),
    errors: &mut Errors,
) -> TokenStream {
    let ident = &input.ident;
    let generics = &input.generics;
    let inputs = match &c.inputs {
        Some(group) => quote!(#group),
        None => quote!((x: #shape_in)),
    };
    let header = quote!(struct #ident #generics #new #inputs -> #shape_out {});
    // Read as `network!` will read it, so that a malformed list is reported here.
    let parsed = match syn::parse2::<crate::network::parse::Network>(header.clone()) {
        Ok(n) => n,
        Err(e) => {
            errors.push(syn::Error::new(new.span(), e.to_string()));
            return TokenStream::new();
        }
    };
    let Some(parameters) = &c.parameters else {
        errors.push(syn::Error::new(
            new.span(),
            format!(
                "`{ident}`'s shapes use its constructor parameters, so its parameter count does too: give it in them, as `parameters = ..` (for a linear layer `[nx -> nf]`, `parameters = nx * nf + nf`)"
            ),
        ));
        return TokenStream::new();
    };
    let sizes: Vec<&syn::Ident> = parsed
        .ctor
        .iter()
        .filter(|p| p.value.is_none())
        .map(|p| &p.name)
        .collect();
    // Switches (`bias: bool`) count too, as 0 or 1.
    let switches: Vec<syn::Ident> = parsed
        .ctor
        .iter()
        .filter(|p| matches!(p.value, Some(crate::network::parse::ValueParam::Bool(_))))
        .map(|p| format_ident!("{}", p.name, span = proc_macro2::Span::call_site()))
        .collect();
    let mut quiet = crate::network::check_errors();
    for shape in [&parsed.inputs[0].shape, &parsed.outputs[0]] {
        crate::network::declared_tokens(shape, &quote!(::ferrograd), &mut quiet);
    }
    if let Err(e) = crate::network::finish_errors(quiet) {
        errors.push(e);
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let doc = format!(
        "The parameter count of `{ident}::new({}.., device)` (`#[module(parameters = ..)]`), as `network!` sums it.",
        sizes.iter().map(|s| format!("{s}, ")).collect::<String>()
    );
    let declaration =
        crate::network::declaration_macro(ident, &input.vis, &quote!(#[module] #header));
    quote! {
        impl #impl_generics #ident #ty_generics #where_clause {
            #[doc = #doc]
            #[allow(non_snake_case, unused_variables, clippy::too_many_arguments)]
            pub const fn num_parameters_for(#(#sizes: usize,)* #(#switches: bool),*) -> usize {
                #(let #switches = #switches as usize;)*
                #parameters
            }
        }
        #declaration
    }
}

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        Data::Enum(e) => {
            return Err(syn::Error::new_spanned(
                e.enum_token,
                "`#[derive(Module)]` works on structs only: a module's tensors must be known without matching on a variant",
            ));
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(
                u.union_token,
                "`#[derive(Module)]` works on structs only, not unions",
            ));
        }
    };
    let mut errors = Errors::default();
    let container = container(input, &mut errors);
    let krate = container.krate.clone();
    let members: Vec<(syn::Member, String, &Field)> = match fields {
        Fields::Named(named) => named
            .named
            .iter()
            .filter_map(|f| {
                let ident = f.ident.clone()?;
                let name = key_of(f)
                    .unwrap_or_else(|| ident.to_string().trim_start_matches("r#").to_string());
                Some((syn::Member::Named(ident), name, f))
            })
            .collect(),
        Fields::Unnamed(unnamed) => unnamed
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (syn::Member::Unnamed(syn::Index::from(i)), i.to_string(), f))
            .collect(),
        Fields::Unit => Vec::new(),
    };

    let (mut visit, mut visit_mut, mut training) = (Vec::new(), Vec::new(), Vec::new());
    let mut modules = Vec::new();
    let mut child_types: Vec<&Type> = Vec::new();
    // The first `#[param]` attribute, for the error when a count is needed.
    let mut has_params: Option<proc_macro2::Span> = None;
    for (member, name, field) in &members {
        // Errors (a field type that is no module) point at the type; the locals
        // (`self`, `prefix`, `f`) keep this expansion's hygiene, as the type may come from
        // another macro's input.
        let span = field.ty.span();
        match role_of(field, &mut errors) {
            role @ (Role::Parameter | Role::Buffer) => {
                if matches!(role, Role::Parameter) && has_params.is_none() {
                    has_params = field
                        .attrs
                        .iter()
                        .find(|a| a.path().is_ident("param"))
                        .map(|a| a.path().span());
                }
                let kind = if matches!(role, Role::Parameter) {
                    format_ident!("Parameter")
                } else {
                    format_ident!("Buffer")
                };
                let kind = quote!(#krate::nn::TensorKind::#kind);
                if tensor_field(&field.ty) == Some(true) {
                    visit.push(quote! {
                        if let ::core::option::Option::Some(t) = &self.#member { f(&#krate::nn::join_path(prefix, #name), t, #kind); }
                    });
                    visit_mut.push(quote! {
                        if let ::core::option::Option::Some(t) = &mut self.#member { f(&#krate::nn::join_path(prefix, #name), t, #kind); }
                    });
                } else {
                    visit.push(
                        quote! { f(&#krate::nn::join_path(prefix, #name), &self.#member, #kind); },
                    );
                    visit_mut.push(quote! { f(&#krate::nn::join_path(prefix, #name), &mut self.#member, #kind); });
                }
            }
            Role::Child if tensor_field(&field.ty).is_some() => {
                // A tensor is no child module: say which attribute it lacks, once. After
                // a misspelt one (`#[parm]`) rustc's own error names the right spelling,
                // so nothing is added to it.
                let misspelt = field.attrs.iter().any(|a| {
                    a.path().get_ident().is_some_and(|i| {
                        crate::network::suggest(&i.to_string(), ["param", "buffer"].into_iter())
                            .is_some()
                    })
                });
                if !misspelt {
                    let what = match &field.ident {
                        Some(ident) => format!("field `{ident}`"),
                        None => format!("field {name}"),
                    };
                    errors.push(syn::Error::new(
                        field.ident.as_ref().map_or(span, |i| i.span()),
                        format!("{what} is a tensor, not a module: mark it `#[param]` (trained, in `parameters()`) or `#[buffer]` (saved in the state dict, not trained), or `#[module(skip)]` to leave it out"),
                    ));
                }
            }
            Role::Child => {
                child_types.push(&field.ty);
                let (v, vm, st) = (
                    quote_spanned! {span=> #krate::nn::Module::visit},
                    quote_spanned! {span=> #krate::nn::Module::visit_mut},
                    quote_spanned! {span=> #krate::nn::Module::set_training},
                );
                // The field, at the type's location with this expansion's hygiene.
                let at = proc_macro2::Span::call_site().located_at(span);
                let (this, this_mut) = (
                    quote_spanned! {at=> &self.#member},
                    quote_spanned! {at=> &mut self.#member},
                );
                visit.push(quote! { #v(#this, &#krate::nn::join_path(prefix, #name), f); });
                visit_mut
                    .push(quote! { #vm(#this_mut, &#krate::nn::join_path(prefix, #name), f); });
                training.push(quote! { #st(#this_mut, training); });
                let each = quote_spanned! {span=> #krate::nn::Module::for_each_module_mut};
                modules.push(quote! { #each(#this_mut, f); });
            }
            Role::Training => {
                let ty = &field.ty;
                if quote!(#ty).to_string() != "bool" {
                    errors.push(syn::Error::new_spanned(
                        ty,
                        "`#[module(training)]` marks a `bool` field",
                    ));
                }
                training.push(quote! { self.#member = training; });
            }
            Role::Skip => {}
        }
    }
    let declared = declared(input, &container, &child_types, has_params, &mut errors);
    errors.finish()?;

    let ident = &input.ident;
    // A struct without generics is 'static: it can be found by type in a model.
    let as_any = input.generics.params.is_empty().then(|| {
        quote! {
            fn as_any_mut(&mut self) -> ::core::option::Option<&mut dyn ::core::any::Any> {
                ::core::option::Option::Some(self)
            }
        }
    });
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // Generic children need `Module` bounds: put them on the field types, as serde does.
    let mut where_clause = where_clause
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(where));
    let generic_names: Vec<String> = input
        .generics
        .type_params()
        .map(|p| p.ident.to_string())
        .collect();
    for ty in child_types {
        let text = quote!(#ty).to_string();
        if generic_names.iter().any(|g| {
            text.split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == g)
        }) {
            where_clause
                .predicates
                .push(syn::parse_quote!(#ty: #krate::nn::Module));
        }
    }
    Ok(quote! {
        #declared
        impl #impl_generics #krate::nn::Module for #ident #ty_generics #where_clause {
            #[allow(unused_variables)]
            fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &#krate::Tensor, #krate::nn::TensorKind)) {
                #(#visit)*
            }
            #[allow(unused_variables)]
            fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut #krate::Tensor, #krate::nn::TensorKind)) {
                #(#visit_mut)*
            }
            #[allow(unused_variables)]
            fn set_training(&mut self, training: bool) {
                #(#training)*
            }
            #as_any
            fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn ::core::any::Any)) {
                if let ::core::option::Option::Some(me) = #krate::nn::Module::as_any_mut(self) {
                    f(me);
                }
                #(#modules)*
            }
        }
    })
}
