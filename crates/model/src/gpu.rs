//! GGUF blocks on wgpu / WebGPU: matrices uploaded as their blocks and multiplied by
//! mars-kernels' WGSL kernels (`mars_kernels::gpu`) on the same CubeCL client burn runs on, so
//! activations go from burn's buffers to the kernels and back with no copy. Everything else in
//! the forward pass (norms, RoPE, attention) stays burn ops.

use std::sync::Arc;

use burn::backend::Cube;
use burn::backend::wgpu::CubeTensor;
use burn::tensor::{DType, Device, Shape, Tensor};
use burn_cubecl::kernel::into_contiguous;
use mars_kernels::gpu::{GpuMatrix, PART_PAD, Reduce};
use mars_kernels::{QMatrix, WeightType};

use crate::error::{ModelError, Result};
use crate::weights::Weights;

/// Largest part a matrix is uploaded in (and later multiplied as, one launch per part): a
/// loader reading from a file not held in memory (the page's `Blob`) holds one part at a time,
/// so this bounds the wasm heap a load needs beyond the tokenizer; the Qwen2.5 embedding
/// (151,936 × 1,536 as Q6_K, 191 MB) goes in three parts.
pub(crate) const LOAD_PART_BYTES: u64 = 64 << 20;

/// A `[out, in]` matrix of GGUF blocks in GPU memory (split by output rows where it exceeds
/// the adapter's largest binding).
#[derive(Clone)]
pub(crate) struct GpuLinear {
    matrix: Arc<GpuMatrix>,
    client: cubecl::client::Client,
    device: burn_cubecl::CubeDevice,
}

impl std::fmt::Debug for GpuLinear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuLinear")
            .field("matrix", &self.matrix)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// The CubeCL client and device behind a burn wgpu device, found once per model load.
#[derive(Clone)]
pub(crate) struct GpuTarget {
    client: cubecl::client::Client,
    device: burn_cubecl::CubeDevice,
    /// How the kernels' partial sums meet on this device.
    reduce: Reduce,
}

impl GpuTarget {
    /// Read off a one-value tensor: the one handle burn gives to its runtime. `subgroups`: the
    /// adapter's smallest subgroup where it offers subgroups ([`WeightPath::GpuBlocks`]).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for a device that is not wgpu.
    ///
    /// [`WeightPath::GpuBlocks`]: crate::WeightPath::GpuBlocks
    pub(crate) fn of(device: &Device, subgroups: Option<u32>) -> Result<Self> {
        let (client, device) = client_of(device)?;
        let reduce = match subgroups {
            Some(_) => Reduce::for_subgroups(subgroups),
            None => Reduce::detect(&client),
        };
        Ok(Self {
            client,
            device,
            reduce,
        })
    }
}

/// The adapter's smallest subgroup where it offers subgroups (wgpu's `SUBGROUP`, reported by
/// Vulkan, Metal and D3D12 adapters, lavapipe's included; wgpu's WebGPU backend reports none),
/// for [`WeightPath::GpuBlocks`](crate::WeightPath::GpuBlocks); `None` without them
/// or with a size the kernels cannot use (not a power of two of at least 2).
pub fn subgroup_lanes(adapter: &burn::backend::wgpu::wgpu::Adapter) -> Option<u32> {
    use burn::backend::wgpu::wgpu::Features;
    let min = adapter.get_info().subgroup_min_size;
    let usable = Reduce::for_subgroups(Some(min)) != Reduce::Workgroup;
    (adapter.features().contains(Features::SUBGROUP) && usable).then_some(min)
}

/// Why the block kernels cannot run on `adapter`, or `None` where they can. They decode f16
/// block scales with `unpack2x16float` (core WGSL), which wgpu grants through the downlevel flag
/// `SHADER_F16_IN_F32`: every backend sets it (the browser's included), but wgpu withdraws it on
/// llvmpipe without `shader-f16`, where creating the kernels' pipelines would fail.
pub fn blocks_unsupported(adapter: &burn::backend::wgpu::wgpu::Adapter) -> Option<&'static str> {
    use burn::backend::wgpu::wgpu::DownlevelFlags;
    let flags = adapter.get_downlevel_capabilities().flags;
    (!flags.contains(DownlevelFlags::SHADER_F16_IN_F32)).then_some(
        "the adapter cannot unpack f16 values in shaders (wgpu's SHADER_F16_IN_F32: llvmpipe \
         without shader-f16), so the GGUF block kernels cannot run: weights go to it as f32",
    )
}

