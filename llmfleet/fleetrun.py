"""pyinfra over a whole fleet without the slowest host setting the pace: shards, one process each.

pyinfra runs an operation on every host and waits for all of them before the next one, in one
Python process: a slow host (a degraded disk, a far network, the lab's emulated VM) adds its delay
to every operation of every other host, and the control machine's other cores stay idle. So:

- `llmfleet deploy` splits the hosts into shards (one per core by default) and runs
  `pyinfra INV deploy.py -y --no-wait --json` on each, at once: within a shard each host runs its
  operations on its own (pyinfra's --no-wait), across shards the cores share the work. Nothing in
  deploy.py reads another host, so nothing needs step but the batched rolls (the reboots and the
  vLLM restarts), and those keep `*_max_unavailable` across the whole fleet with the slots of
  llmfleet/roll.py, shared by the shards through LLMFLEET_ROLL_DIR.
- The audit's dry run is sharded the same way (llmfleet/audit/config_drift.py); a dry run changes
  nothing, so it has no roll to keep.

pyinfra's --no-wait does not mark a host failed when an operation fails there (pyinfra 3.10,
pyinfra/api/operations.py `_run_no_wait_ops`: the host's greenlet raises, `state.fail_hosts` is
never called, the exit status is 0), so a host's outcome is read from the run's JSON results (the
hosts each operation failed on) and its exit status, never from the exit status alone.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from llmfleet import roll
from llmfleet.errors import LlmfleetError
from llmfleet.inventory import ROOT, limit_args

HOSTS_PER_SHARD_MIN = 4  # fewer hosts than this a shard: one more process costs more than it saves


def shard_count(hosts: int, asked: int | None = None, cores: int | None = None) -> int:
    """Shards for `hosts` hosts: as asked, else one per core of the control machine, never more
    shards than hosts, nor (unasked) shards of fewer than HOSTS_PER_SHARD_MIN hosts."""
    if asked is not None:
        if asked < 1:
            raise LlmfleetError(f"--shards {asked}: a run needs at least one shard (fix: --shards 1 or more)")
        return max(1, min(asked, hosts))
    cores = cores or os.cpu_count() or 1
    return max(1, min(cores, math.ceil(hosts / HOSTS_PER_SHARD_MIN)))


def split(names: list[str], shards: int) -> list[list[str]]:
    """Hosts dealt round-robin, in the inventory's order: each shard gets some of every group."""
    return [s for s in (names[i::shards] for i in range(shards)) if s]


@dataclass
class Shard:
    index: int
    hosts: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    doc: dict | None = None  # pyinfra's --json document
    log_path: Path | None = None
    tail: list[str] = field(default_factory=list)


