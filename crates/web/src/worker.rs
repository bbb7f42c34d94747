//! The Web Worker side of the page: a typed message protocol (serde-wasm-bindgen) over
//! `postMessage`. The page sends [`Request`]s; the worker answers with [`Event`]s. Downloads and
//! caching stay in the page's JavaScript; the worker owns the device, the models and the loop.
//! A lost GPU device is reported by `worker.js`, which watches `GPUDevice.lost`.
//!
//! Two compute paths, chosen by the page per target load (`Backend`: the page sends `webgpu` or `cpu`): WebGPU (GGUF blocks in
//! GPU buffers, the WGSL kernels) or the packed CPU kernels compiled to WebAssembly, the same
//! ones the CLI runs natively, on the worker's one thread (wasm threads need a standard library
//! built with atomics, which stable Rust does not ship).
//!
//! Models arrive as `Blob`s (a local file, the Cache API's entry, or a download collected by the
//! browser) and are read a slice at a time with `FileReaderSync`: the header, then each tensor
//! (large ones a part at a time) as it is uploaded, so the wasm heap never holds the file.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mars_engine::tune::Timed;
use mars_engine::{
    AnyDrafter, Backend, Choices, DEFAULTS, Decoder, Defaults, EngineError, GpuCaps, Method,
    ModelInfo, Resolved, RunSettings, RunSummary, StepRecord, Target,
};
use mars_formats::{FormatError, Gguf, Message, ReadAt};
use mars_model::{Llama, ModelError, Tuning};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use web_sys::{Blob, DedicatedWorkerGlobalScope, FileReaderSync, MessageEvent};

/// What the page's status line and summary say runs the models.
fn describe(backend: Backend) -> String {
    match backend {
        Backend::Wgpu => "WebGPU".into(),
        Backend::Cpu | Backend::Auto => format!(
            "the CPU (WebAssembly, {} kernels, 1 thread)",
            mars_kernels::Isa::detect().name()
        ),
    }
}

/// Page → worker.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// A downloading file's first bytes: checked as the load will check it (header, tokenizer,
    /// tensor table, the adapter's limits) so that a file that cannot load is refused before
    /// its download finishes. Answered by [`Event::Checked`] or [`Event::CheckFailed`].
    Check {
        /// The file's first bytes (as many as have arrived).
        #[serde(with = "serde_bytes")]
        prefix: Vec<u8>,
        /// The whole file's length (the download's `Content-Length`).
        file_len: u64,
        /// A draft model (checked against the loaded target's tokenizer) or a target.
        draft: bool,
        /// Where the model will run (a draft model: where its target runs).
        backend: Backend,
    },
    /// A GGUF file: the target model, read a slice at a time, for `backend`; a draft model
    /// loaded later runs there too.
    Load {
        /// Where the model runs.
        backend: Backend,
        /// The file (the message's `file` field, a `Blob`: taken apart from serde, which cannot
        /// carry a JS object through an internally tagged enum).
        #[serde(skip)]
        file: Option<Blob>,
        /// On WebGPU, the page's tuning table for its adapter: its kernels' forms, timed once on
        /// that GPU (answered by [`Event::Tuned`] where this load timed something).
        #[serde(default)]
        tuning: Option<PageTuning>,
    },
    /// A separate draft model (its tokenizer must be the target's), named as the race settings
    /// name it (`model:<name>`).
    LoadDraft {
        /// Where it came from (the URL or file name).
        name: String,
        /// The file (the message's `file` field, a `Blob`).
        #[serde(skip)]
        file: Option<Blob>,
    },
    /// Decode one prompt with several methods, from one shared prefill.
    Race {
        /// The user's text.
        prompt: String,
        /// Earlier turns the page keeps when asked (user and assistant messages, oldest
        /// first), rendered before `prompt` by the chat template; empty: the prompt alone.
        #[serde(default)]
        history: Vec<Message>,
        /// The form's settings (drafter, draft shape, MARS threshold, sampling, budget, seed,
        /// chat), resolved and checked by [`Choices::resolve`] before the race.
        settings: Choices,
        /// The panes, in order.
        methods: Vec<Method>,
        /// Interleave the runs step by step (true) or run them one after the other.
        together: bool,
    },
    /// Where the models run when the page's "Runs on" is auto: the adapter WebGPU offered
    /// (`None`: none, `problem` saying why) judged by the engine's one rule,
    /// [`mars_engine::auto_choice`], as the CLI's `--device auto` judges wgpu's. Answered by
    /// [`Event::Chosen`].
    Choose {
        /// WebGPU's adapter, as the page saw it.
        adapter: Option<SeenAdapter>,
        /// Why there is no adapter (no WebGPU in this browser, a refused request).
        #[serde(default)]
        problem: Option<String>,
    },
    /// Stop the current race after the step in flight.
    Stop,
}

