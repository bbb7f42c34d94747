"""What a GPU driver's compiler makes of the mat-vec kernels, without that GPU.

Compiles SPIR-V compute modules into pipelines on the first Vulkan device, a Mesa driver on a
device that is not there (tests/bench/gpu-isa.sh: RADV's null device, AMD's ACO compiler for an
RDNA2 card; or NVK through Mesa's DRM shim, NAK compiling for an NVIDIA Ada card), reads the
driver's statistics (VK_KHR_pipeline_executable_properties: registers, spills, instructions)
and its disassembly (RADV_DEBUG=shaders; NAK_DEBUG=print, its last pass), finds the kernel's
innermost loop (the blocks a branch goes back over) and divides its instructions by the weights
a thread takes each pass of it and by the rows. Counts, not times: the same on every run.

    usage: gpu-isa.py TABLE.tsv | --stats TABLE.tsv | --carve FOLDER
TABLE.tsv: name, SPIR-V path, specialization ("ID=VALUE,..." or "-"), weights a pass, rows,
robustness: `wgpu` (the device's robustBufferAccess and VK_EXT_robustness2's
robustBufferAccess2 on, as wgpu opens every Vulkan device that has them: mars's kernels) or
`off` (bounds unchecked by the driver, as llama.cpp creates its mat-vec pipelines:
VK_EXT_pipeline_robustness, storage and uniform buffers disabled).
Environment: ISA_DRIVER (radv, the default, or nak: which disassembly to read), ISA_RUNNER (a
program the compiling child runs through: the DRM shim's loader).
Prints one line a module: the loop's ALU (RADV: VALU) and all instructions a weight and row,
conversions and loads a weight and row, the loads' widths, registers, scratch (spills), the
whole shader's instruction count; NAK adds its static cycle count of the loop (the issue
delays it schedules, one warp alone) a weight and row, a pass's trips to memory one after
another (memory_trips) with the weights a lane takes a trip, the warps an H200 multiprocessor
could hold at those registers (warps_an_sm), and the weights those warps keep in flight (warps
× a lane's weights a trip: memory-level parallelism under NAK's schedule).
--stats: the driver's own statistics alone, every module on this machine's GPU in one process
(paths relative to the table; `gpu-isa.sh` with ISA_WRITE writes such a table and its modules):
where the compiler is a real GPU's, which runs nowhere else (NVIDIA's), its register counts;
with ISA_CACHE_DIR each pipeline's cache data (the driver's container of its compiled code) and
the internal representations the driver gives (Mesa's: NIR and machine code) to that folder.
--carve: the CUDA ELFs inside such files, for cuobjdump / nvdisasm.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from collections import Counter

SPV_DECORATE = 71
SPV_TYPE_POINTER = 32
SPV_VARIABLE = 59
DECO_BLOCK = 2
DECO_BUFFER_BLOCK = 3
DECO_BINDING = 33
DECO_SET = 34
SC_UNIFORM = 2
SC_PUSH = 9
SC_STORAGE = 12


def reflect(words: tuple[int, ...]) -> tuple[dict[tuple[int, int], bool], bool]:
    """(set, binding) -> whether a storage buffer; whether there are push constants."""
    deco: dict[int, dict[str, int]] = {}
    buffer_block: set[int] = set()
    ptr: dict[int, tuple[int, int]] = {}
    var: dict[int, tuple[int, int]] = {}
    i = 5
    while i < len(words):
        op, n = words[i] & 0xFFFF, words[i] >> 16
        a = words[i + 1 : i + n]
        if op == SPV_DECORATE and a[1] in (DECO_SET, DECO_BINDING):
            deco.setdefault(a[0], {})["set" if a[1] == DECO_SET else "binding"] = a[2]
        elif op == SPV_DECORATE and a[1] == DECO_BUFFER_BLOCK:
            buffer_block.add(a[0])
        elif op == SPV_TYPE_POINTER:
            ptr[a[0]] = (a[1], a[2])
        elif op == SPV_VARIABLE:
            var[a[1]] = (a[0], a[2])
        i += max(n, 1)
    binds: dict[tuple[int, int], bool] = {}
    push = False
    for v, (ty, sc) in var.items():
        push |= sc == SC_PUSH
        if v in deco and "binding" in deco[v]:
            storage = sc == SC_STORAGE or (
                sc == SC_UNIFORM and ptr[ty][1] in buffer_block
            )
            binds[(deco[v].get("set", 0), deco[v]["binding"])] = storage
    return binds, push


def open_device(robust: str):  # noqa: ANN201 (the `vulkan` package's handle)
    """A device on the first Vulkan GPU (else the first device) with every feature it has,
    the pipeline statistics, and `robust` (see the module's TABLE)."""
    import vulkan as vk  # the `vulkan` package: cffi over the system's loader

    inst = vk.vkCreateInstance(
        vk.VkInstanceCreateInfo(
            pApplicationInfo=vk.VkApplicationInfo(
                apiVersion=vk.VK_MAKE_VERSION(1, 3, 0)
            )
        ),
        None,
    )
    devices = vk.vkEnumeratePhysicalDevices(inst)
    pd = next(
        (
            d
            for d in devices
            if vk.vkGetPhysicalDeviceProperties(d).deviceType
            != vk.VK_PHYSICAL_DEVICE_TYPE_CPU
        ),
        devices[0],
    )
    extensions = ["VK_KHR_pipeline_executable_properties"]
    has = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)}
    # The matrix-unit tiles' SPIR-V needs cooperative matrices where the device has them.
    chain = None
    if "VK_KHR_cooperative_matrix" in has:
        extensions.append("VK_KHR_cooperative_matrix")
        chain = vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR()
    if robust == "wgpu" and "VK_EXT_robustness2" in has:
        extensions.append("VK_EXT_robustness2")
        chain = vk.VkPhysicalDeviceRobustness2FeaturesEXT(pNext=chain)
    fpe = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
        pNext=chain, pipelineExecutableInfo=vk.VK_TRUE
    )
    f13 = vk.VkPhysicalDeviceVulkan13Features(pNext=fpe)
    f12 = vk.VkPhysicalDeviceVulkan12Features(pNext=f13)
    f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12)
    f2 = vk.VkPhysicalDeviceFeatures2(pNext=f11)
    vk.vkGetPhysicalDeviceFeatures2(pd, f2)  # every feature the device has, asked for
    fpe.pipelineExecutableInfo = vk.VK_TRUE
    if robust == "off":
        # No bounds checks by the driver: what a pipeline with robustness disabled compiles to.
        f2.features.robustBufferAccess = vk.VK_FALSE
    queue = vk.VkDeviceQueueCreateInfo(
        queueFamilyIndex=0, queueCount=1, pQueuePriorities=[1.0]
    )
    dev = vk.vkCreateDevice(
        pd,
        vk.VkDeviceCreateInfo(
            pNext=f2,
            pQueueCreateInfos=[queue],
            ppEnabledExtensionNames=extensions,
        ),
        None,
    )
    return dev


