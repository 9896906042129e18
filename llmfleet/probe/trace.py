"""Request logs: read (for replay, ``llmfleet probe --trace``, and for learning a mix, ``llmfleet probe
mix``) and turned into a schedule that keeps their timing.

Two formats, told apart by their fields:

- **simple** (JSONL, or CSV with a header): ``arrival_s`` (seconds, from any origin), ``prompt_tokens``
  (or ``prompt``, the text itself), ``output_tokens``; optional ``class`` (a class of the mix: its
  SLOs and sampling settings apply), ``temperature``, ``top_p``.
- **Mooncake** (JSONL, the FAST'25 traces of kvcache-ai/Mooncake, FAST25-release/traces; also read by
  NVIDIA AIPerf and Dynamo's data generator): ``timestamp`` (ms since the first request),
  ``input_length``, ``output_length``, ``hash_ids`` (one id per block of ``MOONCAKE_BLOCK_TOKENS``
  prompt tokens; requests that share leading ids share that prefix). Each id becomes the same
  text wherever it appears, so shared ids are shared prompt prefixes at the server.

Replay is open loop at the log's own timing, divided by ``speed`` (2: twice as fast); the first
request leaves one mean gap after the trial starts, so that the request rates of the report
(llmfleet.probe.stats) read the log's own rate.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from llmfleet.probe.client import Planned
from llmfleet.probe.config import ProbeConfig, ProbeError
from llmfleet.probe.prompts import PromptMaker

# Tokens per hash id in the Mooncake traces (Dynamo benchmarks/data_generator/README.md: "block_size"
# 512 for the released traces; AISBench's mooncake_trace reader: "default 512 tokens").
MOONCAKE_BLOCK_TOKENS = 512
TRACE_CLASS = "trace"  # the class of a record that names none


@dataclass(frozen=True)
class Record:
    line: int
    arrival_s: float
    prompt_tokens: int | None
    output_tokens: int
    prompt: str | None = None
    cls: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    hash_ids: tuple[int, ...] | None = None


def read(path: Path, where: str = "--trace") -> tuple[str, list[Record]]:
    """(format, records in arrival order) of a log; a ProbeError names the line, the field, the value
    and the fix."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProbeError(f"{where} {path}: cannot be read ({exc.strerror})") from exc
    rows: list[tuple[int, dict]] = []
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        rows = [(i + 2, {k.strip(): v.strip() for k, v in row.items() if k and v not in (None, "")})
                for i, row in enumerate(reader)]
    else:
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ProbeError(f"{where} {path}:{i}: not a JSON object ({exc}) (fix: one JSON object per line, "
                                 "or a .csv file with a header)") from exc
            if not isinstance(row, dict):
                raise ProbeError(f"{where} {path}:{i}: expected a JSON object, got {type(row).__name__}")
            rows.append((i, row))
    if not rows:
        raise ProbeError(f"{where} {path}: no requests in it")
    fmt = "mooncake" if "hash_ids" in rows[0][1] or "input_length" in rows[0][1] else "simple"
    records = [(_mooncake if fmt == "mooncake" else _simple)(f"{where} {path}:{i}", i, row) for i, row in rows]
    return fmt, sorted(records, key=lambda r: (r.arrival_s, r.line))


def _field(where: str, row: dict, name: str, kind, required: bool = True, minimum: float | None = None):
    if name not in row:
        if required:
            raise ProbeError(f"{where}: {name} is missing (fix: every record needs {name}; the fields: "
                             "arrival_s, prompt_tokens or prompt, output_tokens [, class, temperature, top_p], or "
                             "Mooncake's timestamp, input_length, output_length, hash_ids)")
        return None
    value = row[name]
    try:
        if kind is int and (isinstance(value, bool) or (isinstance(value, float) and not value.is_integer())):
            raise ValueError
        out = kind(value)
    except (TypeError, ValueError):
        raise ProbeError(f"{where}: {name} = {value!r}: not {'an integer' if kind is int else 'a number'}") from None
    if minimum is not None and out < minimum:
        raise ProbeError(f"{where}: {name} = {value!r}: must be at least {minimum:g}")
    return out


