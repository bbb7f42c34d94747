//! Launches recorded straight into wgpu, each launch's bind group kept for the next time the
//! same kernel meets the same buffers.
//!
//! Why: through CubeCL's `launch` every launch costs its runtime thread a bind group made anew
//! and its bookkeeping a binding (~28k instructions a launch, counted on the no-op card;
//! 10–15 µs of host a launch on an H200): a 0.5B model's token is 128 launches, 1.3–1.9 ms of
//! host where llama.cpp's whole token takes 1.95 ms. A forward meets the same buffers every
//! token (weights, kept activations, the KV cache, the step's words in a kept slot), so here a
//! launch is a lookup, `set_pipeline`, `set_bind_group` and `dispatch` on the caller's thread.
//!
//! What it shares with CubeCL: the memory (CubeCL allocates every buffer; a launch resolves
//! each handle to its wgpu buffer once, with `get_resource`) and the queue. Order across the
//! two is kept by two rules: before anything of CubeCL's touches a buffer the recorded
//! launches may use (a read, a write, a CubeCL launch: [`settle`]) the recording is submitted;
//! before a submit of ours CubeCL submits what it recorded. A handle resolved here is held
//! (which keeps CubeCL from moving or reusing its memory) until its owner drops it: after each
//! submit, entries whose handle no one else holds are let go, with their bind groups.
//!
//! The pipelines are made with wgpu's safe `create_shader_module`, so with wgpu's shader
//! checks (every loop's bound emulated, indices into arrays clamped: CubeCL makes its own
//! with them off, an `unsafe` call the project does not make). What that costs a kernel:
//! `ISA_CHECKED=1 bench.sh gpu-isa` counts it. A pipeline wgpu refuses leaves that kernel to
//! CubeCL's launch, which reports the failure as before.
//!
//! In the browser the browser answers later, and CubeCL's pipelines there are unchecked (a
//! refused one reaches the device's uncaptured-error handler, which panics): a pipeline is used
//! before its answer, its launches each in a submit of their own; every bind group and submit of
//! ours is made inside an error scope; the next read awaits the answers ([`answers`]) and fails
//! with the first refusal; a kernel once refused is not launched again, by either way (the page's
//! WGSL is the browser's to check either way, so there the direct pipelines are the same kernels
//! as CubeCL's).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::ThreadId;

use cubecl::client::Client;
use cubecl::prelude::{CubeCount, KernelMetadata};
use cubecl::server::Handle;
use cubecl::wgpu::{AutoCompiler, WgpuResource, WgpuServer, wgpu};
use cubecl_runtime::storage::ManagedResource;
use rustc_hash::FxHashMap as HashMap;

use super::Shader;
use crate::OUTPUTS_KEPT_BYTES;
use crate::counts::{DirectWork, counted_direct};

/// A buffer as a bind group sees it: CubeCL's memory id and the handle's offsets.
type Key = (usize, Option<u64>, Option<u64>);

/// The direct launches of one CubeCL client.
struct Direct {
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// Launches recorded before a submit (CubeCL's `tasks_max` for the adapter).
    submit_every: usize,
    state: Mutex<State>,
}

/// A handle resolved to its wgpu buffer, held: CubeCL neither moves nor reuses memory bound
/// this way, and our clone of the handle says when its owner let go of it.
struct Held {
    handle: Handle,
    resource: ManagedResource<WgpuResource>,
}

/// What a pipeline is: made, refused by wgpu with its error (natively the kernel then goes
/// through CubeCL, whose checked launch reports it; in the browser it is not launched), or (in
/// the browser, where wgpu's answer arrives later) made and awaiting that answer: `None` when
/// accepted, the error when refused.
#[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
enum Pipeline {
    Made(Arc<wgpu::ComputePipeline>, u32),
    Refused(String),
    Pending(
        Arc<wgpu::ComputePipeline>,
        u32,
        Arc<OnceLock<Option<String>>>,
    ),
}

