#!/usr/bin/env python3
"""Self-audits against the control machine's audit, on the fleet-scale bench lab (24 containers,
benchmarks/fleet_scale.py's lab and inventory):

- a host's CPU for one self-audit run (llmfleet-self-audit.service's command, its whole process
  tree, counted on the host with getrusage), the first run (no hints yet) and the warm ones;
- the control machine's audit of the 24 hosts (`llmfleet audit`, config drift included, and with
  --skip config: the part a self-audit covers): wall, the control machine's CPU and the hosts' CPU
  (fleet_scale's cpuacct group), per host;
- `llmfleet audit --from-prometheus URL` of the same hosts, from the lab's Prometheus, after every
  host audited itself: wall and CPU.

Rounds alternate the order of the audits. The lab's Prometheus is paused (SIGSTOP) during the control
machine's audits (its scrapes of 24 node exporters would count as the hosts' work) and runs for the
--from-prometheus one (which asks it); the lab's own idle work is measured first and subtracted.

    .venv/bin/python benchmarks/self_audit.py [--rounds 2] [--reuse] [--keep]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet_scale as fs  # noqa: E402  (its lab: LLMFLEET_LAB_* of the bench lab, set on import)

from llmfleet import self_audit  # noqa: E402
from llmfleet.audit import from_prometheus  # noqa: E402
from llmfleet.inventory import read as read_inventory  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.state import LabState  # noqa: E402

# the service's command under getrusage: the CPU of the run and of every process it waited for
MEASURED = ("sudo env PYTHONPATH={src} python3 -c 'import resource, subprocess, sys; "
            "r = subprocess.run(sys.argv[2:], cwd=sys.argv[1], capture_output=True); "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(u.ru_utime + u.ru_stime, r.returncode)' "
            "{src} {command}")


def host_run_cpu(host: str, settings) -> float:
    cmd = MEASURED.format(src=self_audit.current_src(settings), command=self_audit.command(settings))
    out = fs.sh(str(fs.BIN / "llmfleet"), "lab", "ssh", host, "--", cmd).stdout.split()
    assert out[-1] == "0", out
    return float(out[-2])


def prometheus_url() -> str:
    lab = LabState.load(LabPaths.from_env())
    svc = lab.services["prometheus"]
    return f"http://{svc.address}:{svc.port}"


def timed(args: list[str], idle: float, paused: bool) -> dict:
    """One command: wall, the control machine's CPU, the hosts' CPU less the lab's own idle work over
    the same time. `paused`: the lab's Prometheus stopped meanwhile (its scrapes are the hosts' work too)."""
    if paused:
        fs.prometheus(signal.SIGSTOP)
    try:
        t0, c0, h0 = time.monotonic(), fs.used_cpu(), fs.hosts_cpu()
        p = fs.sh(*args, check=False)
        wall = time.monotonic() - t0
        hosts = fs.hosts_cpu() - h0 - idle * wall
    finally:
        if paused:
            fs.prometheus(signal.SIGCONT)
    return {"wall": wall, "cpu": fs.used_cpu() - c0, "hosts_cpu": hosts, "exit": p.returncode,
            "tail": (p.stdout + p.stderr).strip().splitlines()[-1:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reuse", action="store_true", help="the bench lab is up and deployed: measure only")
    ap.add_argument("--keep", action="store_true", help="leave the bench lab up")
    a = ap.parse_args()
    llmfleet = str(fs.BIN / "llmfleet")
    work = Path(tempfile.mkdtemp(prefix="llmfleet-self-audit-bench-"))
    if not a.reuse:
        fs.sh(llmfleet, "lab", "down")
        t0 = time.monotonic()
        fs.sh(llmfleet, "lab", "up", "--hosts", str(fs.HOSTS))
        print(f"lab of {fs.HOSTS} containers up in {time.monotonic() - t0:.0f} s", flush=True)
        t0 = time.monotonic()
        p = fs.sh(llmfleet, "deploy", fs.INV, "--out-dir", str(work / "first"), check=False)
        print(f"first deploy: {time.monotonic() - t0:.0f} s, exit {p.returncode}", flush=True)
        if p.returncode != 0:
            sys.exit(p.stdout[-3000:] + p.stderr[-3000:])
    inventory = read_inventory(fs.INV)
    names = [h["name"] for h in inventory]
    from llmfleet.settings import validate

    settings = validate(names[0], inventory[0]["data"] | {"vllm_api_key_file": None})
    state_dir = work / "state"
    fp = fs.sh(str(fs.BIN / "pyinfra"), fs.INV, "fact", "llmfleet.facts.HardwareFingerprint", "--json", "-y").stdout
    for host, value in json.loads(fp[fp.index("{"):])["llmfleet.facts.HardwareFingerprint"].items():
        (state_dir / "hosts" / host).mkdir(parents=True, exist_ok=True)
        (state_dir / "hosts" / host / "fingerprint.json").write_text(json.dumps(value))
    fs.count_hosts_cpu(names)
    # one host's run, measured: the first (its hints made) and three warm ones
    probe = "lab-c1"
    fs.sh(llmfleet, "lab", "ssh", probe, "--", f"sudo rm -rf {self_audit.STATE_DIR}/hints")
    first = host_run_cpu(probe, settings)
    warm = [host_run_cpu(probe, settings) for _ in range(3)]
    print(f"a self-audit run on {probe}: first {first:.2f} CPU s (no hints), then "
          f"{', '.join(f'{w:.2f}' for w in warm)} CPU s (median {statistics.median(warm):.2f})", flush=True)
    # every host audits itself now (their timers would within the hour), and Prometheus holds all of them
    since = time.time()
    t0 = time.monotonic()
    fs.sh(str(fs.BIN / "pyinfra"), fs.INV, "exec", "-y", "--", f"sudo systemctl start {self_audit.UNIT}.service")
    url = prometheus_url()
    while len([r for r in from_prometheus.query(url, 'llmfleet_audit_timestamp_seconds{source="self"}')
               if float(r["value"][1]) >= since - 1]) < len(names):
        assert time.monotonic() - t0 < 600, "not every host's self-audit reached Prometheus within 600 s"
        time.sleep(2)
    print(f"every host audited itself and Prometheus holds it: {time.monotonic() - t0:.0f} s", flush=True)
    audit = [llmfleet, "audit", fs.INV, "--state-dir", str(state_dir), "--out-dir", str(work / "audit")]
    runs = {"audit": audit, "audit --skip config": audit + ["--skip", "config"],
            "audit --from-prometheus": [llmfleet, "audit", "--from-prometheus", url, "--out-dir", str(work / "prom")]}
    results: dict[str, list[dict]] = {}
    fs.timed_audit(names, state_dir, work / "warm-up")  # the control audit's hints, as fleet_scale does
    fs.prometheus(signal.SIGSTOP)
    t0, h0 = time.monotonic(), fs.hosts_cpu()
    time.sleep(fs.IDLE_S)
    idle = (fs.hosts_cpu() - h0) / (time.monotonic() - t0)
    fs.prometheus(signal.SIGCONT)
    print(f"the lab's own work, nothing asked of it: {idle:.3f} CPU s a second (subtracted below)", flush=True)
    for r in range(a.rounds):
        for key in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            res = timed(runs[key], idle, paused=key != "audit --from-prometheus")
            results.setdefault(key, []).append(res)
            print(f"round {r + 1}: {key:26s} wall {res['wall']:6.2f} s, control cpu {res['cpu']:6.2f} s, hosts cpu "
                  f"{res['hosts_cpu']:6.2f} s, exit {res['exit']}: {res['tail']}", flush=True)

    def med(key: str, field: str) -> float:
        return statistics.median(x[field] for x in results[key])

    n = len(names)
    print(f"\nsummary ({n} hosts, medians of {a.rounds}):")
    for key in runs:
        print(f"  {key:26s} wall {med(key, 'wall'):6.2f} s; per host: control {med(key, 'cpu') / n:.3f} CPU s + "
              f"host {med(key, 'hosts_cpu') / n:.3f} CPU s = {(med(key, 'cpu') + med(key, 'hosts_cpu')) / n:.3f}")
    print(f"  a self-audit run: {statistics.median(warm):.2f} CPU s of the host (first run {first:.2f})")
    print(f"  --from-prometheus / audit wall: {med('audit --from-prometheus', 'wall') / med('audit', 'wall'):.3f}")
    if not a.keep and not a.reuse:
        fs.sh(llmfleet, "lab", "down")


if __name__ == "__main__":
    main()
