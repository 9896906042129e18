"""Helpers of the integration tests: commands run as a user would, against the test lab.

The test lab has its own directory, subnet and name prefix, so it runs beside a developer's demo
lab without touching it. It needs root (namespaces, mounts, containers), as CI has. The fixtures
that own the lab's life are in conftest.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LAB_ENV = {
    "LLMFLEET_LAB_DIR": "/var/lib/llmfleet/test-lab",
    "LLMFLEET_LAB_SUBNET": "10.78.0.0/24",
    "LLMFLEET_LAB_PREFIX": "llmt",
}
PREFIX = LAB_ENV["LLMFLEET_LAB_PREFIX"]
N_CONTAINERS = 3
N_GATEWAYS = 1  # lab-gw1: the fleet gateway, in front of the serving containers
GATEWAY = "lab-gw1"
# The lab's groups (inventories/lab.py): what a deploy by group runs at once.
LAB_GROUPS = ("lab_containers", "lab_vms", "lab_gateways")
# The stages of the lab's life, in the order they run (conftest.py orders the modules by them).
LAB_STAGES = ("as made", "grown", "removed")


def api_key() -> str:
    """The test lab's API key (the file `lab up` writes for group_data/lab.py's vllm_api_key_file)."""
    return (Path(LAB_ENV["LLMFLEET_LAB_DIR"]) / "api-key").read_text().strip()


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, **LAB_ENV, **extra}


def run(*args: str, check: bool = True, timeout: float = 900, **extra_env: str) -> subprocess.CompletedProcess:
    """Run a command the way a user would, from the repository root, against the test lab."""
    proc = subprocess.run(list(args), cwd=ROOT, env=env(**extra_env), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n{failure(proc)}")
    return proc


def failure(proc: subprocess.CompletedProcess) -> str:
    """What a failed run said: the lines that name an error (pyinfra's results table, at the end of
    its output, only counts them), then the tails of both streams."""
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines()
            if re.search(r"error|failed|not rebooted|Traceback", ln, re.IGNORECASE)]
    return ("error lines:\n" + "\n".join(said[-40:]) + f"\nstdout:\n{proc.stdout[-2000:]}"
            f"\nstderr:\n{proc.stderr[-2000:]}")


def llmfleet(*args: str, **kw) -> subprocess.CompletedProcess:
    return run(str(BIN / "llmfleet"), *args, **kw)


def lab_ssh(name: str, command: str, **kw) -> subprocess.CompletedProcess:
    """A command on a lab host. ssh's own connection failures (exit 255 with a connection message: the
    emulated VM answers its banner slowly while the machine is busy) are retried twice; the
    command's own failures are not."""
    check = kw.pop("check", True)
    for attempt in range(3):
        proc = llmfleet("lab", "ssh", name, "--", command, check=False, **kw)
        if not (proc.returncode == 255 and "Connection" in proc.stderr and attempt < 2):
            break
        time.sleep(5)
    if check and proc.returncode != 0:
        raise AssertionError(f"lab ssh {name} -- {command} exited {proc.returncode}\nstdout:\n"
                             f"{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def state() -> dict:
    return json.loads((Path(LAB_ENV["LLMFLEET_LAB_DIR"]) / "state.json").read_text())


def serving_containers() -> dict[str, str]:
    """{name: address} of the container hosts that serve (not the gateway), by name."""
    return {name: h["address"] for name, h in sorted(state()["hosts"].items())
            if h["kind"] == "container" and h.get("role", "serving") == "serving"}


@dataclass
class Lab:
    up_output: str

    def testinfra_hosts(self) -> str:
        return llmfleet("lab", "hosts", "--testinfra").stdout.strip()

    def deploy(self, *extra: str) -> subprocess.CompletedProcess:
        return run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", *extra)

    def deploy_by_group(self, *extra: str) -> str:
        """The whole lab deployed, one pyinfra run per lab group at once (deploy_at_once)."""
        return deploy_at_once(LAB_GROUPS, *extra)[1]

    def verify(self, check: bool = True, acceptance: bool = False,
               kinds: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        """The verify suite on every lab host: one pytest for the containers and one for the VM, at
        once, so the emulated VM's slow round trips (about 50 s of checks) overlap the containers'
        checks instead of adding to them. The containers' hosts stay in one pytest, one after the
        other: their acceptance checks (the throughput probe, 18 s a host, asked for only by
        test_lab.py's whole-suite run) measure a server only while no other probe loads the 2
        shared cores (three at once all lost their SLO at 2 req/s). Returns both outputs, the
        containers' first, and the worse exit status; with `check`, a failure fails the test.
        `kinds`: only the hosts of these kinds ("container", "vm"), else all."""
        marker = [] if acceptance else ["-m", "not acceptance"]
        host_kinds = {name: h["kind"] for name, h in state()["hosts"].items()}
        parts: dict[str, list[str]] = {}
        for url in self.testinfra_hosts().split(","):
            name = url.removeprefix("ssh://").split("?", 1)[0]
            if not kinds or host_kinds[name] in kinds:
                parts.setdefault(host_kinds[name], []).append(url)
        codes, output = run_at_once({kind: [str(BIN / "pytest"), "verify/", "-p", "no:cacheprovider", "-q", "-rf",
                                            *marker, f"--hosts={','.join(urls)}"]
                                     for kind, urls in sorted(parts.items())}, timeout=900)
        worst = max(124 if c is None else c for c in codes.values())  # 124: ran past the bound, as timeout(1)
        proc = subprocess.CompletedProcess(["pytest", "verify/"], worst, output, "")
        if check and proc.returncode != 0:
            raise AssertionError(f"verify exited {codes}\n{output[-6000:]}")
        return proc


def run_at_once(commands: dict[str, list[str]], logs: dict[str, Path] | None = None,
                timeout: float = 1800) -> tuple[dict[str, int | None], str]:
    """Each command at once, from the repository root against the test lab, its output (stdout and
    stderr) in its file in `logs` (kept if it hangs) or captured; all end within `timeout` s of the
    start (one still running then is killed: None). Returns each one's exit code and their
    outputs one after the other, in the order given."""
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as tmp:
        files = {key: (logs[key] if logs else Path(tmp) / f"{key}.log").open("w") for key in commands}
        procs = {key: subprocess.Popen(args, cwd=ROOT, env=env(), stdout=files[key], stderr=subprocess.STDOUT,
                                       text=True) for key, args in commands.items()}
        codes: dict[str, int | None] = {}
        try:
            for key, proc in procs.items():
                try:
                    codes[key] = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    codes[key] = None
        finally:
            for f in files.values():
                f.close()
        output = "".join(Path(f.name).read_text() for f in files.values())
    return codes, output


def deploy_at_once(limits: tuple[str, ...], *extra: str, logs: dict[str, Path] | None = None,
                   timeout: float = 1800, check: bool = True) -> tuple[int | None, str]:
    """One pyinfra run per `--limit` (a group or a host), all at once, as an operator splits a
    fleet whose slowest host would otherwise set the pace of every operation (pyinfra waits for
    every host at each one): the emulated VM's slow round trips then overlap the containers'
    vLLM work instead of adding to it. Each run's output goes to its file in `logs` (kept if it
    hangs) or is captured; every run ends within `timeout` s of the start. Returns the exit code of
    the first run that failed (None: one ran past `timeout`) or 0, and every run's output; with
    `check`, a run that failed fails the test with the output."""
    codes, output = run_at_once({limit: [str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit",
                                         limit, *extra] for limit in limits}, logs=logs, timeout=timeout)
    failed = [code for code in codes.values() if code != 0]
    rc = failed[0] if failed else 0
    if check and rc != 0:
        raise AssertionError(f"a deploy of {', '.join(limits)} at once exited {rc}:\n{output[-5000:]}")
    return rc, output


def boot_ids(names: list[str] | None = None) -> dict[str, str]:
    """Each lab host's boot id (changes with every boot, containers included), or those ``names``;
    asked at once (the emulated VM answers its ssh banner slowly)."""
    from concurrent.futures import ThreadPoolExecutor

    names = names or list(state()["hosts"])
    with ThreadPoolExecutor(len(names)) as pool:
        ids = pool.map(lambda n: lab_ssh(n, "cat /proc/sys/kernel/random/boot_id").stdout.strip(), names)
    return dict(zip(names, ids, strict=True))


@dataclass
class Deployed:
    output: str
    boots_before: dict[str, str]
    boots_after: dict[str, str]


LOGS = ROOT / "reports" / "test-logs"
