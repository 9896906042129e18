"""`llmfleet tune`'s part on its host: the host out of service (and back), each candidate deployed
as a deploy would deploy it, measured by the probe's search, and judged; then the confirmation
across a group. The search itself is llmfleet/tune.py (no I/O). In the probe package: it measures
with the probe, and its command is beside the probe's (llmfleet/probe/cli.py).

- **Out of service.** A host behind the fleet gateway (gateway hosts in the inventory) is held out
  of its rotation: its gateway agent answers "drain", and a roll's "ready" leaves it so until the
  hold is released (llmfleet/remote/gateway_agent.py `hold`/`release`). With gateway_drain_hook,
  the hook is run with "drain" at the start and "ready" at the end. A host that nothing fronts
  serves its own clients, which a restart would cut: it is refused unless --out-of-service says it
  has none.
- **A candidate** is the host's group data with the candidate's vllm_flags, vllm_env and
  vllm_layout: validated first as a deploy validates it (llmfleet/settings.py validate: the
  guardrails included; refused: no start), then deployed by `tune_serving.py` (vLLM and its front
  door, as deploy.py deploys them: the host's own vLLM checks the flags before any restart, and a
  server that does not come up is switched back). A deploy that fails is the trial's reason.
- **A measurement** is the probe's search (llmfleet/probe/run.py) with the group's probe settings;
  against an incumbent, the search must first hold its rate (the early stop). A trial that met its
  SLOs is still rejected for preemptions or a full KV cache at its effective rate (tune.rejection).
- **The end.** Whatever happened, the host's configured state is deployed again and the hold is
  released: the host serves as its group data says.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from llmfleet import frontdoor, gateway, tune
from llmfleet.errors import LlmfleetError
from llmfleet.inventory import ROOT, limit_args, read
from llmfleet.probe.config import ProbeError
from llmfleet.settings import Settings, SettingsError, validate

DEPLOY = "tune_serving.py"  # what a candidate deploys (the serving components of deploy.py)
# what every candidate's deploy sets beside the candidate: one host restarted as a rolling deploy
# does it (a canary needs other hosts to compare with), and no drain hook per candidate (the tune
# runs it once at each end)
PACING = ["rollout_strategy=rolling", "gateway_drain_hook=null"]


class TuneError(LlmfleetError):
    """A tune that cannot run: names the host, the setting or option, and the fix (exit 2)."""


@dataclass
class TuneHost:
    inventory: str
    name: str
    address: str
    data: dict  # the host's group data as the inventory resolves it (with --data)
    settings: Settings
    space: tune.Space
    extra: list[str]  # the --data pairs given to the tune (part of the host's configured state)
    fronted_by: str  # how it is taken out of service, in words
    gateways: bool
    applied: str = ""  # the key of the candidate the host serves ("" : its configured state)
    log: Callable[[str], None] = print
    deploys: list[float] = field(default_factory=list)  # seconds of each candidate's deploy

    @property
    def configured(self) -> tuple[dict, object, dict]:
        return dict(self.data.get("vllm_flags") or self.settings.vllm_flags), self.data.get("vllm_layout"), \
            dict(self.data.get("vllm_env") or self.settings.vllm_env)

    def start(self) -> tune.Candidate:
        flags, layout, env = self.configured
        return self.space.nearest(flags, layout, env)

    def serves_configured(self, c: tune.Candidate) -> bool:
        flags, layout, env = self.configured
        return self.space.is_exactly(c, flags, layout, env)

    def needs_deploy(self, c: tune.Candidate) -> bool:
        """Whether the host serves something else than ``c`` now."""
        return c.key != self.applied and not (self.applied == "" and self.serves_configured(c))


def prepare(inventory: str, host: str, data: list[str], out_of_service: bool, log=print) -> TuneHost:
    """The host, its settings and its space, and what fronts it; refused before anything is touched."""
    every = read(inventory, data)
    chosen = [h for h in every if h["name"] == host]
    if not chosen:
        names = ", ".join(h["name"] for h in every)
        raise TuneError(f"--limit {host}: no such host in {inventory} (it has {names}) (fix: tune one host, by "
                        "its inventory name)")
    h = chosen[0]
    try:
        settings = validate(host, h["data"])
    except SettingsError as exc:
        raise TuneError(str(exc)) from None
    if not settings.vllm_enabled:
        raise TuneError(f"host {host}: vllm_enabled is False: nothing to tune (fix: a host that serves)")
    if settings.tune_space is None:
        raise TuneError(f"host {host}: tune_space is not set: nothing to search (fix: declare it in group data, e.g. "
                        "tune_space = {'flags': {'max-num-seqs': [64, 128, 256]}}; docs/settings.md, tune)")
    space = tune.Space.parse(settings.tune_space)
    if h["data"].get("vllm_layout") is None and len(space.layouts) > 1:
        raise TuneError(f"host {host}: it serves vllm.service (no vllm_layout) and tune_space has layouts: a deploy "
                        "moves a host to a layout but not back, so the tune could not put it back (fix: give the host "
                        "one of the space's layouts in group data and deploy it first, or leave layouts out)")
    gateways = gateway.has_gateways([list(x.get("groups", [])) for x in every], settings.gateway_group)
    if gateways:
        fronted_by = "held out of the fleet gateway's rotation (its gateway agent answers drain until the tune ends)"
    elif settings.gateway_drain_hook:
        fronted_by = "taken out of your load balancer's rotation by gateway_drain_hook (drain now, ready at the end)"
    elif out_of_service:
        fronted_by = "out of service as you said (--out-of-service): nothing fronts it"
    else:
        raise TuneError(f"host {host}: nothing fronts it (no gateway host in {inventory}, no gateway_drain_hook), so "
                        "its clients would see each candidate's restart (fix: put it behind the fleet gateway or set "
                        "gateway_drain_hook, or pass --out-of-service once it serves no one)")
    return TuneHost(inventory, host, h["data"].get("ssh_hostname") or host, h["data"], settings, space, list(data),
                    fronted_by, gateways, log=log)


# ---- out of service and back ------------------------------------------------------------------------

def _exec(th: TuneHost, command: str) -> dict:
    """A host command run by pyinfra (the inventory's connection), its last JSON line (-vvv: pyinfra prints
    a command's output only then)."""
    proc = subprocess.run([sys.executable, "-m", "pyinfra", th.inventory, "exec", "-y", "--sudo", "-vvv",
                           *limit_args([th.name]), "--", command], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    for line in reversed((proc.stdout + proc.stderr).splitlines()):
        # the host's output lines, "[host]  {...}" (pyinfra also echoes the command, the script's source)
        if line.startswith(f"[{th.name}]") and line.split("]", 1)[1].strip().startswith('{"ok"'):
            try:
                return json.loads(line.split("]", 1)[1])
            except ValueError:
                continue
    tail = " | ".join(ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip())[-400:]
    return {"ok": False, "why": f"no answer from {th.name}: {tail}"}


def _hook(th: TuneHost, word: str) -> None:
    argv = gateway.hook_argv(th.settings, th.name, word)
    if argv:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=th.settings.vllm_drain_timeout_s)
        if proc.returncode != 0:
            raise TuneError(f"host {th.name}: gateway_drain_hook {' '.join(argv)} exited {proc.returncode}: "
                            f"{(proc.stdout + proc.stderr).strip()[-300:]} (fix: the hook, then run the tune again)")


def hold(th: TuneHost) -> None:
    if th.gateways:
        who = f"llmfleet tune since {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}"
        answer = _exec(th, gateway.hold_command(th.settings, who))
        if not answer.get("ok"):
            raise TuneError(f"host {th.name}: could not hold it out of the gateway's rotation: {answer.get('why')} "
                            "(fix: a deploy of the host, which installs its gateway agent, then the tune again)")
    _hook(th, gateway.DRAIN)
    th.log(f"{th.name}: {th.fronted_by}")


def release(th: TuneHost) -> None:
    if th.gateways:
        answer = _exec(th, gateway.release_command(th.settings))
        if not answer.get("ok"):
            raise TuneError(f"host {th.name}: serving its configured state, but still out of the gateway's rotation: "
                            f"{answer.get('why')} (fix: llmfleet deploy {th.inventory} --limit {th.name})")
    _hook(th, "ready")
    th.log(f"{th.name}: back in rotation, serving its configured state")


# ---- candidates -------------------------------------------------------------------------------------

def candidate_data(th: TuneHost, c: tune.Candidate | None) -> list[str]:
    """The --data of a candidate's deploy (None: the host's configured state)."""
    out = list(th.extra)
    if c is not None:
        flags, _, env = th.configured
        out += [f"vllm_flags={json.dumps(c.flags_over(flags))}", f"vllm_env={json.dumps(c.env_over(env))}",
                f"vllm_layout={json.dumps(c.layout)}"]
    return out + PACING


def refused(th: TuneHost, c: tune.Candidate) -> str:
    """Why a deploy would refuse the candidate ("" if it would not): the host's settings validated
    with the candidate's values (guardrails included)."""
    flags, _, env = th.configured
    values = th.data | {"vllm_flags": c.flags_over(flags), "vllm_env": c.env_over(env), "vllm_layout": c.layout}
    try:
        validate(th.name, values)
    except SettingsError as exc:
        return str(exc)
    return ""


# what serves on the host, stopped before a candidate's deploy: the held host serves no one, so the
# deploy starts its servers (a layout's instances together) instead of restarting them one at a time
# behind the front door (operations/vllm.py _serve_layout: "nothing serves from them now")
STOP_SERVERS = "systemctl stop vllm.service 'vllm-*.service' 2>/dev/null; echo '{\"ok\": true}'"
UNKNOWN = "?"  # th.applied after a failed deploy: the next measurement or the put-back deploys again


def deploy(th: TuneHost, c: tune.Candidate | None, together: bool = True) -> str:
    """The candidate (None: the configured state) deployed on the host, its servers stopped first
    (``together``); "" or why it failed, in the deploy's own words (the server's reason where it did
    not start)."""
    if together:
        _exec(th, STOP_SERVERS)
    args = [sys.executable, "-m", "pyinfra", th.inventory, DEPLOY, "-y", *limit_args([th.name]),
            *[a for kv in candidate_data(th, c) for a in ("--data", kv)]]
    t0 = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    th.deploys.append(round(time.monotonic() - t0, 1))
    if proc.returncode == 0:
        th.applied = "" if c is None or th.serves_configured(c) else c.key
        return ""
    # what serves now is not known for sure (refused: stopped; not started: switched back)
    th.applied = UNKNOWN
    return deploy_failure(proc.stdout + proc.stderr, th.name)


def restarted(why: str) -> bool:
    """Whether a failed deploy got as far as starting the server (the roll's own failure: the
    server did not come up), or stopped before (validation, the host's vLLM refusing the flags)."""
    return why.endswith("stopping the roll")


def deploy_failure(output: str, host: str) -> str:
    """The reason of a failed deploy, from its output: the roll's line for the host (which carries
    the server's own last words), else the host's first error line (a refusal before any change)."""
    flat = " ".join(output.split())
    m = re.search(rf"\[{re.escape(host)}\] vllm: (.*?; stopping the roll)", flat)
    if m:
        return m.group(1)[:1500]
    m = re.search(rf"\[{re.escape(host)}\] Error: (.*?)(?= --> |$)", flat)
    if m:
        return m.group(1)[:1500]
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and ("rror" in ln or "refuse" in ln)]
    return (" | ".join(lines[-2:]) or flat[-600:])[:1500]


