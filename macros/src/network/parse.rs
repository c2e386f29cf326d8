//! The syntax tree of the `network!` DSL and its parser: a faithful mirror of this
//! grammar (README, "The network! DSL"):
//!
//! ```text
//! network  := attrs vis "struct" Ident generics? "(" input ("," input)* ")" "->" outputs "{" body "}"
//! input    := Ident ":" shape (":" dtype)?            dtype := "f32" | "i64" | "bool" | ...
//! outputs  := shape | "(" shape ("," shape)* ")"
//! shape    := "[" dim ("," dim)* "]"
//! dim      := dim ("+" | "-" | "*" | "/") dim | "(" dim ")" | LitInt | Ident
//!
//! body     := chain | graph                           (a graph has a `;` or a `->` outside parentheses)
//! chain    := step ("," step)* ","?                   (applied in turn to the first input)
//! step     := call ("=>" shape)? | "let" Ident | "+" Ident
//! graph    := ("let" pattern "=" expr ";")* expr      (the last expression is the output)
//! pattern  := Ident | "_" | "(" pattern ("," pattern)* ")"
//! expr     := arith ("=>" shape)? ("->" call ("=>" shape)?)*
//! arith    := arith ("+" | "-" | "*" | "/") arith | primary
//! primary  := call "(" expr ("," expr)* ")"           (a layer or op applied to values)
//!           | Ident                                   (a named value)
//!           | "(" expr ("," expr)* ")"                (grouping, or a tuple)
//!           | LitFloat | LitInt                       (a scalar)
//! call     := (Ident ":")? Ident generics? ("(" arg ("," arg)* ")")?
//! arg      := dim "->" dim | Ident "=" value | value
//! value    := dim | "-" dim | LitFloat | LitStr | LitBool | shape
//! ```
//!
//! In an expression a call's last parenthesised group holds the values it is applied to:
//! `relu(x)`, `fc: Linear(4 -> 2)(x)`, `softmax(dim = 1)(scores)`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Generics, Ident, LitInt, Token, Visibility, bracketed, parenthesized};

/// A dimension as written.
#[derive(Clone)]
pub(crate) enum DimExpr {
    Lit(i64, Span),
    Sym(Ident),
    Neg(Box<DimExpr>, Span),
    Bin(Box<DimExpr>, char, Box<DimExpr>, Span),
}

impl DimExpr {
    pub(crate) fn span(&self) -> Span {
        match self {
            DimExpr::Lit(_, s) | DimExpr::Neg(_, s) | DimExpr::Bin(.., s) => *s,
            DimExpr::Sym(i) => i.span(),
        }
    }

    /// How it reads in source.
    pub(crate) fn text(&self) -> String {
        match self {
            DimExpr::Lit(v, _) => v.to_string(),
            DimExpr::Sym(i) => i.to_string(),
            DimExpr::Neg(d, _) => format!("-{}", d.text()),
            DimExpr::Bin(a, op, b, _) => {
                let side = |d: &DimExpr| match d {
                    DimExpr::Bin(..) => format!("({})", d.text()),
                    _ => d.text(),
                };
                format!("{} {op} {}", side(a), side(b))
            }
        }
    }

    fn atom(input: ParseStream) -> syn::Result<Self> {
        if input.peek(syn::token::Paren) {
            let content;
            parenthesized!(content in input);
            return content.parse();
        }
        if input.peek(Token![-]) && !input.peek(Token![->]) {
            let minus: Token![-] = input.parse()?;
            let inner = Self::atom(input)?;
            let span = minus.span.join(inner.span()).unwrap_or(minus.span);
            return Ok(DimExpr::Neg(Box::new(inner), span));
        }
        if input.peek(LitInt) {
            let lit: LitInt = input.parse()?;
            return Ok(DimExpr::Lit(lit.base10_parse()?, lit.span()));
        }
        if input.peek(Ident) {
            return Ok(DimExpr::Sym(input.parse()?));
        }
        Err(input.error("expected a dimension: an integer literal, a name such as `N`, or arithmetic of them such as `2 * C`"))
    }

