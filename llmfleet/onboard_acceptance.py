"""Acceptance results: what onboarding's acceptance stage measured on a host (the model storage,
DCGM's long diagnostic, the burn-in, the all-reduce, the probe, the weights load time), kept beside
its hardware fingerprint in <state dir>/hosts/<host>/acceptance.json; later runs
(`llmfleet onboard --recheck`, <state dir>/hosts/<host>/acceptance-runs/<time>.json) and every audit
(the weights load time of the running servers, and the latest later run) are compared with it.

`compare` is pure: each headline figure of the kept result against the later one, a figure worse by
more than the tolerance (and by more than the figure's own noise, MIN_CHANGE) is a difference.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

HIGHER, LOWER, SAME = "higher is better", "lower is better", "must stay"
# below these a change is noise, whatever the share (a 0.01 s load that takes 0.03 s from a cold cache)
MIN_CHANGE = {"MB/s": 0.0, "ms": 0.5, "s": 5.0, "TFLOP/s": 0.0, "C": 5.0}


def path_for(state_dir: Path, host: str) -> Path:
    return state_dir / "hosts" / host / "acceptance.json"


def runs_dir(state_dir: Path, host: str) -> Path:
    return state_dir / "hosts" / host / "acceptance-runs"


def _write(p: Path, result: dict) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return p


def record(state_dir: Path, host: str, result: dict) -> Path:
    """Keep `result` as the host's acceptance result (onboarding's)."""
    return _write(path_for(state_dir, host), result)


def record_run(state_dir: Path, host: str, result: dict) -> Path:
    """Keep a later run beside it (the kept one stays)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return _write(runs_dir(state_dir, host) / f"{stamp}.json", result)


def load(state_dir: Path, host: str) -> dict | None:
    p = path_for(state_dir, host)
    return json.loads(p.read_text()) if p.is_file() else None


def latest_run(state_dir: Path, host: str) -> tuple[dict | None, Path | None]:
    runs = sorted(runs_dir(state_dir, host).glob("*.json")) if runs_dir(state_dir, host).is_dir() else []
    return (json.loads(runs[-1].read_text()), runs[-1]) if runs else (None, None)


def headline(figures: dict) -> dict[str, tuple[object, str, str]]:
    """{what: (value, unit, direction)} of the figures a later run can be held to."""
    out: dict[str, tuple[object, str, str]] = {}
    ms = figures.get("model_storage")
    if isinstance(ms, dict):
        out["model storage: sequential read"] = (ms.get("read_mbs"), "MB/s", HIGHER)
        out["model storage: 4 KiB random read latency"] = (ms.get("read_latency_ms"), "ms", LOWER)
    for gpu, s in sorted((figures.get("gpu_burnin") or {}).items()):
        out[f"GPU {gpu}: burn-in"] = (s.get("tflops"), "TFLOP/s", HIGHER)
        out[f"GPU {gpu}: burn-in highest temperature"] = (s.get("max_temp_c"), "C", LOWER)
    for key in sorted(k for k in figures if k.startswith("dcgm_diag_r")):
        for gpu, tests in sorted((figures[key].get("per_gpu") or {}).items()):
            for test, status in sorted(tests.items()):
                out[f"GPU {gpu}: dcgmi diag -r {key.removeprefix('dcgm_diag_r')} {test}"] = (status, "", SAME)
    for unit, w in sorted((figures.get("vllm_weights_load") or {}).items()):
        out[f"{unit}: weights load time"] = (w.get("weights_s"), "s", LOWER)
    return out


@dataclass(frozen=True)
class Difference:
    what: str
    kept: object
    now: object
    why: str


def compare(kept: dict, later: dict, tolerance: float) -> list[Difference]:
    """The headline figures `later` has that are worse than `kept`'s beyond `tolerance` (a share)."""
    before, after = headline(kept), headline(later)
    out = []
    for what, (now, unit, direction) in after.items():
        if what not in before or now is None or before[what][0] is None:
            continue
        was = before[what][0]
        if direction == SAME:
            if now != was:
                out.append(Difference(what, was, now, "at acceptance it passed"))
            continue
        assert isinstance(was, int | float) and isinstance(now, int | float)
        worse = (was - now) if direction == HIGHER else (now - was)
        if worse > abs(was) * tolerance and worse > MIN_CHANGE.get(unit, 0.0):
            out.append(Difference(what, f"{was:g} {unit}", f"{now:g} {unit}",
                                  f"{worse / abs(was):.0%} worse than at acceptance (acceptance_tolerance "
                                  f"{tolerance:g}, {direction})" if was else "worse than at acceptance"))
    return out
