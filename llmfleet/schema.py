"""The schema of group data: every tunable, its type and its limits, and the GPU hardware
profile types (`GpuProfile`, `AppClocks`).

Defaults and their documentation live in ``group_data/all.py`` (one place, like an Ansible role's
``defaults/main.yml``); this module says what a valid value is, one setting at a time. The checks
across settings and the one entry point that validates a host (``validate``, ``settings_for``)
are in ``llmfleet/settings.py``; they import this module, never the other way round.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

from llmfleet.probe.config import RequestClass, Slos

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
EnvName = Annotated[str, _pattern(r"[A-Z_][A-Z0-9_]*", "an environment variable name (A-Z 0-9 _)")]
EnvValue = Annotated[str, _pattern(r"[^\n\r\x00]*", "one line of text")]


# GPU hardware profiles (group data `gpu_profiles`, chosen per host by `gpu_profile`)
Flavour = Literal["proprietary", "open"]


class AppClocks(BaseModel):
    """Application clocks in MHz. nvidia-smi takes them memory first: `nvidia-smi -ac MEMORY,GRAPHICS`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    memory: int = Field(gt=0)
    graphics: int = Field(gt=0)


class GpuProfile(BaseModel):
    """What a host's GPUs must look like (documented field by field in group_data/all.py)."""

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
    """The model a host serves (documented in group_data/all.py)."""

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


