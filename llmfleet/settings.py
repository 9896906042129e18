"""The schema of group data: every tunable, its type and its limits.

Defaults and their documentation live in ``group_data/all.py`` (one place, like an Ansible role's
``defaults/main.yml``); this module says what a valid value is. ``settings_for(host)`` validates a
host's resolved data before any operation runs, so bad input stops the deploy before any host
is touched, with the host, the setting, the value and the fix in the message.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

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


PackageName = Annotated[str, AfterValidator(_package)]
Url = Annotated[str, AfterValidator(_url)]
HostName = Annotated[str, AfterValidator(_hostname)]


class Settings(BaseModel):
    """Every llmfleet setting. Defaults and documentation: group_data/all.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # mirrors
    apt_proxy: Url | None
    pip_index_url: Url | None
    pip_find_links: list[Url]
    pip_no_index: bool
    pip_trusted_hosts: list[HostName]
    # base_packages
    base_packages: list[PackageName]
    apt_cache_valid_s: int


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
                key = ".".join(str(p) for p in err["loc"])
                top = str(err["loc"][0])
                problems.append(f"{key} = {values.get(top)!r}: {err['msg']} (fix it in group data)")
    raise SettingsError(f"host {host_name}: " + "; ".join(problems))


def settings_for(host) -> Settings:
    """Settings of a pyinfra host, raised as pyinfra's OperationValueError when invalid."""
    from pyinfra.api.exceptions import OperationValueError

    try:
        return validate(host.name, host.data.dict())
    except SettingsError as exc:
        raise OperationValueError(str(exc)) from None
