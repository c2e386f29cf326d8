//! Shape analysis of a parsed network: lowers the chain form to the graph form, walks
//! the graph binding each value's type, runs each call's [`Kind`] rule, and collects
//! what code generation needs (fields, forward statements, summary rows). Every mistake
//! is an error spanned on the user's token; analysis goes on past it with the shape the
//! call would produce (or stops following that value), so independent mistakes are
//! reported together.

use super::dim::Dim;
use super::kinds::{self, Built, Cx, Out, Ty};
use super::parse::{
    Arg, Body, Call, DKind, DimExpr, Expr, Network, Pattern, ShapeExpr, Step, Stmt, Value,
};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use std::collections::HashMap;
use std::fmt;

/// Error collection that keeps every independent mistake.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl fmt::Display) {
        let e = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// A shape as users write it: `[N, 16, 5, 5]`.
pub(crate) fn show(shape: &[Dim]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Numpy-style broadcasting of two shapes, `None` when they do not broadcast.
pub(crate) fn broadcast(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let x = (i + a.len()).checked_sub(n).map(|j| &a[j]);
        let y = (i + b.len()).checked_sub(n).map(|j| &b[j]);
        out.push(match (x, y) {
            (Some(x), None) => x.clone(),
            (None, Some(y)) => y.clone(),
            (Some(x), Some(y)) if x.same(y) => x.clone(),
            (Some(x), Some(y)) if x.as_lit() == Some(1) => y.clone(),
            (Some(x), Some(y)) if y.as_lit() == Some(1) => x.clone(),
            _ => return None,
        });
    }
    Some(out)
}

/// A value during analysis: a tensor in a local variable, or a tuple of values.
#[derive(Clone)]
enum Val {
    One(TokenStream, Ty),
    Tuple(Vec<Val>),
}

/// A field of the generated struct.
pub(crate) struct Field {
    pub(crate) name: syn::Ident,
    pub(crate) ty: TokenStream,
    pub(crate) init: TokenStream,
}

/// A summary row: label, kind, output shape, parameters.
pub(crate) struct Row {
    pub(crate) label: String,
    pub(crate) kind: String,
    pub(crate) out: String,
    pub(crate) params: TokenStream,
    pub(crate) params_lit: Option<i64>,
}

/// A call's checked result; `params` overrides the summary row's count (a network's
/// `NUM_PARAMETERS`).
struct Resolved {
    built: Built,
    params: Option<TokenStream>,
}

/// Another network used as a layer: checked against its declaration when constants are
/// evaluated.
pub(crate) struct UserLayer {
    pub(crate) ty: syn::Ident,
    pub(crate) input: Vec<Dim>,
    pub(crate) output: Vec<Dim>,
    pub(crate) desc: String,
}

/// Everything code generation needs.
pub(crate) struct Checked {
    pub(crate) fields: Vec<Field>,
    pub(crate) rows: Vec<Row>,
    pub(crate) stmts: Vec<TokenStream>,
    /// The forward's result expression.
    pub(crate) result: TokenStream,
    pub(crate) users: Vec<UserLayer>,
}

/// What a network declares, for its siblings in the same `network!` to use it as a layer.
pub(crate) struct Signature {
    name: String,
    consts: Vec<String>,
    inputs: Vec<Vec<Dim>>,
    outputs: Vec<Vec<Dim>>,
    tuple_output: bool,
}

impl Signature {
    pub(crate) fn of(net: &Network) -> Signature {
        // Malformed dims are reported where the network itself is checked.
        let mut quiet = Errors::default();
        Signature {
            name: net.name.to_string(),
            consts: net
                .generics
                .const_params()
                .map(|c| c.ident.to_string())
                .collect(),
            inputs: net
                .inputs
                .iter()
                .map(|i| shape_dims(&i.shape, &mut quiet))
                .collect(),
            outputs: net
                .outputs
                .iter()
                .map(|o| shape_dims(o, &mut quiet))
                .collect(),
            tuple_output: net.tuple_output,
        }
    }
}

struct Checker<'a> {
    errors: &'a mut Errors,
    krate: TokenStream,
    runtime: Vec<String>,
    env: HashMap<String, Val>,
    next_var: usize,
    checked: Checked,
    field_names: Vec<syn::Ident>,
    siblings: &'a [Signature],
    own_name: String,
}

/// Evaluates a written shape.
fn shape_dims(shape: &ShapeExpr, errors: &mut Errors) -> Vec<Dim> {
    shape
        .dims
        .iter()
        .map(|d| eval_dim(d, errors).unwrap_or_else(|| Dim::lit(1)))
        .collect()
}