def measure(th: TuneHost, probe, c: tune.Candidate, floor: float | None) -> tune.Trial:
    """One trial of a candidate: refused, failed to deploy or start, beaten (could not hold
    ``floor``), rejected (preemptions, KV cache), or measured."""
    base = tune.Trial(c.key, c.describe(), tune.REFUSED)
    why = refused(th, c)
    if why:
        base.reason = why
        return base
    starts = 0
    if th.needs_deploy(c):
        th.log(f"{th.name}: deploying {c.describe()}")
        why = deploy(th, c)
        starts = 1 if not why or restarted(why) else 0
        if why:
            base.status, base.reason, base.starts = tune.FAILED, why, starts
            return base
    th.log(f"{th.name}: measuring {c.describe()}" + (f" (it must hold {floor:g} req/s)" if floor else ""))
    base.starts = starts
    try:
        rep = probe(floor)
    except Interrupted:
        raise
    except ProbeError as exc:  # deployed, but it does not serve what the probe asks: the server's answer
        base.status, base.reason = tune.FAILED, f"deployed, but the probe could not run: {exc}"
        return base
    return judge(th.settings, c, rep, floor, base)


def judge(settings: Settings, c: tune.Candidate, rep, floor: float | None, trial: tune.Trial) -> tune.Trial:
    """A probe search's report as a trial (the probe's report model: llmfleet/probe/report.py)."""
    e = rep.effective
    at = [t for t in rep.trials if e is not None and e.rps is not None and t.offered_rps == e.rps and t.passed]
    shown = at[-1] if at else (rep.trials[-1] if rep.trials else None)
    p95s = [p for p in (e.p95_ms_at_effective if e else []) if p is not None]
    trial.p95_ms = max(p95s) if p95s else (shown.overall.e2e_ms.p95 if shown else None)
    if e is None or e.rps is None:
        trial.status = tune.BEATEN if floor else tune.FAILED
        trial.reason = (e.note if e else "") or "; ".join(rep.reasons) or "no rate met the SLOs"
        return trial
    server = shown.server if shown else None
    why = tune.rejection(server.preemptions if server else None, shown.overall.requests if shown else 0,
                         (server.kv_cache or {}).get("max") if server else None,
                         max_preemptions_per_request=settings.tune_max_preemptions_per_request,
                         min_kv_headroom=settings.tune_min_kv_headroom)
    trial.effective_rps = e.rps
    trial.resolution = _resolution(rep)
    if why:
        trial.status, trial.reason = tune.REJECTED, why
        return trial
    trial.status = tune.MEASURED
    return trial


