"""The probe's run settings (``ProbeConfig``, from group data ``probe_*``), reading a mix file, and the
probe's errors. The settings' types, defaults and documentation are in llmfleet/schema.py
(``ProbeSettings``, ``RequestClass``, ``Slos``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmfleet.errors import LlmfleetError
from llmfleet.schema import (
    SLO_METRICS,
    PositiveFloat,
    PositiveInt,
    RequestClass,
    Slo,
    SloKey,
    Slos,
    TokenRange,
    consistency_problems,
    length_problems,
    mix_problems,
    parse_slos,
)

__all__ = ["SLO_METRICS", "PositiveFloat", "PositiveInt", "ProbeConfig", "ProbeError", "RequestClass", "Slo", "SloKey",
           "Slos", "TokenRange", "consistency_problems", "describe", "from_settings", "length_problems", "load_mix",
           "mix_problems", "parse_slos"]

class ProbeError(LlmfleetError, ValueError):
    """Bad probe input or an endpoint the probe cannot measure; the message says what and the fix."""


class ProbeConfig(BaseModel):
    """Everything a probe run needs besides the endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mix: Annotated[list[RequestClass], Field(min_length=1)]
    slo: Annotated[Slos, Field(min_length=1)]
    # a trial passes only if at least this share of its measured requests met every SLO of their
    # class and the overall ones (goodput share); None: the percentile SLOs alone decide
    goodput_min: Annotated[float, Field(gt=0, le=1)] | None = 0.9
    check_rps: PositiveFloat
    arrivals: Literal["poisson", "gamma"] = "poisson"
    burstiness: PositiveFloat = 1.0
    duration_s: PositiveFloat = 30.0
    warmup_s: Annotated[float, Field(ge=0)] = 5.0
    min_requests: PositiveInt = 20
    request_timeout_s: PositiveFloat = 120.0
    stall_timeout_s: PositiveFloat = 30.0
    repeats: PositiveInt = 2
    search_start_rps: PositiveFloat = 1.0
    search_max_rps: PositiveFloat = 512.0
    search_precision: Annotated[float, Field(gt=0, lt=1)] = 0.1
    baseline_tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.15
    seed: int = 0

    @model_validator(mode="after")
    def _consistent(self):
        problems = consistency_problems(self.mix, self.arrivals, self.burstiness, self.search_start_rps,
                                        self.search_max_rps)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def class_named(self, name: str) -> RequestClass:
        return next(c for c in self.mix if c.name == name)

    @property
    def slos(self) -> list[Slo]:
        """The overall SLOs."""
        return parse_slos(self.slo)

    def slos_of(self, cls: str) -> list[Slo]:
        """What a request of class ``cls`` must meet for goodput: the overall SLOs and its class's (the
        stricter limit where both set the same metric; a class outside the mix: the overall ones)."""
        limits: dict[str, float] = {}
        for s in self.slos + next((c.slos for c in self.mix if c.name == cls), []):
            limits[s.metric] = min(limits.get(s.metric, math.inf), s.limit_ms)
        return [Slo(key=f"{m}_ms", metric=m, q=100.0, limit_ms=v) for m, v in limits.items()]


def describe(exc: ValidationError, prefix: str = "probe", sep: str = "_") -> str:
    """pydantic's errors as `setting = value: why` lines."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        name = f"{prefix}{sep}{where}" if where else prefix
        value = err.get("input")
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{name} = {value!r}: {msg}" if where else f"{name}: {msg}")
    return "; ".join(lines)


def from_settings(settings) -> ProbeConfig:
    """The probe settings of a host's group data: every ``probe_<field>`` of ``settings`` (a validated
    llmfleet.settings.Settings, or a mapping of group data's defaults) for each field of ProbeConfig."""
    get: Callable[[str], Any] = settings.get if isinstance(settings, dict) else (lambda name: getattr(settings, name))
    return ProbeConfig(**{f: get(f"probe_{f}") for f in ProbeConfig.model_fields})


def load_mix(path: Path) -> list[RequestClass]:
    """A mix from a JSON or YAML file: a list of classes (as probe_mix in group data)."""
    try:
        raw = yaml.safe_load(path.read_text()) if path.suffix in (".yml", ".yaml") else json.loads(path.read_text())
    except OSError as exc:
        raise ProbeError(f"--mix {path}: cannot be read ({exc.strerror})") from exc
    except (ValueError, yaml.YAMLError) as exc:
        raise ProbeError(f"--mix {path}: not valid {path.suffix.lstrip('.') or 'JSON'} ({exc})") from exc
    if not isinstance(raw, list):
        raise ProbeError(f"--mix {path}: expected a list of request classes, got {type(raw).__name__}")
    mix, problems = [], []
    for i, c in enumerate(raw):
        try:
            mix.append(RequestClass.model_validate(c))
        except ValidationError as exc:
            problems.append(describe(exc, f"mix[{i}]", "."))
    if problems:
        raise ProbeError(f"--mix {path}: " + "; ".join(problems))
    problems = mix_problems(mix)
    if problems:
        raise ProbeError(f"--mix {path}: " + "; ".join(problems))
    return mix
