//! Text around the engine's tokens: the chat template, message contents, and streaming
//! detokenization with stop strings.

use super::LlmState;
use std::path::Path;
use std::sync::Arc;

/// A folder's chat template (Jinja, as `transformers`' `apply_chat_template` renders it).
pub(crate) struct ChatTemplate {
    env: minijinja::Environment<'static>,
    pub(crate) bos_token: Option<String>,
    pub(crate) eos_token: Option<String>,
}

/// A special token as `tokenizer_config.json` writes it: a string or `{"content": ...}`.
fn token_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl ChatTemplate {
    /// The template of `dir`: `tokenizer_config.json`'s `chat_template` (a string, or a
    /// list of named ones: `default` is taken), else `chat_template.jinja`; `None` when
    /// the folder has none. A template that does not compile is an error.
    pub(crate) fn from_folder(
        dir: &Path,
        tok_cfg: &serde_json::Value,
    ) -> Result<Option<ChatTemplate>, String> {
        let source = match tok_cfg.get("chat_template") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template").and_then(|s| s.as_str()))
                .map(str::to_string),
            _ => None,
        };
        let source = match source {
            Some(s) => s,
            None => match std::fs::read_to_string(dir.join("chat_template.jinja")) {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(format!("chat_template.jinja: {e}")),
            },
        };
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    message,
                ))
            },
        );
        env.add_template_owned("chat", source)
            .map_err(|e| format!("the chat template does not compile: {e}"))?;
        Ok(Some(ChatTemplate {
            env,
            bos_token: token_text(tok_cfg.get("bos_token")),
            eos_token: token_text(tok_cfg.get("eos_token")),
        }))
    }

    /// The prompt for `messages` (role, content), ending with the assistant's turn
    /// (`add_generation_prompt=True`).
    pub(crate) fn render(&self, messages: &[(String, String)]) -> Result<String, String> {
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|(role, content)| minijinja::context! { role => role, content => content })
            .collect();
        let template = self.env.get_template("chat").map_err(|e| e.to_string())?;
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => self.bos_token.clone().unwrap_or_default(),
                eos_token => self.eos_token.clone().unwrap_or_default(),
            })
            .map_err(|e| format!("rendering the chat template: {e}"))
    }
}

/// A message's `content`: a string, or OpenAI's list of parts (the `text` ones joined).
pub(crate) fn content_text(v: &serde_json::Value) -> Result<String, String> {
    match v {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Null => Ok(String::new()),
        serde_json::Value::Array(parts) => parts
            .iter()
            .map(
                |p| match (p.get("type").and_then(|t| t.as_str()), p.get("text")) {
                    (Some("text"), Some(serde_json::Value::String(t))) => Ok(t.clone()),
                    _ => Err(format!("only text content parts are supported, got {p}")),
                },
            )
            .collect(),
        other => Err(format!(
            "a message's content must be a string or parts, got {other}"
        )),
    }
}

/// Turns a sequence's tokens into text deltas: the whole answer decoded again after each
/// token (so merges and multi-byte characters come out right), what is new given out,
/// holding back an unfinished UTF-8 character and any tail that may begin a stop string.
pub(crate) struct Detokenizer {
    state: Arc<LlmState>,
    ids: Vec<u32>,
    emitted: usize,
    stop: Vec<String>,
}

impl Detokenizer {
    pub(crate) fn new(state: Arc<LlmState>, stop: Vec<String>) -> Detokenizer {
        Detokenizer {
            state,
            ids: Vec::new(),
            emitted: 0,
            stop,
        }
    }

    fn text(&self) -> String {
        self.state
            .tokenizer
            .decode(&self.ids, true)
            .unwrap_or_default()
    }

    fn take(&mut self, text: &str, end: usize) -> String {
        if end <= self.emitted
            || !text.is_char_boundary(self.emitted)
            || !text.is_char_boundary(end)
        {
            return String::new();
        }
        let out = text[self.emitted..end].to_string();
        self.emitted = end;
        out
    }

    /// Adds a token: the new text, and whether a stop string has now appeared (the text
    /// then ends just before it).
    pub(crate) fn push(&mut self, token: u32) -> (String, bool) {
        self.ids.push(token);
        let text = self.text();
        if let Some(at) = self.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            let out = self.take(&text, at);
            return (out, true);
        }
        if text.ends_with('\u{FFFD}') {
            return (String::new(), false);
        }
        // The longest tail of the text that a stop string starts with is held back.
        let hold = self
            .stop
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .filter(|&n| s.is_char_boundary(n) && text.ends_with(&s[..n]))
                    .max()
            })
            .max()
            .unwrap_or(0);
        let end = text.len() - hold;
        (self.take(&text, end), false)
    }

    /// What is left to give out when the sequence ends.
    pub(crate) fn flush(&mut self) -> String {
        let text = self.text();
        let end = text.len();
        self.take(&text, end)
    }
}
