"""A probe run from start to report: preflight, prompts, trials (one check, or the search),
the ceiling, the baseline gate."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

from llmfleet.probe import ceiling as ceil
from llmfleet.probe import load, report
from llmfleet.probe import trace as traces
from llmfleet.probe.client import Endpoint, auth_headers, preflight
from llmfleet.probe.config import ProbeConfig, ProbeError, length_problems
from llmfleet.probe.prompts import PromptMaker, load_tokenizer
from llmfleet.probe.search import Outcome, search
from llmfleet.probe.server import ServerView


@contextlib.contextmanager
def _progress(enabled: bool, label: str):
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("in flight {task.fields[inflight]}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(label, total=1, inflight=0)

        def update(sent: int, done: int, total: int):
            prog.update(task, completed=done, total=total, inflight=sent - done)

        yield update


def run_probe(url: str, model: str, api_key: str | None, config: ProbeConfig, *, search_mode: bool = False,
              rate: float | None = None, requests: int | None = None, fixed: dict | None = None,
              tokenizer: str | Path | None = None, host: str | None = None, gpu_profile=None,
              tensor_parallel: int = 1, model_dir: Path | None = None, model_dtype: str | None = None,
              baseline_file: Path | None = None, show_progress: bool = False, stop_early: bool = True,
              log=None, trace: Path | None = None, speed: float = 1.0, trace_warmup_s: float = 0.0,
              server_view: bool = True, floor: bool = False) -> report.ProbeReport:
    """A check trial at ``rate`` (or check_rps), the search (``search_mode``), or the replay of a
    request log (``trace``, at ``speed``); ``server_view``: sample the endpoint's /metrics meanwhile.
    ``floor`` (a search): ``rate`` must hold, or the search ends with no effective rate."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    where = host or url
    tok = load_tokenizer(tokenizer) if tokenizer else None
    trace_format, records = traces.read(Path(trace)) if trace else (None, [])
    endpoint: Endpoint = asyncio.run(preflight(url, model, api_key, calibrate=tok is None))
    problems = _length_problems(config, endpoint, where, fixed, trace, records, requests)
    if problems:
        raise ProbeError("; ".join(problems))
    maker = PromptMaker(tok, endpoint.tokens_per_word, seed=config.seed)
    counter = iter(range(10_000))
    trials: list[load.Trial] = []
    view_note = _view_note(endpoint, server_view)

    def trial(r: float | None) -> load.Trial:
        if trace:
            planned = traces.plan(records, config, maker, speed, trace_warmup_s, requests)
            start, end = load.span(planned)
            n = sum(p.measured for p in planned)
            r = round(n / (end - start), 3) if end > start else float(n)
        else:
            assert r is not None
            planned = load.plan(config, r, maker, seed=config.seed + next(counter), requests=requests, fixed=fixed)
            n = sum(p.measured for p in planned)
        view = ServerView(url, endpoint.version, model, auth_headers(api_key)) if not view_note and endpoint.version \
            else None
        with _progress(show_progress, f"{where} {r:g} req/s") as prog:
            t = load.run_loop(load.run(endpoint, api_key, config, planned, r, progress=prog, stop_early=stop_early,
                                     server_view=view))
        trials.append(t)
        e2e = t.stats["e2e_ms"]["p95"]
        log(f"{where}: {r:g} req/s, {n} requests: P95 e2e {'failed' if e2e is None else f'{e2e:.0f} ms'}, goodput "
            f"{t.stats['goodput_share']:.0%}, {'pass' if t.passed else 'fail: ' + '; '.join(t.reasons)}")
        return t

    effective: report.Effective | None = None
    if search_mode:
        effective = _search(trial, trials, where, rate, config, floor)
    else:
        trial(None if trace else (rate or config.check_rps))

    reasons = _reasons(effective, trials)
    warmup = trace_warmup_s if trace else (0 if requests else config.warmup_s)
    stopped = None if search_mode else _stopped(trials)
    rep = report.ProbeReport(
        created=report.now_iso(),
        target={"url": url, "model": model, "host": host, "server": endpoint.server,
                "server_version": endpoint.version, "max_model_len": endpoint.max_model_len},
        method=_method(config, endpoint, maker, trace=trace, trace_format=trace_format, speed=speed, warmup=warmup,
                       fixed=fixed, view_note=view_note, stopped=stopped),
        definitions=report.DEFINITIONS,
        slo=config.slo, goodput_min=config.goodput_min,
        mix=config.mix, mode="search" if search_mode else ("trace" if trace else "check"),
        trials=[report.trial_report(t) for t in trials], effective=effective,
        ceiling=None, ceiling_note="", gate=None, passed=not reasons, reasons=reasons)
    rep.ceiling, rep.ceiling_note = _ceiling(rep, gpu_profile, tensor_parallel, model_dir, model_dtype)
    if baseline_file:
        rep.gate = report.gate(rep, baseline_file, config.baseline_tolerance)
        if not rep.gate.passed:
            rep.reasons.append(f"baseline gate: {rep.gate.message}")
            rep.passed = False
    return rep