    fn product(input: ParseStream) -> syn::Result<Self> {
        let mut left = Self::atom(input)?;
        while input.peek(Token![*]) || (input.peek(Token![/]) && !input.peek(Token![/=])) {
            let op = if input.peek(Token![*]) {
                input.parse::<Token![*]>()?;
                '*'
            } else {
                input.parse::<Token![/]>()?;
                '/'
            };
            let right = Self::atom(input)?;
            let span = left.span().join(right.span()).unwrap_or(left.span());
            left = DimExpr::Bin(Box::new(left), op, Box::new(right), span);
        }
        Ok(left)
    }
}

impl Parse for DimExpr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut left = Self::product(input)?;
        loop {
            let op = if input.peek(Token![+]) {
                input.parse::<Token![+]>()?;
                '+'
            } else if input.peek(Token![-]) && !input.peek(Token![->]) {
                input.parse::<Token![-]>()?;
                '-'
            } else {
                break;
            };
            let right = Self::product(input)?;
            let span = left.span().join(right.span()).unwrap_or(left.span());
            left = DimExpr::Bin(Box::new(left), op, Box::new(right), span);
        }
        Ok(left)
    }
}

/// A written shape `[N, 1, 28, 28]`.
#[derive(Clone)]
pub(crate) struct ShapeExpr {
    pub(crate) dims: Vec<DimExpr>,
    pub(crate) span: Span,
}

impl ShapeExpr {
    pub(crate) fn text(&self) -> String {
        format!(
            "[{}]",
            self.dims
                .iter()
                .map(DimExpr::text)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl Parse for ShapeExpr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let content;
        let bracket = bracketed!(content in input);
        let dims = Punctuated::<DimExpr, Token![,]>::parse_terminated(&content)?;
        Ok(ShapeExpr {
            dims: dims.into_iter().collect(),
            span: bracket.span.join(),
        })
    }
}

/// An argument's value.
#[derive(Clone)]
pub(crate) enum Value {
    Dim(DimExpr),
    Float(f64, Span),
    Str(syn::LitStr),
    Bool(syn::LitBool),
    Shape(ShapeExpr),
}

impl Value {
    pub(crate) fn span(&self) -> Span {
        match self {
            Value::Dim(d) => d.span(),
            Value::Float(_, s) => *s,
            Value::Str(s) => s.span(),
            Value::Bool(b) => b.span,
            Value::Shape(s) => s.span,
        }
    }

    pub(crate) fn text(&self) -> String {
        match self {
            Value::Dim(d) => d.text(),
            Value::Float(v, _) => format!("{v:?}"),
            Value::Str(s) => format!("{:?}", s.value()),
            Value::Bool(b) => b.value.to_string(),
            Value::Shape(s) => s.text(),
        }
    }
}

impl Parse for Value {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(syn::token::Bracket) {
            return Ok(Value::Shape(input.parse()?));
        }
        if input.peek(syn::LitStr) {
            return Ok(Value::Str(input.parse()?));
        }
        if input.peek(syn::LitBool) {
            return Ok(Value::Bool(input.parse()?));
        }
        let negative = input.peek(Token![-]) && input.peek2(syn::LitFloat);
        if negative || input.peek(syn::LitFloat) {
            let minus: Option<Token![-]> = input.parse()?;
            let lit: syn::LitFloat = input.parse()?;
            let v: f64 = lit.base10_parse()?;
            let span = minus
                .and_then(|m| m.span.join(lit.span()))
                .unwrap_or(lit.span());
            return Ok(Value::Float(if negative { -v } else { v }, span));
        }
        Ok(Value::Dim(input.parse()?))
    }
}

/// An argument of a call.
#[derive(Clone)]
pub(crate) enum Arg {
    /// `in -> out`
    Arrow(DimExpr, DimExpr),
    /// `key = value`
    Named(Ident, Value),
    /// `value`
    Positional(Value),
}