pub(crate) fn eval_dim(d: &DimExpr, errors: &mut Errors) -> Option<Dim> {
    Some(match d {
        DimExpr::Lit(v, _) => Dim::lit(*v),
        DimExpr::Sym(i) => Dim::sym(&i.to_string()),
        DimExpr::Neg(inner, _) => eval_dim(inner, errors)?.neg(),
        DimExpr::Bin(a, op, b, span) => {
            let (x, y) = (eval_dim(a, errors)?, eval_dim(b, errors)?);
            match op {
                '+' => x.add(&y),
                '-' => x.sub(&y),
                '*' => x.mul(&y),
                _ => match y.as_lit() {
                    Some(k) if k > 0 => x.floor_div(k),
                    _ => {
                        errors.push(
                            *span,
                            format!(
                                "`{}`: sizes divide by positive integer literals only",
                                d.text()
                            ),
                        );
                        return None;
                    }
                },
            }
        }
    })
}

/// Lowers the chain form to statements and an output expression. Each step's value gets
/// an internal name (`__chainK`), so chains of thousands of layers stay flat.
fn lower_chain(net: &Network, steps: &[Step]) -> (Vec<Stmt>, Expr) {
    let mut stmts = Vec::new();
    let mut cur = Expr::Value(net.inputs[0].name.clone());
    for (k, step) in steps.iter().enumerate() {
        let (expr, annotation) = match step {
            Step::Call(call, ann) => {
                let expr = if call.kind == "cat" {
                    // `cat(h, dim = d)`: the named values join the current one.
                    let mut others = Vec::new();
                    let mut args = Vec::new();
                    for a in &call.args {
                        match a {
                            Arg::Positional(Value::Dim(DimExpr::Sym(i))) => {
                                others.push(Expr::Value(i.clone()))
                            }
                            other => args.push(other.clone()),
                        }
                    }
                    let mut inputs = vec![cur.clone()];
                    inputs.extend(others);
                    let span = call.args_or_kind();
                    Expr::Apply(
                        Call {
                            args,
                            ..call.clone()
                        },
                        inputs,
                        span,
                    )
                } else {
                    Expr::Pipe(Box::new(cur.clone()), call.clone())
                };
                (expr, ann.clone())
            }
            Step::Save(name, ann) => {
                let value = match ann {
                    Some(a) => Expr::Annotated(Box::new(cur.clone()), a.clone()),
                    None => cur.clone(),
                };
                stmts.push(Stmt {
                    pattern: Pattern::Name(name.clone()),
                    expr: value,
                });
                continue;
            }
            Step::Add(name, ann) => {
                let span = name.span();
                (
                    Expr::Binary(
                        Box::new(cur.clone()),
                        '+',
                        Box::new(Expr::Value(name.clone())),
                        span,
                    ),
                    ann.clone(),
                )
            }
        };
        let expr = match annotation {
            Some(a) => Expr::Annotated(Box::new(expr), a),
            None => expr,
        };
        let var = format_ident!("__chain{}", k);
        stmts.push(Stmt {
            pattern: Pattern::Name(var.clone()),
            expr,
        });
        cur = Expr::Value(var);
    }
    (stmts, cur)
}

