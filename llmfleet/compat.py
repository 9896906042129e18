"""What runs on which GPU: the one table the compatibility guardrails read.

Every row carries its source. A new vLLM or PyTorch release is one row here; a new GPU model is a
profile in group data (`gpu_profiles`). Facts: ../shared/facts/v100-vllm.md.
"""

from __future__ import annotations

from dataclasses import dataclass


def version_tuple(version: str) -> tuple[int, ...]:
    """"0.10.2" -> (0, 10, 2); "2.10.0+cu128" -> (2, 10, 0); "12.9" -> (12, 9)."""
    core = version.split("+", 1)[0]
    parts = []
    for piece in core.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if not piece.isdigit() else piece
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


@dataclass(frozen=True)
class VllmRelease:
    """A range of vLLM releases that behave alike on the GPUs llmfleet knows."""

    first: str  # first version of the range (inclusive)
    last: str  # last version of the range (inclusive)
    min_compute_capability: float  # lowest architecture its wheels carry kernels for
    volta_engine: str  # the engine it runs on compute capability 7.0 by default
    kv_cache_fp8_on_volta: bool  # whether --kv-cache-dtype fp8 works on 7.0 with that engine
    torch: str | None  # the PyTorch version the release pins, where known
    source: str


# Source: compiled architectures of `_C.abi3.so` in each released wheel, 0.4.3 to 0.33.0, and
# vLLM's `engine/arg_utils.py` / `platforms/cuda.py` per version (../shared/facts/v100-vllm.md).
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
    first: str
    last: str
    has_sm70: bool
    source: str


# Source: pytorch/pytorch release matrix; checked on hardware: torch 2.11.0+cu130 reports
# ['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120'] (the lent H200, 2026-11-29).
# The verify suite checks `torch.cuda.get_arch_list()` on every host, whatever this table says.
TORCH_RELEASES: tuple[TorchRelease, ...] = (
    TorchRelease("1.0", "2.10.99", True, "default CUDA builds up to 2.10 include sm_70"),
    TorchRelease("2.11.0", "99", False, "2.11 dropped Volta from its cu128/cu130 builds"),
)

# Lowest compute capability of each quantization method's kernels, in every vLLM version.
# Source: `get_min_capability` of each method in vLLM 0.4.3 to 0.33.0 (../shared/facts/v100-vllm.md).
QUANTIZATION_MIN_CC: dict[str, float] = {
    "gptq": 6.0,
    "awq": 7.5,
    "gptq_marlin": 8.0,
    "awq_marlin": 8.0,
    "marlin": 8.0,
}

# bf16 needs compute capability 8.0; vLLM: "Bfloat16 is only supported on GPUs with compute
# capability of at least 8.0" (vLLM platforms/cuda.py).
BF16_MIN_CC = 8.0

# Oldest driver branch each CUDA major version needs (NVIDIA CUDA toolkit release notes, "CUDA
# Toolkit and corresponding driver versions": 12.x needs >= 525, 13.x needs >= 580).
CUDA_MIN_DRIVER_BRANCH: dict[int, int] = {11: 450, 12: 525, 13: 580}


def vllm_release(version: str) -> VllmRelease | None:
    v = version_tuple(version)
    for row in VLLM_RELEASES:
        if version_tuple(row.first) <= v <= version_tuple(row.last):
            return row
    return None


def torch_release(version: str) -> TorchRelease | None:
    v = version_tuple(version)
    for row in TORCH_RELEASES:
        if version_tuple(row.first) <= v <= version_tuple(row.last):
            return row
    return None


def known_vllm_range() -> str:
    return f"{VLLM_RELEASES[0].first} to {VLLM_RELEASES[-1].last}"


# vLLM flags that are misspelt, removed or never existed, found in group data before any host is
# touched: name -> (first version that has it or None, first version without it or None, fix).
# Source: ../shared/facts/v100-vllm.md ("vLLM flags, by version"; "Wrong claims in the design notes").
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

# Metric names the monitoring hand-off uses, by the vLLM version that exports them.
# Source: ../shared/facts/v100-vllm.md ("vLLM metrics"); checked on the lab's vLLM 0.32.0 /metrics.
# `vllm:engine_*` names of the design notes exist in no version.
METRICS: dict[str, tuple[tuple[str, str | None, str], ...]] = {
    # purpose: ((name, first version, first version without it), ...)
    "queue": (("vllm:num_requests_waiting", "0.4.0", None),),
    "running": (("vllm:num_requests_running", "0.4.0", None),),
    "kv_cache": (("vllm:gpu_cache_usage_perc", "0.4.0", "0.11.0"), ("vllm:kv_cache_usage_perc", "0.11.0", None)),
    "e2e_latency": (("vllm:e2e_request_latency_seconds", "0.4.0", None),),
    "ttft": (("vllm:time_to_first_token_seconds", "0.4.0", None),),
    "generation_tokens": (("vllm:generation_tokens_total", "0.4.0", None),),
    # HTTP status counts of the API server (prometheus-fastapi-instrumentator)
    "http_requests": (("http_requests_total", "0.4.0", None),),
}


def metric(purpose: str, vllm_version: str) -> str:
    """The metric name for a purpose in a vLLM version (KeyError: none exports it)."""
    v = version_tuple(vllm_version)
    for name, first, gone in METRICS[purpose]:
        if version_tuple(first) <= v and (gone is None or v < version_tuple(gone)):
            return name
    raise KeyError(f"no metric for {purpose} in vLLM {vllm_version}")
