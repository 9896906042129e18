"""The CPU of one SSH connection (connect, run `true`, close) with ssh's own key exchange list and
with the audit's (the setting audit_ssh_kex_algorithms), alternated: the control machine's
(the ssh client) and the host's (sshd and what it starts, the host container's cgroup).

    .venv/bin/python benchmarks/ssh_kex.py lab-c1 [rounds]

with the lab's LLMFLEET_LAB_DIR and LLMFLEET_LAB_PREFIX set (fleet_scale's bench lab:
/var/lib/llmfleet/bench-lab and llmb; the demo's lab: none needed). Needs a lab that is up. The
connection goes through the lab's own ssh config with no control socket (ControlPath none): each
round trip makes a connection, as the audit's verify part does once a host. Also prints the key
exchange each list ends with (ssh -v)."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmfleet.lab import cgroup  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.hosts import container_cgroup  # noqa: E402
from llmfleet.schema import defaults  # noqa: E402


def children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    host = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    setting = defaults()["audit_ssh_kex_algorithms"]
    base = ["ssh", "-F", str(LabPaths.from_env().ssh_config), "-o", "ControlPath=none"]
    lists = {"ssh's default": [], f"audit ({setting})": ["-o", f"KexAlgorithms={setting}"]}
    group = Path(f"/sys/fs/cgroup/cpuacct/llmfleet-bench-{host}")
    cgroup.move_to(container_cgroup(host), group)

    def host_cpu() -> float:
        return int((group / "cpuacct.usage").read_text()) / 1e9

    for name, extra in lists.items():
        log = subprocess.run([*base, *extra, "-v", host, "true"], capture_output=True, text=True).stderr
        found = re.search(r"kex: algorithm: (\S+)", log)
        print(f"{name}: key exchange {found[1] if found else 'not found in ssh -v'}")
    cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in lists}
    for r in range(rounds):
        for name in (list(lists) if r % 2 == 0 else list(reversed(lists))):
            c, h = children(), host_cpu()
            subprocess.run([*base, *lists[name], host, "true"], check=True, capture_output=True, timeout=60)
            cpu[name].append((children() - c, host_cpu() - h))
        time.sleep(0.1)
    print(f"{host}: one connection each, {rounds} rounds, order alternated")
    for name, values in cpu.items():
        control = sorted(v[0] for v in values)
        own = sorted(v[1] for v in values)
        print(f"{name:40s} control CPU median {control[len(control) // 2] * 1000:5.1f} ms, host CPU median "
              f"{own[len(own) // 2] * 1000:5.1f} ms")


if __name__ == "__main__":
    main()