def _length_problems(config: ProbeConfig, endpoint: Endpoint, where: str, fixed: dict | None,
                     trace: Path | None, records: list, requests: int | None) -> list[str]:
    """What of the planned lengths (the mix's, the fixed ones, the trace's) the server cannot serve."""
    problems = length_problems(config.mix if not (fixed or trace) else [], endpoint.max_model_len, where)
    if fixed and endpoint.max_model_len and fixed["prompt_tokens"] + fixed["output_tokens"] > endpoint.max_model_len:
        problems.append(f"{where}: fixed lengths {fixed['prompt_tokens']} + {fixed['output_tokens']} tokens, beyond "
                        f"the served max_model_len {endpoint.max_model_len} (fix: shorter lengths)")
    if trace:
        problems += traces.length_problems(records[:requests] if requests else records, endpoint.max_model_len,
                                           f"{where}: --trace {trace}")
    return problems


def _search(trial, trials: list[load.Trial], where: str, rate: float | None,
            config: ProbeConfig, floor: bool = False) -> report.Effective:
    """The search for the effective rate, a trial (``trial``) at each rate it tries."""
    def searched(r: float) -> Outcome:
        if load.STOP.is_set():
            raise ProbeError(f"{where}: the search was stopped by a signal after {len(trials)} trial(s): no "
                             "effective rate (fix: let it end, or probe one rate without --search)")
        return _outcome(trial(r))

    res = search(searched, rate or config.search_start_rps, config.search_max_rps, config.search_precision,
                 config.repeats, floor=floor and rate is not None)
    return report.Effective(rps=res.effective_rps, lowest_failing_rps=res.lowest_failing_rps,
                            relative_uncertainty=res.relative_uncertainty,
                            p95_ms_at_effective=res.p95_ms_at_effective, note=res.note)


def _reasons(effective: report.Effective | None, trials: list[load.Trial]) -> list[str]:
    """Why the run fails: a search with no effective rate, or the one trial's reasons."""
    reasons: list[str] = []
    if effective is not None:  # a search
        if effective.rps is None:
            reasons.append(f"no rate met the SLO ({effective.note})")
    elif not trials[-1].passed:
        reasons.extend(trials[-1].reasons)
    return reasons


def _stopped(trials: list[load.Trial]) -> str | None:
    """How a trial (not a search) a signal stopped ended (None: no signal)."""
    if not load.STOP.is_set():
        return None
    sent = sum(1 for r in trials[-1].results if r.measured)
    return (f"by a signal (SIGTERM or Ctrl-C): no request sent after it, {sent} measured request(s) sent "
            "and judged, those in flight finished")


