//! The graph form's expressions, `let` patterns and statements.

use super::terms::{Arg, Call, ShapeExpr};
use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitInt, Token, parenthesized};

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
        // A field named by a keyword (`self: BertSelfAttention(..)(x, mask)`).
        let keyword_field =
            input.peek(Ident::peek_any) && input.peek2(Token![:]) && !input.peek2(Token![::]);
        if !input.peek(Ident) && !keyword_field {
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
