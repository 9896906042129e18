"""A request mix learnt from a request log (`llmfleet probe mix LOG --classes 5`):
k-means on the requests' prompt and output lengths (scikit-learn), each cluster a class.

Lengths are clustered on a log scale, standardised (prompt lengths span 10 to 10,000 tokens: on a
linear scale the long requests alone would decide the clusters). Each class gets its share of the
log's requests, the 5th to 95th percentile of its prompt and output lengths as its ranges (the probe
draws uniformly within them), and the sampling settings most of its requests used (where the log
records them). Classes are named by size (five: the fleet's very_short ... very_long) and ordered
from the shortest. SLOs are not in a log: the proposal leaves them to the operator.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from llmfleet.probe.config import ProbeError, RequestClass, mix_problems
from llmfleet.probe.trace import Record, read

NAMES = {1: ["all"], 2: ["short", "long"], 3: ["short", "medium", "long"],
         4: ["very_short", "short", "medium", "long"], 5: ["very_short", "short", "medium", "long", "very_long"]}
RANGE_PERCENTILES = (5, 95)


@dataclass
class Learnt:
    mix: list[RequestClass]
    counts: list[int]  # requests of the log in each class
    centres: list[tuple[float, float]]  # (prompt, output) tokens at each cluster's centre
    requests: int
    log: str
    fmt: str


def learn(path: Path, classes: int, seed: int = 0) -> Learnt:
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.preprocessing import StandardScaler

    fmt, records = read(path, where="probe mix")
    missing = [r.line for r in records if r.prompt_tokens is None]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise ProbeError(f"probe mix {path}: lines {shown} have a prompt but no prompt_tokens (fix: a log with "
                         "token counts: the lengths are what is clustered)")
    distinct = len({(r.prompt_tokens, r.output_tokens) for r in records})
    if classes > distinct:
        raise ProbeError(f"probe mix {path}: --classes {classes}, but the log holds only {distinct} distinct "
                         f"(prompt, output) lengths in {len(records)} requests (fix: --classes {distinct} or fewer, "
                         "or a longer log)")
    lengths = np.array([[r.prompt_tokens, r.output_tokens] for r in records], dtype=float)
    features = StandardScaler().fit_transform(np.log(lengths))
    km = KMeans(n_clusters=classes, n_init=10, random_state=seed).fit(features)
    groups = [lengths[km.labels_ == k] for k in range(classes)]
    members = [[r for r, label in zip(records, km.labels_, strict=True) if label == k] for k in range(classes)]
    order = sorted(range(classes), key=lambda k: float(np.median(groups[k].sum(axis=1))))
    names = NAMES.get(classes) or [f"class{i + 1}" for i in range(classes)]
    shares = _shares([len(groups[k]) for k in order])
    mix = []
    for name, k, share in zip(names, order, shares, strict=True):
        g = groups[k]
        lo, hi = RANGE_PERCENTILES
        prompt = [max(1, int(math.floor(np.percentile(g[:, 0], lo)))), int(math.ceil(np.percentile(g[:, 0], hi)))]
        output = [max(1, int(math.floor(np.percentile(g[:, 1], lo)))), int(math.ceil(np.percentile(g[:, 1], hi)))]
        mix.append(RequestClass.model_validate({"name": name, "share": share, "prompt_tokens": prompt,
                                                "output_tokens": output, **_sampling(members[k])}))
    problems = mix_problems(mix)
    if problems:  # cannot happen: shares are made to add up
        raise ProbeError("; ".join(problems))
    centres = [tuple(float(x) for x in np.median(groups[k], axis=0)) for k in order]
    return Learnt(mix, [len(groups[k]) for k in order], centres, len(records), str(path), fmt)  # type: ignore[arg-type]


def _shares(counts: list[int]) -> list[float]:
    """Shares of the counts to 3 decimals, each above 0, adding up to 1 exactly."""
    n = sum(counts)
    shares = [max(0.001, round(c / n, 3)) for c in counts]
    biggest = max(range(len(shares)), key=lambda i: shares[i])
    shares[biggest] = round(1 - sum(s for i, s in enumerate(shares) if i != biggest), 3)
    return shares


def _sampling(records: list[Record]) -> dict:
    """The (temperature, top_p) most of the class's requests used, where the log has them."""
    seen = Counter((r.temperature, r.top_p) for r in records if r.temperature is not None or r.top_p is not None)
    if not seen:
        return {}
    (temperature, top_p), _ = seen.most_common(1)[0]
    out = {}
    if temperature is not None:
        out["temperature"] = temperature
    if top_p is not None:
        out["top_p"] = top_p
    return out


def as_group_data(learnt: Learnt) -> str:
    """The proposal as group data (Python, for group_data/<group>.py), one class per line."""
    lines = [f"# probe_mix learnt from {learnt.log} ({learnt.fmt}, {learnt.requests} requests) by "
             "`llmfleet probe mix`:",
             f"# k-means on log prompt and output lengths; ranges are each class's P{RANGE_PERCENTILES[0]}-"
             f"P{RANGE_PERCENTILES[1]}. Add each class's SLOs (slo = {{'e2e_p95_ms': ...}}).",
             "probe_mix = ["]
    for c, n, (p, o) in zip(learnt.mix, learnt.counts, learnt.centres, strict=True):
        d = _fields(c)
        fields = ", ".join(f"{k!r}: {v!r}" for k, v in d.items())
        lines.append(f"    {{{fields}}},  # {n} requests, median {p:.0f} in / {o:.0f} out")
    lines.append("]")
    return "\n".join(lines) + "\n"


def as_yaml(learnt: Learnt) -> str:
    """The proposal as a mix file for `llmfleet probe --mix`."""
    import yaml

    return yaml.safe_dump([_fields(c) for c in learnt.mix], sort_keys=False, default_flow_style=None)


def _fields(c: RequestClass) -> dict:
    """A class as group data writes it: every learnt field shown (sampling settings too, default or not)."""
    return {"name": c.name, "share": c.share, "prompt_tokens": [c.prompt_tokens.min, c.prompt_tokens.max],
            "output_tokens": [c.output_tokens.min, c.output_tokens.max], "temperature": c.temperature,
            "top_p": c.top_p}
