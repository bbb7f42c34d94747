//! Chat templates rendered with minijinja in a sandbox: templates come from model files, which
//! come from strangers, so the engine has no loader (no `include` of files), no functions that
//! reach the host, and a fuel limit that stops runaway loops.

use minijinja::{Environment, Error, ErrorKind, context};
use serde::Serialize;

use crate::error::{FormatError, Result};

/// Fuel for one rendering: far above any real template, far below a hang.
const FUEL: u64 = 1_000_000;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
