#!/usr/bin/env python3
"""Fleet scale: a no-change deploy and an audit on 1, 8 and 24 lab container hosts, with and without
one host slowed on purpose, in step (one pyinfra process, every host waiting at each operation) and
in shards (`llmfleet deploy`: pyinfra --no-wait processes); the control machine's CPU seconds per
host, and a projection to 500 hosts on an 8-core control machine.

    .venv/bin/python benchmarks/fleet_scale.py [--rounds 2] [--cpu-percent 5] [--keep] [--reuse] [--audit-only]
                                               [--phases]

A lab of its own (/var/lib/llmfleet/bench-lab, 10.76.0.0/24, prefix llmb) of 24 containers, its
inventory benchmarks/inventories/lab.py (vLLM on 3 hosts only). The slowed host runs on a CPU
limit (`--cpu-percent` of one core, a cgroup v1 cpu quota over its container's processes): a host
under load, every command on it slower. The lab's hosts share this machine's cores with the
control side (pyinfra, pytest), so past a few hosts the hosts' own commands bound the wall time;
the control side's CPU seconds per host are what the projection to 500 hosts uses. The hosts' own
CPU seconds are counted too (a cgroup v1 cpuacct group over every container's processes), and the
lab's Prometheus is paused (SIGSTOP) while measuring: scraping 24 node exporters every 5 s took
about a third of a core here, which on a real fleet the hosts and the monitoring server pay.

"A host's finish" is when pyinfra printed that host's last line (its last operation's result),
read as the lines arrive. "The others" are every host but the slowed one. In step, the others
finish with the slowed host; with --no-wait they should not wait for it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.update({"LLMFLEET_LAB_DIR": "/var/lib/llmfleet/bench-lab", "LLMFLEET_LAB_SUBNET": "10.76.0.0/24",
                   "LLMFLEET_LAB_PREFIX": "llmb"})

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmfleet import fleetrun  # noqa: E402
from llmfleet.inventory import read as read_inventory  # noqa: E402
from llmfleet.lab import cgroup  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.hosts import container_cgroup  # noqa: E402
from llmfleet.lab.state import LabState  # noqa: E402

BIN = Path(sys.executable).parent
INV = "benchmarks/inventories/lab.py"
HOSTS = 24
SLOW = "lab-c2"
LINE = re.compile(r"^\s*(?:\[shard \d+\]\s*)?\[([^\]]+)\]")


def sh(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env} if env else None)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def used_cpu(who: int = resource.RUSAGE_CHILDREN) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


IDLE_S = 20  # seconds over which the lab's own work is measured, nothing asked of it
HOSTS_CPU = Path("/sys/fs/cgroup/cpuacct/llmfleet-bench-hosts")  # every container's processes


def hosts_cpu() -> float:
    return int((HOSTS_CPU / "cpuacct.usage").read_text()) / 1e9


def count_hosts_cpu(names: list[str]) -> None:
    """Every process of the bench lab's containers into one cpuacct group (new ones inherit it)."""
    for name in names:
        cgroup.move_to(container_cgroup(name), HOSTS_CPU)


def prometheus(sig: int) -> None:
    """Pause (SIGSTOP) or resume (SIGCONT) the lab's Prometheus."""
    lab = LabState.load(LabPaths.from_env())
    svc = lab.services.get("prometheus") if lab else None
    if svc and svc.proc and svc.proc.alive():
        os.kill(svc.proc.pid, sig)