def pipeline_stats(  # noqa: ANN001
    dev, path: str, spec: str, cache_to: str | None = None
) -> list[tuple[str, object]]:
    """Creates the pipeline of the module at `path` (the driver may dump its code to stderr)
    and returns the driver's statistics of it, by name, in its order; with `cache_to`, the
    pipeline made into a cache of its own whose data (the driver's compiled code, in its own
    container) goes to that file."""
    import vulkan as vk

    with open(path, "rb") as f:
        data = f.read()
    binds, push = reflect(struct.unpack(f"<{len(data) // 4}I", data))
    sets: dict[int, list[object]] = {}
    for (s, b), storage in sorted(binds.items()):
        kind = (
            vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            if storage
            else vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER
        )
        sets.setdefault(s, []).append(
            vk.VkDescriptorSetLayoutBinding(
                binding=b,
                descriptorType=kind,
                descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            )
        )
    layouts = [
        vk.vkCreateDescriptorSetLayout(
            dev, vk.VkDescriptorSetLayoutCreateInfo(pBindings=sets.get(s, [])), None
        )
        for s in range(max(sets) + 1 if sets else 0)
    ]
    ranges = (
        [
            vk.VkPushConstantRange(
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=128
            )
        ]
        if push
        else []
    )
    layout = vk.vkCreatePipelineLayout(
        dev,
        vk.VkPipelineLayoutCreateInfo(pSetLayouts=layouts, pPushConstantRanges=ranges),
        None,
    )
    module = vk.vkCreateShaderModule(
        dev, vk.VkShaderModuleCreateInfo(codeSize=len(data), pCode=data), None
    )
    spec_info = None
    if spec != "-":
        pairs = [tuple(int(x) for x in p.split("=")) for p in spec.split(",")]
        blob = struct.pack(f"<{len(pairs)}I", *[v for _, v in pairs])
        spec_info = vk.VkSpecializationInfo(
            pMapEntries=[
                vk.VkSpecializationMapEntry(constantID=k, offset=4 * j, size=4)
                for j, (k, _) in enumerate(pairs)
            ],
            dataSize=len(blob),
            pData=vk.ffi.from_buffer(blob),
        )
    stage = vk.VkPipelineShaderStageCreateInfo(
        stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
        module=module,
        pName="main",
        pSpecializationInfo=spec_info,
    )
    flags = vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
    if cache_to:
        flags |= vk.VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR
    info = vk.VkComputePipelineCreateInfo(flags=flags, stage=stage, layout=layout)
    cache = None
    if cache_to:
        cache = vk.vkCreatePipelineCache(dev, vk.VkPipelineCacheCreateInfo(), None)
    pipe = vk.vkCreateComputePipelines(dev, cache, 1, [info], None)[0]
    if cache is not None:
        # The package wraps no vkGetPipelineCacheData (its data is untyped): the loader's
        # own entry point, asked for the size and then the data.
        size = vk.ffi.new("size_t *")
        vk.lib.vkGetPipelineCacheData(dev, cache, size, vk.ffi.NULL)
        data = vk.ffi.new("char[]", size[0])
        vk.lib.vkGetPipelineCacheData(dev, cache, size, data)
        with open(cache_to, "wb") as f:
            f.write(vk.ffi.buffer(data, size[0]))
        vk.vkDestroyPipelineCache(dev, cache, None)
    props = vk.vkGetDeviceProcAddr(dev, "vkGetPipelineExecutablePropertiesKHR")
    stats = vk.vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR")
    out: list[tuple[str, object]] = []
    executables = len(list(props(dev, vk.VkPipelineInfoKHR(pipeline=pipe))))
    if cache_to:
        internal_representations(dev, pipe, executables, cache_to.removesuffix(".cache"))
    for n in range(executables):
        for st in stats(
            dev, vk.VkPipelineExecutableInfoKHR(pipeline=pipe, executableIndex=n)
        ):
            name = (
                st.name if isinstance(st.name, str) else vk.ffi.string(st.name).decode()
            )
            value = {
                vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: st.value.u64,
                vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: st.value.i64,
                vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: st.value.f64,
            }.get(st.format, st.value.b32)
            out.append((name, value))
    vk.vkDestroyPipeline(dev, pipe, None)
    return out


