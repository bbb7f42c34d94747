//! One prompt, several methods: the prompt tokenized and run through the target once, then each
//! method's decoder started from a clone of that prefill. `mars generate`, `compare`, `bench`,
//! `eval` and the page's worker all go through here, so "prompt → prefill → one decoder per
//! method" and the stop-token filtering of what a user sees exist once.

use mars_formats::Message;
use mars_model::Llama;
use serde::Serialize;

use crate::decoder::{Decoder, Prefill, RunSummary, StepRecord};
use crate::drafter::AnyDrafter;
use crate::error::{EngineError, Result};
use crate::session::Target;
use crate::settings::{Method, Resolved};

/// A prompt after its prefill, from which every method starts.
#[derive(Debug)]
pub struct Race<'t> {
    target: &'t Target,
    draft_model: Option<&'t Llama>,
    ids: Vec<u32>,
    prefill: Prefill,
}

/// One method's finished run: its ids, the text a user sees, and its totals.
#[derive(Debug, Clone, Serialize)]
pub struct MethodOutput {
    /// Every generated id, stop tokens included.
    pub ids: Vec<u32>,
    /// The generated text without stop tokens.
    pub text: String,
    /// The run's totals.
    #[serde(flatten)]
    pub summary: RunSummary,
}

impl Target {
    /// Tokenizes `prompt` as `settings` say (chat template or raw) and runs it through the
    /// target once, for a cache of the prompt plus `settings.max_tokens`. `draft_model` is the
    /// loaded model a [`crate::DrafterSpec::Model`] names (front ends load files their own way).
    ///
    /// # Errors
    /// As [`Target::prompt_ids`] and [`Prefill::new`].
    pub async fn race<'t>(
        &'t self,
        prompt: &str,
        settings: &Resolved,
        draft_model: Option<&'t Llama>,
    ) -> Result<Race<'t>> {
        let ids = self.prompt_ids(prompt, settings)?;
        self.race_ids(ids, settings.max_tokens, draft_model).await
    }

    /// As [`Target::race`] after earlier turns of a conversation (`history`, user and
    /// assistant messages, oldest first; [`crate::RunSettings::messages`]); an empty history is
    /// [`Target::race`] itself.
    ///
    /// # Errors
    /// As [`Target::race`]; a history without chat is refused by name, and one the rules of
    /// [`mars_formats::check_conversation`] refuse.
    pub async fn race_after<'t>(
        &'t self,
        history: &[Message],
        prompt: &str,
        settings: &Resolved,
        draft_model: Option<&'t Llama>,
    ) -> Result<Race<'t>> {
        if history.is_empty() {
            return self.race(prompt, settings, draft_model).await;
        }
        if !settings.chat {
            return Err(EngineError::Config {
                field: "history",
                value: format!("{} messages", history.len()),
                why: "earlier turns are rendered by the chat template: needs chat",
            });
        }
        let messages = settings.messages(history, prompt);
        self.race_conversation(&messages, settings, draft_model)
            .await
    }

    /// As [`Target::race`] from a conversation ([`Target::conversation_ids`]).
    ///
    /// # Errors
    /// As [`Target::conversation_ids`] and [`Prefill::new`].
    pub async fn race_conversation<'t>(
        &'t self,
        messages: &[Message],
        settings: &Resolved,
        draft_model: Option<&'t Llama>,
    ) -> Result<Race<'t>> {
        let ids = self.conversation_ids(messages)?;
        self.race_ids(ids, settings.max_tokens, draft_model).await
    }

    /// As [`Target::race`] from token ids (a benchmark's fixed prompt), for `max_tokens`.
    ///
    /// # Errors
    /// As [`Prefill::new`].
    pub async fn race_ids<'t>(
        &'t self,
        ids: Vec<u32>,
        max_tokens: usize,
        draft_model: Option<&'t Llama>,
    ) -> Result<Race<'t>> {
        let capacity = self.capacity(ids.len(), max_tokens);
        let prefill = Prefill::new(self.model(), &ids, capacity).await?;
        Ok(Race {
            target: self,
            draft_model,
            ids,
            prefill,
        })
    }

    /// The text a user sees of generated `ids`: stop tokens (end of turn, end of text) left out.
    ///
    /// # Errors
    /// An id outside the tokenizer's vocabulary.
    pub fn visible_text(&self, ids: &[u32]) -> Result<String> {
        let stop = &self.tokenizer().stop_ids;
        let visible: Vec<u32> = ids.iter().copied().filter(|t| !stop.contains(t)).collect();
        Ok(self.tokenizer().decode(&visible)?)
    }
}

impl Race<'_> {
    /// The prompt's ids.
    pub fn prompt_ids(&self) -> &[u32] {
        &self.ids
    }

    /// Milliseconds the prefill took.
    pub fn prefill_ms(&self) -> f64 {
        self.prefill.ms()
    }

    /// A decoder for `method` from a clone of the prefill, with a fresh drafter. `settings` may
    /// differ between methods (another MARS mode) but not in `max_tokens` beyond the cache
    /// the prefill made.
    ///
    /// # Errors
    /// As [`Target::decoder`].
    pub async fn decoder(
        &self,
        settings: &Resolved,
        method: Method,
    ) -> Result<Decoder<AnyDrafter>> {
        self.target
            .decoder(settings, method, self.prefill.clone(), self.draft_model)
            .await
    }

    /// Runs `method` to its end, calling `on_step` after each step (for streaming).
    ///
    /// # Errors
    /// As [`Race::decoder`] and [`Decoder::step`].
    pub async fn run(
        &self,
        settings: &Resolved,
        method: Method,
        on_step: impl FnMut(&StepRecord),
    ) -> Result<MethodOutput> {
        let mut dec = self.decoder(settings, method).await?;
        let summary = dec.run(on_step).await?;
        let ids = dec.generated().to_vec();
        Ok(MethodOutput {
            text: self.target.visible_text(&ids)?,
            ids,
            summary,
        })
    }
}