def _resolution(rep) -> float | None:
    e = rep.effective
    return round(e.lowest_failing_rps - e.rps, 4) if e and e.rps is not None and e.lowest_failing_rps else None


# ---- confirmation across a group --------------------------------------------------------------------

def outliers(results: dict[str, dict], tolerance: float) -> dict[str, str]:
    """{host: why} of the hosts that stand out: an SLO missed at the tuned rate, or a P95 end-to-end
    latency more than ``tolerance`` above the group's median. ``results``: {host: {"passed",
    "p95_ms", "reasons"}}."""
    p95s = [r["p95_ms"] for r in results.values() if r.get("p95_ms") is not None]
    median = statistics.median(p95s) if p95s else None
    out = {}
    for host, r in results.items():
        if not r["passed"]:
            out[host] = "missed the SLOs at the tuned rate: " + "; ".join(r.get("reasons") or [])
        elif r.get("p95_ms") is None:
            out[host] = "no P95 (failed requests)"
        elif median and r["p95_ms"] > median * (1 + tolerance):
            out[host] = (f"P95 end-to-end {r['p95_ms']:.0f} ms, {r['p95_ms'] / median - 1:.0%} above the group's "
                         f"median {median:.0f} ms (tune_confirm_tolerance {tolerance:.0%})")
    return out


