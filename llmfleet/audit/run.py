"""`llmfleet audit`: hardware, config and state drift of every host, one report, an exit status."""

from __future__ import annotations

import datetime as dt
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmfleet import fleetrun, onboard_acceptance
from llmfleet.audit import config_drift, fingerprint, metrics, report, state_drift, testinfra, waivers
from llmfleet.audit.fingerprint import repair as hardware_repair
from llmfleet.audit.model import HostResult, Problem
from llmfleet.inventory import read as read_inventory

KINDS_RUN = ("hardware", "config", "state")


def unreachable(inventory: str, host: str, reply: str) -> Problem:
    return Problem(host, "unreachable", "reachable", f"did not answer: {reply} (not audited: fix the connection "
                   "and audit again)", "answers", f"no answer: {reply}", what="SSH", why="not audited",
                   repair=f"check SSH to the host (pyinfra {inventory} exec --limit {host} -- true), then audit again")


def acceptance_problems(inventory: str, h: dict, state_dir: Path, figures: dict) -> tuple[list[Problem], list[str]]:
    """A host's figures now (this audit's weights load time, and the latest `onboard --recheck` run kept
    after its acceptance) against the acceptance result kept at onboarding: (problems, notes)."""
    n = h["name"]
    kept = onboard_acceptance.load(state_dir, n)
    if kept is None:
        return [], [f"no acceptance result kept in {onboard_acceptance.path_for(state_dir, n)} (onboarded "
                    f"before acceptance results were kept: llmfleet onboard {inventory} --limit {n} --recheck "
                    "keeps one)"]
    later = {"vllm_weights_load": figures.get("vllm_weights_load") or {}}
    run, run_path = onboard_acceptance.latest_run(state_dir, n)
    notes = [f"compared with the acceptance result of {kept['at']}"]
    if run is not None and run["at"] > kept["at"]:
        later = {**run["figures"], **later}
        notes.append(f"and the later acceptance run of {run['at']} ({run_path})")
    tolerance = float(h["data"].get("acceptance_tolerance", 0.25))
    return [Problem(n, "hardware", f"acceptance: {d.what}", f"{d.what}: {d.why}", d.kept, d.now, what=d.what,
                    why=d.why, repair=(f"look at the part on {n} (the disk of vllm_models_dir, the GPU); to accept it "
                                       f"as it is now: llmfleet onboard {inventory} --limit {n} --restart"))
            for d in onboard_acceptance.compare(kept["figures"], later, tolerance)], ["; ".join(notes)]


