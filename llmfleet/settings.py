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

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, ValidationError

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
            return Settings(**values)
        except ValidationError as exc:
            for err in exc.errors():
                problems.append(_describe(err, values))
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