def internal_representations(dev, pipe, executables: int, stem: str) -> None:  # noqa: ANN001
    """Each text the driver gives of the pipeline's executables (its intermediate forms and
    machine code, where it gives any: Mesa's drivers do) to STEM.N.NAME.txt. The package's
    wrapper asks the sizes alone, so the data are asked through the entry point itself."""
    import vulkan as vk

    fn = vk.ffi.cast(
        "PFN_vkGetPipelineExecutableInternalRepresentationsKHR",
        vk.lib.vkGetDeviceProcAddr(dev, b"vkGetPipelineExecutableInternalRepresentationsKHR"),
    )
    for n in range(executables):
        exe = vk.ffi.new(
            "VkPipelineExecutableInfoKHR *",
            {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, "pipeline": pipe,
             "executableIndex": n},
        )
        count = vk.ffi.new("uint32_t *")
        if fn(dev, exe, count, vk.ffi.NULL) != vk.VK_SUCCESS or count[0] == 0:
            continue
        reps = vk.ffi.new("VkPipelineExecutableInternalRepresentationKHR[]", count[0])
        for r in reps:
            r.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR
        fn(dev, exe, count, reps)  # the sizes
        keep = []
        for r in reps:
            keep.append(vk.ffi.new("char[]", max(r.dataSize, 1)))
            r.pData = keep[-1]
        fn(dev, exe, count, reps)  # the data
        for r in reps:
            name = vk.ffi.string(r.name).decode(errors="replace")
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "representation"
            data = bytes(vk.ffi.buffer(r.pData, r.dataSize))
            with open(f"{stem}.{n}.{safe}.{'txt' if r.isText else 'bin'}", "wb") as f:
                f.write(data.rstrip(b"\0"))


def compile_one(path: str, spec: str, robust: str) -> None:
    """Creates the pipeline (the driver dumps its code to stderr) and prints its statistics."""
    for name, value in pipeline_stats(open_device(robust), path, spec):
        print(f"stat\t{name}\t{value}", file=sys.stderr, flush=True)


# The statistic that counts a thread's registers, as each driver names it: NVIDIA's own,
# NAK's, RADV's (its vector registers: a lane's).
REGISTERS = re.compile(r"(?i)regist|^number of gprs$|^vgprs$")


