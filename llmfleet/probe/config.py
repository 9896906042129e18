"""The probe's settings: the request mix, the SLOs and the load (group data ``probe_*``,
documented with their defaults in group_data/all.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmfleet.errors import LlmfleetError

PositiveInt = Annotated[int, Field(gt=0, strict=True)]
PositiveFloat = Annotated[float, Field(gt=0)]

# An SLO is `<metric>_p<percentile>_ms: limit`, e.g. ``ttft_p99_ms: 500``: the metric's percentile over the
# measured requests of the group (the whole mix, or one class) must be at most the limit (ms). The same
# limit is each request's threshold for goodput (as vLLM's --goodput ttft:X tpot:Y e2el:Z).
SLO_METRICS = ("ttft", "tpot", "e2e")
SloKey = Annotated[str, Field(pattern=r"^(ttft|tpot|e2e)_p(100|[1-9][0-9]?(\.[0-9]+)?)_ms$")]
Slos = dict[SloKey, PositiveFloat]


class ProbeError(LlmfleetError, ValueError):
    """Bad probe input or an endpoint the probe cannot measure; the message says what and the fix."""


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