/// The tuning table the page keeps for its WebGPU adapter (`mars_engine::tune`: each matrix
/// group shape's fastest form, timed once on that GPU), in the page's storage because the
/// worker has none that lasts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageTuning {
    /// The adapter as the page names it (`GPUAdapter.info`) with the browser and its major
    /// version, whose WebGPU compiles the kernels: the table's key.
    pub adapter: String,
    /// Whether the adapter runs on the CPU (SwiftShader, a fallback adapter): never timed, its
    /// forms the rules' unless the table names some.
    pub software: bool,
    /// The table's text (`mars_model::Tuning`), empty before the first tuning.
    pub table: String,
}

/// A WebGPU adapter as the page sees it (`GPUAdapter.info`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeenAdapter {
    /// Vendor, architecture, device and description, as given.
    pub name: String,
    /// `isFallbackAdapter`, or a name that says software (SwiftShader, llvmpipe, lavapipe).
    pub software: bool,
}

/// [`Request::Choose`]'s answer: [`mars_engine::auto_choice`] over the page's adapter, with the
/// page's own reason where WebGPU gave none.
pub fn choose(adapter: Option<SeenAdapter>, problem: Option<String>) -> (Backend, String) {
    let facts = adapter.map(|a| mars_engine::AdapterFacts {
        name: a.name,
        software: a.software,
        // The browser's WebGPU runs the block kernels wherever it gives an adapter (WGSL
        // without extensions); wgpu's native limits do not apply.
        blocks_unsupported: None,
    });
    let (backend, why) = mars_engine::auto_choice(facts.as_ref());
    match (facts, problem) {
        (None, Some(problem)) => (backend, problem),
        _ => (backend, why),
    }
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
    /// A [`Request::Check`]'s answer: the header passed every check, or more of the file is
    /// needed to read it.
    Checked {
        /// The request's `draft`.
        draft: bool,
        /// `Some(n)`: the header runs past the prefix; send again with at least `n` bytes.
        need: Option<u64>,
    },
    /// A [`Request::Check`] refused the file: the download should stop.
    CheckFailed {
        /// The request's `draft`.
        draft: bool,
        /// What kind of failure.
        kind: ErrorKind,
        /// What is wrong, from the failing layer's typed error.
        message: String,
    },
    /// A model is loaded.
    Loaded {
        /// Its facts.
        info: ModelInfo,
        /// Where it runs, in words (`describe`).
        runs_on: String,
        /// The wasm heap's size after the load: it only grows, so this is the load's peak.
        wasm_bytes: u64,
    },
    /// A load starts timing its model's kernels on this GPU (once per adapter and shape: a few
    /// seconds, longer where the browser compiles each form's pipeline slowly).
    Tuning {
        /// The group shapes to time.
        shapes: usize,
    },
    /// A load timed its model's kernels on this GPU (before [`Event::Loaded`] or
    /// [`Event::DraftLoaded`]): the page keeps `table` for its later loads.
    Tuned {
        /// The whole table, the new choices added (`mars_model::Tuning`'s text).
        table: String,
        /// What was timed, for the page's status line; or why the tuning failed (the rules'
        /// forms run, nothing added).
        note: String,
    },
    /// A draft model is loaded.
    DraftLoaded {
        /// The name it was loaded under.
        name: String,
        /// The wasm heap's size after the load (its peak so far).
        wasm_bytes: u64,
    },
    /// [`Request::Choose`]'s answer.
    Chosen {
        /// [`Backend::Wgpu`] (the page's `webgpu`) or [`Backend::Cpu`].
        backend: Backend,
        /// Why, in words.
        why: String,
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

/// The worker's state: the target (with where it runs) and the draft model it holds.
#[derive(Debug, Default)]
struct State {
    target: Option<Rc<Target>>,
    backend: Backend,
    /// The page's tuning table as the target's load left it, with the adapter it is for: a
    /// draft model's load applies it too (and adds its own shapes).
    tuning: Option<(GpuCaps, Tuning)>,
    /// (name, model): a draft model belongs to the target it was checked against.
    draft: Option<(String, Llama)>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
    static STOP: Cell<bool> = const { Cell::new(false) };
}

fn post(event: &Event) {
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    // Maps as plain objects: a flattened struct (the defaults' and presets' draft shape)
    // serializes as a map, which serde-wasm-bindgen otherwise makes a JS `Map`.
    let serializer = serde_wasm_bindgen::Serializer::new().serialize_maps_as_objects(true);
    match event.serialize(&serializer) {
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
    let on_message =
        Closure::<dyn FnMut(MessageEvent)>::new(|event: MessageEvent| {
            match request_of(&event.data()) {
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

/// A `Blob` read a slice at a time (`FileReaderSync`, which workers have): the loader asks for
/// the header, then for each tensor or part of one, so the wasm heap holds one part at a time.
#[derive(Debug)]
pub struct BlobSource {
    blob: Blob,
    reader: FileReaderSync,
}

impl BlobSource {
    /// Wraps `blob`.
    ///
    /// # Errors
    /// [`FormatError::Read`] where this scope has no `FileReaderSync` (the page's main thread).
    pub fn new(blob: Blob) -> Result<Self, FormatError> {
        let reader = FileReaderSync::new().map_err(|e| FormatError::Read {
            offset: 0,
            len: 0,
            why: format!("no FileReaderSync here (not a worker?): {}", js_text(&e)),
        })?;
        Ok(Self { blob, reader })
    }
}

fn js_text(e: &JsValue) -> String {
    e.as_string().unwrap_or_else(|| {
        e.dyn_ref::<js_sys::Error>()
            .map_or_else(|| format!("{e:?}"), |e| e.to_string().into())
    })
}

impl ReadAt for BlobSource {
    fn len(&self) -> u64 {
        // A Blob's size is an exact integer below 2^53.
        self.blob.size() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FormatError> {
        let len = buf.len() as u64;
        let failed = |why: String| FormatError::Read { offset, len, why };
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| failed(format!("past the end of the {}-byte file", self.len())))?;
        // Offsets below 2^53 are exact as f64.
        let slice = self
            .blob
            .slice_with_f64_and_f64(offset as f64, end as f64)
            .map_err(|e| failed(js_text(&e)))?;
        let data = self
            .reader
            .read_as_array_buffer(&slice)
            .map_err(|e| failed(js_text(&e)))?;
        let data = js_sys::Uint8Array::new(&data);
        if u64::from(data.length()) != len {
            return Err(failed(format!("the file gave {} bytes", data.length())));
        }
        data.copy_to(buf);
        Ok(())
    }
}

/// The wasm heap's size in bytes (it never shrinks, so after a load it is the load's peak).
pub fn wasm_bytes() -> u64 {
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    let buffer: js_sys::ArrayBuffer = memory.buffer().unchecked_into();
    buffer.byte_length() as u64
}

/// A message as a [`Request`]: a load's `file` (a `Blob`) is taken out by hand and the rest
/// read by serde.
fn request_of(data: &JsValue) -> Result<Request, String> {
    let file = js_sys::Reflect::get(data, &"file".into())
        .ok()
        .and_then(|f| f.dyn_into::<Blob>().ok());
    let Some(file) = file else {
        return serde_wasm_bindgen::from_value::<Request>(data.clone()).map_err(|e| e.to_string());
    };
    let rest = js_sys::Object::assign(&js_sys::Object::new(), data.unchecked_ref());
    js_sys::Reflect::delete_property(&rest, &"file".into()).map_err(|e| js_text(&e))?;
    match serde_wasm_bindgen::from_value::<Request>(rest.into()).map_err(|e| e.to_string())? {
        Request::Load {
            backend, tuning, ..
        } => Ok(Request::Load {
            file: Some(file),
            backend,
            tuning,
        }),
        Request::LoadDraft { name, .. } => Ok(Request::LoadDraft {
            name,
            file: Some(file),
        }),
        _ => Err("only load and load_draft messages carry a file".into()),
    }
}

/// Parses a GGUF `Blob` (read a slice at a time) and builds something from it on `backend`'s
/// device.
async fn on_device<T>(
    backend: Backend,
    file: Option<Blob>,
    build: impl FnOnce(&Gguf<'_>, &mars_engine::OpenDevice) -> mars_engine::Result<T>,
) -> mars_engine::Result<(T, mars_engine::OpenDevice)> {
    let file = file.ok_or_else(|| EngineError::Config {
        field: "file",
        value: "missing".into(),
        why: "a load message carries the model as a Blob",
    })?;
    let open = backend.open().await?;
    let source = BlobSource::new(file)?;
    let g = Gguf::parse_from(&source)?;
    Ok((build(&g, &open)?, open))
}

/// The adapter's facts for a tuning: the engine's, named and judged as the page names and
/// judges its adapter (WebGPU gives the worker only a description, often empty).
fn page_caps(open: &mars_engine::OpenDevice, page: &PageTuning) -> Option<GpuCaps> {
    let mut caps = open.gpu.clone()?;
    caps.identity = page.adapter.clone();
    caps.software |= page.software;
    if caps.software {
        caps.evict_bytes = 0;
    }
    Some(caps)
}

/// Before a load applies the page's table: where the adapter is a card and the table lacks
/// some of `model`'s shapes, the page is told that they are being timed.
fn tuning_starts(model: &Llama, caps: &GpuCaps, table: &Tuning) {
    let shapes = mars_engine::tune::missing(model, &caps.identity, table);
    if !caps.software && shapes > 0 {
        post(&Event::Tuning { shapes });
    }
}

/// After it: the table posted back to the page where something was timed (or the tuning
/// failed, which the page's status line says).
fn tuning_ends(timed: Timed, caps: &GpuCaps, table: &Tuning) {
    let note = match timed {
        Timed::Nothing => return,
        Timed::Shapes(n) => {
            mars_engine::tune::tuned_line(&caps.identity, n, "kept in this browser")
        }
        Timed::Failed(why) => why,
    };
    post(&Event::Tuned {
        table: table.to_text(),
        note,
    });
}

/// The page's table parsed, with the adapter it is for; `None` off WebGPU or without one. A
/// stored table another build wrote reads as empty (`Tuning::parse`), and one that does not
/// parse is set aside too, not an error: the load tunes anew and the page's storage gets the
/// new table.
fn page_table(
    open: &mars_engine::OpenDevice,
    page: Option<&PageTuning>,
) -> Option<(GpuCaps, Tuning)> {
    let (page, caps) = page.and_then(|p| Some((p, page_caps(open, p)?)))?;
    let table = Tuning::parse(&page.table).unwrap_or_else(|e| {
        web_sys::console::warn_1(&format!("the stored tuning table is set aside: {e}").into());
        Tuning::default()
    });
    Some((caps, table))
}

/// A download's first bytes checked as the load will check them; `Ok(Some(n))`: the header
/// needs at least `n` bytes.
async fn check(
    prefix: &[u8],
    file_len: u64,
    draft: bool,
    backend: Backend,
) -> mars_engine::Result<Option<u64>> {
    let g = match Gguf::parse_header(prefix, file_len) {
        Ok(g) => g,
        Err(FormatError::UnexpectedEof { offset, needed, .. })
            if (prefix.len() as u64) < file_len =>
        {
            // At least the field that ran out; doubling keeps the round trips few.
            let need = offset
                .saturating_add(needed)
                .max((prefix.len() as u64).saturating_mul(2))
                .min(file_len);
            return Ok(Some(need));
        }
        Err(e) => return Err(e.into()),
    };
    let open = backend.open().await?;
    if draft {
        // A draft model is checked against the target it will race with, if one is loaded
        // (else its load says so).
        match STATE.with(|s| s.borrow().target.clone()) {
            Some(target) => target.check_draft(&g, open.default_options())?,
            None => {
                Target::check_gguf(&g, open.default_options())?;
            }
        }
    } else {
        Target::check_gguf(&g, open.default_options())?;
    }
    Ok(None)
}

async fn handle(request: Request) {
    match request {
        Request::Check {
            prefix,
            file_len,
            draft,
            backend,
        } => match check(&prefix, file_len, draft, backend).await {
            Ok(need) => post(&Event::Checked { draft, need }),
            Err(e) => post(&Event::CheckFailed {
                draft,
                kind: ErrorKind::of(&e),
                message: e.to_string(),
            }),
        },
        Request::Load {
            file,
            backend,
            tuning,
        } => {
            let loaded = async {
                let (target, open) = on_device(backend, file, |g, open| {
                    Target::from_gguf(g, &open.device, open.default_options())
                })
                .await?;
                let mut table = page_table(&open, tuning.as_ref());
                let target = match &mut table {
                    Some((caps, table)) => {
                        tuning_starts(target.model(), caps, table);
                        let (target, timed) =
                            mars_engine::tune::target_with_table(target, caps, table).await?;
                        tuning_ends(timed, caps, table);
                        target
                    }
                    None => target,
                };
                // `auto` (the page decides before it sends; a caller may not) as resolved.
                Ok::<_, EngineError>((target, open.backend, table))
            };
            match loaded.await {
                Ok((target, backend, table)) => {
                    let info = target.info().clone();
                    STATE.with(|s| {
                        let mut s = s.borrow_mut();
                        s.target = Some(Rc::new(target));
                        s.backend = backend;
                        s.tuning = table;
                        // A draft model belongs to the previous target's tokenizer.
                        s.draft = None;
                    });
                    post(&Event::Loaded {
                        info,
                        runs_on: describe(backend),
                        wasm_bytes: wasm_bytes(),
                    });
                }
                Err(e) => engine_error(&e),
            }
        }
        Request::LoadDraft { name, file } => {
            let Some(target) = STATE.with(|s| s.borrow().target.clone()) else {
                return error(
                    ErrorKind::Request,
                    "load the target model before a draft model",
                );
            };
            // Two statements: a shared borrow alive beside the mutable one would panic.
            let backend = STATE.with(|s| s.borrow().backend);
            let mut table = STATE.with(|s| s.borrow_mut().tuning.take());
            let built = async {
                let (model, _) = on_device(backend, file, |g, open| {
                    target.draft_model(g, &open.device, open.default_options())
                })
                .await?;
                match &mut table {
                    Some((caps, table)) => {
                        tuning_starts(&model, caps, table);
                        let (model, timed) =
                            mars_engine::tune::with_table(model, caps, table).await?;
                        tuning_ends(timed, caps, table);
                        Ok(model)
                    }
                    None => Ok(model),
                }
            }
            .await;
            STATE.with(|s| s.borrow_mut().tuning = table);
            match built {
                Ok(model) => {
                    STATE.with(|s| s.borrow_mut().draft = Some((name.clone(), model)));
                    post(&Event::DraftLoaded {
                        name,
                        wasm_bytes: wasm_bytes(),
                    });
                }
                Err(e) => engine_error(&e),
            }
        }
        Request::Race {
            prompt,
            history,
            settings,
            methods,
            together,
        } => {
            let Some(target) = STATE.with(|s| s.borrow().target.clone()) else {
                return error(ErrorKind::Request, "no model loaded");
            };
            STOP.with(|s| s.set(false));
            // The page's settings are checked here, once, as the CLI's flags are.
            let outcome = match settings.resolve() {
                Ok(settings) => {
                    let turn = (history.as_slice(), prompt.as_str());
                    race(&target, turn, &settings, &methods, together).await
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(true) => post(&Event::Stopped),
                Ok(false) => {}
                Err(e) => engine_error(&e),
            }
        }
        Request::Choose { adapter, problem } => {
            let (backend, why) = choose(adapter, problem);
            post(&Event::Chosen { backend, why });
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
    (history, prompt): (&[Message], &str),
    settings: &Resolved,
    methods: &[Method],
    together: bool,
) -> mars_engine::Result<bool> {
    let draft_model = draft_model_for(settings);
    let race = target
        .race_after(history, prompt, settings, draft_model.as_ref())
        .await?;
    let mut panes: Vec<(Method, Decoder<AnyDrafter>)> = Vec::with_capacity(methods.len());
    for &method in methods {
        panes.push((method, race.decoder(settings, method).await?));
    }
    let mut live = vec![true; panes.len()];
    let mut last_yield = web_time::Instant::now();
    while let Some(first_live) = live.iter().position(|&l| l) {
        // A CPU step never waits on anything, so the loop would hold the worker's thread to
        // the race's end and a Stop message would wait behind it: let the events in every
        // 50 ms (one timer round trip, a few ms at most, against steps of tens to hundreds).
        if last_yield.elapsed() >= std::time::Duration::from_millis(50) {
            yield_to_events().await;
            last_yield = web_time::Instant::now();
        }
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

/// Waits one turn of the worker's event loop (a zero-delay timer), so that messages queued
/// meanwhile (Stop) are handled.
async fn yield_to_events() {
    let timer = js_sys::Promise::new(&mut |resolve, _reject| {
        let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
        if scope.set_timeout_with_callback(&resolve).is_err() {
            // No timer: go on without yielding rather than hang.
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(timer).await;
}