impl Arg {
    pub(crate) fn span(&self) -> Span {
        match self {
            Arg::Arrow(a, b) => a.span().join(b.span()).unwrap_or(a.span()),
            Arg::Named(k, v) => k.span().join(v.span()).unwrap_or(k.span()),
            Arg::Positional(v) => v.span(),
        }
    }

    fn text(&self) -> String {
        match self {
            Arg::Arrow(a, b) => format!("{} -> {}", a.text(), b.text()),
            Arg::Named(k, v) => format!("{k} = {}", v.text()),
            Arg::Positional(v) => v.text(),
        }
    }
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(Ident) && input.peek2(Token![=]) && !input.peek2(Token![=>]) {
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            return Ok(Arg::Named(key, input.parse()?));
        }
        let value: Value = input.parse()?;
        if input.peek(Token![->]) {
            let Value::Dim(first) = value else {
                return Err(syn::Error::new(
                    value.span(),
                    "`in -> out` takes dimensions on both sides",
                ));
            };
            input.parse::<Token![->]>()?;
            return Ok(Arg::Arrow(first, input.parse()?));
        }
        Ok(Arg::Positional(value))
    }
}

/// A layer or op as written: `conv1: Conv2d(1 -> 6, kernel = 5)`, `relu`, `Block<64>`.
#[derive(Clone)]
pub(crate) struct Call {
    /// The field name of a layer with parameters.
    pub(crate) name: Option<Ident>,
    pub(crate) kind: Ident,
    pub(crate) generics: Option<syn::AngleBracketedGenericArguments>,
    pub(crate) args: Vec<Arg>,
    pub(crate) args_span: Option<Span>,
    /// `name: [Kind; n]`: `n` copies applied in turn (fields `name.0`, `name.1`, ..).
    pub(crate) repeat: Option<(usize, Span)>,
    /// `name: (A, B, ..)`: a sequence applied in turn, kept as one tuple field.
    pub(crate) items: Vec<Call>,
}

