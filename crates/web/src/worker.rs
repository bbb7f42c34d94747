//! The Web Worker side of the page: a typed message protocol (serde-wasm-bindgen) over
//! `postMessage`. The page sends [`Request`]s; the worker answers with [`Event`]s. Downloads and
//! caching stay in the page's JavaScript; the worker owns the GPU device, the models and the
//! loop. A lost GPU device is reported by `worker.js`, which watches `GPUDevice.lost`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mars_engine::{
    AnyDrafter, Backend, DEFAULTS, Decoder, Defaults, EngineError, Method, ModelInfo, RunSettings,
    RunSummary, StepRecord, Target,
};
use mars_formats::{FormatError, Gguf};
use mars_model::{Llama, ModelError};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

/// Page → worker.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// A GGUF file's bytes: the target model.
    Load {
        /// The file.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// A separate draft model's bytes (its tokenizer must be the target's), named as the race
    /// settings name it (`model:<name>`).
    LoadDraft {
        /// Where it came from (the URL or file name).
        name: String,
        /// The file.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Decode one prompt with several methods, from one shared prefill.
    Race {
        /// The user's text.
        prompt: String,
        /// Resolved settings (drafter, k, MARS mode, sampling, budget, seed, chat).
        settings: RunSettings,
        /// The panes, in order.
        methods: Vec<Method>,
        /// Interleave the runs step by step (true) or run them one after the other.
        together: bool,
    },
    /// Stop the current race after the step in flight.
    Stop,
}

/// Why something failed, so that the page can pick its advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No WebGPU adapter or device.
    NoWebgpu,
    /// The model file cannot be used (malformed, unsupported).
    Model,
    /// The tokenizer or chat template cannot be built, or two models' tokenizers differ.
    Tokenizer,
    /// The model is too large for the adapter's limits.
    Limit,
    /// The request is wrong (settings, no model loaded, a draft model not loaded).
    Request,
    /// The GPU device was lost (sent by `worker.js` from `GPUDevice.lost`).
    DeviceLost,
    /// Anything else the engine reports while running.
    Engine,
}

impl ErrorKind {
    /// The kind of an engine error, from its type (never from its text).
    pub fn of(e: &EngineError) -> Self {
        let of_format = |f: &FormatError| match f {
            FormatError::Tokenizer(_) | FormatError::Template(_) => Self::Tokenizer,
            _ => Self::Model,
        };
        match e {
            EngineError::Device(_) | EngineError::BackendUnavailable { .. } => Self::NoWebgpu,
            EngineError::Model(ModelError::TooBigForDevice { .. }) => Self::Limit,
            EngineError::Model(ModelError::Format(f)) | EngineError::Format(f) => of_format(f),
            EngineError::Model(
                ModelError::Unsupported(_) | ModelError::Config(_) | ModelError::TensorShape { .. },
            ) => Self::Model,
            EngineError::TokenizerMismatch { .. } | EngineError::VocabMismatch { .. } => {
                Self::Tokenizer
            }
            EngineError::EmptyPrompt
            | EngineError::PromptTooLong { .. }
            | EngineError::NoChatTemplate
            | EngineError::DrafterSpec { .. }
            | EngineError::DraftModelNotLoaded { .. }
            | EngineError::Config { .. }
            | EngineError::Verify(_) => Self::Request,
            _ => Self::Engine,
        }
    }
}

/// Worker → page.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The worker is up; the page's fields start from these defaults.
    Ready {
        /// The engine's one copy of the defaults.
        defaults: Defaults,
    },
    /// A model is loaded.
    Loaded {
        /// Its facts.
        info: ModelInfo,
    },
    /// A draft model is loaded.
    DraftLoaded {
        /// The name it was loaded under.
        name: String,
    },
    /// A pane's step.
    Step {
        /// The pane's method.
        pane: Method,
        /// The engine's record.
        step: StepRecord,
        /// The pane's totals so far.
        summary: RunSummary,
    },
    /// A pane finished.
    Done {
        /// The pane's method.
        pane: Method,
        /// Totals.
        summary: RunSummary,
    },
    /// A Stop request ended the race; the panes keep what they streamed.
    Stopped,
    /// Something failed.
    Error {
        /// What kind of failure, for the page's advice.
        kind: ErrorKind,
        /// What went wrong, from the failing layer's own typed error.
        message: String,
    },
}

/// The worker's state: the target and the draft model it holds.
#[derive(Debug, Default)]
struct State {
    target: Option<Rc<Target>>,
    /// (name, model): a draft model belongs to the target it was checked against.
    draft: Option<(String, Llama)>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
    static STOP: Cell<bool> = const { Cell::new(false) };
}

fn post(event: &Event) {
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    match serde_wasm_bindgen::to_value(event) {
        Ok(v) => {
            if let Err(e) = scope.post_message(&v) {
                web_sys::console::error_2(&"postMessage failed".into(), &e);
            }
        }
        Err(e) => web_sys::console::error_1(&e.to_string().into()),
    }
}