def not_serving(settings: Settings, winner: dict) -> str:
    """How a host's configuration differs from the tuned one ("" : it serves it)."""
    diffs = []
    flags = dict(settings.vllm_flags)
    for k, v in (winner.get("vllm_flags") or {}).items():
        if flags.get(k) != v:
            diffs.append(f"vllm_flags {k} {flags.get(k)!r} (tuned: {v!r})")
    for k in set(flags) - set(winner.get("vllm_flags") or {}):
        diffs.append(f"vllm_flags {k} {flags[k]!r} (tuned: left out)")
    for k, v in (winner.get("vllm_env") or {}).items():
        if settings.vllm_env.get(k) != v:
            diffs.append(f"vllm_env {k} {settings.vllm_env.get(k)!r} (tuned: {v!r})")
    if "vllm_layout" in winner:
        ours, tuned = _layout(settings.vllm_layout), _layout(winner["vllm_layout"])
        if ours != tuned:
            diffs.append(f"vllm_layout {json.dumps(ours)} (tuned: {json.dumps(tuned)})")
    return "; ".join(diffs)


def _layout(layout) -> object:
    """A layout as group data would write it, every instance through the schema (its defaults
    left out), so that a host's and a report's compare equal when they are the same layout."""
    from llmfleet.schema import VllmInstance

    if not isinstance(layout, list):
        return layout
    return [(i if isinstance(i, VllmInstance) else VllmInstance(**i)).model_dump(exclude_defaults=True)
            for i in layout]


