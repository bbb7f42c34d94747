"""What a GPU driver's compiler makes of the mat-vec kernels, without that GPU.

Compiles SPIR-V compute modules into pipelines on the first Vulkan device (tests/bench/gpu-isa.sh
points it at Mesa's RADV null device: AMD's ACO compiler for an RDNA2 card, no card needed),
reads the driver's statistics (VK_KHR_pipeline_executable_properties: registers, spills,
instructions) and its disassembly (RADV_DEBUG=shaders), finds the kernel's innermost loop (the
blocks a branch goes back over) and divides its instructions by the weights a thread takes each
pass of it and by the rows. Counts, not times: the same on every run.

    usage: gpu-isa.py TABLE.tsv
TABLE.tsv: name, SPIR-V path, specialization ("ID=VALUE,..." or "-"), weights a pass, rows.
Prints one line a module: VALU and all instructions a weight and row in the loop, vector memory
loads (their widths), VGPRs, scratch bytes, the whole shader's instruction count.
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


def compile_one(path: str, spec: str) -> None:
    """Creates the pipeline (the driver dumps its code to stderr) and prints its statistics."""
    import vulkan as vk  # the `vulkan` package: cffi over the system's loader

    inst = vk.vkCreateInstance(
        vk.VkInstanceCreateInfo(
            pApplicationInfo=vk.VkApplicationInfo(
                apiVersion=vk.VK_MAKE_VERSION(1, 3, 0)
            )
        ),
        None,
    )
    pd = vk.vkEnumeratePhysicalDevices(inst)[0]
    fpe = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
        pipelineExecutableInfo=vk.VK_TRUE
    )
    f13 = vk.VkPhysicalDeviceVulkan13Features(pNext=fpe)
    f12 = vk.VkPhysicalDeviceVulkan12Features(pNext=f13)
    f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12)
    f2 = vk.VkPhysicalDeviceFeatures2(pNext=f11)
    vk.vkGetPhysicalDeviceFeatures2(pd, f2)  # every feature the device has, asked for
    fpe.pipelineExecutableInfo = vk.VK_TRUE
    queue = vk.VkDeviceQueueCreateInfo(
        queueFamilyIndex=0, queueCount=1, pQueuePriorities=[1.0]
    )
    dev = vk.vkCreateDevice(
        pd,
        vk.VkDeviceCreateInfo(
            pNext=f2,
            pQueueCreateInfos=[queue],
            ppEnabledExtensionNames=["VK_KHR_pipeline_executable_properties"],
        ),
        None,
    )
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
    info = vk.VkComputePipelineCreateInfo(
        flags=vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR,
        stage=stage,
        layout=layout,
    )
    pipe = vk.vkCreateComputePipelines(dev, None, 1, [info], None)[0]
    props = vk.vkGetDeviceProcAddr(dev, "vkGetPipelineExecutablePropertiesKHR")
    stats = vk.vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR")
    for n in range(len(list(props(dev, vk.VkPipelineInfoKHR(pipeline=pipe))))):
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
            print(f"stat\t{name}\t{value}", file=sys.stderr, flush=True)


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


def inner_loops(blocks: list[tuple[str, list[str]]]) -> list[list[str]]:
    """Each innermost loop's instructions: the blocks from a backward branch's target to it."""
    at = {name: n for n, (name, _) in enumerate(blocks)}
    loops = []
    for n, (_, ins) in enumerate(blocks):
        for i in ins:
            m = re.match(r"s_c?branch\w*\s+(BB\d+)", i)
            if m and at.get(m.group(1), n + 1) <= n:
                loops.append((at[m.group(1)], n))
    inner = [
        (a, z)
        for a, z in loops
        if not any((a2, z2) != (a, z) and a <= a2 and z2 <= z for a2, z2 in loops)
    ]
    return [[i for _, ins in blocks[a : z + 1] for i in ins] for a, z in inner]


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        compile_one(sys.argv[2], sys.argv[3])
        return
    # No shader cache: a cached pipeline is not compiled, so its code is not dumped.
    env = dict(
        os.environ, RADV_DEBUG="shaders,nocache", MESA_SHADER_CACHE_DISABLE="true"
    )
    print(
        "| kernel | loop: VALU / weight·row | of them conversions | all / weight·row"
        " | loads / weight·row | loads | VGPRs | scratch | shader instructions |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with open(sys.argv[1]) as f:
        lines = f.read().splitlines()
    for line in lines:
        name, path, spec, per_pass, rows = line.split()
        run = subprocess.run(
            [sys.executable, __file__, "--one", path, spec],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            print(f"| {name} | failed: {run.stderr.strip().splitlines()[-1:]} |")
            continue
        fields = (s.split("\t") for s in run.stderr.splitlines())
        stats = {p[1]: p[2] for p in fields if p[0] == "stat"}
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
        w = int(per_pass) * int(rows)
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
