//! Shape analysis of a parsed network: lowers the chain form to the graph form, walks
//! the graph binding each value's type, runs each call's [`Kind`] rule, and collects
//! what code generation needs (fields, forward statements, summary rows). Every mistake
//! is an error spanned on the user's token; analysis goes on past it with the shape the
//! call would produce (or stops following that value), so independent mistakes are
//! reported together.

mod calls;
mod values;

use super::dim::{Dim, onnx_shape};
use super::kinds::{Built, Ty};
use super::parse::{
    Arg, Body, Call, DimExpr, Expr, Network, Pattern, ShapeExpr, Step, Stmt, Value, ValueParam,
};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use std::collections::HashMap;
use std::fmt;

/// Error collection that keeps every independent mistake.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>, usize);

impl Errors {
    /// Whether nothing was reported.
    pub(crate) fn is_empty(&self) -> bool {
        self.1 == 0
    }

    pub(crate) fn push(&mut self, span: Span, message: impl fmt::Display) {
        self.1 += 1;
        let e = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    /// How many errors were pushed.
    pub(crate) fn count(&self) -> usize {
        self.1
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
    /// The state-dict key: the name as written (`LayerNorm`, `self`).
    pub(crate) key: String,
    pub(crate) ty: TokenStream,
    pub(crate) init: TokenStream,
    /// The field's documentation: the layer as written.
    pub(crate) doc: String,
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
    /// The type with its generic arguments (`Residual<512>`).
    pub(crate) ty_tokens: TokenStream,
    pub(crate) input: Vec<Dim>,
    /// Where the input comes from (`the input \`x\``, `the previous layer (..)`).
    pub(crate) origin: String,
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
    /// The ONNX export's statements (the same values, as `onnx::Value`s).
    pub(crate) onnx_stmts: Vec<TokenStream>,
    /// The result's values, in order.
    pub(crate) result_vars: Vec<TokenStream>,
    pub(crate) users: Vec<UserLayer>,
    /// Statements that may run fused with the ones around them (see `fuse`).
    pub(crate) fusable: Vec<Fusable>,
}

/// A statement of `forward` that a fusion may take in: its index, its output variable,
/// what it is, its input variables and its layer's field.
pub(crate) struct Fusable {
    pub(crate) stmt: usize,
    pub(crate) out: String,
    pub(crate) kind: FuseKind,
    pub(crate) inputs: Vec<TokenStream>,
    pub(crate) field: TokenStream,
}

pub(crate) enum FuseKind {
    Linear,
    Dropout,
    LayerNorm,
    /// An activation: `nn::Activation` tokens.
    Act(TokenStream),
    /// `a + b` of equal shapes.
    Add,
}

/// What a network declares, for its siblings in the same `network!` to use it as a layer.
pub(crate) struct Signature {
    name: String,
    consts: Vec<String>,
    /// Size constructor parameters and their defaults; whether the first two go as `a
    /// -> b`.
    ctor: Vec<(String, Option<i64>)>,
    ctor_arrow: bool,
    /// Number (`f64`) and activation constructor parameters, after the sizes in `new`.
    values: Vec<(String, ValueParam)>,
    inputs: Vec<Vec<Dim>>,
    input_names: Vec<String>,
    /// Which inputs are optional (`Option<[..]>`).
    optional: Vec<bool>,
    outputs: Vec<Vec<Dim>>,
    tuple_output: bool,
    /// A `#[derive(Module)]` type with declared shapes (its count is
    /// `nn::DeclaredShapes::PARAMETERS`, checked against its fields at construction).
    derived: bool,
    /// A `#[derive(Module)]` type without declared shapes.
    undeclared: bool,
    /// A type declared through `declared_shapes!`: its shapes are a hand-written
    /// `nn::DeclaredShapes`, checked by constant evaluation.
    elsewhere: bool,
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
            ctor: net
                .ctor
                .iter()
                .filter(|p| p.value.is_none())
                .map(|p| (p.name.to_string(), p.default))
                .collect(),
            ctor_arrow: net.ctor_arrow,
            values: net
                .ctor
                .iter()
                .filter_map(|p| Some((p.name.to_string(), p.value.clone()?)))
                .collect(),
            inputs: net
                .inputs
                .iter()
                .map(|i| shape_dims(&i.shape, &mut quiet))
                .collect(),
            input_names: net.inputs.iter().map(|i| i.name.to_string()).collect(),
            optional: net.inputs.iter().map(|i| i.optional).collect(),
            outputs: net
                .outputs
                .iter()
                .map(|o| shape_dims(o, &mut quiet))
                .collect(),
            tuple_output: net.tuple_output,
            derived: net.attrs.iter().any(|a| a.path().is_ident("module")),
            undeclared: net.attrs.iter().any(|a| {
                a.path().is_ident("module")
                    && a.parse_args::<syn::Ident>()
                        .is_ok_and(|i| i == "undeclared")
            }),
            elsewhere: net.attrs.iter().any(|a| {
                a.path().is_ident("module")
                    && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "elsewhere")
            }),
        }
    }
}