impl Call {
    /// How the call reads in source, for messages: `fc1: Linear(401 -> 120)`.
    pub(crate) fn describe(&self) -> String {
        if !self.items.is_empty() {
            let items: Vec<String> = self.items.iter().map(Call::describe).collect();
            return match &self.name {
                Some(n) => format!("{n}: ({})", items.join(", ")),
                None => format!("({})", items.join(", ")),
            };
        }
        let generics = self.generics.as_ref().map_or(String::new(), |g| {
            quote::ToTokens::to_token_stream(g)
                .to_string()
                .replace("< ", "<")
                .replace(" >", ">")
                .replace(" ,", ",")
        });
        let call = match self.args_span {
            Some(_) => format!(
                "{}{generics}({})",
                self.kind,
                self.args
                    .iter()
                    .map(Arg::text)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("{}{generics}", self.kind),
        };
        match (&self.name, self.repeat) {
            (Some(n), Some((k, _))) => format!("{n}: [{call}; {k}]"),
            (Some(n), None) => format!("{n}: {call}"),
            (None, _) => call,
        }
    }

    /// The call without its field name: `Linear(401 -> 120)`.
    pub(crate) fn describe_kind(&self) -> String {
        let d = self.describe();
        match &self.name {
            Some(_) => d.split_once(": ").map_or(d.clone(), |(_, k)| k.to_string()),
            None => d,
        }
    }

    /// The tokens to point at when the arguments are wrong as a whole.
    pub(crate) fn args_or_kind(&self) -> Span {
        self.args_span.unwrap_or(self.kind.span())
    }

    /// Parses `(name:)? Kind<..>? (args)?`; `in_expression`, the last parenthesised group
    /// is left for the inputs.
    fn parse_with(input: ParseStream, in_expression: bool) -> syn::Result<Self> {
        let first: Ident = input.parse()?;
        if input.peek(Token![:]) && !input.peek(Token![::]) && input.peek2(syn::token::Bracket) {
            // `name: [Kind<..>(args); n]`
            input.parse::<Token![:]>()?;
            let content;
            bracketed!(content in input);
            let mut call = Call::parse_with(&content, false)?;
            content.parse::<Token![;]>()?;
            let count: LitInt = content.parse()?;
            let n: usize = count.base10_parse()?;
            if n == 0 {
                return Err(syn::Error::new(
                    count.span(),
                    "a repetition needs at least one copy",
                ));
            }
            if call.name.is_some() {
                return Err(syn::Error::new(
                    call.kind.span(),
                    "name the repetition, not its element: `blocks: [Block; 3]`",
                ));
            }
            call.name = Some(first);
            call.repeat = Some((n, count.span()));
            return Ok(call);
        }
        if input.peek(Token![:]) && !input.peek(Token![::]) && input.peek2(syn::token::Paren) {
            // `name: (A, B, ..)`
            input.parse::<Token![:]>()?;
            let content;
            let paren = parenthesized!(content in input);
            let items = Punctuated::<Call, Token![,]>::parse_terminated_with(&content, |p| {
                Call::parse_with(p, false)
            })?;
            if items.is_empty() {
                return Err(syn::Error::new(
                    paren.span.join(),
                    "a sequence holds at least one layer",
                ));
            }
            return Ok(Call {
                kind: Ident::new("Sequential", first.span()),
                name: Some(first),
                generics: None,
                args: Vec::new(),
                args_span: Some(paren.span.join()),
                repeat: None,
                items: items.into_iter().collect(),
            });
        }
        let (name, kind) = if input.peek(Token![:]) && !input.peek(Token![::]) {
            input.parse::<Token![:]>()?;
            (Some(first), input.parse::<Ident>()?)
        } else {
            (None, first)
        };
        let generics = if input.peek(Token![<]) {
            Some(input.parse()?)
        } else {
            None
        };
        // In an expression the last group is the inputs: take a group as arguments only
        // when another group follows it.
        let args_follow = input.peek(syn::token::Paren) && {
            if in_expression {
                let fork = input.fork();
                let content;
                let _ = parenthesized!(content in fork);
                let _ = content;
                fork.peek(syn::token::Paren)
            } else {
                true
            }
        };
        let (args, args_span) = if args_follow {
            let content;
            let paren = parenthesized!(content in input);
            let args = Punctuated::<Arg, Token![,]>::parse_terminated(&content)?;
            (args.into_iter().collect(), Some(paren.span.join()))
        } else {
            (Vec::new(), None)
        };
        Ok(Call {
            name,
            kind,
            generics,
            args,
            args_span,
            repeat: None,
            items: Vec::new(),
        })
    }
}

/// One step of the chain form: a call, `let h` or `+ h`, with an optional checked shape.
#[derive(Clone)]
pub(crate) enum Step {
    Call(Call, Option<ShapeExpr>),
    Save(Ident, Option<ShapeExpr>),
    Add(Ident, Option<ShapeExpr>),
}

impl Parse for Step {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let annotation = |input: ParseStream| -> syn::Result<Option<ShapeExpr>> {
            if input.peek(Token![=>]) {
                input.parse::<Token![=>]>()?;
                Ok(Some(input.parse()?))
            } else {
                Ok(None)
            }
        };
        if input.peek(Token![let]) {
            input.parse::<Token![let]>()?;
            let name = input.parse()?;
            return Ok(Step::Save(name, annotation(input)?));
        }
        if input.peek(Token![+]) {
            input.parse::<Token![+]>()?;
            let name = input.parse()?;
            return Ok(Step::Add(name, annotation(input)?));
        }
        let call = Call::parse_with(input, false)?;
        Ok(Step::Call(call, annotation(input)?))
    }
}

/// An expression of the graph form.
#[derive(Clone)]
pub(crate) enum Expr {
    /// A named value.
    Value(Ident),
    /// A call applied to values: `relu(a + b)`, `fc: Linear(4 -> 2)(x)`.
    Apply(Call, Vec<Expr>, Span),
    /// `from -> call`
    Pipe(Box<Expr>, Call),
    /// `a + b`, `a - b`, `a * b`, `a / b` (elementwise, broadcasting; a side may be a scalar).
    Binary(Box<Expr>, char, Box<Expr>, Span),
    /// A number.
    Scalar(f64, Span),
    /// `(a, b)`
    Tuple(Vec<Expr>, Span),
    /// `expr => [shape]`
    Annotated(Box<Expr>, ShapeExpr),
}

