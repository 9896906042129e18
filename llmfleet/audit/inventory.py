"""Hosts of a pyinfra inventory with their data, and how testinfra reaches them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llmfleet.errors import LlmfleetError

ROOT = Path(__file__).resolve().parents[2]


class AuditError(LlmfleetError):
    """The audit or onboarding could not run (exit status 2)."""


def limit_args(names: list[str]) -> list[str]:
    """pyinfra's --limit takes one host or group each time (a comma-separated list matches nothing)."""
    return [a for n in names for a in ("--limit", n)]


def unmatched(stderr: str) -> None:
    """pyinfra warns and carries on with no host when a --limit matches nothing: that is no reading."""
    for line in stderr.splitlines():
        if "No host matches found for --limit" in line:
            raise AuditError(f"pyinfra: {line.strip()} (the hosts were chosen from the inventory a moment "
                             "before: did the inventory change?)")


def hosts(inventory: str, limit: list[str] | None = None, data: list[str] | None = None) -> list[dict]:
    """[{name, groups, data}] of the inventory, limited to hosts or groups named in ``limit``."""
    if inventory.endswith(".py") and not (ROOT / inventory).is_file() and not Path(inventory).is_file():
        # pyinfra would take a missing file's name for a host name and carry on
        raise AuditError(f"cannot read inventory {inventory}: no such file (fix: the path of a pyinfra inventory, "
                         "e.g. inventories/prod.py)")
    args = [a for kv in (data or []) for a in ("--data", kv)]
    proc = subprocess.run([sys.executable, "-m", "pyinfra", *args, inventory, "debug-inventory", "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise AuditError(f"cannot read inventory {inventory}: {proc.stderr.strip()[-500:]} (fix: the path of a "
                         "pyinfra inventory, e.g. inventories/prod.py)")
    found = json.loads(proc.stdout)
    if not limit:
        return found
    chosen = [h for h in found if h["name"] in limit or set(limit) & set(h.get("groups", []))]
    if not chosen:
        names = sorted({h["name"] for h in found} | {g for h in found for g in h.get("groups", [])})
        raise AuditError(f"--limit {','.join(limit)}: no such host or group in {inventory} (it has: "
                         f"{', '.join(names)})")
    return chosen


def testinfra_url(name: str, data: dict, ssh_config: Path) -> str:
    """A testinfra host URL for an inventory host; its ssh settings go to ``ssh_config`` (appended),
    so that testinfra's host name is the inventory name (verify/conftest.py maps it back), with a
    control socket beside it so that a host's checks share one connection."""
    if name.startswith("@local"):
        return "local://"
    lines = [f"Host {name}"]
    if data.get("ssh_hostname"):
        lines.append(f"  HostName {data['ssh_hostname']}")
    for key, opt in (("ssh_port", "Port"), ("ssh_user", "User"), ("ssh_key", "IdentityFile"),
                     ("ssh_known_hosts_file", "UserKnownHostsFile")):
        if data.get(key):
            lines.append(f"  {opt} {data[key]}")
    if data.get("ssh_strict_host_key_checking"):
        lines.append(f"  StrictHostKeyChecking {data['ssh_strict_host_key_checking']}")
    lines.append("  ConnectTimeout 10")
    # one SSH connection per host for all its checks (testinfra asks for ControlMaster=auto but
    # gives no ControlPath, so without this line every command would open a connection)
    lines.append(f"  ControlPath {ssh_config.parent}/cm-%C")
    with ssh_config.open("a") as f:
        f.write("\n".join(lines) + "\n")
    sudo = "&sudo=true" if data.get("ssh_user") not in (None, "root") else ""
    return f"ssh://{name}?ssh_config={ssh_config}{sudo}"