struct Checker<'a> {
    errors: &'a mut Errors,
    krate: TokenStream,
    runtime: Vec<String>,
    /// `runtime` and the const and constructor parameters.
    sizes: Vec<String>,
    env: HashMap<String, Val>,
    next_var: usize,
    checked: Checked,
    field_names: Vec<syn::Ident>,
    siblings: &'a [Signature],
    own_name: String,
    /// This network's constructor parameters.
    ctor: Vec<String>,
    /// Its number (`f64`) constructor parameters.
    floats: Vec<String>,
    /// Its activation constructor parameters.
    acts: Vec<String>,
    /// Its switch (`bool`) constructor parameters.
    bools: Vec<String>,
    /// The last batch norm emitted: its statement, field, input and output variable, so
    /// that a `relu` piped straight after it runs fused (`forward_relu`).
    last_norm: Option<LastNorm>,
    /// The variables of optional inputs (`Option<Tensor>` in `forward`), and their names.
    optional: Vec<(String, String)>,
    /// For the call being resolved: which of its values are optional.
    call_optional: Vec<bool>,
}

/// A batch norm's forward statement (see `Checker::last_norm`).
struct LastNorm {
    stmt: usize,
    field: TokenStream,
    input: TokenStream,
    out: String,
}

/// Evaluates a written shape.
pub(crate) fn shape_dims(shape: &ShapeExpr, errors: &mut Errors) -> Vec<Dim> {
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
                    // A size (`stride`, `C`): positive for every assignment.
                    None if !y.symbols().is_empty() => x.floor_div_by(&y),
                    _ => {
                        errors.push(
                            *span,
                            format!(
                                "`{}`: sizes divide by positive integers or by sizes",
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
                    let mut written_values = Vec::new();
                    for a in &call.args {
                        match a {
                            Arg::Positional(Value::Dim(DimExpr::Sym(i))) => {
                                written_values.push(i.to_string());
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
                            written_values,
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
    // Const and constructor parameters: symbols known when the network is built.
    let consts: Vec<String> = net
        .generics
        .const_params()
        .map(|c| c.ident.to_string())
        .chain(
            net.ctor
                .iter()
                .filter(|p| p.value.is_none())
                .map(|p| p.name.to_string()),
        )
        .collect();
    for (k, p) in net.ctor.iter().enumerate() {
        let name = p.name.to_string();
        let clash = if net.ctor[..k].iter().any(|q| q.name == p.name) {
            Some("another constructor parameter")
        } else if net.inputs.iter().any(|i| i.name == p.name) {
            Some("an input")
        } else if net.generics.const_params().any(|c| c.ident == p.name) {
            Some("a const parameter")
        } else if name == "device" || name.starts_with("__") {
            Some("a name the generated `new` uses")
        } else {
            None
        };
        if let Some(what) = clash {
            errors.push(
                p.name.span(),
                format!("constructor parameter `{name}` has the name of {what}: rename it"),
            );
        }
    }
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
    let sizes = runtime.iter().chain(&consts).cloned().collect();
    // The names of the constructor parameters of one kind (numbers, activations, ..).
    let params_where = |kind: fn(&ValueParam) -> bool| -> Vec<String> {
        net.ctor
            .iter()
            .filter(|p| p.value.as_ref().is_some_and(kind))
            .map(|p| p.name.to_string())
            .collect()
    };
    let mut c = Checker {
        errors,
        krate: quote!(::ferrograd),
        runtime,
        sizes,
        env: HashMap::new(),
        next_var: 0,
        checked: Checked {
            fields: Vec::new(),
            rows: Vec::new(),
            stmts: Vec::new(),
            result: quote!(()),
            users: Vec::new(),
            onnx_stmts: Vec::new(),
            result_vars: Vec::new(),
            fusable: Vec::new(),
        },
        field_names: net.ctor.iter().map(|p| p.name.clone()).collect(),
        siblings,
        own_name: net.name.to_string(),
        ctor: net.ctor.iter().map(|p| p.name.to_string()).collect(),
        floats: params_where(|v| matches!(v, ValueParam::Number(_))),
        acts: params_where(|v| matches!(v, ValueParam::Activation)),
        bools: params_where(|v| matches!(v, ValueParam::Bool(_))),
        last_norm: None,
        optional: Vec::new(),
        call_optional: Vec::new(),
    };
    for (k, input) in net.inputs.iter().enumerate() {
        let shape = shape_dims(&input.shape, c.errors);
        let var = format_ident!("__input{}", k);
        if input.optional {
            c.optional.push((var.to_string(), input.name.to_string()));
            // Its sizes must be known without it.
            for s in shape_dims(&input.shape, &mut Errors::default())
                .iter()
                .flat_map(|d| d.symbols())
            {
                let bound_elsewhere = c.sizes.contains(&s)
                    && (!c.runtime.contains(&s)
                        || net.inputs.iter().filter(|i| !i.optional).any(|i| {
                            shape_dims(&i.shape, &mut Errors::default())
                                .iter()
                                .any(|d| d.symbols().contains(&s))
                        }));
                if !bound_elsewhere {
                    c.errors.push(input.shape.span, format!("`{s}` is a size only of the optional input `{}`, which may be absent: give it through a required input, a const or a constructor parameter", input.name));
                }
            }
        }
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
    fuse(&mut c.checked);
    c.checked
}

/// Inference fusions the graph shows at compile time, each a runtime function that runs
/// the unfused layers whenever a gradient is needed or a dropout is active: a `Linear`
/// piped only into `gelu` (or an activation parameter) becomes
/// `nn::fusion::linear_activation` (the bias in the GELU's pass), and `norm(dropout(
/// dense(x)) + residual)` — a post-norm sublayer's end, each value read once —
/// `nn::fusion::linear_dropout_add_layer_norm` (one pass for bias, residual and norm).
fn fuse(checked: &mut Checked) {
    use std::collections::HashMap;
    // Reads of each variable: its occurrences, less its definition.
    let mut reads: HashMap<String, usize> = HashMap::new();
    fn count(ts: TokenStream, reads: &mut HashMap<String, usize>) {
        for t in ts {
            match t {
                proc_macro2::TokenTree::Group(g) => count(g.stream(), reads),
                proc_macro2::TokenTree::Ident(i) => {
                    let s = i.to_string();
                    if s.starts_with("__v") || s.starts_with("__input") {
                        *reads.entry(s).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
    }
    for s in &checked.stmts {
        count(s.clone(), &mut reads);
    }
    count(checked.result.clone(), &mut reads);
    let once = |v: &str| reads.get(v).copied().unwrap_or(0) == 2;
    let by_out: HashMap<String, usize> = checked
        .fusable
        .iter()
        .enumerate()
        .map(|(k, f)| (f.out.clone(), k))
        .collect();
    let producer = |v: &TokenStream, kind: fn(&FuseKind) -> bool| {
        by_out
            .get(&v.to_string())
            .map(|&k| &checked.fusable[k])
            .filter(|f| kind(&f.kind) && once(&f.out))
    };
    let mut replace: Vec<(usize, TokenStream)> = Vec::new();
    let mut removed: Vec<usize> = Vec::new();
    for f in &checked.fusable {
        let out = syn::Ident::new(&f.out, proc_macro2::Span::call_site());
        match &f.kind {
            FuseKind::LayerNorm => {
                let Some(add) = producer(&f.inputs[0], |k| matches!(k, FuseKind::Add)) else {
                    continue;
                };
                let fused = (0..2).find_map(|side| {
                    let drop = producer(&add.inputs[side], |k| matches!(k, FuseKind::Dropout))?;
                    let dense = producer(&drop.inputs[0], |k| matches!(k, FuseKind::Linear))?;
                    Some((dense, drop, &add.inputs[1 - side]))
                });
                let Some((dense, drop, residual)) = fused else {
                    continue;
                };
                let (df, pf, nf, x) = (&dense.field, &drop.field, &f.field, &dense.inputs[0]);
                replace.push((
                    f.stmt,
                    quote!(let #out = ::ferrograd::nn::fusion::linear_dropout_add_layer_norm(&#df, &#pf, &#x, &#residual, &#nf);),
                ));
                removed.extend([dense.stmt, drop.stmt, add.stmt]);
            }
            FuseKind::Act(act) => {
                let Some(dense) = producer(&f.inputs[0], |k| matches!(k, FuseKind::Linear)) else {
                    continue;
                };
                let (df, x) = (&dense.field, &dense.inputs[0]);
                replace.push((
                    f.stmt,
                    quote!(let #out = ::ferrograd::nn::fusion::linear_activation(&#df, &#x, #act);),
                ));
                removed.push(dense.stmt);
            }
            _ => {}
        }
    }
    for (k, s) in replace {
        checked.stmts[k] = s;
    }
    removed.sort_unstable();
    removed.dedup();
    for k in removed.into_iter().rev() {
        checked.stmts.remove(k);
    }
}

impl Checker<'_> {
    /// Gives the ONNX value `var` its compile-time shape.
    fn onnx_declare(&mut self, var: &TokenStream, ty: &Ty) {
        let shape = onnx_shape(&ty.shape, &self.runtime, &self.krate);
        self.checked
            .onnx_stmts
            .push(quote!(let #var = __g.declare(#var, #shape);));
    }

    fn var(&mut self) -> TokenStream {
        let v = format_ident!("__v{}", self.next_var);
        self.next_var += 1;
        quote!(#v)
    }

    fn outputs(&mut self, net: &Network, output: &Expr, result: Option<Val>) {
        let Some(result) = result else { return };
        if let Val::One(v, _) = &result
            && self.refuse_optional(v, output.span(), "the network's output")
        {
            return;
        }
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
            check_shape(
                &ty.shape,
                shape,
                self.errors,
                "the declared output",
                "the network",
            );
        }
        let vars: Vec<&TokenStream> = singles.iter().map(|(v, _)| v).collect();
        self.checked.result_vars = vars.iter().map(|v| (*v).clone()).collect();
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
/// Compares a written shape (`what`) with the inferred one (made by `producer`); whether
/// they agree (a malformed written dim counts as not agreeing: it was reported).
fn check_shape(
    inferred: &[Dim],
    written: &ShapeExpr,
    errors: &mut Errors,
    what: &str,
    producer: &str,
) -> bool {
    let evaluated: Vec<Option<Dim>> = written.dims.iter().map(|d| eval_dim(d, errors)).collect();
    if evaluated.iter().any(Option::is_none) {
        // A malformed dim was reported; comparing against a guess would only add noise.
        return false;
    }
    let expected: Vec<Dim> = evaluated.into_iter().flatten().collect();
    if expected.len() != inferred.len() {
        errors.push(
            written.span,
            format!(
                "{what} has rank {} ({}) but {producer} produces rank {} ({})",
                expected.len(),
                show(&expected),
                inferred.len(),
                show(inferred)
            ),
        );
        return false;
    }
    let mut ok = true;
    for (i, ((d, w), tok)) in inferred
        .iter()
        .zip(&expected)
        .zip(&written.dims)
        .enumerate()
    {
        if !d.same(w) {
            ok = false;
            errors.push(
                tok.span(),
                format!(
                    "{what} says dim {i} is {} but {producer} produces {} there (shape {})",
                    tok.text(),
                    d,
                    show(inferred)
                ),
            );
        }
    }
    ok
}