def cores_of_parts(skip: tuple[str, ...] = (), cores: int | None = None) -> tuple[int, int]:
    """The control machine's cores between the audit's two parts, which run at once: (the dry run's
    shards, the verify suite's processes), each part at most one process a core of its share
    (fleetrun.shard_count, at least HOSTS_PER_SHARD_MIN hosts a process). One process a core for
    each part made twice the cores' processes, each paying its start for no more CPU: on the bench
    lab's 2 cores, 24 hosts audited in 16.2 s with one of each against 17.0 s with two of each
    (benchmarks/fleet_scale.py's lab, medians of 3, alternated). A part left out leaves all of
    them to the other."""
    cores = cores or os.cpu_count() or 1
    if "config" in skip or "state" in skip:
        return cores, cores
    dry_run = max(1, cores // 2)
    return dry_run, max(1, cores - dry_run)


def waiver_repair(waivers_file: Path | str | None) -> str:
    return f"resolve the problems it covered, or give the waiver a later expires: in {waivers_file}"


def audit(inventory: str, limit: list[str] | None, state_dir: Path, out_dir: Path, waivers_file: Path | None,
          workers: int | None = None, skip: tuple[str, ...] = (), today: dt.date | None = None, log=print,
          data: list[str] | None = None, shards: int | None = None) -> tuple[dict, dict]:
    today = today or dt.date.today()
    waiver_list = waivers.load(waivers_file) if waivers_file else []
    chosen = read_inventory(inventory, data, limit)
    metrics_at = metrics.metrics_dir(chosen)  # before any host is asked: a bad setting stops the audit
    testinfra.check(chosen)
    names = [h["name"] for h in chosen]
    results = {n: HostResult(n) for n in names}
    log(f"audit: {len(names)} host(s) of {inventory}: reading hardware fingerprints (and who answers)")
    found, why = fingerprint.read(inventory, names)
    for n in names:
        if n not in found:
            results[n].reachable = False
            results[n].problems.append(unreachable(inventory, n, why.get(n, "no reply")))
    reachable = [h for h in chosen if h["name"] in found]
    if "hardware" not in skip:
        for h in reachable:
            n = h["name"]
            recorded = fingerprint.load(state_dir, n)
            if recorded is None:
                results[n].notes.append(f"no hardware fingerprint recorded in {fingerprint.path_for(state_dir, n)} "
                                        f"(fix: llmfleet onboard {inventory} --limit {n})")
                continue
            results[n].checks_run += fingerprint.field_count(recorded)
            for p in fingerprint.compare(n, recorded, found[n]):
                p.repair = hardware_repair(inventory, n)
                results[n].problems.append(p)
    figures: dict[str, dict] = {}
    dry_run_cores, verify_cores = cores_of_parts(skip)
    with ThreadPoolExecutor(max_workers=2) as pool:
        config_job = pool.submit(config_drift.plan, inventory, [h["name"] for h in reachable], data,
                                 fleetrun.shard_count(len(reachable), shards, dry_run_cores)) \
            if "config" not in skip else None
        state_job = pool.submit(state_drift.verify, inventory, reachable,
                                fleetrun.shard_count(len(reachable), workers, verify_cores), data=data,
                                figures=figures) \
            if "state" not in skip else None
        if config_job:
            log("audit: config drift (the deploy's dry run) ...")
            problems, notes, n_ops = config_job.result()
            for p in problems:
                results[p.host].problems.append(p)
            for h in reachable:
                results[h["name"]].checks_run += n_ops
            for n, ns in notes.items():
                results[n].notes += ns
        if state_job:
            log("audit: state drift (the verify suite on every host) ...")
            problems, counts, notes = state_job.result()
            for p in problems:
                results[p.host].problems.append(p)
            for n, c in counts.items():
                results[n].checks_run += c
            for n, ns in notes.items():
                results[n].notes += ns
            for h in reachable:
                n = h["name"]
                results[n].figures = figures.get(n, {})
                if "hardware" not in skip:
                    problems, ns = acceptance_problems(inventory, h, state_dir, results[n].figures)
                    results[n].problems += problems
                    results[n].notes += ns
    extra = waivers.apply([p for r in results.values() for p in r.problems], waiver_list, today)
    for p in extra:
        p.repair = waiver_repair(waivers_file)
    previous, previous_path = report.latest(out_dir)
    created, folder = report.stamp()
    doc = report.build(inventory, limit, results, extra, previous, previous_path, created,
                       tuple(k for k in KINDS_RUN if k not in skip))
    paths = report.write(doc, out_dir / folder)
    if metrics_at is not None:
        metrics.write(doc, metrics_at)
        paths["metrics"] = metrics_at
        log(f"audit: metrics of {len(doc['hosts'])} host(s) written to {metrics_at} "
            "(the node exporter's textfile folder)")
    else:
        log("audit: no metrics written (audit_metrics_dir is None)")
    return doc, paths


def from_prometheus(url: str, limit: list[str] | None, out_dir: Path, waivers_file: Path | None,
                    today: dt.date | None = None, log=print) -> tuple[dict, dict]:
    """The audit's report from what Prometheus holds (llmfleet/audit/from_prometheus.py): the hosts'
    self-audits and the control machine's audits, the latest of each host; waivers applied here."""
    from llmfleet.audit import from_prometheus as prom

    today = today or dt.date.today()
    waiver_list = waivers.load(waivers_file) if waivers_file else []
    log(f"audit: reading the fleet's audit metrics from Prometheus at {url}")
    results, inventory = prom.results(url, limit)
    extra = waivers.apply([p for r in results.values() for p in r.problems], waiver_list, today)
    for p in extra:
        p.repair = waiver_repair(waivers_file)
    previous, previous_path = report.latest(out_dir)
    created, folder = report.stamp()
    doc = report.build(inventory, limit, results, extra, previous, previous_path, created, ("hardware", "state"))
    doc["source"] = url
    return doc, report.write(doc, out_dir / folder)
