//! [`Cx`]: what a kind's check reads its arguments through (typed, validated, with
//! spanned errors and suggestions for misspelt keys) and reports mistakes with.

use super::{Ty, suggest};
use crate::network::check::{Errors, eval_dim};
use crate::network::dim::{Dim, symbol_tokens};
use crate::network::parse::{Arg, Call, DKind, DimExpr, Value};
use proc_macro2::{Span, TokenStream};
use std::fmt;

/// Why `name` cannot stand for a size, given the network's `sizes` (input sizes, const
/// and constructor parameters), with the closest one suggested.
pub(crate) fn unknown_size(name: &str, sizes: &[String]) -> String {
    let known = if sizes.is_empty() {
        "it has none".to_string()
    } else {
        format!("its sizes are {}", sizes.join(", "))
    };
    let hint = suggest(name, sizes.iter().map(String::as_str))
        .or_else(|| (sizes.len() == 1).then(|| sizes[0].as_str()))
        .map_or(String::new(), |s| format!(": did you mean `{s}`?"));
    format!(
        "`{name}` is not a size of this network ({known}) nor a const or constructor parameter{hint}"
    )
}

/// The context of one call's check.
pub(crate) struct Cx<'a> {
    pub(crate) errors: &'a mut Errors,
    pub(crate) call: &'a Call,
    /// How the call reads: `fc1: Linear(400 -> 120)`.
    pub(crate) desc: String,
    pub(crate) krate: TokenStream,
    /// Size names bound from the inputs' shapes at run time.
    pub(crate) runtime: &'a [String],
    /// Every size name an argument may use: the runtime ones, const and constructor
    /// parameters.
    sizes: &'a [String],
    /// The network's float constructor parameters (`p: f64`).
    floats: &'a [String],
    /// Its switch constructor parameters (`bias: bool`).
    bools: &'a [String],
    args: Vec<Option<Arg>>,
    /// The kind's argument keys, in PyTorch's positional order.
    keys: Vec<String>,
    /// The keys read from a positional argument.
    positional_keys: Vec<String>,
    /// Whether an argument was wrong (then the output is left unknown).
    bad_args: bool,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(
        errors: &'a mut Errors,
        call: &'a Call,
        krate: TokenStream,
        runtime: &'a [String],
        sizes: &'a [String],
        (floats, bools): (&'a [String], &'a [String]),
        keys: &[&str],
    ) -> Self {
        // A misspelt key close to a known one is reported with a suggestion and then read
        // as the key it resembles, so one typo is one error.
        let args = call
            .args
            .iter()
            .map(|arg| match arg {
                Arg::Named(k, v) if !keys.contains(&k.to_string().as_str()) => {
                    match suggest(&k.to_string(), keys.iter().copied()) {
                        Some(key) => {
                            errors.push(
                                k.span(),
                                format!(
                                    "unknown argument `{k}` for `{}`: did you mean `{key}`?",
                                    call.kind
                                ),
                            );
                            Some(Arg::Named(syn::Ident::new(key, k.span()), v.clone()))
                        }
                        None => Some(arg.clone()),
                    }
                }
                _ => Some(arg.clone()),
            })
            .collect();
        Cx {
            errors,
            call,
            desc: call.describe(),
            krate,
            runtime,
            sizes,
            floats,
            bools,
            args,
            keys: keys.iter().map(|k| k.to_string()).collect(),
            positional_keys: Vec::new(),
            bad_args: false,
        }
    }

    /// Reports a mistake in the inputs' shapes (the output is still inferred, so later
    /// independent mistakes are found too).
    pub(crate) fn error(&mut self, span: Span, message: impl fmt::Display) {
        self.errors.push(span, message);
    }

    /// Reports a wrong argument; the call's output is then left unknown.
    pub(crate) fn arg_error(&mut self, span: Span, message: impl fmt::Display) {
        self.bad_args = true;
        self.errors.push(span, message);
    }

    /// Whether [`Cx::arg_error`] was called.
    pub(crate) fn bad_args(&self) -> bool {
        self.bad_args
    }

    /// The kind's name as written.
    pub(crate) fn kind(&self) -> String {
        self.call.kind.to_string()
    }

    pub(crate) fn kind_span(&self) -> Span {
        self.call.kind.span()
    }

    pub(crate) fn args_span(&self) -> Span {
        self.call.args_or_kind()
    }

    fn take(&mut self, pick: impl Fn(&Arg) -> bool) -> Option<Arg> {
        let slot = self
            .args
            .iter_mut()
            .find(|a| a.as_ref().is_some_and(&pick))?;
        slot.take()
    }

    /// `in -> out`, required.
    pub(crate) fn arrow(&mut self, what: &str) -> Option<(DimExpr, DimExpr)> {
        match self.take(|a| matches!(a, Arg::Arrow(..))) {
            Some(Arg::Arrow(a, b)) => Some((a, b)),
            _ => {
                let (kind, span) = (self.kind(), self.args_span());
                self.arg_error(
                    span,
                    format!(
                        "`{kind}` needs `{what}` as its first argument, as `{kind}({what}, ..)`"
                    ),
                );
                None
            }
        }
    }

    /// `key = value`, or the next positional value when `positional`.
    pub(crate) fn value(&mut self, key: &str, positional: bool) -> Option<Value> {
        if let Some(Arg::Named(_, v)) = self.take(|a| matches!(a, Arg::Named(k, _) if k == key)) {
            return Some(v);
        }
        if positional
            && let Some(Arg::Positional(v)) = self.take(|a| matches!(a, Arg::Positional(_)))
        {
            self.positional_keys.push(key.to_string());
            return Some(v);
        }
        None
    }

    /// Whether the call gives `key` by name (and it has not been read yet).
    pub(crate) fn has_arg(&self, key: &str) -> bool {
        self.args
            .iter()
            .flatten()
            .any(|a| matches!(a, Arg::Named(k, _) if k == key))
    }

    /// The next positional value.
    pub(crate) fn positional(&mut self) -> Option<Value> {
        match self.take(|a| matches!(a, Arg::Positional(_))) {
            Some(Arg::Positional(v)) => Some(v),
            _ => None,
        }
    }

    /// A dimension value as a [`Dim`]; reports non-dimensions.
    pub(crate) fn dim_of(&mut self, v: &Value, key: &str) -> Option<(Dim, Span)> {
        match v {
            Value::Dim(d) => self.dim(d).map(|x| (x, d.span())),
            other => {
                let kind = self.kind();
                self.arg_error(
                    other.span(),
                    format!(
                        "`{key}` of `{kind}` is a size: an integer or a size expression, not `{}`",
                        other.text()
                    ),
                );
                None
            }
        }
    }

    /// Evaluates written dimension arithmetic (a mistake in it is a wrong argument). A
    /// name that is no size of the network (`B` where the batch is `N`) is one error on
    /// it, with the sizes there are.
    pub(crate) fn dim(&mut self, d: &DimExpr) -> Option<Dim> {
        let mut names = Vec::new();
        d.symbols(&mut names);
        for name in names {
            let text = name.to_string();
            if self.sizes.contains(&text) {
                continue;
            }
            let message = if self.floats.contains(&text) {
                format!(
                    "`{text}` is a number parameter (`{text}: f64`), not a size: sizes are integers known when the network is built (`[{text}]`)"
                )
            } else {
                unknown_size(&text, self.sizes)
            };
            self.arg_error(name.span(), message);
            return None;
        }
        let before = self.errors.count();
        let value = eval_dim(d, self.errors);
        if self.errors.count() > before {
            self.bad_args = true;
        }
        value
    }

    /// The one tensor a call is applied to, a float of one of `ranks`; `None` (reported)
    /// otherwise.
    pub(crate) fn one_float<'t>(
        &mut self,
        inputs: &'t [Ty],
        ranks: &[usize],
        layout: &str,
    ) -> Option<&'t Ty> {
        if !self.arity(inputs, 1, "one value") {
            return None;
        }
        let x = &inputs[0];
        self.need_float(x);
        self.need_rank(x, ranks, layout).then_some(x)
    }

    /// An integer argument (`key = v`, or positional when `positional`) that must be a
    /// literal at least `min`; `default` when absent (`None`: required).
    pub(crate) fn int(
        &mut self,
        key: &str,
        positional: bool,
        default: Option<i64>,
        min: i64,
    ) -> i64 {
        let v = self.value(key, positional);
        self.int_of(v, key, default, min)
    }

    /// [`Cx::int`] of a value already taken.
    pub(crate) fn int_of(
        &mut self,
        v: Option<Value>,
        key: &str,
        default: Option<i64>,
        min: i64,
    ) -> i64 {
        let kind = self.kind();
        let Some(v) = v else {
            return match default {
                Some(d) => d,
                None => {
                    let span = self.args_span();
                    self.arg_error(span, format!("`{kind}` needs `{key} = ..`"));
                    min.max(1)
                }
            };
        };
        let Some((d, span)) = self.dim_of(&v, key) else {
            return default.unwrap_or(min.max(1));
        };
        match d.as_lit() {
            Some(x) if x >= min => x,
            Some(x) => {
                let need = if min == 1 {
                    "positive".to_string()
                } else {
                    format!("at least {min}")
                };
                self.arg_error(
                    span,
                    format!("`{key}` of `{kind}` must be {need}, but it is {x}"),
                );
                default.unwrap_or(min.max(1))
            }
            None => {
                self.arg_error(span, format!("`{key}` of `{kind}` must be an integer literal here: shapes are computed at compile time"));
                default.unwrap_or(min.max(1))
            }
        }
    }

    /// A size argument (`key = v`, or positional when `positional`): a literal at least
    /// `min`, or an expression of const or constructor parameters (a literal is
    /// checked; a size known only at run time is reported when the size reaches the
    /// generated code, by [`Cx::const_tokens`]). `default` when absent (`None`: required).
    pub(crate) fn size(
        &mut self,
        key: &str,
        positional: bool,
        default: Option<i64>,
        min: i64,
    ) -> (Dim, Span) {
        let v = self.value(key, positional);
        let span = v.as_ref().map_or(self.args_span(), Value::span);
        if let Some(Value::Dim(d)) = &v {
            let mut names = Vec::new();
            d.symbols(&mut names);
            if !names.is_empty() {
                // A size name: checked to be one of the network's (else one error, and
                // the output is left unknown).
                match self.dim(d) {
                    Some(x) if x.as_lit().is_none() => return (x, span),
                    Some(_) => {}
                    None => return (Dim::lit(default.unwrap_or(min).max(min)), span),
                }
            }
        }
        (Dim::lit(self.int_of(v, key, default, min)), span)
    }

    /// A signed axis (`dim = -1`) for a value of `rank`, normalised; reports out of range.
    pub(crate) fn axis(
        &mut self,
        key: &str,
        positional: bool,
        default: Option<i64>,
        rank: usize,
        input: &Ty,
    ) -> Option<usize> {
        self.axis_spanned(key, positional, default, rank, input)
            .map(|(axis, _)| axis)
    }

    /// [`Cx::axis`] and the span of the value it was read from (of the arguments when
    /// the default was taken).
    pub(crate) fn axis_spanned(
        &mut self,
        key: &str,
        positional: bool,
        default: Option<i64>,
        rank: usize,
        input: &Ty,
    ) -> Option<(usize, Span)> {
        let kind = self.kind();
        let (raw, span) = match self.value(key, positional) {
            Some(v) => {
                let (d, span) = self.dim_of(&v, key)?;
                match d.as_lit() {
                    Some(x) => (x, span),
                    None => {
                        self.arg_error(
                            span,
                            format!("`{key}` of `{kind}` must be an integer literal"),
                        );
                        return None;
                    }
                }
            }
            None => match default {
                Some(d) => (d, self.args_span()),
                None => {
                    let span = self.args_span();
                    self.arg_error(span, format!("`{kind}` needs `{key} = ..`"));
                    return None;
                }
            },
        };
        let r = rank as i64;
        if raw < -r || raw >= r {
            let desc = self.desc.clone();
            self.arg_error(
                span,
                format!("`{desc}`: {key} {raw} is out of range for {} of rank {rank} {} (valid: {} to {})", input.origin, input.show(), -r, r - 1),
            );
            return None;
        }
        Some((raw.rem_euclid(r.max(1)) as usize, span))
    }

    /// A float argument in `[lo, hi)` (`hi_inclusive` for `[lo, hi]`).
    pub(crate) fn float(
        &mut self,
        key: &str,
        positional: bool,
        default: Option<f64>,
        lo: f64,
        hi: f64,
        hi_inclusive: bool,
    ) -> f64 {
        let v = self.value(key, positional);
        self.float_from(v, key, default, lo, hi, hi_inclusive)
    }

    /// A number argument that may also be one of the network's float constructor
    /// parameters (`Dropout(p)` of `struct Block[dim, p: f64]`): its value when written as
    /// a literal, and its tokens for the constructor either way. A parameter's range is
    /// checked where the layer is built (`Dropout::new` panics outside [0, 1]).
    pub(crate) fn float_arg(
        &mut self,
        key: &str,
        positional: bool,
        default: Option<f64>,
        (lo, hi, hi_inclusive): (f64, f64, bool),
    ) -> (Option<f64>, TokenStream) {
        let v = self.value(key, positional);
        if let Some(Value::Dim(DimExpr::Sym(name))) = &v
            && self.floats.iter().any(|f| name == f)
        {
            // The expansion's hygiene (constructor parameters are locals of `new`), at
            // the user's token.
            let at = Span::call_site().located_at(name.span());
            let i = syn::Ident::new(&name.to_string(), at);
            return (None, quote::quote!(#i));
        }
        let x = self.float_from(v, key, default, lo, hi, hi_inclusive);
        (Some(x), quote::quote!(#x))
    }

    /// [`Cx::float`] of a value already read.
    fn float_from(
        &mut self,
        v: Option<Value>,
        key: &str,
        default: Option<f64>,
        lo: f64,
        hi: f64,
        hi_inclusive: bool,
    ) -> f64 {
        let kind = self.kind();
        let Some(v) = v else {
            return match default {
                Some(d) => d,
                None => {
                    let span = self.args_span();
                    self.arg_error(span, format!("`{kind}` needs `{key}`, as `{kind}(0.5)`"));
                    lo
                }
            };
        };
        let (x, span) = match &v {
            Value::Float(x, s) => (*x, *s),
            Value::Dim(DimExpr::Lit(x, s)) => (*x as f64, *s),
            other => {
                self.arg_error(
                    other.span(),
                    format!("`{key}` of `{kind}` is a number, not `{}`", other.text()),
                );
                return default.unwrap_or(lo);
            }
        };
        let inside = x >= lo && (x < hi || (hi_inclusive && x == hi));
        if !inside {
            let close = if hi_inclusive { "]" } else { ")" };
            self.arg_error(
                span,
                format!("`{key}` of `{kind}` must be in [{lo}, {hi}{close}, but it is {x}"),
            );
        }
        x
    }

    /// A `true`/`false` argument that may also be one of the network's switch parameters
    /// (`Linear(d -> h, bias = bias)` of `struct Mlp[d, h, bias: bool]`): its tokens for
    /// the constructor, and how many of a thing it adds as a factor of the count (1, 0,
    /// or the parameter, a 0/1 size to the count).
    pub(crate) fn bool_arg(&mut self, key: &str, default: bool) -> (TokenStream, Dim) {
        let v = self.value(key, false);
        if let Some(Value::Dim(DimExpr::Sym(name))) = &v
            && self.bools.iter().any(|b| name == b)
        {
            let at = Span::call_site().located_at(name.span());
            let i = syn::Ident::new(&name.to_string(), at);
            return (quote::quote!(#i), Dim::sym(&name.to_string()));
        }
        let b = self.bool_from(v, key, default);
        (quote::quote!(#b), Dim::lit(b as i64))
    }

    /// A `true`/`false` argument.
    pub(crate) fn bool(&mut self, key: &str, default: bool) -> bool {
        let v = self.value(key, false);
        self.bool_from(v, key, default)
    }

    /// [`Cx::bool`] of a value already read.
    fn bool_from(&mut self, v: Option<Value>, key: &str, default: bool) -> bool {
        match v {
            None => default,
            Some(Value::Bool(b)) => b.value,
            Some(other) => {
                let kind = self.kind();
                self.arg_error(
                    other.span(),
                    format!(
                        "`{key}` of `{kind}` is `true` or `false`, not `{}`",
                        other.text()
                    ),
                );
                default
            }
        }
    }

    /// Reports arguments nobody took.
    pub(crate) fn finish(&mut self, allowed: &str) {
        let kind = self.kind();
        let left: Vec<Arg> = self.args.iter_mut().filter_map(Option::take).collect();
        // A positional argument past those that go by position is most likely the next
        // of PyTorch's positional parameters (`Conv2d(3 -> 8, 3, 2)`: 2 is the stride):
        // the keys neither read by position nor given by name, in order.
        let named: Vec<String> = self
            .call
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Named(k, _) => Some(k.to_string()),
                _ => None,
            })
            .collect();
        let after = self
            .keys
            .iter()
            .rposition(|k| self.positional_keys.contains(k))
            .map_or(0, |i| i + 1);
        let mut free = self.keys[after.min(self.keys.len())..]
            .iter()
            .filter(|k| !named.contains(k) && !self.positional_keys.contains(k))
            .cloned()
            .collect::<Vec<_>>()
            .into_iter();
        for arg in left {
            let what = match &arg {
                Arg::Named(k, _) => {
                    format!("unknown argument `{k}` for `{kind}`: it takes {allowed}")
                }
                Arg::Positional(v) => match free.next() {
                    Some(key) => {
                        let by_position = match &self.positional_keys[..] {
                            [] => "nothing goes by position".to_string(),
                            [one] => format!("only `{one}` goes by position"),
                            many => format!("only `{}` go by position", many.join("`, `")),
                        };
                        format!(
                            "unexpected positional argument `{}` for `{kind}`: {by_position}; did you mean `{key} = {}`?",
                            v.text(),
                            v.text()
                        )
                    }
                    None => format!("unexpected argument for `{kind}`: it takes {allowed}"),
                },
                _ => format!("unexpected argument for `{kind}`: it takes {allowed}"),
            };
            self.arg_error(arg.span(), what);
        }
    }

    /// Checks the number of values the call is applied to.
    pub(crate) fn arity(&mut self, inputs: &[Ty], n: usize, what: &str) -> bool {
        if inputs.len() == n {
            return true;
        }
        let (kind, span) = (self.kind(), self.kind_span());
        self.error(
            span,
            format!(
                "`{kind}` takes {what}, but it is applied to {} value{}",
                inputs.len(),
                if inputs.len() == 1 { "" } else { "s" }
            ),
        );
        false
    }

    /// Requires a float input (layers do arithmetic; indices go through `Embedding`).
    pub(crate) fn need_float(&mut self, input: &Ty) -> bool {
        if input.dtype == DKind::Float {
            return true;
        }
        let (desc, span) = (self.desc.clone(), self.kind_span());
        self.error(span, format!("`{desc}` takes a float tensor, but {} is {} ({}): integer ids go through an `Embedding` first", input.origin, input.dtype.name(), input.show()));
        false
    }

    /// Requires one of `ranks` for `input`, with the usual fix in the message.
    pub(crate) fn need_rank(&mut self, input: &Ty, ranks: &[usize], layout: &str) -> bool {
        if ranks.contains(&input.shape.len()) {
            return true;
        }
        let kind = self.kind();
        let rank = input.shape.len();
        let hint = if ranks.contains(&2) && rank > 2 && kind == "Linear" {
            ": add `flatten` before it".to_string()
        } else if let Some(fix) = rank_fix(&kind, rank) {
            format!(": for a rank-{rank} input use `{fix}`")
        } else {
            String::new()
        };
        let (desc, span) = (self.desc.clone(), self.kind_span());
        let ranks = ranks
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(" or rank-");
        self.error(span, format!("`{desc}` expects a rank-{ranks} input {layout}, but {} yields rank {rank} {}{hint}", input.origin, input.show()));
        false
    }

    /// A dim's tokens in the constructor (`new(device)`): literals and const parameters
    /// only.
    pub(crate) fn const_tokens(&mut self, d: &Dim, span: Span) -> TokenStream {
        let runtime: Vec<String> = d
            .symbols()
            .into_iter()
            .filter(|s| self.runtime.contains(s))
            .collect();
        if let Some(s) = runtime.first() {
            let desc = self.desc.clone();
            self.error(span, format!("`{desc}`: `{s}` is a size of the input, known only at run time; layer sizes are literals, const or constructor parameters, or consts"));
        }
        // The expansion's own hygiene (constructor parameters are its locals), at the
        // user's token.
        let at = Span::call_site().located_at(span);
        d.tokens(&|s| {
            let i = syn::Ident::new(s, at);
            quote::quote!(#i)
        })
    }

    /// A dim's tokens inside `forward`: input sizes bound at run time, const parameters,
    /// literals and consts.
    pub(crate) fn runtime_tokens(&self, d: &Dim) -> TokenStream {
        d.tokens(&|s| symbol_tokens(s, self.runtime.iter().any(|r| r == s)))
    }

    /// Compares an input dim with what the call expects; reports a mismatch on `token`.
    pub(crate) fn expect_dim(
        &mut self,
        got: &Dim,
        want: &Dim,
        token: Span,
        what: &str,
        input: &Ty,
    ) -> bool {
        if got.same(want) {
            return true;
        }
        let desc = self.desc.clone();
        self.error(
            token,
            format!(
                "`{desc}` expects {what} {want}, but {} yields {got} (shape {})",
                input.origin,
                input.show()
            ),
        );
        false
    }
}

/// The layer to use for a rank the kind does not take (`BatchNorm1d` on rank 4).
fn rank_fix(kind: &str, rank: usize) -> Option<&'static str> {
    match (kind, rank) {
        ("BatchNorm1d" | "BatchNorm3d", 4) => Some("BatchNorm2d"),
        ("BatchNorm2d", 2 | 3) => Some("BatchNorm1d"),
        ("Conv2d", 3) => Some("Conv1d"),
        ("Conv1d", 4) => Some("Conv2d"),
        _ => None,
    }
}