def stats_table(table: str) -> None:
    """The driver's own statistics of every module of `table` (paths relative to it), compiled
    on this machine's GPU: a line a module, a column a statistic, and the warps an NVIDIA
    Hopper multiprocessor holds at the registers it reports (warps_an_sm). On a GPU whose
    compiler cannot be run elsewhere (NVIDIA's) its register counts stand beside NAK's."""
    base = os.path.dirname(os.path.abspath(table))
    devices: dict[str, object] = {}
    rows: list[tuple[str, dict[str, object], str]] = []
    names: list[str] = []
    with open(table) as f:
        lines = f.read().splitlines()
    cache_dir = os.environ.get("ISA_CACHE_DIR")
    for line in lines:
        name, path, spec, _per_pass, _rows, robust = line.split("\t")
        cache_to = None
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            cache_to = os.path.join(cache_dir, name.replace(":", "-") + ".cache")
        try:
            dev = devices.get(robust) or devices.setdefault(robust, open_device(robust))
            got = pipeline_stats(dev, os.path.join(base, path), spec, cache_to)
        except Exception as e:  # noqa: BLE001 (a module the driver refuses is a row)
            rows.append((name, {}, f"failed: {type(e).__name__} {e}".strip()))
            continue
        for k, _ in got:
            if k not in names:
                names.append(k)
        rows.append((name, dict(got), ""))
    reg = next((n for n in names if REGISTERS.search(n)), None)
    print(f"| kernel | {' | '.join(names)} | warps an SM (H200, at {reg or 'no register count'}) |")
    print("|---" * (len(names) + 2) + "|")
    for name, got, why in rows:
        if why:
            print(f"| {name} | {why} |")
            continue
        regs = got.get(reg) if reg else None
        warps = warps_an_sm(int(regs)) if isinstance(regs, int) else "-"
        cells = " | ".join(str(got.get(n, "")) for n in names)
        print(f"| {name} | {cells} | {warps} |")


def kind(ins: str) -> str:
    op = ins.split()[0]
    if op.startswith(("buffer_load", "global_load", "scratch_load")):
        return "load"
    if op.startswith(("s_load", "s_buffer_load")):
        return "smem"
    if op.startswith("ds_"):
        return "lds"
    if op.startswith(("s_waitcnt", "s_clause", "s_nop", "s_delay", "s_inst_prefetch")):
        return "wait"
    if op.startswith(("s_cbranch", "s_branch")):
        return "branch"
    if op.startswith("v_"):
        return "valu"
    return "salu" if op.startswith("s_") else "other"


def disassembly(text: str) -> list[tuple[str, list[str]]]:
    """The blocks of the 'disasm:' section: (name, instructions)."""
    blocks: list[tuple[str, list[str]]] = []
    on = False
    for line in text.splitlines():
        if line.startswith("disasm:"):
            on = True
            continue
        if not on:
            continue
        if not line.strip():
            break
        m = re.match(r"^(BB\d+):", line)
        if m:
            blocks.append((m.group(1), []))
        elif line.startswith("\t") and blocks:
            ins = line.strip().split(";")[0].strip()
            if ins:
                blocks[-1][1].append(ins)
    return blocks


def nak_op(ins: str) -> str:
    """An instruction's operation in NAK's print: after any `@p` guard and `dst =`."""
    body = re.sub(r"^@!?\w+\s+", "", ins.split("//")[0].strip())
    if " = " in body:
        body = body.split(" = ", 1)[1]
    return body.split()[0] if body.split() else ""


def nak_kind(ins: str) -> str:
    op = nak_op(ins)
    if op.startswith("ld.global"):
        return "load"
    if op.startswith(("ld.shared", "st.shared")):
        return "lds"
    if op.startswith(("ldc", "r2ur", "s2r")):
        return "smem"
    if op.startswith(("bra", "bssy", "bsync", "bclear", "exit", "nop", "bar", "sync")):
        return "branch"
    return "alu"


def nak_blocks(text: str) -> list[tuple[str, list[str]]]:
    """The blocks of NAK's last pass printed (NAK_DEBUG=print), each block's successors as
    pseudo-instructions `s_branch BBn` at its end (and `s_endpgm` where it has none), so that
    `inner_loops` reads NAK's control flow as it reads RADV's. Only what lies between a block's
    header and its closing line is taken: the statistics printed after the last block are not
    instructions."""
    last = text.rfind("NAK IR after ")
    blocks: list[tuple[str, list[str]]] = []
    inside = False
    for line in text[last:].splitlines()[1:]:
        if line.startswith(("Encoded shader", "NAK IR")):
            break
        m = re.match(r"^block(?:\.u)? (\d+) ", line)
        if m:
            blocks.append((f"BB{m.group(1)}", []))
            inside = True
            continue
        m = re.match(r"^\} -> \[([\d, ]*)\]", line)
        if m and blocks:
            succ = [f"BB{t.strip()}" for t in m.group(1).split(",") if t.strip()]
            blocks[-1][1].extend(f"s_branch {t}" for t in succ)
            if not succ:
                blocks[-1][1].append("s_endpgm")
            inside = False
            continue
        ins = line.strip()
        if ins and inside:
            blocks[-1][1].append(ins)
    return blocks


