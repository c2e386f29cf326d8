//! The small pieces: dimensions, shapes, argument values, arguments, calls and the
//! chain form's steps.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitInt, Token, bracketed, parenthesized};

/// A dimension as written.
#[derive(Clone)]
pub(crate) enum DimExpr {
    Lit(i64, Span),
    Sym(Ident),
    Neg(Box<DimExpr>, Span),
    Bin(Box<DimExpr>, char, Box<DimExpr>, Span),
}

impl DimExpr {
    /// The size names it uses, in order.
    pub(crate) fn symbols<'a>(&'a self, out: &mut Vec<&'a Ident>) {
        match self {
            DimExpr::Lit(..) => {}
            DimExpr::Sym(i) => out.push(i),
            DimExpr::Neg(inner, _) => inner.symbols(out),
            DimExpr::Bin(a, _, b, _) => {
                a.symbols(out);
                b.symbols(out);
            }
        }
    }

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

    pub(crate) fn text(&self) -> String {
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
    /// The field's key where it is no Rust field name as written (`self`, `LayerNorm`;
    /// `name` is then `self_`, `layer_norm`).
    pub(crate) key: Option<String>,
    pub(crate) kind: Ident,
    /// The path before a user layer's kind (`self::`, `crate::gpt2::`), as written: such a
    /// kind is never a built-in one, nor a typo of one (`c_fc: self::Conv1D(..)`, a type
    /// of the user's beside the built-in `Conv1d`).
    pub(crate) path: Option<proc_macro2::TokenStream>,
    pub(crate) generics: Option<syn::AngleBracketedGenericArguments>,
    pub(crate) args: Vec<Arg>,
    pub(crate) args_span: Option<Span>,
    /// `name: [Kind; n]`: `n` copies applied in turn (fields `name.0`, `name.1`, ..).
    pub(crate) repeat: Option<(usize, Span)>,
    /// `name: (A, B, ..)`: a sequence applied in turn, kept as one tuple field.
    pub(crate) items: Vec<Call>,
    /// The values written among the arguments (the chain form's `cat(skip, dim = 1)`),
    /// moved out of `args` by the checker and shown in messages as written.
    pub(crate) written_values: Vec<String>,
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
        let path = self
            .path
            .as_ref()
            .map_or(String::new(), |p| p.to_string().replace(' ', ""));
        let call = match self.args_span {
            Some(_) => format!(
                "{path}{}{generics}({})",
                self.kind,
                self.args
                    .iter()
                    .map(Arg::text)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("{path}{}{generics}", self.kind),
        };
        let name = self.field_key();
        match (name, self.repeat) {
            (Some(n), Some((k, _))) => format!("{n}: [{call}; {k}]"),
            (Some(n), None) => format!("{n}: {call}"),
            (None, _) => call,
        }
    }

    /// The field's key as written (`LayerNorm`, `self`), if the call has a field.
    pub(crate) fn field_key(&self) -> Option<String> {
        match (&self.key, &self.name) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(n)) => Some(n.to_string()),
            (None, None) => None,
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

    /// The items of a sequence, `A, B, (C, D), ..` (a parenthesised item is a nested
    /// sequence, `nn.Sequential` inside `nn.Sequential`: keys `name.2.0.…`), as an unnamed
    /// `Sequential` call; `span` covers the parentheses, `kind_span` names it in messages.
    fn sequence_items(content: ParseStream, span: Span, kind_span: Span) -> syn::Result<Self> {
        let items = Punctuated::<Call, Token![,]>::parse_terminated_with(content, |p| {
            if p.peek(syn::token::Paren) {
                let inner;
                let paren = parenthesized!(inner in p);
                Call::sequence_items(&inner, paren.span.join(), paren.span.open())
            } else {
                Call::parse_with(p, false)
            }
        })?;
        if items.is_empty() {
            return Err(syn::Error::new(span, "a sequence holds at least one layer"));
        }
        Ok(Call {
            kind: Ident::new("Sequential", kind_span),
            path: None,
            name: None,
            key: None,
            generics: None,
            args: Vec::new(),
            args_span: Some(span),
            repeat: None,
            items: items.into_iter().collect(),
            written_values: Vec::new(),
        })
    }

    /// Parses `(name:)? Kind<..>? (args)?`; `in_expression`, the last parenthesised group
    /// is left for the inputs.
    pub(crate) fn parse_with(input: ParseStream, in_expression: bool) -> syn::Result<Self> {
        // A field name may be a checkpoint's key that is no Rust field name (BERT's
        // `attention.self`, `LayerNorm`): the field is `self_`, `layer_norm`, its key as
        // written.
        let named = input.peek2(Token![:]) && !input.peek2(Token![::]);
        let first: Ident = if named {
            Ident::parse_any(input)?
        } else {
            input.parse()?
        };
        let (first, key) = if named {
            field_ident(first)
        } else {
            (first, None)
        };
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
            call.key = key;
            call.repeat = Some((n, count.span()));
            return Ok(call);
        }
        if input.peek(Token![:]) && !input.peek(Token![::]) && input.peek2(syn::token::Paren) {
            // `name: (A, B, ..)`
            input.parse::<Token![:]>()?;
            let content;
            let paren = parenthesized!(content in input);
            let mut call = Call::sequence_items(&content, paren.span.join(), first.span())?;
            call.name = Some(first);
            call.key = key;
            return Ok(call);
        }
        let (name, kind, path) = if input.peek(Token![:]) && !input.peek(Token![::]) {
            input.parse::<Token![:]>()?;
            // A user layer's kind may be a path, `self::Conv1D`, `blocks::Basic`.
            let mut kind = Ident::parse_any(input)?;
            let mut path = proc_macro2::TokenStream::new();
            while input.peek(Token![::]) {
                let colons: Token![::] = input.parse()?;
                path.extend(quote::quote!(#kind #colons));
                kind = Ident::parse_any(input)?;
            }
            if path.is_empty() {
                if kind == "self" || kind == "crate" || kind == "super" {
                    return Err(syn::Error::new(
                        kind.span(),
                        format!(
                            "`{kind}` begins a path: write the layer's type after it, as `{kind}::Conv1D(..)`"
                        ),
                    ));
                }
                (Some(first), kind, None)
            } else {
                (Some(first), kind, Some(path))
            }
        } else {
            (None, first, None)
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
                fork.parse::<proc_macro2::TokenTree>().is_ok() && fork.peek(syn::token::Paren)
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
            key: key.clone(),
            kind,
            path,
            generics,
            args,
            args_span,
            repeat: None,
            items: Vec::new(),
            written_values: Vec::new(),
        })
    }
}

/// One step of the chain form: a call, `let h` or `+ h`, with an optional checked shape.
// Steps are parsed once per invocation and held in one `Vec`: boxing the call would
// only add an allocation per step.
#[allow(clippy::large_enum_variant)]
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

/// The Rust field for a field name as written, and the key when they differ: a keyword
/// (`self`) gains a `_`, a name in another case (`LayerNorm`, Hugging Face's key) is
/// written in snake case (`layer_norm`).
fn field_ident(name: Ident) -> (Ident, Option<String>) {
    let text = name.to_string();
    if syn::parse_str::<Ident>(&text).is_err() {
        return (Ident::new(&format!("{text}_"), name.span()), Some(text));
    }
    if !text.chars().any(|c| c.is_ascii_uppercase()) {
        return (name, None);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut snake = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let after_lower = prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit());
            let acronym_end = prev.is_some_and(|p| p.is_ascii_uppercase())
                && chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if (after_lower || acronym_end) && !snake.ends_with('_') {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    if syn::parse_str::<Ident>(&snake).is_err() {
        snake.push('_');
    }
    (Ident::new(&snake, name.span()), Some(text))
}
