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


class Settings(BaseModel):
    """Every llmfleet setting. Defaults and documentation: group_data/all.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # mirrors
    apt_proxy: Url | None
    pip_index_url: Url | None
    pip_find_links: list[Url]
    pip_no_index: StrictBool
    pip_trusted_hosts: list[HostName]
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
    # kernel_modules
    kernel_modules_blacklist: list[ModuleName]
    # GPUs: profiles, NVIDIA driver, CUDA, clocks
    gpu_profiles: dict[Annotated[str, _pattern(r"[a-z0-9_]+", "a profile name (a-z 0-9 _)")], GpuProfile]
    gpu_profile: str | None
    nvidia_repo_url: Url
    nvidia_driver_version: DriverVersion
    nvidia_kernel_modules: Literal["proprietary", "open"]
    cuda_toolkit_version: CudaVersion
    gpu_app_clocks: AppClocks | None
    # vLLM (what the GPU guardrails need of the service's settings)
    vllm_venv: AbsPath
    vllm_version: Version
    vllm_torch_version: Version | None
    vllm_dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
    vllm_model_dtype: Literal["float16", "bfloat16", "float32"]
    vllm_quantization: Annotated[str, _pattern(r"[a-z0-9_]+", "a quantization method name")] | None
    vllm_kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
    vllm_tensor_parallel_size: PositiveInt
    vllm_model_attention_heads: PositiveInt


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
            # what the host's GPUs cannot run (llmfleet/gpu.py, from llmfleet/compat.py's table)
            problems = guardrails(settings)
            if not problems:
                return settings
    raise SettingsError(f"host {host_name}: " + "; ".join(problems))


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