class VllmInstance(BaseModel):
    """One vLLM instance of a serving layout (group data `vllm_layout`, documented there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Annotated[str, _pattern(r"[a-z0-9][a-z0-9-]{0,30}", "an instance name (a-z 0-9 -, up to 31)")]
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


# Monitoring: exporters, log forwarding, alert thresholds (documented in group_data/all.py)
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
    """What the filesystem of vllm_models_dir must deliver (fio; documented in group_data/all.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_read_mbs: Annotated[float, Field(gt=0)]
    max_read_latency_ms: Annotated[float, Field(gt=0)]


class Settings(BaseModel):
    """Every llmfleet setting. Defaults and documentation: group_data/all.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # mirrors
    apt_proxy: Url | None
    pip_index_url: Url | None
    pip_find_links: list[Url]
    pip_no_index: StrictBool
    pip_trusted_hosts: list[HostName]
    apt_http_timeout_s: PositiveInt
    apt_retries: Annotated[int, Field(ge=0, le=10, strict=True)]
    apt_http_pipeline_depth: Annotated[int, Field(ge=0, le=10, strict=True)]
    apt_lock_timeout_s: Annotated[int, Field(ge=0, le=3600, strict=True)]
    # base_packages
    base_packages: list[PackageName]
    apt_cache_valid_s: PositiveInt
    cpu_governor: Literal["performance", "powersave", "ondemand", "schedutil", "conservative"] | None
    # kernel_cmdline and reboots
    kernel_cmdline: dict[KernelParam, KernelValue | None]
    reboot_max_unavailable: PositiveInt
    reboot_timeout_s: PositiveInt
    reboot_stop_units: list[UnitName]
    # thp
    thp_enabled: Literal["always", "madvise", "never"]
    thp_defrag: Literal["always", "defer", "defer+madvise", "madvise", "never"]
    # limits
    service_user: UserName
    limits_nofile: PositiveInt
    limits_memlock: PositiveInt | Literal["unlimited"]
    # sysctls
    sysctls: dict[SysctlName, Annotated[int, Field(strict=True)] | SysctlValue]
    # chrony
    chrony_servers: Annotated[list[HostName], Field(min_length=1)]
    chrony_max_offset_ms: Annotated[float, Field(gt=0)]
    # module_blacklist
    module_blacklist: list[ModuleName]
    # GPUs: profiles, NVIDIA driver, CUDA, clocks
    gpu_profiles: dict[Annotated[str, _pattern(r"[a-z0-9_]+", "a profile name (a-z 0-9 _)")], GpuProfile]
    gpu_profile: str | None
    nvidia_repo_url: Url
    nvidia_driver_version: DriverVersion
    nvidia_driver_flavour: Literal["proprietary", "open"]
    cuda_toolkit_version: CudaVersion
    gpu_app_clocks: AppClocks | None
    gpu_allreduce_sizes_mib: Annotated[list[PositiveInt], Field(min_length=1)]
    gpu_allreduce_iters: PositiveInt
    gpu_allreduce_warmup: Annotated[int, Field(ge=0)]
    gpu_allreduce_timeout_s: PositiveInt
    gpu_burnin_duration_s: PositiveInt
    gpu_burnin_matrix_size: Annotated[int, Field(ge=256, le=32768, strict=True)]
    gpu_burnin_sample_interval_s: PositiveInt
    gpu_burnin_min_tflops_fraction: Annotated[float, Field(gt=0, le=1)]
    gpu_burnin_max_temperature_c: Annotated[int, Field(gt=0, le=150, strict=True)]
    gpu_smoke_timeout_s: PositiveInt
    # vllm: the service
    vllm_enabled: StrictBool
    vllm_packages: Annotated[list[PipRequirement], Field(min_length=1)]
    vllm_pip_remove: list[PipName]
    vllm_installer: UvRequirement | None
    vllm_venv: AbsPath
    vllm_version: Version
    vllm_torch_version: Version | None
    vllm_models_dir: AbsPath
    vllm_model: VllmModel | None
    vllm_served_model_name: Annotated[str, _pattern(r"[A-Za-z0-9._/-]+", "a model name (letters, digits, . _ / -)")]
    vllm_host: Annotated[str, _pattern(r"[0-9a-fA-F.:]+", "an IP address to listen on (0.0.0.0: all)")]
    vllm_port: Port
    vllm_layout: Annotated[str, _pattern(r"[1-9][0-9]*x[1-9][0-9]*", "a shorthand like '4x2' (instances x GPUs)")] \
        | Annotated[list[VllmInstance], Field(min_length=1)] | None
    vllm_layout_first_port: Port
    vllm_layout_numa_span: StrictBool
    vllm_frontdoor_metrics_port: Port
    vllm_frontdoor_check_interval_ms: Annotated[int, Field(ge=100, le=60000, strict=True)]
    vllm_frontdoor_timeout_s: PositiveInt
    vllm_drain_timeout_s: PositiveInt
    host_service_ports: dict[Annotated[str, _pattern(r"[a-z0-9_-]+", "a service name (a-z 0-9 _ -)")], Port]
    vllm_flags: dict[FlagName, FlagValue]
    vllm_env: dict[EnvName, EnvValue]
    vllm_api_key_file: AbsPath | None
    vllm_max_unavailable: PositiveInt
    vllm_ready_timeout_s: PositiveInt
    vllm_start_limit_burst: PositiveInt
    vllm_start_limit_interval_s: PositiveInt
    vllm_alerts: VllmAlerts
    vllm_weights_load_max_s: Annotated[float, Field(gt=0)]
    # node_exporter, dcgm_exporter, log_forwarding, monitoring (`llmfleet monitoring`, audit metrics)
    node_exporter_address: Listen
    node_exporter_textfile_dir: AbsPath
    node_exporter_metrics_interval_s: PositiveInt
    dcgm_version: Version
    dcgm_exporter_package: DcgmExporterPackage | None
    dcgm_exporter_archive: DcgmExporterArchive | None
    dcgm_exporter_address: Listen
    dcgm_exporter_interval_ms: Annotated[int, Field(ge=100, strict=True)]
    dcgm_exporter_counters: Annotated[list[DcgmCounter], Field(min_length=1)]
    dcgm_diag_verify_level: Annotated[int, Field(ge=1, le=4, strict=True)]
    dcgm_diag_acceptance_level: Annotated[int, Field(ge=1, le=4, strict=True)]
    dcgm_diag_timeout_s: PositiveInt
    log_forward_target: HostPort | None
    log_forward_units: list[UnitPattern]
    log_forward_kernel: StrictBool
    log_forward_queue_max_mb: PositiveInt
    log_forward_retry_s: PositiveInt
    monitoring_scrape_interval_s: PositiveInt
    monitoring_evaluation_interval_s: PositiveInt
    monitoring_alert_for: dict[Annotated[str, _pattern(r"[A-Za-z]+", "an alert name")], Duration]
    gpu_alerts: GpuAlerts
    host_alerts: HostAlerts
    audit_alerts: AuditAlerts
    audit_metrics_dir: AbsPath | None
    audit_metrics_node_exporter: HostPort | None
    audit_ssh_kex_algorithms: KexAlgorithms | None
    # probe (llmfleet.probe.config documents the fields of a request class)
    probe_mix: Annotated[list[RequestClass], Field(min_length=1)]
    probe_slo: Annotated[Slos, Field(min_length=1)]
    probe_goodput_min: Annotated[float, Field(gt=0, le=1)] | None
    probe_check_rps: Annotated[float, Field(gt=0)]
    probe_arrivals: Literal["poisson", "gamma"]
    probe_burstiness: Annotated[float, Field(gt=0)]
    probe_duration_s: Annotated[float, Field(gt=0)]
    probe_warmup_s: Annotated[float, Field(ge=0)]
    probe_min_requests: PositiveInt
    probe_request_timeout_s: Annotated[float, Field(gt=0)]
    probe_stall_timeout_s: Annotated[float, Field(gt=0)]
    probe_repeats: PositiveInt
    probe_search_start_rps: Annotated[float, Field(gt=0)]
    probe_search_max_rps: Annotated[float, Field(gt=0)]
    probe_search_precision: Annotated[float, Field(gt=0, lt=1)]
    probe_baseline_file: str | None
    probe_baseline_tolerance: Annotated[float, Field(gt=0, lt=1)]
    probe_seed: int
    probe_max_client_lag_ms: Annotated[float, Field(gt=0)]
    # model storage (fio) and onboarding
    storage_fio_size_mib: PositiveInt
    storage_fio_runtime_s: PositiveInt
    storage_thresholds: StorageThresholds
    onboard_min_free_gb: PositiveInt
    acceptance_tolerance: Annotated[float, Field(gt=0, lt=1)]

    @property
    def profile(self) -> GpuProfile | None:
        """The host's GPU profile (gpu_profiles[gpu_profile]); None on a host without GPUs, or while
        gpu_profile names no profile (validation refuses that: llmfleet/gpu_guardrails.py)."""
        return self.gpu_profiles.get(self.gpu_profile) if self.gpu_profile is not None else None


class SettingsError(ValueError):
    """Group data that cannot be deployed; the message names host, setting, value and fix."""