/// Analyses the network.
pub(crate) fn check(net: &Network, siblings: &[Signature], errors: &mut Errors) -> Checked {
    let consts: Vec<String> = net
        .generics
        .const_params()
        .map(|c| c.ident.to_string())
        .collect();
    let mut runtime = Vec::new();
    for input in &net.inputs {
        for d in shape_dims(&input.shape, errors) {
            for s in d.symbols() {
                if !consts.contains(&s) && !runtime.contains(&s) {
                    runtime.push(s);
                }
            }
        }
    }
    let mut c = Checker {
        errors,
        krate: quote!(::ferrograd),
        runtime,
        env: HashMap::new(),
        next_var: 0,
        checked: Checked {
            fields: Vec::new(),
            rows: Vec::new(),
            stmts: Vec::new(),
            result: quote!(()),
            users: Vec::new(),
        },
        field_names: Vec::new(),
        siblings,
        own_name: net.name.to_string(),
    };
    for (k, input) in net.inputs.iter().enumerate() {
        let shape = shape_dims(&input.shape, c.errors);
        let var = format_ident!("__input{}", k);
        let ty = Ty {
            shape,
            dtype: input.dtype.1,
            origin: format!("the input `{}`", input.name),
        };
        if c.env
            .insert(input.name.to_string(), Val::One(quote!(#var), ty))
            .is_some()
        {
            c.errors.push(
                input.name.span(),
                format!("duplicate input name `{}`", input.name),
            );
        }
    }
    let lowered;
    let (stmts, output) = match &net.body {
        Body::Chain(steps) => {
            lowered = lower_chain(net, steps);
            (&lowered.0, &lowered.1)
        }
        Body::Graph(stmts, output) => (stmts, &**output),
    };
    for stmt in stmts {
        let value = c.expr(&stmt.expr, None);
        c.bind(&stmt.pattern, value);
    }
    let result = c.expr(output, None);
    c.outputs(net, output, result);
    c.checked
}

impl Checker<'_> {
    fn var(&mut self) -> TokenStream {
        let v = format_ident!("__v{}", self.next_var);
        self.next_var += 1;
        quote!(#v)
    }

    fn bind(&mut self, pattern: &Pattern, value: Option<Val>) {
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
    fn expr(&mut self, expr: &Expr, annotation: Option<&ShapeExpr>) -> Option<Val> {
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
                    let what = match inner.as_ref() {
                        Expr::Pipe(_, call) | Expr::Apply(call, ..) => {
                            format!("the annotation after `{}`", call.describe())
                        }
                        other => format!("the annotation after `{}`", other.text()),
                    };
                    check_shape(&ty.shape, shape, self.errors, &what);
                }
                Some(v)
            }
            Expr::Binary(a, op, b, span) => self.binary(a, *op, b, *span),
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
                self.checked
                    .stmts
                    .push(quote!(let #var = #vx.#method(&#vy);));
                let ty = Ty {
                    shape,
                    dtype: DKind::Float,
                    origin: format!("`{text}`"),
                };
                return Some(Val::One(var, ty));
            }
        };
        let (v, ty) = self.one(value)?;
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
        let var = self.var();
        self.checked.stmts.push(quote!(let #var = #code;));
        Some(Val::One(
            var,
            Ty {
                origin: format!("`{text}`"),
                ..ty
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

    fn call(
        &mut self,
        call: &Call,
        inputs: Vec<(TokenStream, Ty)>,
        unknown: bool,
        annotation: Option<&ShapeExpr>,
    ) -> Option<Val> {
        if let Some(name) = &call.name {
            if let Some(first) = self.field_names.iter().find(|n| *n == name) {
                self.errors.push(name.span(), format!("duplicate layer name `{name}`: `{first}` is already a layer of this network"));
            }
            self.field_names.push(name.clone());
        }
        if !call.items.is_empty() {
            return self.sequence(call, inputs, unknown);
        }
        let (vars, tys): (Vec<TokenStream>, Vec<Ty>) = inputs.into_iter().unzip();
        let (call, r) = self.resolve(call, &tys, unknown, annotation, call.name.is_some())?;
        let field = call.name.as_ref().map_or(quote!(self), |n| quote!(self.#n));
        let label = call
            .name
            .as_ref()
            .map_or(call.kind.to_string(), |n| n.to_string());
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
        let Some(kind) = kinds::find(&kind_name) else {
            if let Some(sig) = self
                .siblings
                .iter()
                .find(|s| s.name == kind_name && s.name != self.own_name)
            {
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
                self.errors.push(
                    call.kind.span(),
                    format!("unknown layer kind `{kind_name}`: did you mean `{close}`?"),
                );
                let fixed = Call {
                    kind: syn::Ident::new(close, call.kind.span()),
                    ..call.clone()
                };
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
                    "`{kind_name}` has parameters, so it needs a field name: write `name: {}`",
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
        if let Some((_, span)) = call.repeat {
            self.errors.push(span, format!("`[{kind_name}; n]` repeats a network declared in this `network!`; for built-in layers, write them out or declare a block network"));
            return None;
        }
        self.builtin(call, kind, tys, unknown)
            .map(|r| (call.clone(), r))
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
        let (mut vars, mut tys): (Vec<TokenStream>, Vec<Ty>) = inputs.into_iter().unzip();
        let mut out = None;
        let (mut types, mut inits) = (Vec::new(), Vec::new());
        for (k, item) in call.items.iter().enumerate() {
            let index = syn::Index::from(k);
            let (item, r) = self.resolve(item, &tys, unknown, None, true)?;
            let krate = &self.krate;
            let (ty, init) =
                r.built.field.clone().unwrap_or_else(|| {
                    (quote!(#krate::nn::Identity), quote!(#krate::nn::Identity))
                });
            types.push(ty);
            inits.push(init);
            let mut r = r;
            r.built.field = None;
            let val = self.emit(
                &item,
                r,
                &vars,
                quote!(self.#name.#index),
                format!("{name}.{k}"),
                false,
            );
            match &val {
                Val::One(v, t) => {
                    vars = vec![v.clone()];
                    tys = vec![t.clone()];
                }
                Val::Tuple(_) => {
                    if k + 1 < call.items.len() {
                        self.errors.push(item.kind.span(), format!("`{}` yields a tuple, so nothing can follow it in the sequence `{name}`", item.describe()));
                        return None;
                    }
                }
            }
            out = Some(val);
        }
        self.checked.fields.push(Field {
            name,
            ty: quote!((#(#types,)*)),
            init: quote!((#(#inits,)*)),
        });
        out
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
                name: name.clone(),
                ty,
                init,
            });
        }
        let desc = call.describe();
        let origin = format!("the previous layer (`{desc}`)");
        let out = self.alloc(&built.out, &origin);
        let pattern = pattern_tokens(&out);
        let code = (built.forward)(vars, &field);
        let span = call.kind.span();
        self.checked
            .stmts
            .push(quote::quote_spanned!(span=> let #pattern = #code;));
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

    /// A network declared in the same `network!`: its const parameters substituted, its
    /// input unified with the value it is applied to (binding its size names), its output
    /// computed; `[Block; n]` chains `n` copies.
    fn sibling(
        &mut self,
        call: &Call,
        sig: &Signature,
        tys: &[Ty],
        unknown: bool,
        named: bool,
    ) -> Option<Resolved> {
        let kind = &call.kind;
        let desc = call.describe();
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
        if sig.inputs.len() != 1 || sig.tuple_output {
            self.errors.push(kind.span(), format!("`{kind}` has {} inputs and {} outputs: as a layer a network takes one value and yields one", sig.inputs.len(), sig.outputs.len()));
            return None;
        }
        if unknown {
            return None;
        }
        if tys.len() != 1 {
            self.errors.push(
                kind.span(),
                format!(
                    "`{desc}` takes one value, but it is applied to {}",
                    tys.len()
                ),
            );
            return None;
        }
        let ty = &tys[0];
        let subst = |d: &Dim, map: &HashMap<String, Dim>| d.subst(&|s| map.get(s).cloned());
        let declared_in: Vec<Dim> = sig.inputs[0].iter().map(|d| subst(d, &map)).collect();
        let mismatch = |errors: &mut Errors, map: &HashMap<String, Dim>| {
            let want: Vec<Dim> = sig.inputs[0].iter().map(|d| subst(d, map)).collect();
            errors.push(
                kind.span(),
                format!(
                    "`{desc}` takes {} (`{kind}` declares its input as {}), but {} yields {}",
                    show(&want),
                    show(&sig.inputs[0]),
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
        let output: Vec<Dim> = sig.outputs[0].iter().map(|d| subst(d, &map)).collect();
        let count = call.repeat.map_or(1, |(n, _)| n);
        if count > 1
            && !(output.len() == ty.shape.len()
                && output.iter().zip(&ty.shape).all(|(a, b)| a.same(b)))
        {
            self.errors.push(call.repeat.expect("repeated").1, format!("`{desc}` chains {count} copies, but one copy turns {} into {}: a repeated block keeps its input's shape", ty.show(), show(&output)));
            return None;
        }
        let ty_tokens = match &call.generics {
            Some(g) => quote!(#kind #g),
            None => quote!(#kind),
        };
        let (field_ty, init) = match call.repeat {
            Some((n, _)) => (
                quote!([#ty_tokens; #n]),
                quote!(::core::array::from_fn(|_| <#ty_tokens>::new(device))),
            ),
            None => (ty_tokens.clone(), quote!(<#ty_tokens>::new(device))),
        };
        let repeated = call.repeat.is_some();
        let built = Built {
            out: Out::One(Ty::float(output)),
            field: Some((field_ty, init)),
            params: Dim::lit(0),
            forward: Box::new(move |x, f| {
                let x = &x[0];
                if repeated {
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
        };
        Some(Resolved {
            built,
            params: Some(quote!(<#ty_tokens>::NUM_PARAMETERS * #count)),
        })
    }

    /// `name: Type => [shape]`: another network as a layer, checked through
    /// `nn::DeclaredShapes` by constant evaluation.
    fn user(
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
        if unknown || tys.len() != 1 {
            return None;
        }
        let output = shape_dims(annotation, self.errors);
        self.checked.users.push(UserLayer {
            ty: kind.clone(),
            input: tys[0].shape.clone(),
            output: output.clone(),
            desc: call.describe(),
        });
        let ty_tokens = match &call.generics {
            Some(g) => quote!(#kind #g),
            None => quote!(#kind),
        };
        // A hand-written `DeclaredShapes` may claim any count: compare it with the built
        // module's once, when the network is constructed.
        let text = kind.to_string();
        let init = quote!({
            let __module = <#ty_tokens>::new(device);
            let __declared = <#ty_tokens as ::ferrograd::nn::DeclaredShapes>::PARAMETERS;
            let __actual = ::ferrograd::nn::Module::num_parameters(&__module);
            assert!(__declared == __actual, "`{}` declares {} parameters (nn::DeclaredShapes::PARAMETERS) but its fields hold {}", #text, __declared, __actual);
            __module
        });
        let built = Built {
            out: Out::One(Ty::float(output)),
            field: Some((ty_tokens.clone(), init)),
            params: Dim::lit(0),
            forward: Box::new(|x, f| {
                let x = &x[0];
                quote!(#f.forward(&#x))
            }),
        };
        Some(Resolved {
            built,
            params: Some(quote!(<#ty_tokens as ::ferrograd::nn::DeclaredShapes>::PARAMETERS)),
        })
    }

    fn outputs(&mut self, net: &Network, output: &Expr, result: Option<Val>) {
        let Some(result) = result else { return };
        let declared = &net.outputs;
        let singles: Vec<(TokenStream, Ty)> = match (&result, net.tuple_output) {
            (Val::One(v, t), false) => vec![(v.clone(), t.clone())],
            (Val::Tuple(items), true) if items.len() == declared.len() => {
                let mut out = Vec::new();
                for i in items {
                    match i {
                        Val::One(v, t) => out.push((v.clone(), t.clone())),
                        Val::Tuple(_) => {
                            self.errors.push(output.span(), "each declared output is one tensor, but this part of the result is a tuple");
                            return;
                        }
                    }
                }
                out
            }
            (Val::Tuple(items), _) => {
                self.errors.push(
                    output.span(),
                    format!(
                        "the network declares {} output{} but the body yields a tuple of {}",
                        declared.len(),
                        if declared.len() == 1 { "" } else { "s" },
                        items.len()
                    ),
                );
                return;
            }
            (Val::One(_, t), true) => {
                self.errors.push(
                    output.span(),
                    format!(
                        "the network declares {} outputs but the body yields one tensor {}",
                        declared.len(),
                        t.show()
                    ),
                );
                return;
            }
        };
        for ((_, ty), shape) in singles.iter().zip(declared) {
            check_shape(&ty.shape, shape, self.errors, "the declared output");
        }
        let vars: Vec<&TokenStream> = singles.iter().map(|(v, _)| v).collect();
        self.checked.result = if net.tuple_output {
            quote!((#(#vars),*))
        } else {
            quote!(#(#vars)*)
        };
    }
}

fn pattern_tokens(v: &Val) -> TokenStream {
    match v {
        Val::One(var, _) => quote!(#var),
        Val::Tuple(items) => {
            let parts = items.iter().map(pattern_tokens);
            quote!((#(#parts),*))
        }
    }
}

/// Compares an inferred shape with a written one, erroring on each disagreeing dim.
fn check_shape(inferred: &[Dim], written: &ShapeExpr, errors: &mut Errors, what: &str) {
    let evaluated: Vec<Option<Dim>> = written.dims.iter().map(|d| eval_dim(d, errors)).collect();
    if evaluated.iter().any(Option::is_none) {
        // A malformed dim was reported; comparing against a guess would only add noise.
        return;
    }
    let expected: Vec<Dim> = evaluated.into_iter().flatten().collect();
    if expected.len() != inferred.len() {
        errors.push(
            written.span,
            format!(
                "{what} has rank {} ({}) but the network produces rank {} ({})",
                expected.len(),
                show(&expected),
                inferred.len(),
                show(inferred)
            ),
        );
        return;
    }
    for (i, ((d, w), tok)) in inferred
        .iter()
        .zip(&expected)
        .zip(&written.dims)
        .enumerate()
    {
        if !d.same(w) {
            errors.push(
                tok.span(),
                format!(
                    "{what} says dim {i} is {} but the network produces {} there (shape {})",
                    tok.text(),
                    d,
                    show(inferred)
                ),
            );
        }
    }
}