def _method(config: ProbeConfig, endpoint: Endpoint, maker: PromptMaker, *, trace: Path | None,
            trace_format: str | None, speed: float, warmup: float, fixed: dict | None, view_note: str | None,
            stopped: str | None) -> dict:
    """The report's method: how prompts, outputs, arrivals and the server's view were made."""
    return {"prompt_lengths": maker.method,
            "output_lengths": "exact (ignore_eos)" if endpoint.ignore_eos else
            "caps: the server refused ignore_eos, outputs may end early",
            "token_counts": "server usage (stream_options.include_usage)",
            "arrivals": f"trace {trace} ({trace_format}), at {speed:g}x its own timing" if trace
            else config.arrivals,
            "burstiness": None if trace else (config.burstiness if config.arrivals == "gamma" else 1.0),
            "latency_origin": "intended send time", "warmup_s": warmup,
            "fixed_lengths": f"{fixed['prompt_tokens']} in / {fixed['output_tokens']} out" if fixed else None,
            "shared_prefixes": _prefixes(config, trace_format),
            "server_view": view_note or f"/metrics sampled every {1:g} s (vLLM {endpoint.version} names)",
            **({"stopped": stopped} if stopped else {})}


def _view_note(endpoint: Endpoint, wanted: bool) -> str | None:
    """Why the server's view is left out (None: it is sampled)."""
    if not wanted:
        return "not sampled (asked not to)"
    if not endpoint.version:
        return "not sampled: the server has no /version (not vLLM?), so its metric names are not known"
    return None


def _prefixes(config: ProbeConfig, trace_format: str | None) -> str:
    if trace_format == "mooncake":
        return (f"from the trace's hash ids ({traces.MOONCAKE_BLOCK_TOKENS} tokens each): shared ids, shared "
                "prompt text")
    shared = [f"{c.name} {c.shared_prefix_tokens}" for c in config.mix if c.shared_prefix_tokens]
    if shared:
        return "per class, tokens of a prompt prefix shared by the class's requests: " + ", ".join(shared)
    return "none: every prompt differs from its first token"


def _outcome(t: load.Trial) -> Outcome:
    return Outcome(t.offered_rps, t.passed, t.stats["e2e_ms"]["p95"], t)


def _ceiling(rep: report.ProbeReport, profile, tp: int, model_dir: Path | None, dtype: str | None):
    if profile is None:
        return None, ("not computed: no GPU profile for this host (gpu_profile = None; the lab serves on CPU); "
                      "the ceiling needs the GPUs' memory bandwidth")
    if model_dir is None or not (Path(model_dir) / "config.json").is_file():
        return None, (f"not computed: the model's config.json and weights are not readable here ({model_dir}); "
                      "pass --model-dir")
    shape = ceil.shape_of_model_dir(Path(model_dir), dtype)
    shown = report._trial_at(rep)
    if shown is None or not shown.overall.ok:
        return None, "not computed: no successful request to compare with"
    o = shown.overall
    batch = max(1.0, o.completed_rps * (o.e2e_ms.mean or 0) / 1000)  # Little's law: requests in flight
    context = (o.prompt_tokens["server_mean"] or 0) + (o.output_tokens["server_mean"] or 0) / 2
    c = ceil.ceiling(profile.memory_bandwidth_gbs, tp, shape.weight_bytes, shape.kv_bytes_per_token, batch, context)
    d = c.as_dict()
    d["share_reached"] = round(o.output_tokens_per_s / c.batch_tokens_per_s, 4) if c.batch_tokens_per_s else None
    tpot = o.tpot_ms.p50
    d["single_stream_share_reached"] = round(1000 / tpot / c.single_stream_tokens_per_s, 4) if tpot else None
    d["model_weight_bytes"] = shape.weight_bytes
    return d, ("memory-bandwidth bound decode, eta 0.8, all-reduce not counted "
               "(llmfleet/probe/ceiling.py); batch from Little's law on the measured trial")