# ---- the whole tune ---------------------------------------------------------------------------------

class Interrupted(LlmfleetError):
    """A tune stopped by a signal (exit 1): the journal keeps its trials, the same command resumes."""

    exit_code = 1


def run(th: TuneHost, config, out_dir: Path, max_starts: int | None = None) -> dict:
    """Hold the host, search, measure the top candidates again, put the host back; the report (a
    dict: tune.report's document)."""
    s = th.settings
    journal = tune.Journal(out_dir / f"{th.name}.journal.jsonl")
    if journal.trials:
        th.log(f"{th.name}: resuming: {len(journal.trials)} trial(s) in {journal.path} are not measured again")
    seen: dict = {}
    probe = prober(th, config, seen, lambda: _stopped(th, journal))

    def trial(c: tune.Candidate, floor: float | None) -> tune.Trial:
        if stop_requested():
            raise Interrupted(_stopped(th, journal))
        return measure(th, probe, c, floor)

    start = th.start()
    limit = max_starts or s.tune_max_starts
    hold(th)
    t0 = time.monotonic()
    try:
        # what the host serves is what its group data says (a no-op where it is): the incumbent is
        # measured as configured, whatever a deploy with other --data left on it
        why = deploy(th, None, together=False)
        if why:
            raise TuneError(f"host {th.name}: its configured state did not deploy: {why} (fix: llmfleet deploy "
                            f"{th.inventory} --limit {th.name}, then the tune again)")
        tune.search(th.space, start, trial, journal, max_starts=limit, min_gain=s.tune_min_gain, log=th.log)
        again(th, journal, probe)
    finally:
        put_back(th)
    return report(th, journal, start, seen.get("server_version"), config, time.monotonic() - t0)


