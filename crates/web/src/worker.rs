//! The Web Worker side of the page: a typed message protocol (serde-wasm-bindgen) over
//! `postMessage`. The page sends [`Request`]s; the worker answers with [`Event`]s. Downloads and
//! caching stay in the page's JavaScript; the worker owns the GPU device, the model and the loop.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mars_engine::{AnyDrafter, DecodeConfig, Decoder, Prefill, RunSummary, StepRecord};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

use crate::{Engine, ModelInfo, RunRequest};

/// Page → worker.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// A GGUF file's bytes.
    Load {
        /// The file.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// A separate draft model's bytes (its tokenizer must be the target's).
    LoadDraft {
        /// The file.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Strict and MARS on the same prompt, drafter and seed.
    Race {
        /// Shared settings; `method` is ignored.
        request: RunRequest,
        /// Interleave the two runs step by step (true) or run strict, then MARS.
        together: bool,
    },
    /// Stop the current race after the step in flight.
    Stop,
}

/// Worker → page.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The worker is up.
    Ready,
    /// A model is loaded.
    Loaded {
        /// Its facts.
        info: ModelInfo,
    },
    /// A draft model is loaded.
    DraftLoaded,
    /// A pane's step.
    Step {
        /// "strict" or "mars".
        pane: &'static str,
        /// The engine's record.
        step: StepRecord,
        /// The pane's totals so far.
        summary: RunSummary,
    },
    /// A pane finished.
    Done {
        /// "strict" or "mars".
        pane: &'static str,
        /// Totals.
        summary: RunSummary,
    },
    /// Something failed; `kind` lets the page pick its advice.
    Error {
        /// "no_webgpu", "model", "device_lost", "request" or "engine".
        kind: &'static str,
        /// What went wrong, from the failing layer's own typed error.
        message: String,
    },
}

thread_local! {
    static ENGINE: RefCell<Option<Rc<Engine>>> = const { RefCell::new(None) };
    static DRAFT: RefCell<Option<mars_model::Llama>> = const { RefCell::new(None) };
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

fn error(kind: &'static str, message: impl std::fmt::Display) {
    post(&Event::Error {
        kind,
        message: message.to_string(),
    });
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
            Err(e) => error("request", e),
        }
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as the page keeps it; so does its handler.
    on_message.forget();
    post(&Event::Ready);
}

async fn handle(request: Request) {
    match request {
        Request::Load { bytes } => match Engine::load_bytes(&bytes).await {
            Ok(engine) => {
                let info = engine.info.clone();
                ENGINE.with(|e| *e.borrow_mut() = Some(Rc::new(engine)));
                // A draft model belongs to the previous target's tokenizer.
                DRAFT.with(|d| *d.borrow_mut() = None);
                post(&Event::Loaded { info });
            }
            Err((kind, message)) => error(kind, message),
        },
        Request::LoadDraft { bytes } => {
            let Some(engine) = ENGINE.with(|e| e.borrow().clone()) else {
                return error("request", "load the target model before a draft model");
            };
            match engine.load_draft(&bytes).await {
                Ok(model) => {
                    DRAFT.with(|d| *d.borrow_mut() = Some(model));
                    post(&Event::DraftLoaded);
                }
                Err((kind, message)) => error(kind, message),
            }
        }
        Request::Race { request, together } => {
            let Some(engine) = ENGINE.with(|e| e.borrow().clone()) else {
                return error("request", "no model loaded");
            };
            STOP.with(|s| s.set(false));
            if let Err(e) = race(&engine, &request, together).await {
                let text = e.to_string();
                let kind = if text.contains("lost") || text.contains("Device") {
                    "device_lost"
                } else {
                    "engine"
                };
                error(kind, text);
            }
        }
        Request::Stop => STOP.with(|s| s.set(true)),
    }
}

/// Strict and MARS over one shared prefill. Each pane's tokens/s counts only its own steps'
/// time (the engine times draft and verify per step), so interleaving does not favour either.
async fn race(engine: &Engine, r: &RunRequest, together: bool) -> Result<(), String> {
    let ids = engine.prompt_ids(r)?;
    let capacity = ids
        .len()
        .saturating_add(r.max_tokens)
        .min(engine.info.context_length);
    let prefill = Prefill::new(&engine.model, &ids, capacity)
        .await
        .map_err(|e| e.to_string())?;
    let mut panes: Vec<(&'static str, Decoder<AnyDrafter>)> = Vec::with_capacity(2);
    for (pane, method) in [("strict", "strict"), ("mars", "mars")] {
        let sampling = r.sampling();
        let mode = r.mode(method).map_err(|e| e.to_string())?;
        let draft_model = DRAFT.with(|d| d.borrow().clone());
        let drafter = engine.drafter(&r.draft, capacity, sampling, draft_model.as_ref())?;
        let config = DecodeConfig {
            k: r.k,
            verify: mars_verify::VerifyConfig { sampling, mode },
            max_tokens: r.max_tokens,
            seed: r.seed,
            capacity: Some(capacity),
        };
        let dec = Decoder::from_prefill(
            &engine.model,
            engine.tokenizer.clone(),
            Some(drafter),
            &config,
            prefill.clone(),
        )
        .await
        .map_err(|e| e.to_string())?;
        panes.push((pane, dec));
    }
    let mut live = [true, true];
    while live.iter().any(|&l| l) {
        for i in 0..panes.len() {
            if !live[i] || (!together && i > 0 && live[0]) {
                continue;
            }
            if STOP.with(Cell::get) {
                return Ok(());
            }
            let (pane, dec) = &mut panes[i];
            match dec.step().await.map_err(|e| e.to_string())? {
                Some(step) => post(&Event::Step {
                    pane,
                    step,
                    summary: dec.summary(),
                }),
                None => {
                    live[i] = false;
                    post(&Event::Done {
                        pane,
                        summary: dec.summary(),
                    });
                }
            }
        }
    }
    Ok(())
}
