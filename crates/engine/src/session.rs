//! A loaded target (model, tokenizer, chat template) that turns resolved settings
//! ([`crate::Resolved`]) into decoders: everything a front end does between "the user chose
//! these settings" and "step the loop" happens here once, so the native binary and the browser
//! cannot drift apart.

use std::sync::Arc;

use mars_formats::{ChatTemplate, Gguf, Message, Tokenizer};
use mars_model::{Device, Llama, LoadOptions};
use serde::Serialize;

use crate::decoder::{Decoder, Prefill};
use crate::drafter::{AnyDrafter, ModelDrafter, NgramDrafter, check_same_tokenizer};
use crate::error::{EngineError, Result};
use crate::settings::{DrafterSpec, Method, Resolved, RunSettings};

/// Model facts a front end shows and checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    /// `general.name`, else the architecture.
    pub name: String,
    /// Layers.
    pub n_layers: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length.
    pub context_length: usize,
    /// Whether the file has a chat template.
    pub chat_template: bool,
}

/// A loaded target: model, tokenizer and chat template from one GGUF file, on one device.
#[derive(Debug)]
pub struct Target {
    model: Llama,
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    info: ModelInfo,
}

/// Tokenizer and chat template of a parsed GGUF.
fn tokenizer_of(g: &Gguf<'_>) -> Result<(Tokenizer, Option<ChatTemplate>)> {
    let tokenizer = Tokenizer::from_gguf(g)?;
    let template = match g.get_str("tokenizer.chat_template") {
        Ok(source) => {
            let name = |id: Option<u32>| id.and_then(|i| tokenizer.token(i)).unwrap_or_default();
            Some(ChatTemplate::new(
                source,
                &name(tokenizer.bos),
                &name(tokenizer.eos),
            )?)
        }
        Err(_) => None,
    };
    Ok((tokenizer, template))
}

/// A model's facts for the page and the reports; refuses a tokenizer larger than the model's
/// vocabulary.
fn model_info(
    g: &Gguf<'_>,
    c: &mars_model::LlamaConfig,
    tokenizer: &Tokenizer,
    chat_template: bool,
) -> Result<ModelInfo> {
    if tokenizer.vocab_size() > c.vocab_size {
        return Err(EngineError::VocabMismatch {
            tokenizer: tokenizer.vocab_size(),
            model: c.vocab_size,
        });
    }
    Ok(ModelInfo {
        name: g
            .get_str("general.name")
            .unwrap_or(c.architecture.as_str())
            .to_string(),
        n_layers: c.n_layers,
        vocab: c.vocab_size,
        context_length: c.context_length,
        chat_template,
    })
}

impl Target {
    /// Loads a target from a parsed GGUF onto `device`, checking `options`' limits first.
    ///
    /// # Errors
    /// A malformed or unsupported file, a tokenizer larger than the model's vocabulary, or a
    /// model too large for the device.
    pub fn from_gguf(g: &Gguf<'_>, device: &Device, options: LoadOptions) -> Result<Self> {
        let (tokenizer, template) = tokenizer_of(g)?;
        let model = Llama::from_gguf(g, device, options)?;
        let info = model_info(g, model.config(), &tokenizer, template.is_some())?;
        Ok(Self {
            model,
            tokenizer: Arc::new(tokenizer),
            template,
            info,
        })
    }

    /// Everything [`Target::from_gguf`] checks before reading tensor data (tokenizer, chat
    /// template, configuration, tensor table, the device's limits), from a header alone
    /// ([`Gguf::parse_header`]): a download can be refused before it finishes.
    ///
    /// # Errors
    /// As [`Target::from_gguf`], short of errors in the tensor data itself.
    pub fn check_gguf(g: &Gguf<'_>, options: LoadOptions) -> Result<ModelInfo> {
        let (tokenizer, template) = tokenizer_of(g)?;
        let config = Llama::check_gguf(g, options)?;
        model_info(g, &config, &tokenizer, template.is_some())
    }

    /// Loads a separate draft model for this target from a parsed GGUF: its tokenizer must be
    /// the target's (the first differing id is named).
    ///
    /// # Errors
    /// As [`Target::from_gguf`], and [`EngineError::TokenizerMismatch`].
    pub fn draft_model(
        &self,
        g: &Gguf<'_>,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Llama> {
        let (tokenizer, _) = tokenizer_of(g)?;
        check_same_tokenizer(&self.tokenizer, &tokenizer)?;
        Ok(Llama::from_gguf(g, device, options)?)
    }