def run(argv: Callable[[list[str]], list[str]], shards: list[list[str]], log_dir: Path,
        env: dict[str, str] | None = None, echo: Callable[[str], None] | None = None,
        timeout_s: float = 6 * 3600, cwd: Path = ROOT) -> list[Shard]:
    """Run `argv(hosts)` for every shard at once, in `cwd` (the project root: pyinfra reads its
    group_data/ there); each shard's stderr (pyinfra's progress)
    goes to log_dir/shard-N.log and, line by line, to `echo`; its stdout is read as pyinfra's JSON."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out = [Shard(i + 1, hosts, log_path=log_dir / f"shard-{i + 1}.log") for i, hosts in enumerate(shards)]
    lock = threading.Lock()

    def one(shard: Shard) -> None:
        t0 = time.monotonic()
        assert shard.log_path is not None
        with open(shard.log_path, "w") as log:
            proc = subprocess.Popen(argv(shard.hosts), cwd=cwd, env={**os.environ, **(env or {})},
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            stdout = proc.stdout
            assert stdout is not None
            reader = threading.Thread(target=lambda: setattr(shard, "doc", _json(stdout.read())))
            reader.start()
            assert proc.stderr is not None
            for line in proc.stderr:
                log.write(line)
                shard.tail = (shard.tail + [line.rstrip()])[-40:]
                if echo:
                    with lock:
                        echo(f"[shard {shard.index}] {line.rstrip()}" if len(out) > 1 else line.rstrip())
            try:
                shard.returncode = proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                proc.kill()
                shard.returncode = proc.wait()
            reader.join()
        shard.seconds = time.monotonic() - t0

    with ThreadPoolExecutor(max_workers=len(out) or 1) as pool:
        list(pool.map(one, out))
    return out


def host_errors(log: str, hosts: list[str]) -> dict[str, str]:
    """The first error line pyinfra printed for each host ("    [host] Error: ...")."""
    out: dict[str, str] = {}
    for line in log.splitlines():
        m = re.match(r"\s*\[([^\]]+)\]\s+(.*)", line)
        if m and m.group(1) in hosts and "error" in m.group(2).lower():
            out.setdefault(m.group(1), m.group(2).strip()[:400])
    return out


def _json(text: str | None) -> dict | None:
    if not text or "{" not in text:
        return None
    try:
        doc = json.loads(text[text.index("{"):])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


# ------------------------------------------------------------------------------------------------
# llmfleet deploy
# ------------------------------------------------------------------------------------------------
def deploy_argv(inventory: str, data: list[str], in_step: bool) -> Callable[[list[str]], list[str]]:
    def argv(hosts: list[str]) -> list[str]:
        return [sys.executable, "-m", "pyinfra", inventory, "deploy.py", "-y", "--json",
                *([] if in_step else ["--no-wait"]), *limit_args(hosts),
                *[a for kv in data for a in ("--data", kv)]]
    return argv


def outcome(shard: Shard) -> dict[str, dict]:
    """Each host of a shard: {"ok", "changed" (operations that changed it), "failed" (the operation
    that failed there, or why nothing could be read)}."""
    hosts: dict[str, dict[str, Any]] = {h: {"ok": True, "changed": [], "failed": None} for h in shard.hosts}
    doc = shard.doc or {}
    results = doc.get("results") or {}
    if not results:  # pyinfra stopped before its results (in step: every host failed, "No hosts remaining")
        why = f"pyinfra exited {shard.returncode} without results (its log: {shard.log_path})"
        said = host_errors(shard.log_path.read_text() if shard.log_path and shard.log_path.exists() else "",
                            shard.hosts)
        return {h: {"ok": False, "changed": [], "failed": f"{said[h]}; {why}" if h in said else why}
                for h in shard.hosts}
    for op in results.get("operations", []):
        for h in op.get("error", []):
            if h in hosts and hosts[h]["failed"] is None:
                hosts[h].update(ok=False, failed=op["name"])
        for h in op.get("success", []):
            if h in hosts:
                hosts[h]["changed"].append(op["name"])
    for h in results.get("failed_hosts", []):
        if h in hosts and hosts[h]["ok"]:
            hosts[h].update(ok=False, failed="pyinfra failed the host (connection, or a fact it could not read)")
    return hosts


def deploy(inventory: str, limit: list[str] | None, data: list[str], shards: int | None, out_dir: Path,
           in_step: bool = False, log: Callable[[str], None] = print) -> dict:
    """Validate every chosen host first (a refusal touches no host), then run the deploy in shards.
    Returns the summary written to out_dir/<stamp>/summary.json."""
    from llmfleet.inventory import validated

    chosen = validated(inventory, data, limit)  # bad settings stop here, naming host, setting and fix
    names = [h["name"] for h, _ in chosen]
    n = 1 if in_step else shard_count(len(names), shards)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    folder = out_dir / stamp
    roll_dir = folder / "roll"
    roll_dir.mkdir(parents=True)
    parts = split(names, n)
    log(f"deploy: {len(names)} host(s) of {inventory} in {len(parts)} shard(s)"
        + (", in step (one process)" if in_step else ", hosts not waiting for each other (pyinfra --no-wait)")
        + f"; rolls keep *_max_unavailable across all of them (slots in {roll_dir}); logs in {folder}")
    t0 = time.monotonic()
    done = run(deploy_argv(inventory, data, in_step), parts, folder, {roll.ENV: str(roll_dir)}, echo=log)
    hosts: dict[str, dict] = {}
    for s in done:
        for h, o in outcome(s).items():
            hosts[h] = {**o, "shard": s.index}
    summary = {
        "inventory": inventory, "shards": [{"index": s.index, "hosts": s.hosts, "exit": s.returncode,
                                            "seconds": round(s.seconds, 1), "log": str(s.log_path)} for s in done],
        "seconds": round(time.monotonic() - t0, 1), "hosts": hosts,
        "failed": sorted(h for h, o in hosts.items() if not o["ok"]),
        "reboot_roll_stopped": roll.Roll(roll.REBOOT, roll_dir).stopped(),
        "vllm_roll_stopped": roll.Roll(roll.VLLM, roll_dir).stopped(),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    summary["path"] = str(folder / "summary.json")
    return summary