fn client_of(device: &Device) -> Result<(cubecl::client::Client, burn_cubecl::CubeDevice)> {
    let probe = Tensor::<1>::zeros([1], device)
        .try_into_primitive::<Cube>()
        .map_err(|e| {
            ModelError::Unsupported(format!("GGUF blocks on the GPU need a wgpu device: {e:?}"))
        })?;
    Ok((probe.client.clone(), probe.device.clone()))
}

impl GpuLinear {
    /// Uploads `w`'s blocks to `target`.
    ///
    /// # Errors
    /// The kernels' error for a row larger than the adapter binds.
    pub(crate) fn upload(w: &QMatrix, target: &GpuTarget) -> Result<Self> {
        let (client, device) = (target.client.clone(), target.device.clone());
        let max = client.properties().memory.max_page_size;
        let mut matrix = GpuMatrix::upload(&client, w.ty(), w.rows(), w.cols(), w.blocks(), max)?;
        matrix.set_reduce(target.reduce)?;
        Ok(Self {
            matrix: Arc::new(matrix),
            client,
            device,
        })
    }

    /// Uploads the stored `[rows, cols]` matrix `name` of `ty` from `g`, a part at a time (at
    /// most [`LOAD_PART_BYTES`] each): only one part's bytes are on the host at once.
    ///
    /// # Errors
    /// The source's error reading a part; the kernels' error for a row larger than a part.
    pub(crate) fn upload_stored(
        g: &dyn Weights,
        name: &str,
        ty: WeightType,
        rows: usize,
        cols: usize,
        target: &GpuTarget,
    ) -> Result<Self> {
        let (client, device) = (target.client.clone(), target.device.clone());
        let max = client
            .properties()
            .memory
            .max_page_size
            .min(LOAD_PART_BYTES);
        let mut matrix = GpuMatrix::upload_with(&client, ty, rows, cols, max, |range| {
            g.stored_bytes(name, range, PART_PAD)
        })?;
        matrix.set_reduce(target.reduce)?;
        Ok(Self {
            matrix: Arc::new(matrix),
            client,
            device,
        })
    }

    /// Bytes of blocks one product reads.
    pub(crate) fn bytes(&self) -> u64 {
        self.matrix.bytes()
    }

    /// `x [1, t, in] → [1, t, out]`, 16 rows a launch.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for a tensor that is not f32 on wgpu; the kernels' error
    /// for a width other than the matrix's columns.
    pub(crate) fn forward(&self, x: Tensor<3>) -> Result<Tensor<3>> {
        let [_, t, _] = x.dims();
        let x = into_contiguous(x.try_into_primitive::<Cube>().map_err(|e| {
            ModelError::Unsupported(format!("a GGUF-block matrix on a non-wgpu tensor: {e:?}"))
        })?);
        if x.dtype != DType::F32 {
            return Err(ModelError::Unsupported(format!(
                "activations of dtype {:?} (the block kernels take f32)",
                x.dtype
            )));
        }
        let rows = self.matrix.rows();
        let y = x.client.empty(t * rows * 4);
        self.matrix.matmul(&x.client, &x.handle, &y, t)?;
        let out = CubeTensor::new_contiguous(
            x.client.clone(),
            x.device.clone(),
            Shape::new([1, t, rows]),
            y,
            DType::F32,
        );
        Ok(Tensor::from_primitive::<Cube>(out))
    }

    /// The rows of `ids` (each below the matrix's rows: the caller checks the vocabulary),
    /// dequantized: `[1, t, cols]`.
    ///
    /// # Errors
    /// The kernels' error for more ids than one lookup takes.
    pub(crate) fn lookup(&self, ids: &[u32]) -> Result<Tensor<3>> {
        let client = &self.client;
        let id_bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ids_handle = client.create_from_slice(&id_bytes);
        let cols = self.matrix.cols();
        let out = client.empty(ids.len() * cols * 4);
        self.matrix.embed(client, &ids_handle, &out, ids.len())?;
        let out = CubeTensor::new_contiguous(
            client.clone(),
            self.device.clone(),
            Shape::new([1, ids.len(), cols]),
            out,
            DType::F32,
        );
        Ok(Tensor::from_primitive::<Cube>(out))
    }
}