def again(th: TuneHost, journal: tune.Journal, probe) -> None:
    """The tune_top best measured tune_repeats more times each; where that changes which are the
    best, the new ones too (the winner always has its interval)."""
    s = th.settings
    while True:
        todo = [t for t in tune.ranked(journal.trials.values())[:s.tune_top]
                if len(t.repeats) < s.tune_repeats and not t.reason.startswith("measured again")]
        if not todo:
            return
        t = todo[0]
        c = _candidate(th.space, t.key)
        if th.needs_deploy(c):
            th.log(f"{th.name}: deploying {c.describe()} to measure it again")
            why = deploy(th, c)
            t.starts += 1 if not why or restarted(why) else 0
            if why:
                t.reason = f"measured again: {why}"
                journal.record(t)
                continue
        th.log(f"{th.name}: measuring {c.describe()} again ({len(t.repeats) + 2} of {s.tune_repeats + 1})")
        rep = probe(t.effective_rps, floor=False)  # a whole search, from where the first one ended
        # one that holds nothing now counts as 0 against it
        t.repeats.append(rep.effective.rps if rep.effective and rep.effective.rps is not None else 0.0)
        t.resolution = max(t.resolution or 0.0, _resolution(rep) or 0.0) or None
        journal.record(t)


def stop_requested() -> bool:
    from llmfleet.probe import load

    return load.STOP.is_set()


def prober(th: TuneHost, config, seen: dict, stopped: Callable[[], str]) -> Callable[..., Any]:
    """probe(rate, floor=True): the probe's search on the host from ``rate`` (None:
    probe_search_start_rps), which it must hold where ``floor`` (else it searches down from there
    too); the server's version goes into ``seen``; a signal raises Interrupted with ``stopped()``'s
    words."""
    from llmfleet.probe import fleet
    from llmfleet.probe import run as probe_run

    target = fleet.target_of(th.name, th.settings, th.address)

    def probe(rate: float | None, floor: bool = True):
        if stop_requested():
            raise Interrupted(stopped())
        answering(target.url, frontdoor.up_wait_s(th.settings) + 30)
        rep = probe_run.run_probe(target.url, target.model, target.api_key, config, search_mode=True, rate=rate,
                                  floor=floor and rate is not None, host=th.name, log=lambda m: th.log("  " + m))
        seen.setdefault("server_version", rep.target.get("server_version"))
        if stop_requested():
            raise Interrupted(stopped())
        return rep

    return probe