def timed_deploy(hosts: list[str], sharded: bool, out: Path) -> dict:
    """One no-change deploy; wall, children's CPU, the hosts' own CPU, each host's finish (its last
    line), hosts failed."""
    t0, c0, h0 = time.monotonic(), used_cpu(), hosts_cpu()
    last: dict[str, float] = {}

    def echo(line: str) -> None:
        m = LINE.match(line)
        if m and m.group(1) in hosts:
            last[m.group(1)] = time.monotonic() - t0

    argv = fleetrun.deploy_argv(INV, [], in_step=not sharded)
    parts = fleetrun.split(hosts, fleetrun.shard_count(len(hosts))) if sharded else [hosts]
    done = fleetrun.run(argv, parts, out / f"{'sharded' if sharded else 'in-step'}-{len(hosts)}-{time.time():.0f}",
                        echo=echo)
    wall, cpu, host_cpu = time.monotonic() - t0, used_cpu() - c0, hosts_cpu() - h0
    failed = [h for s in done for h, o in fleetrun.outcome(s).items() if not o["ok"]]
    changed = [h for s in done for h, o in fleetrun.outcome(s).items() if o["changed"]]
    return {"wall": wall, "cpu": cpu, "hosts_cpu": host_cpu, "last": last, "failed": failed, "changed": changed,
            "shards": len(parts)}


def timed_audit(hosts: list[str], state_dir: Path, out_dir: Path, prefetch: bool = True) -> dict:
    """One audit; without `prefetch`, every fact read on its own (LLMFLEET_HINTS=off)."""
    t0, c0, h0 = time.monotonic(), used_cpu(), hosts_cpu()
    p = sh(str(BIN / "llmfleet"), "audit", INV, *[a for h in hosts for a in ("--limit", h)], "--state-dir",
           str(state_dir), "--out-dir", str(out_dir), check=False,
           env=None if prefetch else {"LLMFLEET_HINTS": "off"})
    wall, cpu, host_cpu = time.monotonic() - t0, used_cpu() - c0, hosts_cpu() - h0
    summary = [ln for ln in (p.stdout + p.stderr).splitlines() if "host(s)" in ln and "clean" in ln.lower()]
    return {"wall": wall, "cpu": cpu, "hosts_cpu": host_cpu, "exit": p.returncode,
            "line": (summary or [p.stdout[-200:]])[-1].strip()}


def audit_phases(chosen: list[dict]) -> None:
    """Each part of an audit alone, as llmfleet/audit/run.py calls it (the dry run and the verify
    suite run side by side there): wall, the control side's CPU (this process and its children),
    the hosts' own."""
    from llmfleet.audit import config_drift, fingerprint, state_drift
    from llmfleet.audit.run import cores_of_parts

    names, n = [h["name"] for h in chosen], len(chosen)
    dry_run_cores, verify_cores = cores_of_parts()  # the audit's split of the cores between the two
    for what, run in (("inventory read", lambda: read_inventory(INV, None, names)),
                      ("fingerprints", lambda: fingerprint.read(INV, names)),
                      ("dry run", lambda: config_drift.plan(INV, names, None,
                                                            fleetrun.shard_count(n, None, dry_run_cores))),
                      ("verify suite", lambda: state_drift.verify(INV, chosen,
                                                                  fleetrun.shard_count(n, None, verify_cores)))):
        t0, c0, h0 = time.monotonic(), used_cpu() + used_cpu(resource.RUSAGE_SELF), hosts_cpu()
        run()
        wall, own = time.monotonic() - t0, hosts_cpu() - h0
        cpu = used_cpu() + used_cpu(resource.RUSAGE_SELF) - c0
        print(f"audit part, {n:2d} host(s): {what:15s} wall {wall:5.1f} s, control {cpu:5.1f} CPU s "
              f"({cpu / n:.2f} a host), hosts' own {own:5.1f} CPU s ({own / n:.2f} a host)", flush=True)


SLOW_CGROUP = Path("/sys/fs/cgroup/cpu/llmfleet-bench-slow")  # cgroup v1's cpu controller (this machine's)


