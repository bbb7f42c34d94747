//! Chat templates rendered with minijinja in a sandbox: templates come from model files, which
//! come from strangers, so the engine has no loader (no `include` of files), no functions that
//! reach the host, and a fuel limit that stops runaway loops.

use minijinja::{Environment, Error, ErrorKind, context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{FormatError, Result};

/// Fuel for one rendering: far above any real template, far below a hang.
const FUEL: u64 = 1_000_000;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// The roles a conversation may hold.
pub const ROLES: [&str; 3] = ["system", "user", "assistant"];

fn conversation_err(field: impl Into<String>, problem: impl Into<String>) -> FormatError {
    FormatError::Conversation {
        field: field.into(),
        problem: problem.into(),
    }
}

/// A message's text: a string, or OpenAI's list of content parts of which only `text` parts
/// are taken (joined with newlines).
fn content_text(value: &Value, field: &str) -> Result<String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let here = format!("{field}[{i}]");
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(text))) => texts.push(text.as_str()),
                    (Some("text"), _) => {
                        return Err(conversation_err(
                            format!("{here}.text"),
                            "expected a string",
                        ));
                    }
                    (kind, _) => {
                        return Err(conversation_err(
                            format!("{here}.type"),
                            format!("only text parts are supported, got {kind:?}"),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        other => Err(conversation_err(
            field,
            format!("expected a string or a list of text parts, got {other}"),
        )),
    }
}

/// A conversation in OpenAI's message shape, from JSON: a list of `{"role", "content"}`
/// objects, or an object whose `messages` field is one (a chat-completion request body).
/// Roles are `system` (first message only), `user` and `assistant`; the last message is the
/// user's, the turn the model answers. Other fields of a message (`name`, ...) are ignored.
///
/// # Errors
/// [`FormatError::Conversation`] naming the field at fault.
pub fn conversation(json: &str) -> Result<Vec<Message>> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| conversation_err("messages", format!("not JSON: {e}")))?;
    let list = match &value {
        Value::Array(list) => list,
        Value::Object(object) => match object.get("messages") {
            Some(Value::Array(list)) => list,
            _ => return Err(conversation_err("messages", "expected a list of messages")),
        },
        _ => {
            return Err(conversation_err(
                "messages",
                "expected a list of messages or an object with one",
            ));
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, message) in list.iter().enumerate() {
        let field = format!("messages[{i}]");
        let role = match message.get("role") {
            Some(Value::String(role)) => role.as_str(),
            Some(other) => {
                return Err(conversation_err(
                    format!("{field}.role"),
                    format!("expected one of {ROLES:?}, got {other}"),
                ));
            }
            None => return Err(conversation_err(format!("{field}.role"), "missing")),
        };
        let content = message
            .get("content")
            .ok_or_else(|| conversation_err(format!("{field}.content"), "missing"))?;
        out.push(Message::new(
            role,
            content_text(content, &format!("{field}.content"))?,
        ));
    }
    check_conversation(&out)?;
    Ok(out)
}

/// The rules a conversation keeps, however it was made (a file, the page's kept turns): known
/// roles, a system message only first, the user's turn last.
///
/// # Errors
/// [`FormatError::Conversation`] naming the message at fault.
pub fn check_conversation(messages: &[Message]) -> Result<()> {
    for (i, m) in messages.iter().enumerate() {
        if !ROLES.contains(&m.role.as_str()) {
            return Err(conversation_err(
                format!("messages[{i}].role"),
                format!("expected one of {ROLES:?}, got {:?}", m.role),
            ));
        }
        if m.role == "system" && i > 0 {
            return Err(conversation_err(
                format!("messages[{i}].role"),
                "a system message may only come first",
            ));
        }
    }
    match messages.last() {
        None => Err(conversation_err("messages", "empty")),
        Some(last) if last.role != "user" => Err(conversation_err(
            format!("messages[{}].role", messages.len() - 1),
            format!("the last message must be the user's, got {:?}", last.role),
        )),
        Some(_) => Ok(()),
    }
}

/// A parsed chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn template_err(e: Error) -> FormatError {
    FormatError::Template(format!("{e:#}"))
}

impl ChatTemplate {
    /// Parses `source` (a model's `tokenizer.chat_template`).
    ///
    /// # Errors
    /// [`FormatError::Template`] with the parser's message for invalid Jinja.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_fuel(Some(FUEL));
        // HF templates call Python string methods (.strip(), .startswith()).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(template_err)?;
        Ok(Self {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// Renders `messages`, ending with the assistant's turn opener when `add_generation_prompt`.
    ///
    /// # Errors
    /// [`FormatError::Template`] when rendering fails (an error the template raises, or fuel
    /// running out).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let template = self.env.get_template("chat").map_err(template_err)?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos,
                eos_token => self.eos,
            })
            .map_err(template_err)
    }
}