#[derive(Default)]
struct State {
    pipelines: HashMap<(u8, u64), Pipeline>,
    held: HashMap<Key, Held>,
    /// Bind groups by their launch's keys: the pipeline's number (`(number, None, None)`),
    /// then its buffers', binding 0 first.
    groups: HashMap<Box<[Key]>, wgpu::BindGroup>,
    /// A launch's keys while it looks its bind group up: found without an allocation.
    launch_keys: Vec<Key>,
    /// Each thread's launches not yet submitted. A thread's own: CubeCL gives each thread a
    /// stream of its own, and a submit flushes the submitting thread's stream only, so a
    /// thread's launches go after its own CubeCL work (threads share no buffer being written).
    recordings: HashMap<ThreadId, Recording>,
    /// Kept buffers for steps' words ([`kept_step`]), a thread's own (a slot is written when
    /// its thread's launches that read it were submitted): free where no step holds the `Arc`.
    steps: Vec<(ThreadId, Arc<Handle>)>,
    /// Kept buffers for passes' outputs ([`kept_output`]), a thread's own likewise (a slot is
    /// written by its thread's launches, queued after that thread's reads of it).
    outputs: Vec<(ThreadId, Arc<Handle>)>,
    /// Where each launch's device time goes, where profiling ([`profile`]).
    #[cfg(not(target_family = "wasm"))]
    profile: Option<std::io::BufWriter<std::fs::File>>,
    /// Each thread's first launch that neither wgpu nor CubeCL could make since its last read
    /// (its kernel's name, the refusals): that thread's next read reports it ([`take_failure`])
    /// instead of returning what its outputs held. A thread's own, as its recording is: the
    /// threads sharing a device (a process's tests) read their own launches' outputs.
    failures: HashMap<ThreadId, (&'static str, String)>,
}

struct Recording {
    // Declared before the encoder: a pass ends when dropped, before the encoder finishes.
    pass: wgpu::ComputePass<'static>,
    encoder: wgpu::CommandEncoder,
    launches: usize,
    /// Where profiling: a timestamp at the pass's start and after each launch, and each
    /// launch's kernel name.
    stamps: Option<(wgpu::QuerySet, Vec<&'static str>)>,
    /// The first launch's kernel: what a submit the browser refuses is reported as.
    first: &'static str,
}

/// Whether launches should go straight into wgpu: `MARS_GPU_LAUNCH` is `direct` (the default)
/// or `cubecl` (CubeCL's launch, each launch's bind group made anew: what a lease compares).
///
/// # Errors
/// Another value, named.
pub fn wanted() -> Result<bool, String> {
    match std::env::var("MARS_GPU_LAUNCH").as_deref() {
        Err(_) | Ok("direct") => Ok(true),
        Ok("cubecl") => Ok(false),
        Ok(other) => Err(format!(
            "MARS_GPU_LAUNCH is `direct` or `cubecl`, not `{other}`"
        )),
    }
}

/// A client's service (CubeCL's `ServiceId`, which no crate the project uses re-exports).
type ClientId = (cubecl::device::DeviceId, std::any::TypeId);

fn client_id(client: &Client) -> ClientId {
    let id = client.service_id();
    (id.device, id.service)
}

static CLIENTS: Mutex<Vec<(ClientId, Arc<Direct>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while recording leaves nothing half-written that the next launch could trip on
    // (a recording is submitted whole or dropped), so a poisoned lock is taken as it is.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Launches on `client` from now on go straight into wgpu (`device` and `queue` must be the
/// ones CubeCL opened `client` on), submitted every `submit_every` launches (at least 1).
/// A client registered before stays as it is.
pub fn register(client: &Client, device: wgpu::Device, queue: wgpu::Queue, submit_every: usize) {
    let id = client_id(client);
    let mut clients = lock(&CLIENTS);
    if clients.iter().any(|(s, _)| *s == id) {
        return;
    }
    let direct = Arc::new(Direct {
        device,
        queue,
        submit_every: submit_every.max(1),
        state: Mutex::new(State::default()),
    });
    clients.push((id, direct));
}

/// Launches on `client` go through CubeCL again (what was recorded is submitted first, what
/// was held let go).
pub fn unregister(client: &Client) {
    let id = client_id(client);
    let removed: Vec<Arc<Direct>> = {
        let mut clients = lock(&CLIENTS);
        let (gone, kept) = clients.drain(..).partition(|(s, _)| *s == id);
        *clients = kept;
        gone.into_iter().map(|(_, d)| d).collect()
    };
    for direct in removed {
        let mut state = lock(&direct.state);
        // Every thread's launches, this thread's CubeCL work first (another thread's launching
        // at this moment has its launches submitted here, after its last CubeCL flush).
        let _ = client.flush();
        let recordings: Vec<Recording> = state.recordings.drain().map(|(_, r)| r).collect();
        for recording in recordings {
            direct.finish(&mut state, recording);
        }
        state.groups.clear();
        state.held.clear();
    }
}

/// From now on, where `client` launches directly, appends each launch's time on the device to
/// the file at `path` (`| 12345ns | matmul_store_direct |`, the lines of CubeCL's profile log,
/// which tests/bench/gpu-profile.sh reads): timestamps at the start of each recorded pass and
/// after each launch, each launch's time from the end of the launch before it, the host
/// waiting for each submit (so a profiled run is slower; its kernels' times are the device's).
/// What the profile shows is the launches as they run (direct, in their own pipelines, the
/// kernels back to back in a pass), where CubeCL's profile waits for each of its launches.
///
/// # Errors
/// Where the device has no timestamps inside passes, or the file cannot be created.
#[cfg(not(target_family = "wasm"))]
pub fn profile(client: &Client, path: &std::path::Path) -> Result<(), String> {
    let direct = of(client).ok_or("the client does not launch directly (MARS_GPU_LAUNCH)")?;
    let needs = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    if !direct.device.features().contains(needs) {
        return Err("the device has no timestamps inside compute passes".into());
    }
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    settle(client);
    lock(&direct.state).profile = Some(std::io::BufWriter::new(file));
    Ok(())
}

/// Whether `client` launches directly.
pub fn is_direct(client: &Client) -> bool {
    of(client).is_some()
}

fn of(client: &Client) -> Option<Arc<Direct>> {
    let id = client_id(client);
    let clients = lock(&CLIENTS);
    clients
        .iter()
        .find(|(s, _)| *s == id)
        .map(|(_, d)| d.clone())
}

/// How [`launch`] left a launch.
#[derive(Debug)]
pub(crate) enum Launched {
    /// Recorded into a wgpu compute pass.
    Direct,
    /// CubeCL's to make: the client not registered, an indirect count, a binding CubeCL cannot
    /// resolve.
    ToCubecl,
    /// CubeCL's to make, wgpu having refused the kernel's pipeline with this error (natively).
    #[cfg_attr(target_family = "wasm", allow(dead_code))]
    Refused(String),
    /// Not made (in the browser, where the pipeline was refused: CubeCL's own would be the
    /// same WGSL, refused the same way, but unchecked there): the next read reports it.
    #[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
    Dropped,
}

/// Records `shader` over `bindings` (binding 0 first) where `client` launches directly; else
/// says why the launch is CubeCL's to make.
pub(crate) fn launch(
    client: &Client,
    shader: &Shader,
    kernel: (u8, u64),
    count: &CubeCount,
    bindings: &[Handle],
) -> Launched {
    let Some(direct) = of(client) else {
        return Launched::ToCubecl;
    };
    let CubeCount::Static(x, y, z) = *count else {
        counted_direct(DirectWork::Fallback);
        settle(client);
        return Launched::ToCubecl;
    };
    let mut state = lock(&direct.state);
    if x == 0 || y == 0 || z == 0 {
        // Nothing to run: CubeCL records nothing for it either.
        return Launched::Direct;
    }
    let (pipeline, number, answered) = match direct.pipeline(&mut state, shader, kernel) {
        Ok(made) => made,
        Err(error) => {
            drop(state);
            // In the browser CubeCL would make the same WGSL into a pipeline the browser
            // refuses again, unchecked: its error then reaches the device's uncaptured-error
            // handler, which panics (CubeCL's), and the page's worker with it.
            #[cfg(target_family = "wasm")]
            {
                fail(client, shader.name(), error);
                return Launched::Dropped;
            }
            #[cfg(not(target_family = "wasm"))]
            {
                counted_direct(DirectWork::Fallback);
                settle(client);
                return Launched::Refused(error);
            }
        }
    };
    if !answered {
        // In the browser, a pipeline the browser has not answered for yet: recorded in a
        // submit of its own, so that if the browser refuses it, the submit it makes invalid
        // holds no other launch (a refused launch is not made; the others are, as natively).
        direct.submit(client, &mut state, false);
    }
    // The state's vector, taken for the lookup and put back (the keys of the last launch).
    let mut keys = std::mem::take(&mut state.launch_keys);
    keys.clear();
    keys.push((number as usize, None, None));
    keys.extend(bindings.iter().map(key));
    let found = state.groups.get(keys.as_slice()).cloned();
    let group = match found {
        Some(group) => {
            state.launch_keys = keys;
            group
        }
        None => {
            let Some(group) =
                direct.bind_group(client, &mut state, &pipeline, bindings, shader.name())
            else {
                drop(state);
                counted_direct(DirectWork::Fallback);
                settle(client);
                return Launched::ToCubecl;
            };
            state.groups.insert(keys.as_slice().into(), group.clone());
            state.launch_keys = keys;
            group
        }
    };
    #[cfg(not(target_family = "wasm"))]
    let profiling = state.profile.is_some();
    #[cfg(target_family = "wasm")]
    let profiling = false;
    let full = {
        let recordings = &mut state.recordings;
        let thread = std::thread::current().id();
        let recording = recordings.entry(thread).or_insert_with(|| {
            let mut encoder = direct.device.create_command_encoder(&Default::default());
            let mut pass = encoder
                .begin_compute_pass(&Default::default())
                .forget_lifetime();
            let stamps = profiling.then(|| {
                let set = direct.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: None,
                    ty: wgpu::QueryType::Timestamp,
                    // The start, and one after each launch (at most `submit_every`).
                    count: u32::try_from(direct.submit_every + 1).unwrap_or(u32::MAX),
                });
                pass.write_timestamp(&set, 0);
                (set, Vec::new())
            });
            Recording {
                pass,
                encoder,
                launches: 0,
                stamps,
                first: shader.name(),
            }
        });
        recording.pass.set_pipeline(&pipeline);
        recording.pass.set_bind_group(0, &group, &[]);
        recording.pass.dispatch_workgroups(x, y, z);
        recording.launches += 1;
        if let Some((set, names)) = &mut recording.stamps {
            recording
                .pass
                .write_timestamp(set, u32::try_from(recording.launches).unwrap_or(u32::MAX));
            names.push(shader.name());
        }
        recording.launches >= direct.submit_every || !answered
    };
    if full {
        // Mid-pass: what owners dropped is let go at the next settle, once a pass.
        direct.submit(client, &mut state, false);
    }
    Launched::Direct
}

/// Records that `kernel`'s launch could be made neither directly nor by CubeCL (`reason`), where
/// `client` launches directly: the next read reports the first such launch. (In the browser,
/// where a refusal arrives later, also what [`answers`] finds.)
pub(crate) fn fail(client: &Client, kernel: &'static str, reason: String) {
    if let Some(direct) = of(client) {
        let thread = std::thread::current().id();
        lock(&direct.state)
            .failures
            .entry(thread)
            .or_insert((kernel, reason));
    }
}

/// The launch [`fail`] recorded on this thread since its last read, taken: a read reports it,
/// and the reads after it (a tuning that goes on to other forms) start clean.
pub(crate) fn take_failure(client: &Client) -> Option<(&'static str, String)> {
    let thread = std::thread::current().id();
    of(client).and_then(|direct| lock(&direct.state).failures.remove(&thread))
}

/// A browser's answer to a scoped call ([`Direct::scoped`], a pipeline made): the kernel it is
/// reported as, the error scope's answer, and where it is a pipeline's, where its answer goes
/// ([`Pipeline::Pending`]). The page's one thread's own.
#[cfg(target_family = "wasm")]
type Answer = (
    &'static str,
    std::pin::Pin<Box<dyn Future<Output = Option<wgpu::Error>>>>,
    Option<Arc<OnceLock<Option<String>>>>,
);

#[cfg(target_family = "wasm")]
thread_local! {
    static SCOPES: std::cell::RefCell<Vec<Answer>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// In the browser, the answers to every scoped call since the last read (the pipelines, the
/// bind groups made, the submits), awaited in their order: each pipeline's answer settles it
/// (made or refused), and the first error is recorded as its kernel's failure ([`fail`]),
/// which the read then reports. A read awaits them after its data came back, by when the
/// browser has validated each submit before it: nothing is waited for that the read did not
/// wait for.
#[cfg(target_family = "wasm")]
pub(crate) async fn answers(client: &Client) {
    let scopes = SCOPES.with(|s| std::mem::take(&mut *s.borrow_mut()));
    for (kernel, answer, pipeline) in scopes {
        let error = answer.await.map(|e| e.to_string());
        if let Some(slot) = pipeline {
            let _ = slot.set(error.clone());
        }
        if let Some(error) = error {
            fail(client, kernel, error);
        }
    }
}

/// Submits what was recorded for `client` (CubeCL's own recording first): before CubeCL reads
/// or writes a buffer, or launches, after direct launches.
pub(crate) fn settle(client: &Client) {
    if let Some(direct) = of(client) {
        let mut state = lock(&direct.state);
        direct.submit(client, &mut state, true);
    }
}

/// A kept buffer of at least `bytes.len()` bytes holding `bytes`, for a step's words, where
/// `client` launches directly: a slot no other step holds, written in queue order (after
/// everything recorded before), so every launch of every pass binds the same few buffers and
/// finds its bind group made. `None` where `client` launches through CubeCL.
pub(crate) fn kept_step(client: &Client, bytes: &[u8]) -> Option<Arc<Handle>> {
    let direct = of(client)?;
    // Everything recorded so far, and CubeCL's, goes before the write.
    settle(client);
    let mut state = lock(&direct.state);
    let size = bytes.len().max(4) as u64;
    let thread = std::thread::current().id();
    let slot = match free_slot(&state.steps, thread, |bound| bound >= size) {
        Some(slot) => slot,
        None => {
            // Sizes kept to powers of two (at least 1 KiB) so that a few slots serve every
            // step a model takes.
            let slot = Arc::new(client.empty(size.next_power_of_two().max(1024) as usize));
            state.steps.push((thread, slot.clone()));
            slot
        }
    };
    let resource = direct.resolve(client, &mut state, &slot)?;
    direct
        .queue
        .write_buffer(&resource.buffer, resource.offset, bytes);
    Some(slot)
}

/// A kept buffer of exactly `bytes` bytes (at least 4), its contents whatever its last user
/// left, for a pass's outputs (its logits, their summaries) where `client` launches directly:
/// a slot no other output holds, so the launches writing and reading a pass's outputs find
/// the bind groups the same launches of the last such pass made. Exact sizes, as a buffer's
/// bound range is its size and a read reads all of it. `None` where `client` launches through
/// CubeCL, or where this thread keeps [`OUTPUTS_KEPT_BYTES`] already.
pub(crate) fn kept_output(client: &Client, bytes: usize) -> Option<Arc<Handle>> {
    let direct = of(client)?;
    let mut state = lock(&direct.state);
    let size = bytes.max(4) as u64;
    let thread = std::thread::current().id();
    if let Some(slot) = free_slot(&state.outputs, thread, |bound| bound == size) {
        // Its last user's launches are recorded on this thread's queue before the next ones.
        return Some(slot);
    }
    let kept: u64 = (state.outputs.iter())
        .filter(|(t, _)| *t == thread)
        .map(|(_, s)| s.size())
        .sum();
    if kept.saturating_add(size) > OUTPUTS_KEPT_BYTES {
        return None;
    }
    let slot = Arc::new(client.empty(usize::try_from(size).ok()?));
    state.outputs.push((thread, slot.clone()));
    Some(slot)
}

/// The first of `thread`'s slots that no one else holds and whose bound range `fits`. By the
/// bound range (`size_in_used`), not `Handle::size`: that is the allocation, rounded up to the
/// device's alignment (`super::bound_bytes`), and a binding covers the bound range alone.
fn free_slot(
    slots: &[(ThreadId, Arc<Handle>)],
    thread: ThreadId,
    fits: impl Fn(u64) -> bool,
) -> Option<Arc<Handle>> {
    slots
        .iter()
        .find(|(t, s)| *t == thread && Arc::strong_count(s) == 1 && fits(s.size_in_used()))
        .map(|(_, s)| s.clone())
}

fn key(handle: &Handle) -> Key {
    // CubeCL's id of the memory, fixed for the memory's life (its location may change; the
    // wgpu buffer is resolved from the handle when a bind group is made).
    (
        handle.memory.descriptor().id.value,
        handle.offset_start,
        handle.offset_end,
    )
}

impl Direct {
    /// The pipeline of `shader`, its number and whether wgpu has answered for it (in the
    /// browser it answers later: until then the pipeline is used as made, its launches in
    /// submits of their own, whose error scopes report a refusal), made on first use; the
    /// error where it refused it.
    fn pipeline(
        &self,
        state: &mut State,
        shader: &Shader,
        key: (u8, u64),
    ) -> Result<(Arc<wgpu::ComputePipeline>, u32, bool), String> {
        let next = u32::try_from(state.pipelines.len()).unwrap_or(u32::MAX);
        let entry = state
            .pipelines
            .entry(key)
            .or_insert_with(|| self.make_pipeline(shader, next));
        if let Pipeline::Pending(pipeline, number, answer) = entry {
            match answer.get() {
                Some(None) => *entry = Pipeline::Made(pipeline.clone(), *number),
                Some(Some(error)) => *entry = Pipeline::Refused(error.clone()),
                None => return Ok((pipeline.clone(), *number, false)),
            }
        }
        match entry {
            Pipeline::Made(p, n) => Ok((p.clone(), *n, true)),
            Pipeline::Refused(error) => Err(error.clone()),
            Pipeline::Pending(p, n, _) => Ok((p.clone(), *n, false)),
        }
    }

    /// `shader`'s pipeline, made inside an error scope whose answer says whether wgpu took it.
    fn make_pipeline(&self, shader: &Shader, number: u32) -> Pipeline {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(shader.source().into()),
            });
        let pipeline = Arc::new(self.device.create_compute_pipeline(
            &wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some("main"),
                // Every kernel writes its workgroup memory before reading it, so none asks the
                // driver (or naga's polyfill: invocation 0 storing every word, then a barrier)
                // to zero it first at each workgroup's start, as CubeCL's pipelines do not:
                // wgpu's default, WebGPU's contract for untrusted shaders, had cost the direct
                // launches' every workgroup that work since they began (NAK: 241 stores before
                // the own-quantizing form's first product, 2026-12-06). In the browser the
                // option is not WebGPU's: the browser zeroes it.
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: false,
                    ..Default::default()
                },
                cache: None,
            },
        ));
        let answer = scope.pop();
        // Natively wgpu answers an error scope at once.
        #[cfg(not(target_family = "wasm"))]
        return match pollster::block_on(answer) {
            None => Pipeline::Made(pipeline, number),
            Some(error) => Pipeline::Refused(error.to_string()),
        };
        // In the browser the answer is a promise, which the next read awaits ([`answers`]: a
        // refusal then fails that read, as the launches' own errors would, rather than a read
        // after it); until then the pipeline's launches go in submits of their own (`launch`).
        #[cfg(target_family = "wasm")]
        {
            let slot = Arc::new(OnceLock::new());
            SCOPES.with(|s| {
                s.borrow_mut()
                    .push((shader.name(), Box::pin(answer), Some(slot.clone())))
            });
            Pipeline::Pending(pipeline, number, slot)
        }
    }

    /// The wgpu buffer behind `handle`, resolved once and held.
    fn resolve(&self, client: &Client, state: &mut State, handle: &Handle) -> Option<WgpuResource> {
        let k = key(handle);
        if let Some(held) = state.held.get(&k) {
            return Some(held.resource.resource().clone());
        }
        let resource = client
            .get_resource::<WgpuServer<AutoCompiler>>(handle.clone())
            .ok()?;
        let out = resource.resource().clone();
        counted_direct(DirectWork::Resolved);
        state.held.insert(
            k,
            Held {
                handle: handle.clone(),
                resource,
            },
        );
        Some(out)
    }

    fn bind_group(
        &self,
        client: &Client,
        state: &mut State,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[Handle],
        kernel: &'static str,
    ) -> Option<wgpu::BindGroup> {
        let resources: Vec<WgpuResource> = bindings
            .iter()
            .map(|h| self.resolve(client, state, h))
            .collect::<Option<_>>()?;
        let entries: Vec<wgpu::BindGroupEntry<'_>> = resources
            .iter()
            .zip(0u32..)
            .map(|(r, binding)| wgpu::BindGroupEntry {
                binding,
                resource: r.as_wgpu_bind_resource(),
            })
            .collect();
        counted_direct(DirectWork::BindGroup);
        let make = || {
            self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            })
        };
        #[cfg(target_family = "wasm")]
        return Some(self.scoped(kernel, make));
        #[cfg(not(target_family = "wasm"))]
        {
            let _ = kernel;
            Some(make())
        }
    }

    /// `make`'s work inside a validation error scope whose answer [`answers`] awaits at the
    /// next read, an error there reported as `kernel`'s refusal. In the browser only: there
    /// an error no scope takes reaches the device's uncaptured-error handler, CubeCL's, which
    /// panics (and the page's worker with it), and the browser answers later than the call.
    #[cfg(target_family = "wasm")]
    fn scoped<T>(&self, kernel: &'static str, make: impl FnOnce() -> T) -> T {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let made = make();
        let answer = scope.pop();
        SCOPES.with(|s| s.borrow_mut().push((kernel, Box::pin(answer), None)));
        made
    }

    /// Ends `recording`'s pass and submits it; where profiling, waits for it and writes each
    /// launch's device time.
    fn finish(&self, state: &mut State, recording: Recording) {
        let Recording {
            pass,
            mut encoder,
            launches,
            stamps,
            first,
        } = recording;
        let Some((set, names)) = stamps else {
            let submit = || {
                drop(pass);
                self.queue.submit([encoder.finish()]);
            };
            // A pipeline the browser refuses makes the pass, and with it the submit, invalid:
            // the error is reported as the recording's first kernel's (a launch whose pipeline
            // awaits its answer is recorded alone).
            #[cfg(target_family = "wasm")]
            self.scoped(first, submit);
            #[cfg(not(target_family = "wasm"))]
            {
                let _ = first;
                submit();
            }
            return;
        };
        drop(pass);
        // [launches + 1] u64 timestamps, resolved, then copied where the host can map them.
        let bytes = 8 * (launches as u64 + 1);
        let buffer = |usage| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolved = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let read = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let queries = u32::try_from(launches + 1).unwrap_or(u32::MAX);
        encoder.resolve_query_set(&set, 0..queries, &resolved, 0);
        encoder.copy_buffer_to_buffer(&resolved, 0, &read, 0, bytes);
        self.queue.submit([encoder.finish()]);
        #[cfg(not(target_family = "wasm"))]
        self.write_times(state, &read, &names);
        #[cfg(target_family = "wasm")]
        let _ = (state, read, names);
    }

    /// Waits for `read`'s timestamps and appends a line a launch to the profile: `| time |
    /// kernel_direct |`, the time from the end of the launch before (or the pass's start) to
    /// the end of this one, as CubeCL's profile log writes a kernel's.
    #[cfg(not(target_family = "wasm"))]
    fn write_times(&self, state: &mut State, read: &wgpu::Buffer, names: &[&'static str]) {
        use std::io::Write;
        let slice = read.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| ());
        let Some(out) = state.profile.as_mut() else {
            return;
        };
        if self
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .is_err()
        {
            // A lost device: the next read reports it.
            return;
        }
        let period = f64::from(self.queue.get_timestamp_period());
        let Ok(view) = slice.get_mapped_range() else {
            return;
        };
        let stamps: Vec<u64> = view
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect();
        drop(view);
        for (name, pair) in names.iter().zip(stamps.windows(2)) {
            let ns = pair[1].saturating_sub(pair[0]) as f64 * period;
            // A failed write loses the profile, never the run.
            let _ = writeln!(out, "| {ns:.0}ns | {name}_direct |");
        }
        let _ = out.flush();
    }

    /// This thread's CubeCL recording, then its direct one; then, where `release` and no
    /// thread has launches waiting, lets go of what only this holds (a handle dropped by its
    /// owner while a thread's launches that bind it wait must outlive their submit).
    fn submit(&self, client: &Client, state: &mut State, release: bool) {
        let thread = std::thread::current().id();
        if let Some(recording) = state.recordings.remove(&thread) {
            // A flush fails only on a device CubeCL has found lost, which the next read reports.
            let _ = client.flush();
            self.finish(state, recording);
        }
        if !release || !state.recordings.is_empty() {
            return;
        }
        // Our clone is the last but CubeCL's own: the owner dropped the handle.
        let before = state.held.len();
        state.held.retain(|_, h| !h.handle.memory.can_mut());
        let released = before - state.held.len();
        if released > 0 {
            counted_direct(DirectWork::Released(released as u64));
            let held = &state.held;
            state
                .groups
                .retain(|keys, _| keys[1..].iter().all(|k| held.contains_key(k)));
        }
    }
}
