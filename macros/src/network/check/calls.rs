//! Calls: a built-in kind, a sequence, a sibling network (declared in the same
//! `network!`, checked through its declaration) or a network declared elsewhere
//! (annotated, checked by constant evaluation); and their code.

use super::{
    Checker, Errors, Field, Resolved, Row, Signature, UserLayer, Val, eval_dim, pattern_tokens,
    shape_dims, show,
};
use crate::network::dim::Dim;
use crate::network::kinds::{self, Built, Cx, Out, Ty};
use crate::network::parse::{Arg, Call, DKind, DimExpr, ShapeExpr, Value, ValueParam};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use std::collections::HashMap;

mod blocks;
mod derived;

use derived::{count_checked, forward_checked, param_count_checked};

impl Checker<'_> {
    pub(super) fn call(
        &mut self,
        call: &Call,
        inputs: Vec<(TokenStream, Ty)>,
        unknown: bool,
        annotation: Option<&ShapeExpr>,
    ) -> Option<Val> {
        if let Some(name) = &call.name {
            if let Some(first) = self.field_names.iter().find(|n| *n == name) {
                let what = if self.ctor.iter().any(|c| first == c) {
                    "a constructor parameter"
                } else {
                    "a layer"
                };
                self.errors.push(
                    name.span(),
                    format!(
                        "duplicate layer name `{name}`: `{first}` is already {what} of this network"
                    ),
                );
            }
            self.field_names.push(name.clone());
        }
        if !call.items.is_empty() {
            return self.sequence(call, inputs, unknown);
        }
        let (vars, tys): (Vec<TokenStream>, Vec<Ty>) = inputs.into_iter().unzip();
        let optional: Vec<bool> = vars
            .iter()
            .map(|v| self.optional_name(v).is_some())
            .collect();
        if let Some(k) = optional.iter().position(|&o| o) {
            let kind = call.kind.to_string();
            let sig = (call.path.is_some() || kinds::find(&kind).is_none())
                .then(|| self.siblings.iter().find(|s| s.name == kind))
                .flatten();
            let takes = sig.is_some_and(|s| {
                s.inputs.len() == optional.len()
                    && optional
                        .iter()
                        .zip(&s.optional)
                        .all(|(o, takes)| !o || *takes)
            });
            if !takes {
                let name = self.optional_name(&vars[k]).unwrap_or_default();
                let how = match sig {
                    Some(s) if s.inputs.len() == optional.len() => format!(
                        "`{kind}` declares its input `{}` as a tensor that is always there",
                        s.input_names[k]
                    ),
                    _ => format!("`{}` needs a tensor", call.describe()),
                };
                self.errors.push(
                    call.kind.span(),
                    format!("`{name}` is an optional input (`Option<[..]>`), absent at run time when `forward` is given `None`, but {how}: hand it on only to a network or `#[derive(Module)]` layer that declares that input `Option<[..]>` too"),
                );
                return None;
            }
        }
        self.call_optional = optional;
        let (call, r) = self.resolve(call, &tys, unknown, annotation, call.name.is_some())?;
        let field = call.name.as_ref().map_or(quote!(self), |n| quote!(self.#n));
        let label = call.field_key().unwrap_or_else(|| call.kind.to_string());
        Some(self.emit(&call, r, &vars, field, label, true))
    }

    /// Checks one call (a built-in kind, a sibling network, or an annotated network) on
    /// inputs of types `tys`: the call as checked (a typo of a kind is corrected) and
    /// its result. `named`: the call has (or, in a sequence, stands for) a field.
    fn resolve(
        &mut self,
        call: &Call,
        tys: &[Ty],
        unknown: bool,
        annotation: Option<&ShapeExpr>,
        named: bool,
    ) -> Option<(Call, Resolved)> {
        let kind_name = call.kind.to_string();
        if call.path.is_some() {
            // `self::Conv1D`: the user's type, fetched by its path.
            if let Some(sig) = self.siblings.iter().find(|s| s.name == kind_name) {
                return self
                    .sibling(call, sig, tys, unknown, named)
                    .map(|r| (call.clone(), r));
            }
            return self
                .user(call, tys, unknown, annotation)
                .map(|r| (call.clone(), r));
        }
        if self.acts.contains(&kind_name) {
            return self
                .activation_param(call, tys, unknown)
                .map(|r| (call.clone(), r));
        }
        let Some(kind) = kinds::find(&kind_name) else {
            if let Some(sig) = self
                .siblings
                .iter()
                .find(|s| s.name == kind_name && s.name != self.own_name)
            {
                // Shapes only in a hand-written `nn::DeclaredShapes` (`declared_shapes!`,
                // or a derived struct without declared shapes): the annotation is checked
                // against them by constant evaluation.
                if (sig.undeclared || sig.elsewhere)
                    && annotation.is_some()
                    && named
                    && call.args_span.is_none()
                    && call.generics.is_none()
                    && call.repeat.is_none()
                {
                    return self
                        .user(call, tys, unknown, annotation)
                        .map(|r| (call.clone(), r));
                }
                return self
                    .sibling(call, sig, tys, unknown, named)
                    .map(|r| (call.clone(), r));
            }
            if kind_name == self.own_name {
                self.errors.push(
                    call.kind.span(),
                    format!(
                        "`{kind_name}` uses itself as a layer: a network cannot contain itself"
                    ),
                );
                return None;
            }
            if annotation.is_none()
                && let Some(op) = kinds::op_named_like_a_module(&kind_name)
                && let Some(op_kind) = kinds::find(op)
            {
                // `act: ReLU`, PyTorch's `self.act = nn.ReLU()`: say how the op is written
                // here, then check the call as that op.
                let how = if named {
                    format!("an op written without a field name: write `{op}`")
                } else {
                    format!("write `{op}`")
                };
                self.errors.push(
                    call.kind.span(),
                    format!("unknown layer kind `{kind_name}`: PyTorch's `nn.{kind_name}` is `{op}` here, {how}"),
                );
                let fixed = Call {
                    kind: syn::Ident::new(op, call.kind.span()),
                    name: None,
                    ..call.clone()
                };
                return self
                    .builtin(&fixed, op_kind, tys, unknown)
                    .map(|r| (fixed.clone(), r));
            }
            let close = kinds::suggest(&kind_name, kinds::all_names());
            // `name: Type` without arguments: a network declared elsewhere (so its output
            // is annotated), unless the name is a typo of a built-in.
            if named && call.args_span.is_none() && (close.is_none() || annotation.is_some()) {
                return self
                    .user(call, tys, unknown, annotation)
                    .map(|r| (call.clone(), r));
            }
            if let Some(close) = close
                && let Some(fixed_kind) = kinds::find(close)
                && fixed_kind.has_params() == named
                && call.repeat.is_none()
            {
                // A typo of a built-in: report it, then check the call as that kind, so
                // mistakes after it are still found.
                // A user's type of that name would have been fetched had its path been
                // written: say so where it could be one (a named layer).
                let own = if named && kind_name.eq_ignore_ascii_case(close) {
                    format!(
                        " (a layer type of your own named `{kind_name}` is written with its path, as `self::{kind_name}(..)`)"
                    )
                } else {
                    String::new()
                };
                self.errors.push(
                    call.kind.span(),
                    format!("unknown layer kind `{kind_name}`: did you mean `{close}`?{own}"),
                );
                let fixed = Call {
                    kind: syn::Ident::new(close, call.kind.span()),
                    ..call.clone()
                };
                if kind_name.eq_ignore_ascii_case(close) {
                    // Only the case differs (`Conv1D`): quite likely the user's own type
                    // written without its path, whose arguments need not fit the
                    // built-in; the built-in's complaints about them would be noise.
                    let outer = std::mem::take(&mut *self.errors);
                    let r = self.builtin(&fixed, fixed_kind, tys, unknown);
                    let own = std::mem::replace(&mut *self.errors, outer);
                    return if own.is_empty() {
                        r.map(|r| (fixed.clone(), r))
                    } else {
                        None
                    };
                }
                return self
                    .builtin(&fixed, fixed_kind, tys, unknown)
                    .map(|r| (fixed.clone(), r));
            }
            let message = match close {
                Some(close) => format!("unknown layer kind `{kind_name}`: did you mean `{close}`?"),
                None => format!(
                    "unknown layer kind `{kind_name}`: expected one of {} (layers with parameters, written `name: Kind(..)`), {} (ops), a network declared in the same `network!`, or one declared elsewhere written `name: Type => [output shape]`",
                    kinds::KINDS
                        .iter()
                        .filter(|k| k.has_params())
                        .flat_map(|k| k.names().iter().copied())
                        .collect::<Vec<_>>()
                        .join(", "),
                    kinds::KINDS
                        .iter()
                        .filter(|k| !k.has_params())
                        .flat_map(|k| k.names().iter().copied())
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            };
            self.errors.push(call.kind.span(), message);
            return None;
        };
        if kind.has_params() && !named {
            self.errors.push(
                call.kind.span(),
                format!(
                    "`{kind_name}` {}, so it needs a field name: write `name: {}`",
                    kind.why_a_field(),
                    call.describe()
                ),
            );
        }
        if !kind.has_params()
            && let Some(name) = &call.name
        {
            self.errors.push(
                name.span(),
                format!(
                    "`{kind_name}` has no parameters and takes no field name: write `{}`",
                    call.describe_kind()
                ),
            );
        }
        if let Some(g) = &call.generics {
            self.errors.push(
                g.lt_token.span,
                format!("`{kind_name}` is a built-in layer and takes no generic arguments"),
            );
        }
        if let Some((n, span)) = call.repeat {
            return self
                .repeated_builtin(call, kind, tys, unknown, n, span)
                .map(|r| (call.clone(), r));
        }
        self.builtin(call, kind, tys, unknown)
            .map(|r| (call.clone(), r))
    }

    /// `name: [Kind(..); n]`: `n` copies of a built-in layer applied in turn (PyTorch's
    /// `nn.TransformerEncoder(layer, n)`, `nn.ModuleList([..] * n)`), one array field
    /// with keys `name.0.…`, `name.1.…`; a copy must keep its input's shape.
    fn repeated_builtin(
        &mut self,
        call: &Call,
        kind: &dyn kinds::Kind,
        tys: &[Ty],
        unknown: bool,
        n: usize,
        span: Span,
    ) -> Option<Resolved> {
        let desc = call.describe();
        if !kind.has_params() {
            self.errors.push(span, format!("`{desc}` repeats an op without parameters: apply it once, or write the copies out"));
            return None;
        }
        let one = self.builtin(call, kind, tys, unknown)?.built;
        let same_shape = match (&one.out, tys) {
            (Out::One(out), [input]) => {
                out.shape.len() == input.shape.len()
                    && out.shape.iter().zip(&input.shape).all(|(a, b)| a.same(b))
            }
            _ => false,
        };
        if !same_shape {
            let turns = match (&one.out, tys) {
                (Out::One(out), [input]) => {
                    format!("one copy turns {} into {}", input.show(), out.show())
                }
                _ => "a copy does not take one value and yield one".to_string(),
            };
            self.errors.push(span, format!("`{desc}` chains {n} copies, but {turns}: a repeated layer keeps its input's shape"));
            return None;
        }
        let (ty, init) = one.field.expect("a layer with parameters has a field");
        let forward = one.forward;
        let step = forward(&[quote!(__r)], &quote!(__layer));
        Some(Resolved {
            built: Built {
                out: one.out,
                field: Some((quote!([#ty; #n]), quote!(::core::array::from_fn(|_| #init)))),
                params: one.params.mul(&Dim::lit(n as i64)),
                forward: Box::new(move |x, f| {
                    let x = &x[0];
                    quote!({
                        let mut __r = #x.clone();
                        for __layer in #f.iter() {
                            __r = #step;
                        }
                        __r
                    })
                }),
                onnx: None,
            },
            params: None,
        })
    }

    fn builtin(
        &mut self,
        call: &Call,
        kind: &dyn kinds::Kind,
        tys: &[Ty],
        unknown: bool,
    ) -> Option<Resolved> {
        if unknown {
            // An input is unknown after an earlier mistake: stay quiet, so one mistake
            // is one error.
            return None;
        }
        let mut cx = Cx::new(
            self.errors,
            call,
            self.krate.clone(),
            &self.runtime,
            &self.sizes,
            (&self.floats, &self.bools),
            kind.keys(),
        );
        let built = kind.check(&mut cx, tys);
        // After a wrong argument the output would be a guess: leave it unknown rather
        // than report its consequences downstream.
        if cx.bad_args() {
            return None;
        }
        Some(Resolved {
            built: built?,
            params: None,
        })
    }

    /// `-> act` where `act: Activation` is a constructor parameter: the activation the
    /// caller chose, applied (`Activation::apply`; ONNX by its name).
    fn activation_param(&mut self, call: &Call, tys: &[Ty], unknown: bool) -> Option<Resolved> {
        let name = &call.kind;
        if call.name.is_some()
            || call.args_span.is_some()
            || call.generics.is_some()
            || call.repeat.is_some()
        {
            let span = call.name.as_ref().map_or(call.args_or_kind(), |n| n.span());
            self.errors.push(span, format!("`{name}` is this network's activation parameter: apply it as `-> {name}`, without a field name or arguments"));
            return None;
        }
        if unknown {
            return None;
        }
        let [x] = tys else {
            self.errors.push(
                name.span(),
                format!(
                    "`{name}` (an activation) takes one value, got {}",
                    tys.len()
                ),
            );
            return None;
        };
        if x.dtype != DKind::Float {
            self.errors.push(
                name.span(),
                format!(
                    "`{name}` (an activation) needs a float value, but {} is an integer or bool tensor",
                    x.origin
                ),
            );
            return None;
        }
        let act = syn::Ident::new(&name.to_string(), Span::call_site());
        let act2 = act.clone();
        let built = Built::op(
            Ty::float(x.shape.clone()),
            Box::new(move |x, _| {
                let x = &x[0];
                quote!(#act.apply(&#x))
            }),
        )
        .onnx(Box::new(move |x, _, _| {
            let x = &x[0];
            quote!(__g.activation(#act2.name(), &#x, 0.0))
        }));
        Some(Resolved {
            built,
            params: None,
        })
    }

    /// `name: (A, B, ..)`: items applied in turn, one field holding them as a tuple
    /// (state_dict keys `name.0.…`, `name.1.…`, as `nn.Sequential`).
    fn sequence(
        &mut self,
        call: &Call,
        inputs: Vec<(TokenStream, Ty)>,
        unknown: bool,
    ) -> Option<Val> {
        let name = call
            .name
            .clone()
            .expect("a sequence is named by the parser");
        let (out, ty, init) = self.sequence_items(
            call,
            inputs,
            unknown,
            quote!(self.#name),
            &call.field_key().unwrap_or_else(|| name.to_string()),
        )?;
        self.checked.fields.push(Field {
            key: call.field_key().unwrap_or_else(|| name.to_string()),
            name,
            ty,
            init,
            doc: format!("The layers `{}`.", call.describe()),
        });
        Some(out)
    }

    /// The items of the sequence `call` reached at `path` (`self.conv`, `self.conv.1` for
    /// a nested one) and labelled `label` (`conv`, `conv.1`): the value it yields, and the
    /// type and initialiser of the tuple that holds its layers.
    fn sequence_items(
        &mut self,
        call: &Call,
        inputs: Vec<(TokenStream, Ty)>,
        unknown: bool,
        path: TokenStream,
        label: &str,
    ) -> Option<(Val, TokenStream, TokenStream)> {
        let (mut vars, mut tys): (Vec<TokenStream>, Vec<Ty>) = inputs.into_iter().unzip();
        let mut out = None;
        let (mut types, mut inits) = (Vec::new(), Vec::new());
        for (k, item) in call.items.iter().enumerate() {
            let index = syn::Index::from(k);
            let item_path = quote!(#path.#index);
            let item_label = format!("{label}.{k}");
            let val = if item.items.is_empty() {
                let (item, r) = self.resolve(item, &tys, unknown, None, true)?;
                let krate = &self.krate;
                let (ty, init) = r.built.field.clone().unwrap_or_else(|| {
                    (quote!(#krate::nn::Identity), quote!(#krate::nn::Identity))
                });
                types.push(ty);
                inits.push(init);
                let mut r = r;
                r.built.field = None;
                self.emit(&item, r, &vars, item_path, item_label, false)
            } else {
                let inputs = vars.iter().cloned().zip(tys.iter().cloned()).collect();
                let (val, ty, init) =
                    self.sequence_items(item, inputs, unknown, item_path, &item_label)?;
                types.push(ty);
                inits.push(init);
                val
            };
            match &val {
                Val::One(v, t) => {
                    vars = vec![v.clone()];
                    tys = vec![t.clone()];
                }
                Val::Tuple(_) => {
                    if k + 1 < call.items.len() {
                        self.errors.push(item.kind.span(), format!("`{}` yields a tuple, so nothing can follow it in the sequence `{label}`", item.describe()));
                        return None;
                    }
                }
            }
            out = Some(val);
        }
        Some((out?, quote!((#(#types,)*)), quote!((#(#inits,)*))))
    }

    /// Emits a checked call: its field, summary row and forward statement.
    fn emit(
        &mut self,
        call: &Call,
        r: Resolved,
        vars: &[TokenStream],
        field: TokenStream,
        label: String,
        push_field: bool,
    ) -> Val {
        let built = r.built;
        if push_field && let (Some(name), Some((ty, init))) = (&call.name, built.field) {
            self.checked.fields.push(Field {
                key: call.field_key().unwrap_or_else(|| name.to_string()),
                name: name.clone(),
                ty,
                init,
                doc: format!("The layer `{}`.", call.describe()),
            });
        }
        let desc = call.describe();
        let origin = format!("the previous layer (`{desc}`)");
        let out = self.alloc(&built.out, &origin);
        let pattern = pattern_tokens(&out);
        let code = (built.forward)(vars, &field);
        let span = call.kind.span();
        let kind_text = call.kind.to_string();
        let fuse_kind = match kind_text.as_str() {
            _ if call.repeat.is_some() || call.path.is_some() => None,
            "Linear" => Some(super::FuseKind::Linear),
            "Dropout" => Some(super::FuseKind::Dropout),
            "LayerNorm" => Some(super::FuseKind::LayerNorm),
            "gelu" => Some(super::FuseKind::Act(quote!(
                ::ferrograd::nn::Activation::Gelu
            ))),
            a if self.acts.iter().any(|x| x == a) => {
                let act = syn::Ident::new(a, Span::call_site());
                Some(super::FuseKind::Act(quote!(#act)))
            }
            _ => None,
        };
        if let (Some(kind), Val::One(v, _), [input]) = (fuse_kind, &out, vars) {
            self.checked.fusable.push(super::Fusable {
                stmt: self.checked.stmts.len(),
                out: v.to_string(),
                kind,
                inputs: vec![input.clone()],
                field: field.clone(),
            });
        }
        self.checked
            .stmts
            .push(quote::quote_spanned!(span=> let #pattern = #code;));
        self.last_norm = match (&out, vars) {
            (Val::One(v, _), [input])
                if matches!(
                    call.kind.to_string().as_str(),
                    "BatchNorm1d" | "BatchNorm2d"
                ) && call.repeat.is_none() =>
            {
                Some(super::LastNorm {
                    stmt: self.checked.stmts.len() - 1,
                    field: field.clone(),
                    input: input.clone(),
                    out: v.to_string(),
                })
            }
            _ => None,
        };
        self.emit_onnx(
            call,
            built.onnx.as_ref(),
            vars,
            &field,
            &label,
            &out,
            &pattern,
        );
        let params = r.params.clone().unwrap_or_else(|| {
            built.params.tokens(&|s| {
                let i = syn::Ident::new(s, Span::call_site());
                quote!(#i)
            })
        });
        self.checked.rows.push(Row {
            label,
            kind: call.describe_kind(),
            out: match &out {
                Val::One(_, t) => t.show(),
                Val::Tuple(_) => "(tuple)".to_string(),
            },
            params,
            params_lit: if r.params.is_some() {
                None
            } else {
                built.params.as_lit()
            },
        });
        out
    }

    /// The ONNX statements of a call: its op's lowering, a layer's `onnx::ExportLayer`
    /// (through `onnx::Probe`, an error for a type without it), or an unsupported-op
    /// error; then each value's declared shape.
    #[allow(clippy::too_many_arguments)]
    fn emit_onnx(
        &mut self,
        call: &Call,
        onnx: Option<&kinds::OnnxFn>,
        vars: &[TokenStream],
        field: &TokenStream,
        label: &str,
        out: &Val,
        pattern: &TokenStream,
    ) {
        let krate = self.krate.clone();
        let is_layer = kinds::find(&call.kind.to_string()).is_none_or(|k| k.has_params());
        let mut next = 0;
        let picked = pick_outputs(out, &mut next);
        let value = match (onnx, is_layer) {
            (Some(f), _) => f(vars, field, &quote!(#label)),
            (None, true) if call.repeat.is_some() && vars.len() == 1 => {
                let x = &vars[0];
                quote!({
                    let mut __r = #x.clone();
                    for (__i, __layer) in #field.iter().enumerate() {
                        let __label = ::std::format!("{}.{}", #label, __i);
                        let __o = (&&&#krate::onnx::TraceProbe(__layer, |__t: &#krate::Tensor| __layer.forward(__t)))
                            .export_call(__g, &__label, &[&__r]);
                        let __next = __g.nth(&__o, 0);
                        __r = __g.shaped_like(__next, &__r);
                    }
                    __r
                })
            }
            // A built-in layer whose type has `ExportLayer`: called directly, without the
            // probe's method resolution through three autoref levels (cheaper to check).
            (None, true)
                if call.path.is_none()
                    && call.repeat.is_none()
                    && vars.len() == 1
                    && matches!(out, Val::One(..))
                    && EXPORTS_ITSELF.contains(&call.kind.to_string().as_str()) =>
            {
                let x = &vars[0];
                quote!({
                    let __o = __g.layer(&#field, #label, &[&#x]);
                    #picked
                })
            }
            // One in, one out: a type without `ExportLayer` is traced through its forward.
            (None, true) if vars.len() == 1 && matches!(out, Val::One(..)) => {
                let x = &vars[0];
                quote!({
                    let __o = (&&&#krate::onnx::TraceProbe(&#field, |__t: &#krate::Tensor| #field.forward(__t)))
                        .export_call(__g, #label, &[&#x]);
                    #picked
                })
            }
            (None, true) => quote!({
                let __o = (&&&#krate::onnx::Probe(&#field)).export_call(__g, #label, &[#(&#vars),*]);
                #picked
            }),
            (None, false) => {
                let desc = call.describe();
                quote!({
                    __g.unsupported(#desc, "`network!` has no ONNX lowering for this op yet; export the model with `onnx::export` (traced)");
                    let __o: ::std::vec::Vec<#krate::onnx::Value> = ::std::vec::Vec::new();
                    #picked
                })
            }
        };
        self.checked.onnx_stmts.push(quote!(let #pattern = #value;));
        for (var, ty) in leaves(out) {
            self.onnx_declare(&var, &ty);
        }
    }

    fn alloc(&mut self, out: &Out, origin: &str) -> Val {
        match out {
            Out::One(ty) => {
                let var = self.var();
                Val::One(
                    var,
                    Ty {
                        origin: origin.to_string(),
                        ..ty.clone()
                    },
                )
            }
            Out::Tuple(items) => Val::Tuple(items.iter().map(|o| self.alloc(o, origin)).collect()),
        }
    }
}

/// The built-in layer kinds whose runtime types implement `onnx::ExportLayer`.
const EXPORTS_ITSELF: &[&str] = &[
    "Linear",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "LayerNorm",
    "RMSNorm",
    "GroupNorm",
    "Dropout",
    "Embedding",
];

/// The layer outputs `__o` as the call's value: one `onnx::Value` or a (nested) tuple.
fn pick_outputs(out: &Val, next: &mut usize) -> TokenStream {
    match out {
        Val::One(..) => {
            let i = *next;
            *next += 1;
            quote!(__g.nth(&__o, #i))
        }
        Val::Tuple(items) => {
            let parts: Vec<TokenStream> = items.iter().map(|v| pick_outputs(v, next)).collect();
            quote!((#(#parts),*))
        }
    }
}

/// Every tensor of a value, in order.
fn leaves(v: &Val) -> Vec<(TokenStream, Ty)> {
    match v {
        Val::One(var, ty) => vec![(var.clone(), ty.clone())],
        Val::Tuple(items) => items.iter().flat_map(leaves).collect(),
    }
}

impl Checker<'_> {
    /// The input name of an optional input's variable.
    pub(super) fn optional_name(&self, var: &TokenStream) -> Option<String> {
        let var = var.to_string();
        self.optional
            .iter()
            .find(|(v, _)| *v == var)
            .map(|(_, name)| name.clone())
    }

    /// Reports `e`'s value when it is an optional input used as a tensor (`what`).
    pub(super) fn refuse_optional(&mut self, var: &TokenStream, span: Span, what: &str) -> bool {
        if let Some(name) = self.optional_name(var) {
            self.errors.push(span, format!("`{name}` is an optional input (`Option<[..]>`), absent at run time when `forward` is given `None`, so {what} cannot use it: hand it on only to a network or `#[derive(Module)]` layer that declares that input `Option<[..]>` too"));
            return true;
        }
        false
    }
}