impl Expr {
    pub(crate) fn span(&self) -> Span {
        match self {
            Expr::Value(i) => i.span(),
            Expr::Apply(_, _, s) | Expr::Binary(.., s) | Expr::Scalar(_, s) | Expr::Tuple(_, s) => {
                *s
            }
            Expr::Pipe(from, call) => from
                .span()
                .join(call.args_or_kind())
                .unwrap_or(call.kind.span()),
            Expr::Annotated(e, s) => e.span().join(s.span).unwrap_or(s.span),
        }
    }

    /// How the expression reads in source (short), for messages.
    pub(crate) fn text(&self) -> String {
        match self {
            Expr::Value(i) => i.to_string(),
            Expr::Apply(call, inputs, _) => format!(
                "{}({})",
                call.describe(),
                inputs.iter().map(Expr::text).collect::<Vec<_>>().join(", ")
            ),
            Expr::Pipe(from, call) => format!("{} -> {}", from.text(), call.describe()),
            Expr::Binary(a, op, b, _) => format!("{} {op} {}", a.text(), b.text()),
            Expr::Scalar(v, _) => format!("{v}"),
            Expr::Tuple(items, _) => format!(
                "({})",
                items.iter().map(Expr::text).collect::<Vec<_>>().join(", ")
            ),
            Expr::Annotated(e, s) => format!("{} => {}", e.text(), s.text()),
        }
    }

    fn primary(input: ParseStream) -> syn::Result<Expr> {
        if input.peek(syn::token::Paren) {
            let content;
            let paren = parenthesized!(content in input);
            let items = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
            let span = paren.span.join();
            let trailing = items.trailing_punct();
            let mut items: Vec<Expr> = items.into_iter().collect();
            return Ok(if items.len() == 1 && !trailing {
                items.pop().expect("one")
            } else {
                Expr::Tuple(items, span)
            });
        }
        if input.peek(syn::LitFloat) || input.peek(LitInt) {
            let lit: syn::Lit = input.parse()?;
            let v = match &lit {
                syn::Lit::Float(f) => f.base10_parse()?,
                syn::Lit::Int(i) => i.base10_parse::<i64>()? as f64,
                _ => unreachable!("peeked a number"),
            };
            return Ok(Expr::Scalar(v, lit.span()));
        }
        if !input.peek(Ident) {
            return Err(input.error(
                "expected a value: a name, a layer applied to values such as `relu(x)`, a number, or `( .. )`",
            ));
        }
        // A bare name not followed by `(`, `:`, `<` is a value.
        let is_call = input.peek2(syn::token::Paren)
            || (input.peek2(Token![:]) && !input.peek2(Token![::]))
            || input.peek2(Token![<]);
        if !is_call {
            return Ok(Expr::Value(input.parse()?));
        }
        let call = Call::parse_with(input, true)?;
        // `fc: Linear(8 -> 4)` with nothing after it: the group holds arguments, not values.
        if input.peek(syn::token::Paren) && call.args_span.is_none() {
            let fork = input.fork();
            let content;
            parenthesized!(content in fork);
            let as_values =
                Punctuated::<Expr, Token![,]>::parse_terminated(&content.fork()).is_ok();
            if !as_values && Punctuated::<Arg, Token![,]>::parse_terminated(&content).is_ok() {
                return Err(syn::Error::new(
                    call.kind.span(),
                    format!(
                        "`{}(..)` is not applied to anything: write the values it takes after its arguments, as `{}(..)(x)`, or pipe into it, as `x -> {}(..)`",
                        call.describe(),
                        call.describe(),
                        call.describe()
                    ),
                ));
            }
        }
        if !input.peek(syn::token::Paren) {
            return Err(syn::Error::new(
                call.kind.span(),
                format!(
                    "`{}` is not applied to anything: write the values it takes after it, as `{}(x)`, or pipe into it, as `x -> {}`",
                    call.describe(),
                    call.describe(),
                    call.describe()
                ),
            ));
        }
        let content;
        let paren = parenthesized!(content in input);
        let inputs = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
        let span = call
            .name
            .as_ref()
            .map_or(call.kind.span(), Ident::span)
            .join(paren.span.close())
            .unwrap_or(call.kind.span());
        Ok(Expr::Apply(call, inputs.into_iter().collect(), span))
    }