def is_pseudo(ins: str) -> bool:
    """`nak_blocks`' successor lines, which are not NAK's instructions."""
    return ins.startswith("s_branch ") or ins == "s_endpgm"


def successors(
    blocks: list[tuple[str, list[str]]], at: dict[str, int], n: int
) -> list[int]:
    """Block n's successors: its branches' targets, and the next block unless it ends in an
    unconditional branch or the program's end (RADV's `s_branch`, `s_endpgm`; NAK's blocks
    end in their full successor list as `s_branch`es, or `s_endpgm`); `at`: each block's index
    by name."""
    ins = blocks[n][1]
    out = []
    for i in ins:
        m = re.match(r"s_c?branch\w*\s+(BB\d+)", i)
        if m and m.group(1) in at:
            out.append(at[m.group(1)])
    ends = bool(ins) and ins[-1].split()[0] in ("s_branch", "s_endpgm", "s_setpc_b64")
    if not ends and n + 1 < len(blocks):
        out.append(n + 1)
    return out


def inner_loops(blocks: list[tuple[str, list[str]]], cost=len) -> list[list[str]]:
    """Each innermost loop's instructions on its costliest pass: for a back edge (a branch to
    a block at or before it, the loop's header), the natural loop (the blocks that reach the
    branch without passing the header, so blocks laid out between them but outside the loop,
    such as a kernel's epilogue placed before a latch the compiler moved to the end, are not
    counted), then the path from the header to the back edge through those blocks whose
    instructions `cost` most: a uniform branch's one side, or where both sides are a lane's
    choice (a warp or wave issues both), the longer, which is the kernel's hot path wherever the
    cold side is the shorter (the zero-filling of a dead output, a last partial step)."""
    at = {name: k for k, (name, _) in enumerate(blocks)}
    succ = [successors(blocks, at, n) for n in range(len(blocks))]
    pred: list[list[int]] = [[] for _ in blocks]
    for n, ss in enumerate(succ):
        for t in ss:
            pred[t].append(n)
    loops = []
    for n in range(len(blocks)):
        for h in succ[n]:
            if h > n:
                continue
            body = {h, n}
            todo = [n]
            while todo:
                for q in pred[todo.pop()]:
                    if q not in body:
                        body.add(q)
                        todo.append(q)
            loops.append((h, n, body))
    inner = [
        (h, n, body) for h, n, body in loops if not any(b2 < body for _, _, b2 in loops)
    ]
    paths = []
    for h, n, body in inner:
        # Longest path over the loop's blocks as a DAG (edges back to the header dropped),
        # in layout order, which is topological for a reducible loop's forward edges.
        best: dict[int, tuple[int, list[int]]] = {h: (cost(blocks[h][1]), [h])}
        for k in sorted(body):
            if k not in best:
                continue
            w, path = best[k]
            for t in succ[k]:
                if t in body and t > k:
                    cand = (w + cost(blocks[t][1]), path + [t])
                    if t not in best or cand[0] > best[t][0]:
                        best[t] = cand
        if n in best:
            paths.append([i for k in best[n][1] for i in blocks[k][1]])
    return paths


def nak_loops(text: str) -> list[list[str]]:
    """Each innermost loop's hot path in NAK's print, its pseudo-instructions left out."""
    loops = inner_loops(
        nak_blocks(text), cost=lambda b: sum(not is_pseudo(i) for i in b)
    )
    return [[i for i in ins if not is_pseudo(i)] for ins in loops]