fn error(kind: ErrorKind, message: impl std::fmt::Display) {
    post(&Event::Error {
        kind,
        message: message.to_string(),
    });
}

fn engine_error(e: &EngineError) {
    error(ErrorKind::of(e), e);
}

/// Entry point when the crate runs as the page's worker.
#[wasm_bindgen]
pub fn worker_main() {
    console_error_panic_hook::set_once();
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(|event: MessageEvent| {
        match serde_wasm_bindgen::from_value::<Request>(event.data()) {
            Ok(Request::Stop) => STOP.with(|s| s.set(true)),
            Ok(request) => wasm_bindgen_futures::spawn_local(handle(request)),
            Err(e) => error(ErrorKind::Request, e),
        }
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as the page keeps it; so does its handler.
    on_message.forget();
    post(&Event::Ready { defaults: DEFAULTS });
}

/// Parses a GGUF and builds something from it on the page's WebGPU device.
async fn on_webgpu<T>(
    bytes: &[u8],
    build: impl FnOnce(&Gguf<'_>, &mars_engine::OpenDevice) -> mars_engine::Result<T>,
) -> mars_engine::Result<T> {
    let open = Backend::Wgpu.open().await?;
    let g = Gguf::parse(bytes)?;
    build(&g, &open)
}

async fn handle(request: Request) {
    match request {
        Request::Load { bytes } => {
            match on_webgpu(&bytes, |g, open| {
                Target::from_gguf(g, &open.device, open.limits)
            })
            .await
            {
                Ok(target) => {
                    let info = target.info().clone();
                    STATE.with(|s| {
                        let mut s = s.borrow_mut();
                        s.target = Some(Rc::new(target));
                        // A draft model belongs to the previous target's tokenizer.
                        s.draft = None;
                    });
                    post(&Event::Loaded { info });
                }
                Err(e) => engine_error(&e),
            }
        }
        Request::LoadDraft { name, bytes } => {
            let Some(target) = STATE.with(|s| s.borrow().target.clone()) else {
                return error(
                    ErrorKind::Request,
                    "load the target model before a draft model",
                );
            };
            let built = on_webgpu(&bytes, |g, open| {
                target.draft_model(g, &open.device, open.limits)
            })
            .await;
            match built {
                Ok(model) => {
                    STATE.with(|s| s.borrow_mut().draft = Some((name.clone(), model)));
                    post(&Event::DraftLoaded { name });
                }
                Err(e) => engine_error(&e),
            }
        }
        Request::Race {
            prompt,
            settings,
            methods,
            together,
        } => {
            let Some(target) = STATE.with(|s| s.borrow().target.clone()) else {
                return error(ErrorKind::Request, "no model loaded");
            };
            STOP.with(|s| s.set(false));
            match race(&target, &prompt, &settings, &methods, together).await {
                Ok(true) => post(&Event::Stopped),
                Ok(false) => {}
                Err(e) => engine_error(&e),
            }
        }
        Request::Stop => STOP.with(|s| s.set(true)),
    }
}

/// The draft model a [`mars_engine::DrafterSpec::Model`] names, if it is the one loaded.
fn draft_model_for(settings: &RunSettings) -> Option<Llama> {
    let mars_engine::DrafterSpec::Model(want) = &settings.drafter else {
        return None;
    };
    STATE.with(|s| {
        s.borrow()
            .draft
            .as_ref()
            .filter(|(name, _)| name == want)
            .map(|(_, m)| m.clone())
    })
}

/// Every method over one shared prefill. Each pane's tokens/s counts only its own steps' time
/// (the engine times draft and verify per step), so interleaving favours none. Returns whether
/// a Stop request ended it.
async fn race(
    target: &Target,
    prompt: &str,
    settings: &RunSettings,
    methods: &[Method],
    together: bool,
) -> mars_engine::Result<bool> {
    settings.validate()?;
    let ids = target.prompt_ids(prompt, settings.chat)?;
    let capacity = target.capacity(ids.len(), settings.max_tokens);
    let prefill = target.prefill(&ids, capacity).await?;
    let draft_model = draft_model_for(settings);
    let mut panes: Vec<(Method, Decoder<AnyDrafter>)> = Vec::with_capacity(methods.len());
    for &method in methods {
        let dec = target
            .decoder(settings, method, prefill.clone(), draft_model.as_ref())
            .await?;
        panes.push((method, dec));
    }
    let mut live = vec![true; panes.len()];
    while let Some(first_live) = live.iter().position(|&l| l) {
        for i in 0..panes.len() {
            // One after the other: only the first pane still running takes steps.
            if !live[i] || (!together && i != first_live) {
                continue;
            }
            if STOP.with(Cell::get) {
                return Ok(true);
            }
            let (pane, dec) = &mut panes[i];
            match dec.step().await? {
                Some(step) => post(&Event::Step {
                    pane: *pane,
                    step,
                    summary: dec.summary(),
                }),
                None => {
                    live[i] = false;
                    post(&Event::Done {
                        pane: *pane,
                        summary: dec.summary(),
                    });
                }
            }
        }
    }
    Ok(false)
}
