//! wasm-bindgen glue for mars in the browser. Nothing here decides anything: the model is
//! `mars-model`, the loop is `mars-engine`, the rules are `mars-verify`; this crate turns bytes
//! and JavaScript values into their inputs, and their records into JavaScript values.
//!
//! Runs inside a Web Worker (the page stays responsive): `Engine.load(bytes)` then
//! `engine.run(request, onStep)` once per method.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::Arc;

mod worker;
pub use worker::{Event, Request, worker_main};

use mars_engine::{
    AnyDrafter, DecodeConfig, Decoder, LayerSpec, ModelDrafter, NgramDrafter, Prefill,
};
use mars_formats::{ChatTemplate, Gguf, Message, Tokenizer};
use mars_model::{Device, Llama, LoadOptions};
use mars_verify::{DEFAULT_THETA, Mode, Sampling, VerifyConfig};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

/// What the page asks for: one method's run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The user's text.
    pub prompt: String,
    /// Wrap it as a chat turn.
    #[serde(default)]
    pub chat: bool,
    /// `"target"`, `"strict"` or `"mars"` (a race runs strict and MARS whatever this says).
    #[serde(default = "default_method")]
    pub method: String,
    /// `"layers:<spec>"` or `"ngram"`.
    #[serde(default = "default_draft")]
    pub draft: String,
    /// Draft length.
    #[serde(default = "default_k")]
    pub k: usize,
    /// MARS paper-mode θ (ignored with `rho`).
    #[serde(default)]
    pub theta: Option<f32>,
    /// MARS margin-mode ρ.
    #[serde(default)]
    pub rho: Option<f32>,
    /// Temperature (0: greedy).
    #[serde(default)]
    pub temperature: f32,
    /// Nucleus mass.
    #[serde(default = "one")]
    pub top_p: f32,
    /// Token budget.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// Seed.
    #[serde(default)]
    pub seed: u64,
}

impl RunRequest {
    /// The sampling settings (no top-k on the page).
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: None,
            top_p: self.top_p,
        }
    }

    /// The verification mode for `method`.
    ///
    /// # Errors
    /// An unknown method, named.
    pub fn mode(&self, method: &str) -> Result<Mode, String> {
        match (method, self.rho) {
            ("target" | "strict", _) => Ok(Mode::Strict),
            ("mars", Some(rho)) => Ok(Mode::Margin { rho }),
            ("mars", None) => Ok(Mode::Paper {
                theta: self.theta.unwrap_or(DEFAULT_THETA),
            }),
            (other, _) => Err(format!(
                "method = {other:?}: expected \"target\", \"strict\" or \"mars\""
            )),
        }
    }
}

fn default_method() -> String {
    "strict".into()
}
fn default_draft() -> String {
    "layers:first:24".into()
}
fn default_k() -> usize {
    4
}
fn one() -> f32 {
    1.0
}
fn default_max_tokens() -> usize {
    64
}

/// Model facts the page shows and checks.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// `general.name` or the architecture.
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

/// A model loaded on the browser's GPU, with its tokenizer.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Engine {
    model: Llama,
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    info: ModelInfo,
}

fn js<E: std::fmt::Display>(e: E) -> JsError {
    JsError::new(&e.to_string())
}

/// Initialises burn's WebGPU runtime once and returns its device and the adapter's largest
/// buffer.
async fn webgpu() -> Result<(Device, u64), (&'static str, String)> {
    thread_local! {
        static DEVICE: std::cell::RefCell<Option<(Device, u64)>> = const { std::cell::RefCell::new(None) };
    }
    if let Some(d) = DEVICE.with(|d| d.borrow().clone()) {
        return Ok(d);
    }
    let (device, setup) = Device::wgpu_options()
        .init_with_setup_async()
        .await
        .map_err(|e| ("no_webgpu", format!("WebGPU is not available: {e}")))?;
    let limits = setup.adapter.limits();
    let max = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    DEVICE.with(|d| *d.borrow_mut() = Some((device.clone(), max)));
    Ok((device, max))
}

