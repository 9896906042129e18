"""The host CPU of one lab host's verify batch (verify/prefetch.py), its python3 host scripts in one
interpreter (llmfleet/remote/run_scripts.py) against each in a python3 of its own, alternated.

    .venv/bin/python benchmarks/verify_batch_cpu.py lab-c10 [rounds]

with the lab's LLMFLEET_LAB_DIR and LLMFLEET_LAB_PREFIX set (fleet_scale's bench lab:
/var/lib/llmfleet/bench-lab and llmb; the demo's lab: none needed).

Needs a lab that is up and deployed, and a verify hint of the host (any earlier `pytest verify/` or
audit of it leaves one: ~/.cache/llmfleet/hints/verify/). The batch is the host's hinted commands,
run over the lab's ssh with sudo as the verify suite runs it; what is counted is every process of
the host's container (a cgroup v1 cpuacct group of its own, moved back by the next fleet_scale run),
so the host's sshd, sudo, shells and the scripts' own children are all in it. Prints the median and
the minimum of each, and whether both answered every command with the same exit status."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmfleet import hints, remote  # noqa: E402
from llmfleet.lab import cgroup  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.hosts import container_cgroup  # noqa: E402
from verify import prefetch as pf  # noqa: E402

MARK = "@@llmfleet-bench@@"


def main() -> None:
    host = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    ssh_config = str(LabPaths.from_env().ssh_config)
    group = Path(f"/sys/fs/cgroup/cpuacct/llmfleet-bench-{host}")
    cgroup.move_to(container_cgroup(host), group)

    def used() -> float:
        return int((group / "cpuacct.usage").read_text()) / 1e9

    where = hints.folder(pf.KIND)  # LLMFLEET_HINTS, else ~/.cache/llmfleet/hints/verify
    files = sorted(where.glob(f"ssh_{host}-*.json"), key=os.path.getsize) if where else []
    if not files:
        sys.exit(f"no verify hint of {host}: run `pytest verify/ --hosts=ssh://{host}` (or an audit) first")
    commands = [c for c in hints.load(files[-1]) if isinstance(c, str)]
    together = pf.batch_script(commands, MARK)
    remote.PYTHON = "none: each script in a python3 of its own"
    apart = pf.batch_script(commands, MARK)

    def session(script: str) -> tuple[float, dict]:
        t = used()
        p = subprocess.run(["ssh", "-F", ssh_config, host, "sudo /bin/sh -c " + shlex.quote(script)],
                           capture_output=True, timeout=300)
        return used() - t, pf.read_batch(p.stdout.decode("utf-8", "replace"), MARK, len(commands))

    cpu: dict[str, list[float]] = {"apart": [], "together": []}
    answers: dict[str, dict] = {}
    for r in range(rounds):
        for name in (("apart", "together") if r % 2 == 0 else ("together", "apart")):
            seconds, answers[name] = session(apart if name == "apart" else together)
            cpu[name].append(seconds)
        time.sleep(0.5)
    print(f"{host}: {len(commands)} commands in the batch; {rounds} rounds, order alternated")
    for name, values in cpu.items():
        values.sort()
        print(f"scripts {name:8s}: host CPU per batch median {values[len(values) // 2] * 1000:.0f} ms, "
              f"min {values[0] * 1000:.0f} ms")
    same = sum(1 for i in range(len(commands))
               if i in answers["apart"] and answers["apart"][i][0] == answers["together"].get(i, (None,))[0])
    print(f"same exit status: {same} of {len(commands)} commands")


if __name__ == "__main__":
    main()