def answering(url: str, within_s: float) -> bool:
    """Whether the host's endpoint answers /health with 200 within ``within_s`` (behind a front door:
    once its checks have an instance UP, which lags the instances' own readiness by `rise` checks)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + within_s
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _stopped(th: TuneHost, journal: tune.Journal) -> str:
    return (f"host {th.name}: the tune was stopped by a signal after {len(journal.trials)} trial(s); they are kept in "
            f"{journal.path} and the same command resumes from them (the host is back in its configured state)")


def _candidate(space: tune.Space, key: str) -> tune.Candidate:
    return next(c for c in space.grid() if c.key == key)


def put_back(th: TuneHost) -> None:
    """The host's configured state deployed again (when a candidate was left on it), then back in
    rotation; both whatever stopped the tune."""
    if th.applied != "":
        th.log(f"{th.name}: putting back its configured state")
        why = deploy(th, None)
        if why:
            raise TuneError(f"host {th.name}: could not deploy its configured state again: {why} (fix: llmfleet deploy "
                            f"{th.inventory} --limit {th.name}; the host is still held out of rotation)")
    release(th)


def report(th: TuneHost, journal: tune.Journal, start: tune.Candidate, server_version: str | None, config,
           seconds: float) -> dict:
    """The tune's document: every trial, the winner with its interval, the Pareto front, the
    provenance and the snippet (or the plain statement that the current configuration is best)."""
    s = th.settings
    trials = list(journal.trials.values())
    best = tune.ranked(trials)
    winner = best[0] if best else None
    doc: dict = {"schema": "llmfleet-tune/1", "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                 "host": th.name, "inventory": th.inventory, "out_of_service": th.fronted_by,
                 "space": s.tune_space, "grid_size": len(th.space.grid()), "starts": journal.starts,
                 "seconds": round(seconds, 1), "deploys_s": th.deploys,
                 "start": {"key": start.key, "candidate": start.describe()},
                 "trials": [t.__dict__ for t in trials],
                 "pareto": [t.key for t in tune.pareto(trials)], "winner": None, "current_is_best": False,
                 "statement": "", "snippet": ""}
    if winner is None:
        doc["statement"] = "no candidate was measured: see each trial's reason"
        return doc
    mean, half = tune.figures(winner)
    c = _candidate(th.space, winner.key)
    flags, _, env = th.configured
    figures = (f"{mean:.3g} req/s effective (95% CI +/- {half:.2g}, n={len(tune.measurements(winner))}), P95 e2e "
               f"{winner.p95_ms:.0f} ms" if winner.p95_ms is not None else f"{mean:.3g} req/s")
    provenance = {"host": th.name, "gpu_profile": s.gpu_profile, "vllm": server_version or s.vllm_version,
                  "model": f"{s.vllm_model.name} {s.vllm_model.version}" if s.vllm_model else None,
                  "mix": tune.mix_hash([m.model_dump() for m in config.mix], dict(config.slo)),
                  "slo": dict(config.slo), "figures": figures, "date": doc["created"][:10],
                  "starts": f"{journal.starts} of a {len(th.space.grid())}-point grid"}
    doc["winner"] = {"key": winner.key, "candidate": winner.candidate, "effective_rps_mean": round(mean, 4),
                     "half_width_95": None if half == float("inf") else round(half, 4),
                     "measurements": tune.measurements(winner), "p95_ms": winner.p95_ms,
                     "vllm_flags": c.flags_over(flags), "vllm_env": c.env_over(env),
                     **({"vllm_layout": c.layout} if len(th.space.layouts) > 1 else {})}
    doc["provenance"] = provenance
    if winner.key == start.key:
        doc["current_is_best"] = True
        doc["statement"] = (f"the current configuration ({start.describe()}) is already the best found: {figures}; "
                            "nothing to change")
    else:
        doc["snippet"] = tune.snippet(c, flags, env, provenance, layouts=len(th.space.layouts) > 1)
        doc["statement"] = f"better than the current configuration: {winner.candidate}: {figures}"
    return doc


def plot(doc: dict, path: Path) -> None:
    """PNG: every measured candidate's effective throughput against its P95 end-to-end latency, the
    Pareto front joined and the winner and the starting configuration marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [t for t in doc["trials"] if t["status"] == tune.MEASURED and t["p95_ms"] is not None]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.scatter([t["p95_ms"] for t in measured], [t["effective_rps"] for t in measured], color="grey",
               label="measured candidates")
    front = sorted((t for t in measured if t["key"] in doc["pareto"]), key=lambda t: t["p95_ms"])
    ax.plot([t["p95_ms"] for t in front], [t["effective_rps"] for t in front], "o-", color="tab:blue",
            label="Pareto front")
    for t in measured:
        ax.annotate(t["candidate"][:40], (t["p95_ms"], t["effective_rps"]), fontsize=6)
        if len(t["repeats"]):
            mean, half = tune.figures(tune.Trial(**t))
            if half != float("inf"):
                ax.errorbar([t["p95_ms"]], [mean], yerr=[half], color="tab:green", capsize=3)
    w = doc.get("winner")
    if w and w.get("p95_ms") is not None:
        ax.scatter([w["p95_ms"]], [w["effective_rps_mean"]], marker="*", s=250, color="tab:red", label="winner")
    start = next((t for t in measured if t["key"] == doc["start"]["key"]), None)
    if start:
        ax.scatter([start["p95_ms"]], [start["effective_rps"]], marker="s", s=90, facecolors="none",
                   edgecolors="black", label="current configuration")
    ax.set_xlabel("P95 end-to-end latency at the effective rate (ms)")
    ax.set_ylabel("effective throughput (requests/s under the SLOs)")
    ax.set_title(f"llmfleet tune: {doc['host']} ({doc['starts']} starts of a {doc['grid_size']}-point grid)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