    fn binary(input: ParseStream, level: u8) -> syn::Result<Expr> {
        let next = |input: ParseStream| {
            if level == 0 {
                Self::binary(input, 1)
            } else {
                Self::primary(input)
            }
        };
        let mut left = next(input)?;
        loop {
            let op = if level == 0 && input.peek(Token![+]) {
                input.parse::<Token![+]>()?;
                '+'
            } else if level == 0 && input.peek(Token![-]) && !input.peek(Token![->]) {
                input.parse::<Token![-]>()?;
                '-'
            } else if level == 1 && input.peek(Token![*]) {
                input.parse::<Token![*]>()?;
                '*'
            } else if level == 1 && input.peek(Token![/]) {
                input.parse::<Token![/]>()?;
                '/'
            } else {
                break;
            };
            let right = next(input)?;
            let span = left.span().join(right.span()).unwrap_or(right.span());
            left = Expr::Binary(Box::new(left), op, Box::new(right), span);
        }
        Ok(left)
    }
}

impl Parse for Expr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut expr = Self::binary(input, 0)?;
        loop {
            if input.peek(Token![=>]) {
                input.parse::<Token![=>]>()?;
                expr = Expr::Annotated(Box::new(expr), input.parse()?);
            } else if input.peek(Token![->]) {
                input.parse::<Token![->]>()?;
                expr = Expr::Pipe(Box::new(expr), Call::parse_with(input, false)?);
            } else {
                return Ok(expr);
            }
        }
    }
}

/// The left side of a `let`.
#[derive(Clone)]
pub(crate) enum Pattern {
    Name(Ident),
    Ignore,
    Tuple(Vec<Pattern>, Span),
}

impl Parse for Pattern {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(Token![_]) {
            input.parse::<Token![_]>()?;
            return Ok(Pattern::Ignore);
        }
        if input.peek(syn::token::Paren) {
            let content;
            let paren = parenthesized!(content in input);
            let items = Punctuated::<Pattern, Token![,]>::parse_terminated(&content)?;
            return Ok(Pattern::Tuple(
                items.into_iter().collect(),
                paren.span.join(),
            ));
        }
        Ok(Pattern::Name(input.parse()?))
    }
}

/// `let pattern = expr;`
#[derive(Clone)]
pub(crate) struct Stmt {
    pub(crate) pattern: Pattern,
    pub(crate) expr: Expr,
}

/// A network's body.
pub(crate) enum Body {
    /// The short form: steps applied in turn to the first input.
    Chain(Vec<Step>),
    /// Statements and the output expression.
    Graph(Vec<Stmt>, Box<Expr>),
}

/// The element type of a declared input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DKind {
    Float,
    Int,
    Bool,
}

impl DKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            DKind::Float => "float",
            DKind::Int => "integer",
            DKind::Bool => "bool",
        }
    }
}

/// A declared input `x: [N, 784]` or `ids: [N, T]: i64`.
#[derive(Clone)]
pub(crate) struct Input {
    pub(crate) name: Ident,
    pub(crate) shape: ShapeExpr,
    /// The declared dtype (`f32` when not written) and its token.
    pub(crate) dtype: (Ident, DKind),
}

/// A whole `network!` invocation.
pub(crate) struct Network {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) name: Ident,
    pub(crate) generics: Generics,
    pub(crate) inputs: Vec<Input>,
    pub(crate) outputs: Vec<ShapeExpr>,
    /// Whether the outputs were written as a tuple.
    pub(crate) tuple_output: bool,
    pub(crate) body: Body,
}