def warps_an_sm(gprs: int) -> int:
    """Warps an NVIDIA Hopper multiprocessor holds at `gprs` registers a thread, by registers
    alone: 65,536 registers, given to a warp 256 at a time, at most 64 warps (CUDA's occupancy
    rules for compute capability 9.0). Fewer warps hide less of the memory's latency. NAK's
    count stands in for NVIDIA's own compiler's, which may allocate otherwise."""
    if gprs <= 0:
        return 64
    per_warp = -(-gprs * 32 // 256) * 256
    return min(64, 65536 // per_warp)


def delay(ins: str) -> int:
    m = re.search(r"delay=(\d+)", ins)
    return int(m.group(1)) if m else 0


def memory_trips(path: list[str]) -> int:
    """The trips to memory a warp makes one after another in one pass of a loop's hot path: a
    wait (`wt=`, a mask of scoreboards, 0 rightmost) on a scoreboard that a global load set
    (`wr:N`) is a trip of its own where that load was issued after the warp's last such trip
    began; loads issued before it were in flight during it and cost no further trip. So a pass
    of n trips keeps a lane's loads in flight in n rounds, each ~0.5-1 µs on HBM that only
    other warps hide. Counted on the path's second lap, so that a load issued at the end of one
    pass and waited on in the next (a prefetch) counts where it is waited on. NAK's schedule,
    not NVIDIA's compiler's."""
    pending: dict[int, int] = {}  # scoreboard -> the latest trip count a load on it saw
    trips = 0
    counted = 0
    for lap in (0, 1):
        for ins in path:
            m = re.search(r"wt=([01]+)", ins)
            if m:
                mask = {k for k, b in enumerate(reversed(m.group(1))) if b == "1"}
                hit = [pending.pop(k) for k in mask if k in pending]
                if hit and max(hit) == trips:
                    trips += 1
                    counted += lap
            m = re.search(r"\bwr:(\d)", ins)
            if m and nak_kind(ins) == "load":
                pending[int(m.group(1))] = trips
    return counted


# NAK's print of a loop whose latch the compiler placed after the kernel's end (as it does for
# mars's mat-vec loops): header 0, a uniform branch (1: the hot side, 2: the cold one), a join 3
# that leaves for the epilogue 4 (outside the loop) or goes on to the latch 5.
SELF_TEST_NAK = """NAK IR after final
block.u 0 L1 [5] -> {
    r1 = iadd3 r1 0x1 rZ // delay=2
    @!p0 bra pT L3 // delay=1
} -> [1, 2]
block 1 L2 [0] -> {
    r2 = ld.global.a64.constant.b128 [r4..6+rZ], pT // delay=1 wr:0
    r5 = i2f.f32.u32.re r7 // delay=1 wr:1
    r3 = idp4.i8.i8 r2 r3 rZ // delay=4 wt=000001
    r3 = idp4.i8.i8 r2 r3 rZ // delay=4 wt=000010
    bra pT L4 // delay=1
} -> [3]
block 2 L3 [0] -> {
    r3 = mov rZ // delay=1
} -> [3]
block 3 L4 [1, 2] -> {
    p1 = isetp.lt.u32 r1 r9 // delay=13
    @!p1 bra pT L6 // delay=1
} -> [4, 5]
block 4 L5 [3] -> {
    r0 = shfl.bfly r3 0x8 0x1f // delay=2
    r0 = fadd.ftz r3 r0 // delay=5
    st.global.a64.strong.gpu.b32 [r6..8+rZ] r0 // delay=2
    exit // delay=1
} -> []
block 5 L6 [3] -> {
    bra pT L1 // delay=1
} -> [0]
Stage: compute
Instruction count: 13
"""

# RADV's disassembly of the same shape, with fall-through edges and a loop laid out in one run.
SELF_TEST_RADV = """disasm:
BB0:
\ts_mov_b32 s0, 0
BB1:
\tv_add_u32 v1, 1, v1
\ts_cbranch_scc0 BB3
BB2:
\tbuffer_load_dwordx4 v[2:5], v0, s[0:3], 0 offen
\tv_dot4_i32_i8 v6, v2, v3, v6
\ts_branch BB4
BB3:
\tv_mov_b32 v6, 0
BB4:
\ts_cbranch_scc1 BB1
BB5:
\tbuffer_store_dword v6, v0, s[0:3], 0 offen
\ts_endpgm

"""


def self_test() -> None:
    """The loop finder on the two samples above: the hot path of the loop alone, neither the
    epilogue laid out inside the loop's span, nor the cold side, nor the text after the last
    block. Run by CI (tests/run.sh), which has no GPU driver to compile with."""
    nak = nak_loops(SELF_TEST_NAK)
    assert len(nak) == 1, nak
    ops = [nak_op(i) for i in nak[0]]
    assert ops == [
        "iadd3",
        "bra",
        "ld.global.a64.constant.b128",
        "i2f.f32.u32.re",
        "idp4.i8.i8",
        "idp4.i8.i8",
        "bra",
        "isetp.lt.u32",
        "bra",
        "bra",
    ], ops
    assert sum(delay(i) for i in nak[0]) == 29, nak[0]
    # One trip a pass; the wait on the conversion's scoreboard is not a load's.
    assert memory_trips(nak[0]) == 1, nak[0]
    # A prefetch: the loads at a pass's end, waited on at the next pass's start (once a pass),
    # two on one scoreboard waited on together (one trip).
    ld = "r2 = ld.global.a64.constant.b128 [r4..6+rZ], pT // delay=1 wr:"
    use = "r3 = idp4.i8.i8 r2 r3 rZ // delay=4 wt="
    assert memory_trips([use + "000001", ld + "0", ld + "0"]) == 1
    # Two loads issued together, then waited on one after the other: the second arrived
    # during the first's wait, one trip; each load issued after the other's wait: two.
    assert memory_trips([ld + "0", ld + "1", use + "000001", use + "000010"]) == 1
    assert memory_trips([ld + "0", use + "000001", ld + "1", use + "000010"]) == 2
    radv = inner_loops(disassembly(SELF_TEST_RADV))
    assert len(radv) == 1, radv
    assert [i.split()[0] for i in radv[0]] == [
        "v_add_u32",
        "s_cbranch_scc0",
        "buffer_load_dwordx4",
        "v_dot4_i32_i8",
        "s_branch",
        "s_cbranch_scc1",
    ], radv
    # CUDA's occupancy calculator at compute capability 9.0, by registers alone.
    warps = [warps_an_sm(g) for g in (32, 40, 56, 88, 168, 255)]
    assert warps == [64, 51, 36, 23, 12, 8], warps
    # Each driver's name for a thread's registers, and not AMD's scalar ones.
    names = ["Register Count", "Number of GPRs", "VGPRs", "SGPRs", "Spills to memory"]
    assert [bool(REGISTERS.search(n)) for n in names] == [True, True, True, False, False]
    # A CUDA ELF inside a cache's bytes comes out whole (its end: the section headers'); an
    # ELF for another machine, and a header cut short, do not.
    def elf(machine: int, body: int) -> bytes:
        head = bytearray(64)
        head[0:6] = b"\x7fELF\x02\x01"
        struct.pack_into("<H", head, 18, machine)
        struct.pack_into("<QQ", head, 32, 0, 64 + body)  # no program headers; sections after
        struct.pack_into("<HHHH", head, 54, 56, 0, 64, 2)
        return bytes(head) + bytes(range(body)) + b"\xee" * 128
    cuda = elf(EM_CUDA, 40)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.cache"), "wb") as f:
            f.write(b"head" + elf(62, 8) + b"pad" + cuda + b"tail" + cuda[:30])
        carve(d)
        got = sorted(n for n in os.listdir(d) if n.endswith(".cubin"))
        assert got == ["k-0.cubin"], got
        with open(os.path.join(d, "k-0.cubin"), "rb") as f:
            assert f.read() == cuda
    print("gpu-isa.py: the loop finder counts the hot path of the loop alone")


EM_CUDA = 190


def carve(folder: str) -> None:
    """Every CUDA ELF (e_machine EM_CUDA, 64-bit, little-endian) inside the files under
    `folder` (stats_table's ISA_CACHE_DIR: each pipeline's cache data, and the driver's own
    disk cache where it was pointed there), written beside each as NAME-N.cubin, for
    cuobjdump and nvdisasm: where a driver keeps its machine code so (NVIDIA's, if it does),
    what it compiled can be read. Prints a line a file."""
    files = sorted(
        os.path.join(root, n)
        for root, _, names in os.walk(folder)
        for n in names
        if not n.endswith(".cubin")
    )
    for path in files:
        file = os.path.relpath(path, folder)
        with open(path, "rb") as f:
            blob = f.read()
        found, at = 0, blob.find(b"\x7fELF")
        while at >= 0:
            head = blob[at : at + 64]
            if len(head) == 64 and head[4] == 2 and head[5] == 1:
                machine = struct.unpack_from("<H", head, 18)[0]
                phoff, shoff = struct.unpack_from("<QQ", head, 32)
                phsize, phnum, shsize, shnum = struct.unpack_from("<HHHH", head, 54)
                end = max(shoff + shsize * shnum, phoff + phsize * phnum)
                if machine == EM_CUDA and 64 <= end <= len(blob) - at:
                    out = f"{path.removesuffix('.cache')}-{found}.cubin"
                    with open(out, "wb") as o:
                        o.write(blob[at : at + end])
                    found += 1
            at = blob.find(b"\x7fELF", at + 1)
        print(f"{file}: {len(blob)} bytes, {found} CUDA ELF")


def main() -> None:
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        compile_one(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--stats":
        stats_table(sys.argv[2])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--carve":
        carve(sys.argv[2])
        return
    nak = os.environ.get("ISA_DRIVER", "radv") == "nak"
    runner = os.environ["ISA_RUNNER"].split() if os.environ.get("ISA_RUNNER") else []
    # No shader cache: a cached pipeline is not compiled, so its code is not dumped.
    env = dict(
        os.environ,
        RADV_DEBUG="shaders,nocache",
        NAK_DEBUG="print",
        MESA_SHADER_CACHE_DISABLE="true",
    )
    if nak:
        print(
            "| kernel | loop: ALU / weight·row | of them conversions | all / weight·row"
            " | static cycles / weight·row | loads / weight·row | loads"
            " | trips to memory a pass (a lane's weights a trip) | GPRs"
            " | warps an SM (H200) | weights in flight an SM | spills | shader instructions |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    else:
        print(
            "| kernel | loop: VALU / weight·row | of them conversions | all / weight·row"
            " | loads / weight·row | loads | VGPRs | scratch | shader instructions |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    with open(sys.argv[1]) as f:
        lines = f.read().splitlines()
    for line in lines:
        name, path, spec, per_pass, rows, robust = line.split()
        run = subprocess.run(
            [*runner, sys.executable, __file__, "--one", path, spec, robust],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            # The driver's last words, or the exit status (a device without cooperative
            # matrices may crash on the matrix units' module rather than refuse it).
            why = run.stderr.strip().splitlines()[-1:] or [
                f"exit status {run.returncode}"
            ]
            print(f"| {name} | failed: {why[0]} |")
            continue
        fields = (s.split("\t") for s in run.stderr.splitlines())
        stats = {p[1]: p[2] for p in fields if p[0] == "stat"}
        w = int(per_pass) * int(rows)
        if nak:
            loops = nak_loops(run.stderr)
            main_loop = max(
                loops,
                key=lambda ins: sum(nak_kind(i) == "load" for i in ins),
                default=[],
            )
            c = Counter(nak_kind(i) for i in main_loop)
            widths = Counter(
                nak_op(i).split(".")[-1] for i in main_loop if nak_kind(i) == "load"
            )
            # Conversions: 16 a clock an SM on NVIDIA against 128 FMAs (CUDA's throughput
            # table, compute capability 8.x and 9.0).
            cvt = sum(
                nak_op(i).startswith(("i2f", "f2f", "f2i", "i2fp")) for i in main_loop
            )
            cycles = sum(delay(i) for i in main_loop)
            spills = sum(
                int(v) for k, v in stats.items() if k.startswith("Spills to memory")
            )
            gprs = stats.get("Number of GPRs", "?")
            warps = warps_an_sm(int(gprs)) if gprs.isdigit() else "?"
            trips = memory_trips(main_loop)
            per_trip = int(per_pass) / trips if trips else 0.0
            in_flight = f"{warps * per_trip:.0f}" if trips and warps != "?" else "-"
            print(
                f"| {name} | {c['alu'] / w:.2f} | {cvt / w:.2f} | {len(main_loop) / w:.2f}"
                f" | {cycles / w:.2f} | {c['load'] / w:.3f}"
                f" | {' '.join(f'{k}×{v}' for k, v in sorted(widths.items()))}"
                f" | {trips} ({per_trip:.0f}) | {gprs} | {warps} | {in_flight} | {spills}"
                f" | {stats.get('Instruction count', '?')} |"
            )
            continue
        loops = inner_loops(disassembly(run.stderr))
        # The kernel's main loop: the innermost loop with the most vector memory loads.
        main_loop = max(
            loops, key=lambda ins: sum(kind(i) == "load" for i in ins), default=[]
        )
        c = Counter(kind(i) for i in main_loop)
        widths = Counter(
            i.split()[0].replace("buffer_load_", "")
            for i in main_loop
            if kind(i) == "load"
        )
        # Conversions (integer or f16 to f32): full rate on AMD, a quarter or less of the FMA rate on
        # NVIDIA (16 a clock an SM on Ampere and Hopper against 128 FMAs), so counted apart.
        cvt = sum(i.startswith("v_cvt_") for i in main_loop)
        print(
            f"| {name} | {c['valu'] / w:.2f} | {cvt / w:.2f} | {len(main_loop) / w:.2f}"
            f" | {c['load'] / w:.3f}"
            f" | {' '.join(f'{k}×{v}' for k, v in sorted(widths.items()))}"
            f" | {stats.get('VGPRs', '?')} | {stats.get('Scratch size', '?')}"
            f" | {stats.get('Instructions', '?')} |"
        )


main()