#[wasm_bindgen]
impl Engine {
    /// Parses a GGUF file and uploads its weights to WebGPU.
    ///
    /// # Errors
    /// No WebGPU, a malformed or unsupported file (the loader's message), or a model larger
    /// than the adapter's buffer limit (named with both numbers).
    pub async fn load(bytes: Vec<u8>) -> Result<Engine, JsError> {
        console_error_panic_hook::set_once();
        Self::load_bytes(&bytes)
            .await
            .map_err(|(_, message)| JsError::new(&message))
    }

    /// The model's facts as a plain object.
    ///
    /// # Errors
    /// Only if serialization fails.
    pub fn info(&self) -> Result<JsValue, JsError> {
        serde_wasm_bindgen::to_value(&self.info).map_err(js)
    }

    /// Token ids of `text` (raw, no BOS unless the model asks for one).
    ///
    /// # Errors
    /// A tokenizer failure.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, JsError> {
        self.tokenizer.encode(text, true).map_err(js)
    }

    /// Runs one method to the end, calling `on_step(step)` after every step with the engine's
    /// step record (text, token kinds, margins, timings) and returning the run's totals.
    ///
    /// # Errors
    /// A malformed request (the field named), or an engine error.
    pub async fn run(
        &self,
        request: JsValue,
        on_step: &js_sys::Function,
    ) -> Result<JsValue, JsError> {
        let r: RunRequest = serde_wasm_bindgen::from_value(request).map_err(js)?;
        let ids = self.prompt_ids(&r).map_err(|e| JsError::new(&e))?;
        let sampling = r.sampling();
        let mode = r.mode(&r.method).map_err(|e| JsError::new(&e))?;
        let capacity = ids
            .len()
            .saturating_add(r.max_tokens)
            .min(self.info.context_length);
        let drafter = if r.method == "target" {
            None
        } else {
            Some(
                self.drafter(&r.draft, capacity, sampling, None)
                    .map_err(|e| JsError::new(&e))?,
            )
        };
        let config = DecodeConfig {
            k: r.k,
            verify: VerifyConfig { sampling, mode },
            max_tokens: r.max_tokens,
            seed: r.seed,
            capacity: Some(capacity),
        };
        let prefill = Prefill::new(&self.model, &ids, capacity)
            .await
            .map_err(js)?;
        let mut dec = Decoder::from_prefill(
            &self.model,
            self.tokenizer.clone(),
            drafter,
            &config,
            prefill,
        )
        .await
        .map_err(js)?;
        while let Some(step) = dec.step().await.map_err(js)? {
            let value = serde_wasm_bindgen::to_value(&step).map_err(js)?;
            on_step
                .call1(&JsValue::NULL, &value)
                .map_err(|e| JsError::new(&format!("onStep threw: {e:?}")))?;
        }
        serde_wasm_bindgen::to_value(&dec.summary()).map_err(js)
    }
}

impl Engine {
    /// Parses a GGUF file and uploads its weights; errors carry a kind for the page ("model",
    /// "no_webgpu") and the failing layer's message.
    async fn load_bytes(bytes: &[u8]) -> Result<Engine, (&'static str, String)> {
        let model_err = |e: &dyn std::fmt::Display| ("model", e.to_string());
        let g = Gguf::parse(bytes).map_err(|e| model_err(&e))?;
        let tokenizer = Tokenizer::from_gguf(&g).map_err(|e| model_err(&e))?;
        let template = match g.get_str("tokenizer.chat_template") {
            Ok(src) => {
                let name =
                    |id: Option<u32>| id.and_then(|i| tokenizer.token(i)).unwrap_or_default();
                Some(
                    ChatTemplate::new(src, &name(tokenizer.bos), &name(tokenizer.eos))
                        .map_err(|e| model_err(&e))?,
                )
            }
            Err(_) => None,
        };
        let model = upload(&g).await?;
        let c = model.config();
        let info = ModelInfo {
            name: g
                .get_str("general.name")
                .unwrap_or(c.architecture.as_str())
                .to_string(),
            n_layers: c.n_layers,
            vocab: c.vocab_size,
            context_length: c.context_length,
            chat_template: template.is_some(),
        };
        Ok(Engine {
            model,
            tokenizer: Arc::new(tokenizer),
            template,
            info,
        })
    }