/// Whether a body is the graph form: a `;`, or a `->` outside any group, at its top level.
fn is_graph(body: ParseStream) -> bool {
    let fork = body.fork();
    let mut previous_minus = false;
    while !fork.is_empty() {
        let Ok(tt) = fork.parse::<proc_macro2::TokenTree>() else {
            return false;
        };
        if let proc_macro2::TokenTree::Punct(p) = &tt {
            if p.as_char() == ';' || (previous_minus && p.as_char() == '>') {
                return true;
            }
            previous_minus = p.as_char() == '-' && p.spacing() == proc_macro2::Spacing::Joint;
        } else {
            previous_minus = false;
        }
    }
    false
}

impl Parse for Network {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![struct]>()?;
        let name: Ident = input.parse()?;
        let generics: Generics = input.parse()?;
        let content;
        parenthesized!(content in input);
        let inputs = Punctuated::<Input, Token![,]>::parse_terminated_with(&content, |p| {
            let name: Ident = p.parse()?;
            p.parse::<Token![:]>()?;
            let shape = p.parse()?;
            let dtype = if p.peek(Token![:]) {
                p.parse::<Token![:]>()?;
                let t: Ident = p.parse()?;
                let kind = match t.to_string().as_str() {
                    "f16" | "bf16" | "f32" | "f64" => DKind::Float,
                    "i64" | "u8" => DKind::Int,
                    "bool" => DKind::Bool,
                    other => {
                        return Err(syn::Error::new(
                            t.span(),
                            format!(
                                "unknown dtype `{other}`: expected f16, bf16, f32, f64, i64, u8 or bool"
                            ),
                        ));
                    }
                };
                (t, kind)
            } else {
                (Ident::new("f32", name.span()), DKind::Float)
            };
            Ok(Input { name, shape, dtype })
        })?;
        if inputs.is_empty() {
            return Err(syn::Error::new(
                name.span(),
                "a network declares at least one input, as `(x: [N, 784])`",
            ));
        }
        input.parse::<Token![->]>()?;
        let (outputs, tuple_output) = if input.peek(syn::token::Paren) {
            let content;
            parenthesized!(content in input);
            let shapes = Punctuated::<ShapeExpr, Token![,]>::parse_terminated(&content)?;
            (shapes.into_iter().collect(), true)
        } else {
            (vec![input.parse::<ShapeExpr>()?], false)
        };
        let body_tokens;
        syn::braced!(body_tokens in input);
        let body = if is_graph(&body_tokens) {
            let mut stmts = Vec::new();
            loop {
                if body_tokens.peek(Token![let]) {
                    body_tokens.parse::<Token![let]>()?;
                    let pattern = body_tokens.parse()?;
                    body_tokens.parse::<Token![=]>()?;
                    let expr = body_tokens.parse()?;
                    body_tokens.parse::<Token![;]>()?;
                    stmts.push(Stmt { pattern, expr });
                    continue;
                }
                if body_tokens.is_empty() {
                    return Err(syn::Error::new(
                        body_tokens.span(),
                        "the network body ends without its output: finish it with the expression to return, without a `;`",
                    ));
                }
                let output: Expr = body_tokens.parse()?;
                if !body_tokens.is_empty() {
                    return Err(body_tokens.error(
                        "expected the end of the body: only the last expression (the output) goes without `let`",
                    ));
                }
                break Body::Graph(stmts, Box::new(output));
            }
        } else {
            let steps = Punctuated::<Step, Token![,]>::parse_terminated(&body_tokens)?;
            Body::Chain(steps.into_iter().collect())
        };
        Ok(Network {
            attrs,
            vis,
            name,
            generics,
            inputs: inputs.into_iter().collect(),
            outputs,
            tuple_output,
            body,
        })
    }
}

/// Every network of one `network!` invocation: they may use each other as layers, with
/// their shapes (and const parameters) checked without annotations.
pub(crate) struct Networks(pub(crate) Vec<Network>);

impl Parse for Networks {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut nets = vec![input.parse::<Network>()?];
        while !input.is_empty() {
            nets.push(input.parse()?);
        }
        Ok(Networks(nets))
    }
}
