//! Values: binding `let` patterns, and the type of each expression (names, calls,
//! pipes, arithmetic, tuples, annotations), emitting its statements.

use super::{Checker, Val, broadcast, check_shape};
use crate::network::dim::{Dim, onnx_dim, symbol_tokens};
use crate::network::kinds::{self, Ty};
use crate::network::parse::{Call, DKind, Expr, Pattern, ShapeExpr};
use proc_macro2::{Span, TokenStream};
use quote::quote;

impl Checker<'_> {
    pub(super) fn bind(&mut self, pattern: &Pattern, value: Option<Val>) {
        match pattern {
            Pattern::Ignore => {}
            Pattern::Name(name) => {
                let key = name.to_string();
                let internal = key.starts_with("__chain");
                if !internal && (self.env.contains_key(&key)) {
                    self.errors.push(
                        name.span(),
                        format!(
                            "`{name}` already names a value of this network: pick another name"
                        ),
                    );
                }
                match value {
                    Some(Val::One(var, mut ty)) => {
                        if !internal {
                            ty.origin = format!("`{name}`");
                        }
                        self.env.insert(key, Val::One(var, ty));
                    }
                    Some(v) => {
                        self.env.insert(key, v);
                    }
                    // Unknown: later uses stay quiet.
                    None => {
                        self.env.remove(&key);
                        self.env.insert(format!("?{key}"), Val::Tuple(Vec::new()));
                    }
                }
            }
            Pattern::Tuple(items, span) => match value {
                Some(Val::Tuple(vals)) if vals.len() == items.len() => {
                    for (p, v) in items.iter().zip(vals) {
                        self.bind(p, Some(v));
                    }
                }
                Some(Val::Tuple(vals)) => {
                    self.errors.push(
                        *span,
                        format!(
                            "this pattern has {} parts but the value is a tuple of {}",
                            items.len(),
                            vals.len()
                        ),
                    );
                    for p in items {
                        self.bind(p, None);
                    }
                }
                Some(Val::One(_, ty)) => {
                    self.errors.push(
                        *span,
                        format!(
                            "this pattern takes a tuple apart, but the value is one tensor {}",
                            ty.show()
                        ),
                    );
                    for p in items {
                        self.bind(p, None);
                    }
                }
                None => {
                    for p in items {
                        self.bind(p, None);
                    }
                }
            },
        }
    }

    /// The type of `expr`, emitting its statements; `annotation` is a `=> [shape]` that
    /// follows a call (a user network's declared output).
    pub(super) fn expr(&mut self, expr: &Expr, annotation: Option<&ShapeExpr>) -> Option<Val> {
        match expr {
            Expr::Value(name) => {
                let key = name.to_string();
                if let Some(v) = self.env.get(&key) {
                    return Some(v.clone());
                }
                if self.env.contains_key(&format!("?{key}")) {
                    return None;
                }
                let known: Vec<String> = self
                    .env
                    .keys()
                    .filter(|k| !k.starts_with('?') && !k.starts_with("__"))
                    .cloned()
                    .collect();
                let hint = match kinds::suggest(&key, known.iter().map(String::as_str)) {
                    Some(k) => format!(": did you mean `{k}`?"),
                    None if kinds::find(&key).is_some() => format!(
                        ": `{key}` is an op; apply it to a value, as `{key}(x)` or `x -> {key}`"
                    ),
                    None => format!(
                        ": name a value with `let {key} = ..` (or `let {key}` in a chain) before using it, or declare an input `{key}`"
                    ),
                };
                self.errors
                    .push(name.span(), format!("no value named `{name}`{hint}"));
                None
            }
            Expr::Scalar(_, span) => {
                self.errors.push(
                    *span,
                    "a number is not a tensor: scale a value with it, as `x * 0.5`",
                );
                None
            }
            Expr::Tuple(items, _) => {
                let vals: Vec<Option<Val>> = items.iter().map(|e| self.expr(e, None)).collect();
                vals.into_iter().collect::<Option<Vec<_>>>().map(Val::Tuple)
            }
            Expr::Annotated(inner, shape) => {
                let v = self.expr(inner, Some(shape))?;
                if let Val::One(_, ty) = &v {
                    let (what, producer) = match inner.as_ref() {
                        Expr::Pipe(_, call) | Expr::Apply(call, ..) => (
                            format!("the annotation after `{}`", call.describe()),
                            format!("`{}`", call.kind),
                        ),
                        other => (
                            format!("the annotation after `{}`", other.text()),
                            "the network".to_string(),
                        ),
                    };
                    // One mistake, one error: a value whose annotation disagrees is left
                    // unknown downstream.
                    if !check_shape(&ty.shape, shape, self.errors, &what, &producer) {
                        return None;
                    }
                }
                Some(v)
            }
            Expr::Binary(a, op, b, span) => self.binary(a, *op, b, *span),
            Expr::Apply(call, inputs, span) if call.kind == "arange" && call.name.is_none() => {
                self.arange(call, inputs, *span)
            }
            Expr::Apply(call, inputs, _) => {
                let mut vals = Vec::new();
                let mut unknown = false;
                for e in inputs {
                    match self.expr(e, None) {
                        Some(Val::One(v, t)) => vals.push((v, t)),
                        Some(Val::Tuple(_)) => {
                            self.errors.push(
                                e.span(),
                                format!(
                                    "`{}` is a tuple: take it apart with `let (a, b) = ..` first",
                                    e.text()
                                ),
                            );
                            unknown = true;
                        }
                        None => unknown = true,
                    }
                }
                self.call(call, vals, unknown, annotation)
            }
            Expr::Pipe(from, call) => {
                // `.. -> bn: BatchNorm2d(C) -> relu`: the norm's output goes nowhere else,
                // so the two run as one pass (`forward_relu`, as the hand-written
                // torchvision models do); the graph and the summary keep both.
                let fusable = call.kind == "relu"
                    && call.name.is_none()
                    && matches!(&**from, Expr::Pipe(_, c) if c.kind == "BatchNorm1d" || c.kind == "BatchNorm2d");
                if fusable {
                    let v = self.expr(from, None);
                    let norm = self.last_norm.take();
                    let stmts_before = self.checked.stmts.len();
                    let out = match &v {
                        Some(Val::One(var, ty)) => {
                            self.call(call, vec![(var.clone(), ty.clone())], false, annotation)
                        }
                        None => self.call(call, Vec::new(), true, annotation),
                        Some(Val::Tuple(_)) => {
                            return self.call(call, Vec::new(), true, annotation);
                        }
                    };
                    if let (Some(norm), Some(Val::One(norm_out, _)), Some(Val::One(relu_out, _))) =
                        (norm, &v, &out)
                        && norm.out == norm_out.to_string()
                        && norm.stmt + 1 == stmts_before
                        && self.checked.stmts.len() == stmts_before + 1
                    {
                        let (field, input) = (&norm.field, &norm.input);
                        self.checked.stmts[norm.stmt] =
                            quote!(let #norm_out = #field.forward_relu(&#input););
                        self.checked.stmts[stmts_before] = quote!(let #relu_out = #norm_out;);
                    }
                    return out;
                }
                let v = self.expr(from, None);
                let (vals, unknown) = match v {
                    Some(Val::One(v, t)) => (vec![(v, t)], false),
                    Some(Val::Tuple(items)) => {
                        let mut vals = Vec::new();
                        for i in items {
                            match i {
                                Val::One(v, t) => vals.push((v, t)),
                                Val::Tuple(_) => {
                                    self.errors.push(from.span(), "a nested tuple cannot be piped into a call: take it apart first");
                                    return None;
                                }
                            }
                        }
                        (vals, false)
                    }
                    None => (Vec::new(), true),
                };
                self.call(call, vals, unknown, annotation)
            }
        }
    }

    fn binary(&mut self, a: &Expr, op: char, b: &Expr, span: Span) -> Option<Val> {
        let scalar = |e: &Expr| {
            if let Expr::Scalar(v, _) = e {
                Some(*v)
            } else {
                None
            }
        };
        let text = format!("{} {op} {}", a.text(), b.text());
        let (value, s, scalar_left) = match (scalar(a), scalar(b)) {
            (Some(_), Some(_)) => {
                self.errors
                    .push(span, format!("`{text}` has no tensor in it"));
                return None;
            }
            (None, Some(s)) => (a, s, false),
            (Some(s), None) => (b, s, true),
            (None, None) => {
                let (x, y) = (self.one(a)?, self.one(b)?);
                let refused_a = self.refuse_optional(&x.0, a.span(), &format!("`{text}`"));
                if refused_a || self.refuse_optional(&y.0, b.span(), &format!("`{text}`")) {
                    return None;
                }
                let Some(shape) = broadcast(&x.1.shape, &y.1.shape) else {
                    let what = if op == '+' { "adds" } else { "combines" };
                    let message = if x.1.shape.len() == y.1.shape.len() && op == '+' {
                        format!(
                            "residual add of mismatched shapes: {} yields {} but {} is {}",
                            x.1.origin,
                            x.1.show(),
                            y.1.origin,
                            y.1.show()
                        )
                    } else {
                        format!(
                            "`{text}` {what} shapes that do not broadcast: {} yields {} and {} yields {}",
                            x.1.origin,
                            x.1.show(),
                            y.1.origin,
                            y.1.show()
                        )
                    };
                    self.errors.push(span, message);
                    return None;
                };
                let method = match op {
                    '+' => quote!(add),
                    '-' => quote!(sub),
                    '*' => quote!(mul),
                    _ => quote!(div),
                };
                let (vx, vy) = (&x.0, &y.0);
                let var = self.var();
                if op == '+'
                    && x.1.shape.len() == y.1.shape.len()
                    && x.1.shape.iter().zip(&y.1.shape).all(|(a, b)| a.same(b))
                {
                    self.checked.fusable.push(super::Fusable {
                        stmt: self.checked.stmts.len(),
                        out: var.to_string(),
                        kind: super::FuseKind::Add,
                        inputs: vec![vx.clone(), vy.clone()],
                        field: TokenStream::new(),
                    });
                }
                self.checked
                    .stmts
                    .push(quote!(let #var = #vx.#method(&#vy);));
                let onnx_op = match op {
                    '+' => "Add",
                    '-' => "Sub",
                    '*' => "Mul",
                    _ => "Div",
                };
                self.checked
                    .onnx_stmts
                    .push(quote!(let #var = __g.binary(#onnx_op, &#vx, &#vy);));
                let ty = Ty {
                    shape,
                    dtype: DKind::Float,
                    origin: format!("`{text}`"),
                };
                self.onnx_declare(&var, &ty);
                return Some(Val::One(var, ty));
            }
        };
        let (v, ty) = self.one(value)?;
        if self.refuse_optional(&v, value.span(), &format!("`{text}`")) {
            return None;
        }
        let code = match (op, scalar_left) {
            ('+', _) => quote!(#v.add_scalar(#s)),
            ('*', _) => quote!(#v.mul_scalar(#s)),
            ('-', false) => {
                let n = -s;
                quote!(#v.add_scalar(#n))
            }
            ('-', true) => quote!(#v.rsub_scalar(#s)),
            ('/', false) => quote!(#v.div_scalar(#s)),
            _ => {
                self.errors.push(span, format!("`{text}` divides a number by a tensor: write `x.reciprocal()`-style ops as layers"));
                return None;
            }
        };
        let (onnx_op, onnx_s, reversed) = match (op, scalar_left) {
            ('+', _) => ("Add", s, false),
            ('*', _) => ("Mul", s, false),
            ('-', false) => ("Sub", s, false),
            ('-', true) => ("Sub", s, true),
            _ => ("Div", s, false),
        };
        let var = self.var();
        self.checked.stmts.push(quote!(let #var = #code;));
        self.checked
            .onnx_stmts
            .push(quote!(let #var = __g.scalar(#onnx_op, &#v, #onnx_s, #reversed);));
        let ty = Ty {
            origin: format!("`{text}`"),
            ..ty
        };
        self.onnx_declare(&var, &ty);
        Some(Val::One(var, ty))
    }

    /// `arange(T)`: the positions `0..T` of a size of the network (an input's size, a const
    /// or constructor parameter, or a literal) as int64 `[T]`, on the first input's device
    /// (`torch.arange(T)`, for position ids computed inside the network).
    fn arange(&mut self, call: &Call, inputs: &[Expr], span: Span) -> Option<Val> {
        if call.args_span.is_some() || call.generics.is_some() {
            self.errors.push(
                call.kind.span(),
                "`arange` takes one size, as `arange(T)`: positions 0..T as int64",
            );
            return None;
        }
        let size = match inputs {
            [Expr::Value(name)] if !self.env.contains_key(&name.to_string()) => {
                let text = name.to_string();
                if !self.sizes.contains(&text) {
                    let why = kinds::unknown_size(&text, &self.sizes);
                    self.errors
                        .push(name.span(), format!("`arange({text})`: {why}"));
                    return None;
                }
                Dim::sym(&text)
            }
            [Expr::Scalar(v, _)] if *v >= 1.0 && v.fract() == 0.0 => Dim::lit(*v as i64),
            _ => {
                self.errors.push(
                    span,
                    "`arange` takes one size (a size name of the network, a const parameter or a positive integer), not a tensor value: `arange(T)`",
                );
                return None;
            }
        };
        let runtime = &self.runtime;
        let n = size.tokens(&|s| symbol_tokens(s, runtime.iter().any(|r| r == s)));
        let var = self.var();
        self.checked.stmts.push(quote!(
            let #var = ::ferrograd::Tensor::arange(0.0, (#n) as f64, 1.0, ::ferrograd::DType::I64, &__input0.device());
        ));
        let onnx_size = onnx_dim(&size, &self.runtime, &self.krate);
        self.checked
            .onnx_stmts
            .push(quote!(let #var = __g.arange(&#onnx_size);));
        let text = format!("arange({size})");
        Some(Val::One(
            var,
            Ty {
                shape: vec![size],
                dtype: DKind::Int,
                origin: format!("`{text}`"),
            },
        ))
    }

    /// One tensor value.
    fn one(&mut self, e: &Expr) -> Option<(TokenStream, Ty)> {
        match self.expr(e, None)? {
            Val::One(v, t) => Some((v, t)),
            Val::Tuple(_) => {
                self.errors.push(
                    e.span(),
                    format!(
                        "`{}` is a tuple, not a tensor: take it apart with `let (a, b) = ..`",
                        e.text()
                    ),
                );
                None
            }
        }
    }
}