    /// A draft model for this engine's target: same tokenizer (the first differing id is
    /// named), weights on the same device.
    async fn load_draft(&self, bytes: &[u8]) -> Result<Llama, (&'static str, String)> {
        let g = Gguf::parse(bytes).map_err(|e| ("model", e.to_string()))?;
        let tokenizer = Tokenizer::from_gguf(&g).map_err(|e| ("model", e.to_string()))?;
        mars_engine::check_same_tokenizer(&self.tokenizer, &tokenizer)
            .map_err(|e| ("model", e.to_string()))?;
        upload(&g).await
    }
}

/// Uploads a parsed GGUF's weights to the page's WebGPU device, checking the adapter's limits.
async fn upload(g: &Gguf<'_>) -> Result<Llama, (&'static str, String)> {
    let (device, max_buffer_bytes) = webgpu().await?;
    Llama::from_gguf(
        g,
        &device,
        LoadOptions {
            max_buffer_bytes: Some(max_buffer_bytes),
            // Browsers do not report GPU memory; a failed allocation surfaces as an error.
            max_total_bytes: None,
        },
    )
    .map_err(|e| match e {
        mars_model::ModelError::TooBigForDevice {
            what,
            needed,
            limit,
        } => (
            "model",
            format!(
                "this GPU's WebGPU limits are too small for the model: {what} needs {needed} bytes \
                 in one buffer, the adapter allows {limit} (maxStorageBufferBindingSize / \
                 maxBufferSize); try a smaller model or another GPU"
            ),
        ),
        other => ("model", other.to_string()),
    })
}

impl Engine {
    fn prompt_ids(&self, r: &RunRequest) -> Result<Vec<u32>, String> {
        let text = |e: mars_formats::FormatError| e.to_string();
        if !r.chat {
            return self.tokenizer.encode(&r.prompt, true).map_err(text);
        }
        let Some(t) = &self.template else {
            return Err("chat = true but the model file has no chat template".into());
        };
        let rendered = t
            .render(&[Message::new("user", &r.prompt)], true)
            .map_err(text)?;
        self.tokenizer.encode(&rendered, false).map_err(text)
    }

    fn drafter(
        &self,
        spec: &str,
        capacity: usize,
        sampling: Sampling,
        draft_model: Option<&Llama>,
    ) -> Result<AnyDrafter, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        if spec == "ngram" {
            return Ok(AnyDrafter::Ngram(NgramDrafter::default()));
        }
        if spec == "model" {
            let Some(model) = draft_model else {
                return Err("draft = \"model\" but no draft model is loaded".into());
            };
            return Ok(AnyDrafter::Model(Box::new(
                ModelDrafter::new(
                    model.clone(),
                    capacity,
                    sampling,
                    self.info.vocab,
                    "draft model",
                )
                .map_err(|e| text(&e))?,
            )));
        }
        let Some(layers) = spec.strip_prefix("layers:") else {
            return Err(format!(
                "draft = {spec:?}: expected \"layers:<spec>\" or \"ngram\""
            ));
        };
        let spec: LayerSpec = layers.parse().map_err(|e| text(&e))?;
        let layers = spec.layers(self.info.n_layers).map_err(|e| text(&e))?;
        let view = self.model.with_layers(&layers).map_err(|e| text(&e))?;
        Ok(AnyDrafter::Model(Box::new(
            ModelDrafter::new(
                view,
                capacity,
                sampling,
                self.info.vocab,
                format!("layer skip {spec}"),
            )
            .map_err(|e| text(&e))?,
        )))
    }
}