def _simple(where: str, line: int, row: dict) -> Record:
    unknown = sorted(set(row) - {"arrival_s", "prompt_tokens", "prompt", "output_tokens", "class", "temperature",
                                 "top_p"})
    if unknown:
        raise ProbeError(f"{where}: unknown field(s) {', '.join(unknown)} (fix: arrival_s, prompt_tokens or prompt, "
                         "output_tokens, and optionally class, temperature, top_p)")
    prompt = row.get("prompt")
    if prompt is None and "prompt_tokens" not in row:
        raise ProbeError(f"{where}: neither prompt_tokens nor prompt (fix: one of them)")
    cls = row.get("class")
    if cls is not None and not str(cls).replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise ProbeError(f"{where}: class = {cls!r}: letters, digits, . _ - only")
    return Record(line, _field(where, row, "arrival_s", float, minimum=0),
                  _field(where, row, "prompt_tokens", int, required=prompt is None, minimum=1),
                  _field(where, row, "output_tokens", int, minimum=1), None if prompt is None else str(prompt),
                  None if cls is None else str(cls), _field(where, row, "temperature", float, False, 0),
                  _field(where, row, "top_p", float, False, 0))


def _mooncake(where: str, line: int, row: dict) -> Record:
    hash_ids = row.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        raise ProbeError(f"{where}: hash_ids = {hash_ids!r}: not a list of integers")
    n = _field(where, row, "input_length", int, minimum=1)
    if hash_ids and not (len(hash_ids) - 1) * MOONCAKE_BLOCK_TOKENS < n <= len(hash_ids) * MOONCAKE_BLOCK_TOKENS:
        raise ProbeError(f"{where}: input_length = {n} does not fit {len(hash_ids)} hash ids of "
                         f"{MOONCAKE_BLOCK_TOKENS} tokens (fix: one id per {MOONCAKE_BLOCK_TOKENS} prompt tokens, "
                         "the last block partial)")
    return Record(line, _field(where, row, "timestamp", float, minimum=0) / 1000, n,
                  _field(where, row, "output_length", int, minimum=1), hash_ids=tuple(hash_ids))


def length_problems(records: list[Record], max_model_len: int | None, where: str) -> list[str]:
    """Records that do not fit the served context (checked before any load; the first few named)."""
    if not max_model_len:
        return []
    bad = [r for r in records if r.prompt_tokens is not None and r.prompt_tokens + r.output_tokens > max_model_len]
    if not bad:
        return []
    shown = ", ".join(f"line {r.line} ({r.prompt_tokens} + {r.output_tokens})" for r in bad[:3])
    return [f"{where}: {len(bad)} of {len(records)} requests need more than the served max_model_len "
            f"{max_model_len} tokens: {shown}{', ...' if len(bad) > 3 else ''} (fix: a trace for this model, or "
            "serve a longer max-model-len)"]


def plan(records: list[Record], config: ProbeConfig, maker: PromptMaker, speed: float = 1.0,
         warmup_s: float = 0.0, requests: int | None = None) -> list[Planned]:
    """The schedule of a replay: each record at its own time / speed (the first one mean gap after the
    start), requests of the first ``warmup_s`` (replayed seconds) not measured; ``requests``: only the
    first so many records."""
    chosen = records[:requests] if requests else records
    t_first = chosen[0].arrival_s
    times = [(r.arrival_s - t_first) / speed for r in chosen]
    shift = times[-1] / (len(times) - 1) if len(times) > 1 and times[-1] > 0 else 0.0
    classes = {c.name: c for c in config.mix}
    out = []
    for i, (r, t) in enumerate(zip(chosen, times, strict=True)):
        cls = r.cls or TRACE_CLASS
        known = classes.get(cls)
        temperature = r.temperature if r.temperature is not None else (known.temperature if known else 0.0)
        top_p = r.top_p if r.top_p is not None else (known.top_p if known else 1.0)
        if r.prompt is not None:
            prompt, asked = r.prompt, r.prompt_tokens or maker.count(r.prompt) or 0
        elif r.hash_ids:
            asked = r.prompt_tokens or 0
            prompt = maker.blocks(list(r.hash_ids), asked, MOONCAKE_BLOCK_TOKENS)
        else:
            asked = r.prompt_tokens or 0
            prompt = maker.make(asked)
        out.append(Planned(i, cls, shift + t, prompt, asked, r.output_tokens, temperature, top_p, t >= warmup_s))
    return out