    /// What [`Target::draft_model`] checks before reading tensor data, from a header alone.
    ///
    /// # Errors
    /// As [`Target::draft_model`], short of errors in the tensor data itself.
    pub fn check_draft(&self, g: &Gguf<'_>, options: LoadOptions) -> Result<()> {
        let (tokenizer, _) = tokenizer_of(g)?;
        check_same_tokenizer(&self.tokenizer, &tokenizer)?;
        Llama::check_gguf(g, options)?;
        Ok(())
    }

    /// The same target around `model` (the same weights in other forms: `crate::tune`).
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub(crate) fn with_model(self, model: Llama) -> Self {
        Self { model, ..self }
    }

    /// The model.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// The model's facts.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The prompt's token ids as `settings` say: raw text (a BOS only if the model asks for
    /// one), or with `chat` a user turn, after `system` where set, rendered by the model's chat
    /// template.
    ///
    /// # Errors
    /// As [`Target::conversation_ids`], or [`EngineError::EmptyPrompt`] when the raw text
    /// tokenizes to nothing.
    pub fn prompt_ids(&self, prompt: &str, settings: &RunSettings) -> Result<Vec<u32>> {
        if settings.chat {
            return self.conversation_ids(&settings.messages(&[], prompt));
        }
        let ids = self.tokenizer.encode(prompt, true)?;
        if ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        Ok(ids)
    }

    /// A conversation's token ids ([`mars_formats::conversation`] reads one), rendered by the
    /// model's chat template (which writes any BOS itself) up to the assistant's next turn.
    ///
    /// # Errors
    /// A conversation [`mars_formats::check_conversation`] refuses,
    /// [`EngineError::NoChatTemplate`], a template or tokenizer failure, or
    /// [`EngineError::EmptyPrompt`] when it tokenizes to nothing.
    pub fn conversation_ids(&self, messages: &[Message]) -> Result<Vec<u32>> {
        mars_formats::check_conversation(messages)?;
        let template = self.template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        let text = template.render(messages, true)?;
        let ids = self.tokenizer.encode(&text, false)?;
        if ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        Ok(ids)
    }

    /// The cache a run needs: the prompt plus `max_tokens`, at most the context length.
    pub fn capacity(&self, prompt_len: usize, max_tokens: usize) -> usize {
        prompt_len
            .saturating_add(max_tokens)
            .min(self.info.context_length)
    }

    /// A fresh drafter for one run (its cache starts empty). `draft_model` is the loaded model a
    /// [`DrafterSpec::Model`] names: front ends load files their own way (a path with a
    /// progress bar, bytes in the browser) and pass the result.
    ///
    /// # Errors
    /// A layer spec the model cannot run, [`EngineError::DraftModelNotLoaded`], or a drafter
    /// that cannot be built for `capacity`.
    pub fn drafter(
        &self,
        settings: &RunSettings,
        draft_model: Option<&Llama>,
        capacity: usize,
    ) -> Result<AnyDrafter> {
        let (spec, vocab) = (&settings.drafter, self.info.vocab);
        let model = match spec {
            DrafterSpec::Ngram => {
                return Ok(AnyDrafter::Ngram(
                    NgramDrafter::default().with_tree(settings.shape.tree),
                ));
            }
            DrafterSpec::Layers(layers) => self
                .model
                .with_layers(&layers.layers(self.info.n_layers)?)?,
            DrafterSpec::Model(source) => draft_model
                .ok_or_else(|| EngineError::DraftModelNotLoaded {
                    name: source.clone(),
                })?
                .clone(),
        };
        let model = match settings.shape.draft_vocab {
            Some(ids) => model.with_vocab_limit(ids)?,
            None => model,
        };
        Ok(AnyDrafter::Model(Box::new(
            ModelDrafter::new(
                model,
                capacity,
                settings.sampling,
                vocab,
                settings.drafter_label(),
            )?
            .with_tree(settings.shape.tree, settings.shape.branch)?
            .with_min_p(settings.shape.tree_min_p)?,
        )))
    }

    /// A decoder for `method` that starts from `prefill` (front ends go through
    /// [`crate::Race::decoder`], which clones one prefill per method).
    ///
    /// # Errors
    /// As [`Target::drafter`] and [`Decoder::from_prefill`].
    pub(crate) async fn decoder(
        &self,
        settings: &Resolved,
        method: Method,
        prefill: Prefill,
        draft_model: Option<&Llama>,
    ) -> Result<Decoder<AnyDrafter>> {
        let capacity = prefill.capacity();
        let drafter = match method {
            Method::Target => None,
            Method::Strict | Method::Mars => Some(self.drafter(settings, draft_model, capacity)?),
        };
        Decoder::from_prefill(
            &self.model,
            self.tokenizer.clone(),
            drafter,
            &settings.decode_config(method, capacity),
            prefill,
        )
        .await
    }
}
