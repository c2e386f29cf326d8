//! Calls of blocks declared elsewhere — a sibling `network!`, a user's layer — and their
//! constructor arguments.

use super::*;

impl Checker<'_> {
    /// A network declared in the same `network!`: its const parameters substituted, its
    /// input unified with the value it is applied to (binding its size names), its output
    /// computed; `[Block; n]` chains `n` copies.
    pub(super) fn sibling(
        &mut self,
        call: &Call,
        sig: &Signature,
        tys: &[Ty],
        unknown: bool,
        named: bool,
    ) -> Option<Resolved> {
        let kind = &call.kind;
        let desc = call.describe();
        if sig.undeclared {
            self.errors.push(kind.span(), format!("`{desc}`: `{kind}` is a `#[derive(Module)]` struct without declared shapes: add `#[module(input = [..], output = [..])]` to it (then it is checked here), or write its output shape here, as `{desc} => [..]` (checked through a hand-written `nn::DeclaredShapes`)"));
            return None;
        }
        if sig.elsewhere {
            self.errors.push(kind.span(), format!("`{desc}`: `{kind}` declares its shapes through a hand-written `nn::DeclaredShapes` (`declared_shapes!`): write its output shape here, as `{desc} => [..]`, and it is checked against them by constant evaluation"));
            return None;
        }
        if !named {
            self.errors.push(kind.span(), format!("the network `{kind}` has parameters, so it needs a field name: write `name: {desc}`"));
            return None;
        }
        // Const arguments.
        let given: Vec<syn::GenericArgument> = call
            .generics
            .as_ref()
            .map_or(Vec::new(), |g| g.args.iter().cloned().collect());
        if given.len() != sig.consts.len() {
            let span = call
                .generics
                .as_ref()
                .map_or(kind.span(), |g| g.lt_token.span);
            self.errors.push(
                span,
                format!(
                    "`{kind}` takes {} const parameter{} ({}), but `{desc}` gives {}",
                    sig.consts.len(),
                    if sig.consts.len() == 1 { "" } else { "s" },
                    sig.consts.join(", "),
                    given.len()
                ),
            );
            return None;
        }
        let mut map: HashMap<String, Dim> = HashMap::new();
        for (c, arg) in sig.consts.iter().zip(&given) {
            let tokens = match arg {
                syn::GenericArgument::Const(syn::Expr::Block(b)) => b
                    .block
                    .stmts
                    .iter()
                    .map(quote::ToTokens::to_token_stream)
                    .collect(),
                other => quote::ToTokens::to_token_stream(other),
            };
            let Ok(d) = syn::parse2::<DimExpr>(tokens) else {
                self.errors.push(syn::spanned::Spanned::span(arg), format!("`{c}` of `{kind}` must be a size: an integer, a const parameter, or `{{arithmetic}}` of them"));
                return None;
            };
            map.insert(c.clone(), eval_dim(&d, self.errors)?);
        }
        // A derived module declared with constructor parameters (`#[module(new = [nx ->
        // nf], ..)]`, GPT-2's `Conv1D`) takes them as a network does, checked and bound.
        let derived_ctor = sig.derived && !(sig.ctor.is_empty() && sig.values.is_empty());
        let ctor_args = if sig.derived && !derived_ctor {
            self.derived_args(call)?
        } else {
            self.ctor_args(call, sig, &mut map)?
        };
        let n_in = sig.inputs.len();
        if let Some((_, span)) = call.repeat
            && (n_in != 1 || sig.tuple_output)
        {
            self.errors.push(span, format!("`[{kind}; n]` chains copies of a block of one input and one output, but `{kind}` has {n_in} input{} and {} output{}", if n_in == 1 { "" } else { "s" }, sig.outputs.len(), if sig.outputs.len() == 1 { "" } else { "s" }));
            return None;
        }
        if unknown {
            return None;
        }
        let declared_inputs = || {
            sig.inputs
                .iter()
                .zip(&sig.input_names)
                .map(|(shape, name)| format!("{name}: {}", show(shape)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if tys.len() != n_in {
            let how = if n_in > 1 {
                let names = sig.input_names.join(", ");
                format!(": apply it to them, as `{desc}({names})` or `({names}) -> {desc}`")
            } else {
                String::new()
            };
            self.errors.push(
                kind.span(),
                format!(
                    "`{desc}` takes {n_in} value{} ({}), but it is applied to {}{how}",
                    if n_in == 1 { "" } else { "s" },
                    declared_inputs(),
                    tys.len()
                ),
            );
            return None;
        }
        let subst = |d: &Dim, map: &HashMap<String, Dim>| d.subst(&|s| map.get(s).cloned());
        for (k, (declared, ty)) in sig.inputs.iter().zip(tys).enumerate() {
            let declared_in: Vec<Dim> = declared.iter().map(|d| subst(d, &map)).collect();
            let mismatch = |errors: &mut Errors, map: &HashMap<String, Dim>| {
                let want: Vec<Dim> = declared.iter().map(|d| subst(d, map)).collect();
                let which = if n_in == 1 {
                    "its input".to_string()
                } else {
                    format!("its input `{}`", sig.input_names[k])
                };
                errors.push(
                    kind.span(),
                    format!(
                        "`{desc}` takes {} (`{kind}` declares {which} as {}), but {} yields {}",
                        show(&want),
                        show(declared),
                        ty.origin,
                        ty.show()
                    ),
                );
            };
            if declared_in.len() != ty.shape.len() {
                mismatch(self.errors, &map);
                return None;
            }
            // Unify: a lone size name binds; everything else must agree.
            for (d, got) in declared_in.iter().zip(&ty.shape) {
                if let Some(s) = d.as_sym()
                    && !map.contains_key(s)
                {
                    map.insert(s.to_string(), got.clone());
                }
            }
            if declared_in
                .iter()
                .zip(&ty.shape)
                .any(|(d, got)| !subst(d, &map).same(got))
            {
                mismatch(self.errors, &map);
                return None;
            }
        }
        let ty = &tys[0];
        let outputs: Vec<Vec<Dim>> = sig
            .outputs
            .iter()
            .map(|o| o.iter().map(|d| subst(d, &map)).collect())
            .collect();
        let output = outputs[0].clone();
        let count = call.repeat.map_or(1, |(n, _)| n);
        if count > 1
            && !(output.len() == ty.shape.len()
                && output.iter().zip(&ty.shape).all(|(a, b)| a.same(b)))
        {
            self.errors.push(call.repeat.expect("repeated").1, format!("`{desc}` chains {count} copies, but one copy turns {} into {}: a repeated block keeps its input's shape", ty.show(), show(&output)));
            return None;
        }
        let path = &call.path;
        let ty_tokens = match &call.generics {
            Some(g) => quote!(#path #kind #g),
            None => quote!(#path #kind),
        };
        // The sizes and switches: numbers and activations do not change the count.
        let sizes: Vec<&TokenStream> = ctor_args
            .iter()
            .take(sig.ctor.len())
            .chain(
                ctor_args
                    .iter()
                    .skip(sig.ctor.len())
                    .zip(&sig.values)
                    .filter(|(_, (_, v))| matches!(v, ValueParam::Bool(_)))
                    .map(|(t, _)| t),
            )
            .collect();
        let sizes = &sizes[..];
        let build_one = if derived_ctor {
            count_checked(
                &ty_tokens,
                &kind.to_string(),
                kind.span(),
                &ctor_args,
                &desc,
                (
                    quote!(<#ty_tokens>::num_parameters_for(#(#sizes),*)),
                    "#[module(parameters = ..)]",
                ),
            )
        } else if sig.derived {
            param_count_checked(
                &ty_tokens,
                &kind.to_string(),
                kind.span(),
                &ctor_args,
                &desc,
            )
        } else {
            quote!(<#ty_tokens>::new(device #(, #ctor_args)*))
        };
        let (field_ty, init) = match call.repeat {
            Some((n, _)) => (
                quote!([#ty_tokens; #n]),
                quote!(::core::array::from_fn(|_| #build_one)),
            ),
            None => (ty_tokens.clone(), build_one),
        };
        let repeated = call.repeat.is_some();
        let derived = sig.derived;
        let (desc_f, kind_f) = (desc.clone(), kind.to_string());
        // A derived module's `forward` is the user's: its result is checked against its
        // declaration, with the error on the layer's token.
        let at = Span::call_site().located_at(kind.span());
        // The number of tensors in a tuple output (0: one tensor).
        let n_out = if sig.tuple_output { outputs.len() } else { 0 };
        let out = if sig.tuple_output {
            Out::Tuple(
                outputs
                    .into_iter()
                    .map(|o| Out::One(Ty::float(o)))
                    .collect(),
            )
        } else {
            Out::One(Ty::float(output))
        };
        // Values handed to inputs declared `Option<[..]>`: an optional input as it is,
        // a tensor as `Some(&x)`.
        let slots: Vec<(bool, bool)> = sig
            .optional
            .iter()
            .zip(self.call_optional.iter().chain(std::iter::repeat(&false)))
            .map(|(&takes, &is)| (takes, is))
            .collect();
        let any_optional = slots.iter().any(|s| s.0);
        let built = Built {
            out,
            field: Some((field_ty, init)),
            params: Dim::lit(0),
            forward: Box::new(move |xs, f| {
                if any_optional {
                    let args = xs.iter().zip(&slots).map(|(x, slot)| match slot {
                        (true, true) => quote!(#x.as_ref()),
                        (true, false) => quote!(::core::option::Option::Some(&#x)),
                        _ => quote!(&#x),
                    });
                    return quote!(#f.forward(#(#args),*));
                }
                if xs.len() > 1 {
                    return quote!(#f.forward(#(&#xs),*));
                }
                let x = &xs[0];
                if derived && !repeated {
                    forward_checked(f, x, at, n_out, &desc_f, &kind_f)
                } else if repeated {
                    quote!({
                        let mut __r = #x.clone();
                        for __block in #f.iter() {
                            __r = __block.forward(&__r);
                        }
                        __r
                    })
                } else {
                    quote!(#f.forward(&#x))
                }
            }),
            onnx: None,
        };
        let one = if sig.derived && !derived_ctor {
            quote!(<#ty_tokens as ::ferrograd::nn::DeclaredShapes>::PARAMETERS)
        } else if !sig.ctor.is_empty()
            || sig
                .values
                .iter()
                .any(|(_, v)| matches!(v, ValueParam::Bool(_)))
        {
            quote!(<#ty_tokens>::num_parameters_for(#(#sizes),*))
        } else {
            quote!(<#ty_tokens>::NUM_PARAMETERS)
        };
        Some(Resolved {
            built,
            params: Some(quote!(#one * #count)),
        })
    }

    /// A constructor argument's tokens at its own token (`span`), the expansion's hygiene
    /// kept (constructor parameters are its locals); `None`, reported on `what`, when it
    /// uses a size of the input, known only at run time.
    pub(super) fn ctor_arg_tokens(
        &mut self,
        value: &Dim,
        span: Span,
        what: &str,
    ) -> Option<TokenStream> {
        if let Some(s) = value
            .symbols()
            .into_iter()
            .find(|s| self.runtime.contains(s))
        {
            self.errors.push(span, format!("{what}: `{s}` is a size of the input, known only at run time; constructor arguments are literals, const or constructor parameters, or consts"));
            return None;
        }
        let at = Span::call_site().located_at(span);
        Some(value.tokens(&|s| {
            let i = syn::Ident::new(s, at);
            quote!(#i)
        }))
    }

    /// A derived module's constructor arguments (`gate: GatedUnit(64)`): sizes or numbers,
    /// positional, passed to its `new` before the device as written (`None` after a
    /// reported mistake).
    pub(super) fn derived_args(&mut self, call: &Call) -> Option<Vec<TokenStream>> {
        let kind = &call.kind;
        let mut tokens = Vec::new();
        for arg in &call.args {
            match arg {
                Arg::Positional(Value::Dim(d)) => {
                    let value = eval_dim(d, self.errors)?;
                    tokens.push(self.ctor_arg_tokens(&value, d.span(), &format!("`{kind}`"))?);
                }
                Arg::Positional(Value::Float(x, span)) => {
                    let lit = proc_macro2::Literal::f64_suffixed(*x);
                    tokens.push(quote::quote_spanned!(*span=> #lit));
                }
                other => {
                    self.errors.push(other.span(), format!("`{kind}` is a `#[derive(Module)]` struct built by its own `new`: give its arguments positionally, as `{kind}::new(.., device)` takes them before the device (here `{}` does not fit)", other.text()));
                    return None;
                }
            }
        }
        Some(tokens)
    }

    /// A sibling's constructor arguments (`Block(64 -> 128, stride = 2)`: the arrow, then
    /// positional, then by name, defaults for the rest) bound in `map`, and their tokens
    /// in `new`'s order. `None` after a reported mistake.
    pub(super) fn ctor_args(
        &mut self,
        call: &Call,
        sig: &Signature,
        map: &mut HashMap<String, Dim>,
    ) -> Option<Vec<TokenStream>> {
        let kind = &call.kind;
        if sig.ctor.is_empty() && sig.values.is_empty() {
            if let Some(span) = call.args_span {
                self.errors.push(span, format!("`{kind}` takes no constructor arguments: declare them as `struct {kind}[a -> b, stride = 1](..)`, or give sizes as const parameters"));
                return None;
            }
            return Some(Vec::new());
        }
        let names: Vec<&str> = sig.ctor.iter().map(|(n, _)| n.as_str()).collect();
        let mut given: Vec<Option<(DimExpr, Span)>> = vec![None; sig.ctor.len()];
        let mut next = 0;
        let mut ok = true;
        // Number and activation parameters, given by name: a literal (a number, an
        // activation's name), or one of this network's own.
        let mut numbers: Vec<Option<TokenStream>> = vec![None; sig.values.len()];
        for arg in &call.args {
            if let Arg::Named(key, v) = arg
                && let Some(k) = sig.values.iter().position(|(n, _)| key == n)
            {
                let own = |name: &syn::Ident, list: &[String]| {
                    list.iter().any(|f| name == f).then(|| {
                        let i = syn::Ident::new(
                            &name.to_string(),
                            Span::call_site().located_at(name.span()),
                        );
                        quote!(#i)
                    })
                };
                let tokens = match (&sig.values[k].1, v) {
                    (ValueParam::Number(_), Value::Float(x, _)) => Some(quote!(#x)),
                    (ValueParam::Number(_), Value::Dim(DimExpr::Lit(x, _))) => {
                        let x = *x as f64;
                        Some(quote!(#x))
                    }
                    (ValueParam::Number(_), Value::Dim(DimExpr::Sym(name))) => {
                        own(name, &self.floats)
                    }
                    (ValueParam::Activation, Value::Dim(DimExpr::Sym(name))) => {
                        own(name, &self.acts)
                    }
                    (ValueParam::Activation, Value::Str(s)) => activation_variant(&s.value())
                        .map(|v| quote!(::ferrograd::nn::Activation::#v)),
                    (ValueParam::Bool(_), Value::Bool(b)) => Some(quote!(#b)),
                    (ValueParam::Bool(_), Value::Dim(DimExpr::Sym(name))) => own(name, &self.bools),
                    _ => None,
                };
                if tokens.is_none() {
                    let want = match sig.values[k].1 {
                        ValueParam::Number(_) => {
                            "a number (`f64`): a literal or one of this network's `f64` parameters"
                        }
                        ValueParam::Activation => {
                            "an activation: a name (\"gelu\", \"gelu_tanh\", \"relu\", \"silu\", \"tanh\", \"sigmoid\") or one of this network's `Activation` parameters"
                        }
                        ValueParam::Bool(_) => {
                            "a switch: `true`, `false` or one of this network's `bool` parameters"
                        }
                    };
                    self.errors.push(
                        v.span(),
                        format!("`{key}` of `{kind}` is {want}, not `{}`", v.text()),
                    );
                    ok = false;
                }
                if numbers[k].is_some() {
                    self.errors
                        .push(key.span(), format!("`{key}` of `{kind}` is given twice"));
                    ok = false;
                }
                numbers[k] = tokens.or(Some(quote!(::core::default::Default::default())));
                continue;
            }
            let mut put = |errors: &mut Errors, k: usize, d: &DimExpr, span: Span| {
                if given[k].is_some() {
                    errors.push(span, format!("`{}` of `{kind}` is given twice", names[k]));
                    false
                } else {
                    given[k] = Some((d.clone(), span));
                    true
                }
            };
            match arg {
                Arg::Arrow(a, b) if sig.ctor_arrow && next == 0 => {
                    ok &= put(self.errors, 0, a, a.span());
                    ok &= put(self.errors, 1, b, b.span());
                    next = 2;
                }
                Arg::Positional(Value::Dim(d)) if next < names.len() => {
                    ok &= put(self.errors, next, d, d.span());
                    next += 1;
                }
                Arg::Named(key, Value::Dim(d)) => match names.iter().position(|n| key == n) {
                    Some(k) => ok &= put(self.errors, k, d, d.span()),
                    None => {
                        let hint = match kinds::suggest(&key.to_string(), names.iter().copied()) {
                            Some(n) => format!(": did you mean `{n}`?"),
                            None => format!(" (it takes {})", names.join(", ")),
                        };
                        self.errors.push(
                            key.span(),
                            format!("`{kind}` has no constructor parameter `{key}`{hint}"),
                        );
                        ok = false;
                    }
                },
                other => {
                    let form = if sig.ctor_arrow {
                        format!(
                            "`{kind}({} -> {}{})`",
                            names[0],
                            names[1],
                            names[2..]
                                .iter()
                                .map(|n| format!(", {n} = .."))
                                .collect::<String>()
                        )
                    } else {
                        format!(
                            "`{kind}({})`",
                            names
                                .iter()
                                .map(|n| format!("{n} = .."))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    };
                    self.errors.push(
                        other.span(),
                        format!("`{kind}` takes sizes as {form}; this argument does not fit"),
                    );
                    ok = false;
                }
            }
        }
        let mut tokens = Vec::new();
        for (k, (name, default)) in sig.ctor.iter().enumerate() {
            let (value, span) = match (&given[k], default) {
                (Some((d, span)), _) => (eval_dim(d, self.errors)?, *span),
                (None, Some(v)) => (Dim::lit(*v), kind.span()),
                (None, None) => {
                    self.errors.push(
                        call.args_or_kind(),
                        format!(
                            "`{}` needs its constructor parameter `{name}`",
                            call.describe()
                        ),
                    );
                    ok = false;
                    continue;
                }
            };
            if let Some(v) = value.as_lit()
                && v <= 0
            {
                self.errors.push(
                    span,
                    format!("`{name}` of `{kind}` is a size: it must be positive, but it is {v}"),
                );
                ok = false;
            }
            match self.ctor_arg_tokens(&value, span, &format!("`{name}` of `{kind}`")) {
                Some(t) => tokens.push(t),
                None => ok = false,
            }
            map.insert(name.clone(), value);
        }
        for ((name, param), given) in sig.values.iter().zip(numbers) {
            match (given, param) {
                (Some(t), _) => tokens.push(t),
                (None, ValueParam::Number(Some(d))) => tokens.push(quote!(#d)),
                (None, ValueParam::Bool(Some(b))) => tokens.push(quote!(#b)),
                (None, param) => {
                    let (what, example) = match param {
                        ValueParam::Number(_) => ("number", "0.1"),
                        ValueParam::Bool(_) => ("switch", "true"),
                        ValueParam::Activation => ("activation", "\"gelu\""),
                    };
                    self.errors.push(
                        call.args_or_kind(),
                        format!(
                            "`{}` needs its {what} parameter `{name}` (by name: `{name} = {example}`)",
                            call.describe()
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(tokens)
    }

    /// `name: Type => [shape]`: another network as a layer, checked through
    /// `nn::DeclaredShapes` by constant evaluation.
    pub(super) fn user(
        &mut self,
        call: &Call,
        tys: &[Ty],
        unknown: bool,
        annotation: Option<&ShapeExpr>,
    ) -> Option<Resolved> {
        let kind = &call.kind;
        let Some(annotation) = annotation else {
            self.errors.push(kind.span(), format!("`{}` uses the network `{kind}` as a layer: write its output shape after it, as `{} => [..]`, and it is checked against `{kind}`'s declaration", call.describe(), call.describe()));
            return None;
        };
        if unknown {
            return None;
        }
        if tys.len() != 1 {
            self.errors.push(kind.span(), format!("`{}` is applied to {} values, but a layer known only through `nn::DeclaredShapes` (`{kind}`) takes one value and yields one: declare `{kind}` with `network!` or `#[module(input = [..], output = [..])]` to apply it to several", call.describe(), tys.len()));
            return None;
        }
        let output = shape_dims(annotation, self.errors);
        let path = &call.path;
        let ty_tokens = match &call.generics {
            Some(g) => quote!(#path #kind #g),
            None => quote!(#path #kind),
        };
        self.checked.users.push(UserLayer {
            ty: kind.clone(),
            ty_tokens: ty_tokens.clone(),
            input: tys[0].shape.clone(),
            origin: tys[0].origin.clone(),
            output: output.clone(),
            desc: call.describe(),
        });
        let desc = call.describe();
        let kind_text = kind.to_string();
        let init = param_count_checked(&ty_tokens, &kind.to_string(), kind.span(), &[], &desc);
        let at = Span::call_site().located_at(kind.span());
        let built = Built {
            out: Out::One(Ty::float(output)),
            field: Some((ty_tokens.clone(), init)),
            params: Dim::lit(0),
            forward: Box::new(move |x, f| forward_checked(f, &x[0], at, 0, &desc, &kind_text)),
            onnx: None,
        };
        Some(Resolved {
            built,
            params: Some(quote!(<#ty_tokens as ::ferrograd::nn::DeclaredShapes>::PARAMETERS)),
        })
    }
}

/// The `nn::Activation` variant of an activation's name (`network!`'s, or a Hugging Face
/// `hidden_act`), as `Activation::from_name` reads it.
pub(crate) fn activation_variant(name: &str) -> Option<syn::Ident> {
    let v = match name {
        "relu" => "Relu",
        "gelu" => "Gelu",
        "gelu_tanh" | "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => "GeluTanh",
        "silu" | "swish" => "Silu",
        "tanh" => "Tanh",
        "sigmoid" => "Sigmoid",
        _ => return None,
    };
    Some(syn::Ident::new(v, Span::call_site()))
}