def slow(host: str, cpu_percent: int | None) -> None:
    """Every process of `host` (its container's systemd tree, read from the name=systemd hierarchy the
    lab keeps each container in, llmfleet/lab/cgroup.py) into a cpu cgroup limited to `cpu_percent` of
    one core; new processes (each SSH command) inherit it. None: the limit lifted. (A delay on its
    link was the first choice: this machine's kernel has no sch_netem.)"""
    SLOW_CGROUP.mkdir(exist_ok=True)
    (SLOW_CGROUP / "cpu.cfs_period_us").write_text("100000")
    (SLOW_CGROUP / "cpu.cfs_quota_us").write_text(str(cpu_percent * 1000) if cpu_percent else "-1")
    cgroup.move_to(container_cgroup(host), SLOW_CGROUP)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cpu-percent", type=int, default=5, help="the slowed host's CPU, percent of one core")
    ap.add_argument("--keep", action="store_true", help="leave the bench lab up")
    ap.add_argument("--reuse", action="store_true", help="the bench lab is up and deployed: measure only")
    ap.add_argument("--audit-only", action="store_true", help="only the audits (1, 8, 24 hosts, and slowed)")
    ap.add_argument("--phases", action="store_true",
                    help="also each part of the audit alone (inventory, fingerprint, dry run, verify), 1 and 24 hosts")
    a = ap.parse_args()
    llmfleet = str(BIN / "llmfleet")
    work = Path(tempfile.mkdtemp(prefix="llmfleet-fleet-scale-"))
    state_dir, audit_dir = work / "state", work / "audit"
    if not a.reuse:
        sh(llmfleet, "lab", "down")
        t0 = time.monotonic()
        sh(llmfleet, "lab", "up", "--hosts", str(HOSTS))
        print(f"lab of {HOSTS} containers up in {time.monotonic() - t0:.0f} s", flush=True)
        t0 = time.monotonic()
        p = sh(llmfleet, "deploy", INV, "--out-dir", str(work / "first"), check=False)
        print(f"first deploy (llmfleet deploy, {HOSTS} hosts, vLLM on 3): {time.monotonic() - t0:.0f} s, exit "
              f"{p.returncode}: {p.stdout.strip().splitlines()[-1:]}", flush=True)
        if p.returncode != 0:
            sys.exit(p.stdout[-3000:] + p.stderr[-3000:])
    inventory = read_inventory(INV)
    names = [h["name"] for h in inventory]
    serving = [h["name"] for h in inventory if h["data"].get("vllm_enabled")]
    assert SLOW in names and SLOW not in serving, (names, serving)
    fp = sh(str(BIN / "pyinfra"), INV, "fact", "llmfleet.facts.HardwareFingerprint", "--json", "-y").stdout
    for host, value in json.loads(fp[fp.index("{"):])["llmfleet.facts.HardwareFingerprint"].items():
        (state_dir / "hosts" / host).mkdir(parents=True, exist_ok=True)
        (state_dir / "hosts" / host / "fingerprint.json").write_text(json.dumps(value))
    # each host's hints (llmfleet/hints.py: the facts its dry run reads, the commands its verify checks
    # run), as any earlier deploy or audit of it leaves them
    count_hosts_cpu(names)  # before the warm-up, which counts them too
    t0 = time.monotonic()
    warm = timed_audit(names, state_dir, work / "warm-up")
    print(f"warm-up: an audit of the {len(names)} hosts (their hints) in {time.monotonic() - t0:.1f} s, exit "
          f"{warm['exit']}", flush=True)
    # 1 host: lab-c1; 8: lab-c1..c8 (the slowed lab-c2 among them); 24: all, vLLM hosts included
    others = [n for n in names if n != SLOW]
    sets = {1: ["lab-c1"], 8: [SLOW] + others[:7], 24: names}
    results: dict[str, list] = {}
    print(f"\nhosts: {len(names)}; serving vLLM: {', '.join(serving)}; slowed: {SLOW} ({a.cpu_percent} % of a "
          f"core); shards: {fleetrun.shard_count(HOSTS)} on {os.cpu_count()} cores; the lab's Prometheus paused while "
          "measuring\n", flush=True)
    prometheus(signal.SIGSTOP)
    t0, h0 = time.monotonic(), hosts_cpu()
    time.sleep(IDLE_S)
    idle = (hosts_cpu() - h0) / (time.monotonic() - t0)
    print(f"the lab's own work with nothing asked of it: {idle:.2f} CPU s a second (over {IDLE_S} s: systemd, "
          "exporters, timers, the idle vLLM servers)\n", flush=True)
    try:
        for r in range(a.rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            for delay in ([0, a.cpu_percent] if r % 2 == 0 else [a.cpu_percent, 0]):
                slow(SLOW, delay)
                for n, hosts in sets.items():
                    if a.audit_only or (delay and SLOW not in hosts):
                        continue
                    for sharded in order:
                        key = f"deploy {'sharded' if sharded else 'in-step'} {n} {'slowed' if delay else 'plain'}"
                        res = timed_deploy(hosts, sharded, work / "deploys")
                        results.setdefault(key, []).append(res)
                        rest = [v for h, v in res["last"].items() if h != SLOW]
                        print(f"round {r + 1}: {key:32s} wall {res['wall']:6.1f} s, cpu {res['cpu']:6.1f} s (hosts "
                              f"{res['hosts_cpu']:6.1f} s), others "
                              f"done at {max(rest) if rest else 0:6.1f} s, {SLOW} at "
                              f"{res['last'].get(SLOW, 0):6.1f} s; changed {res['changed'] or 'none'}, "
                              f"failed {res['failed'] or 'none'}", flush=True)
                # lab-c2 alone, plain and slowed: its own delay, which the 24-host audit may add and no more;
                # 1 and 24 hosts with every fact read on its own too (the prefetch off): what the hints save
                runs = [(w, True) for w in ((1, 8, 24, SLOW) if not delay else (24, SLOW))]
                if not delay:
                    off = [(1, False), (24, False)]
                    runs = runs + off if r % 2 == 0 else off + runs
                for which, prefetch in runs:
                    key = f"audit {which} {'slowed' if delay else 'plain'}{'' if prefetch else ' no-prefetch'}"
                    res = timed_audit(sets[which] if isinstance(which, int) else [which], state_dir, audit_dir,
                                      prefetch)
                    results.setdefault(key, []).append(res)
                    print(f"round {r + 1}: {key:32s} wall {res['wall']:6.1f} s, cpu {res['cpu']:6.1f} s (hosts "
                          f"{res['hosts_cpu']:6.1f} s), exit "
                          f"{res['exit']}: {res['line'][:150]}", flush=True)
        if a.phases:
            slow(SLOW, None)
            print("\neach part of the audit alone (no host slowed):", flush=True)
            for n in (1, 24):
                audit_phases([h for h in inventory if h["name"] in sets[n]])
    finally:
        slow(SLOW, None)
        prometheus(signal.SIGCONT)

    def med(key: str, field: str = "wall") -> float:
        return statistics.median(x[field] for x in results[key])

    def others_done(key: str) -> float:
        return statistics.median(max([v for h, v in x["last"].items() if h != SLOW] or [0]) for x in results[key])

    def slow_done(key: str) -> float:
        return statistics.median(x["last"].get(SLOW, 0) for x in results[key])

    print("\nmedians of", a.rounds, "round(s), one run, order alternated each round:")
    print(f"{'':30s} {'1 host':>10s} {'8 hosts':>10s} {'24 hosts':>10s} {'cpu s/host (24)':>16s} "
          f"{'hosts own (24)':>15s}")
    for mode in (() if a.audit_only else ("in-step", "sharded")):
        for cond in ("plain", "slowed"):
            cells = []
            for n in (1, 8, 24):
                key = f"deploy {mode} {n} {cond}"
                cells.append(f"{med(key):8.1f} s" if key in results else f"{'-':>10s}")
            cpu = med(f"deploy {mode} 24 {cond}", "cpu") / 24
            own = med(f"deploy {mode} 24 {cond}", "hosts_cpu") / 24
            print(f"no-change deploy, {mode:8s} {cond:7s} {' '.join(cells)} {cpu:14.2f} {own:15.2f}")
    audit_cells = " ".join(f"{med(f'audit {n} plain'):8.1f} s" for n in (1, 8, 24))
    print(f"audit, plain{'':18s} {audit_cells} {med('audit 24 plain', 'cpu') / 24:14.2f} "
          f"{med('audit 24 plain', 'hosts_cpu') / 24:15.2f}")
    cells = " ".join(f"{med(f'audit {n} plain no-prefetch'):8.1f} s" if n != 8 else f"{'-':>10s}" for n in (1, 8, 24))
    print(f"audit, plain, no prefetch{'':5s} {cells} {med('audit 24 plain no-prefetch', 'cpu') / 24:14.2f} "
          f"{med('audit 24 plain no-prefetch', 'hosts_cpu') / 24:15.2f}")
    print(f"audit, 24 hosts with {SLOW} slowed: {med('audit 24 slowed'):.1f} s")
    own_delay = med(f"audit {SLOW} slowed") - med(f"audit {SLOW} plain")
    print(f"audit of {SLOW} alone: {med(f'audit {SLOW} plain'):.1f} s, slowed {med(f'audit {SLOW} slowed'):.1f} s: "
          f"its own delay {own_delay:+.1f} s; the 24-host audit with it slowed "
          f"{med('audit 24 slowed') - med('audit 24 plain'):+.1f} s (the report waits for its slowest host: "
          "no more than that host's own delay should be added)")
    ratio = med('audit 24 plain') / med('audit 1 plain')
    print(f"audit 24 hosts / 1 host without the prefetch: "
          f"{med('audit 24 plain no-prefetch') / med('audit 1 plain no-prefetch'):.2f}")
    control, own, cores = med("audit 24 plain", "cpu"), med("audit 24 plain", "hosts_cpu"), os.cpu_count() or 1
    print(f"\naudit 24 hosts / 1 host: {ratio:.2f} (wall time). At 24 hosts the control side used {control:.0f} CPU s "
          f"and the hosts' own commands {own:.0f} CPU s, on this machine's {cores} cores "
          f"({cores} x {med('audit 24 plain'):.0f} s = {cores * med('audit 24 plain'):.0f} CPU s "
          "of room)")
    floor = (control + own) / cores
    print(f"of the hosts' {own:.0f} CPU s, about {idle * med('audit 24 plain'):.0f} were the lab's own work, "
          "which runs whether audited or not")
    print(f"floor on this machine: {control + own:.0f} CPU s over {cores} cores = {floor:.0f} s for 24 hosts, a 24 / 1 "
          f"ratio of at least {floor / med('audit 1 plain'):.2f} however the work is spread; the hosts' own commands "
          f"alone: {own / cores:.0f} s ({own / cores / med('audit 1 plain'):.2f}). A fleet's hosts run their own "
          "commands on their own CPUs: there the control side's share is what grows with the fleet")
    for mode in (() if a.audit_only else ("in-step", "sharded")):
        own = slow_done(f"deploy {mode} 24 slowed") - slow_done(f"deploy {mode} 24 plain")
        added = others_done(f"deploy {mode} 24 slowed") - others_done(f"deploy {mode} 24 plain")
        print(f"{mode:8s}: {SLOW} slowed finishes {own:+.1f} s later; the other 23 finish {added:+.1f} s later")
    for what, key in ((() if a.audit_only else (("no-change deploy, sharded", "deploy sharded 24 plain"),))
                      + (("audit", "audit 24 plain"),)):
        per_host = med(key, "cpu") / 24
        floor = med(key.replace("24", "1"))
        projected = max(floor, per_host * 500 / 8)
        print(f"projection, {what}: {per_host:.2f} CPU s a host x 500 hosts / 8 cores = {per_host * 500 / 8:.0f} s "
              f"(one host alone: {floor:.1f} s) -> about {projected / 60:.1f} min for 500 hosts, if the CPU cost a "
              "host stays what it is at 24")
    (ROOT / "reports").mkdir(exist_ok=True)
    (ROOT / "reports" / "fleet_scale.json").write_text(json.dumps(results, indent=1, default=str))
    print("raw figures: reports/fleet_scale.json")
    if not a.keep:
        sh(llmfleet, "lab", "down")
        for group in (SLOW_CGROUP, HOSTS_CPU):
            for _ in range(20):  # empty once the lab's last processes are gone (they take a moment)
                try:
                    if group.exists():
                        group.rmdir()
                    break
                except OSError:
                    time.sleep(0.5)


if __name__ == "__main__":
    main()
