"""The one reader of a pyinfra inventory: every host with its resolved data, as pyinfra sees it.

`pyinfra INVENTORY debug-inventory --json` (with ``--data`` pairs) prints each host's name, groups
and data, every source merged (pyinfra 3.10: pyinfra_cli/prints.py ``_host_to_dict``; it does not
connect to any host). The rules, the same for every caller (the CLI, the probe, the audit,
onboarding, the verify suite):

- the working folder is the project root (``ROOT``): pyinfra reads ``group_data/`` from its
  current directory (pyinfra_cli/inventory.py ``make_inventory_from_files``), so the project's
  group data applies wherever the command was started; a relative inventory path is taken from
  there too;
- a missing ``.py`` inventory file is refused (pyinfra would take its name for a host name);
- ``--limit`` takes one host or group each (pyinfra_cli/cli.py ``_get_inventory_pattern_matches``:
  a group by its name, else host names matched as shell patterns; a comma-separated list matches
  nothing), and a limit matching no host stops the command. debug-inventory prints every host
  whatever the limit, so the limit is applied here, by pyinfra's rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

from llmfleet.errors import InventoryError

ROOT = Path(__file__).resolve().parents[1]
FIX = "fix: the path of a pyinfra inventory, e.g. inventories/prod.py"


def limit_args(names: list[str]) -> list[str]:
    """pyinfra's --limit takes one host or group each time (a comma-separated list matches nothing)."""
    return [a for n in names for a in ("--limit", n)]


def unmatched(stderr: str) -> None:
    """pyinfra warns and carries on with no host when a --limit matches nothing: that is no reading.
    For pyinfra runs limited to hosts chosen from the inventory a moment before (``read``)."""
    for line in stderr.splitlines():
        if "No host matches found for --limit" in line:
            raise InventoryError(f"pyinfra: {line.strip()} (the hosts were chosen from the inventory a moment "
                                 "before: did the inventory change?)")


def read(inventory: str, data: list[str] | None = None, limit: list[str] | None = None,
         root: Path = ROOT) -> list[dict]:
    """[{name, groups, data}] of the inventory's hosts (those named in ``limit``, hosts or groups),
    with ``data`` ("KEY=VALUE", as pyinfra's --data) over every host's data. pyinfra runs in
    ``root`` (the project root; a test passes a project of its own)."""
    if inventory.endswith(".py") and not (root / inventory).is_file():
        # pyinfra would take a missing file's name for a host name and carry on
        raise InventoryError(f"cannot read inventory {inventory}: no such file ({root / inventory}; a relative "
                             f"path is taken from the project root) ({FIX})")
    args = [a for kv in data or [] for a in ("--data", kv)]
    try:
        proc = subprocess.run([sys.executable, "-m", "pyinfra", *args, inventory, "debug-inventory", "--json"],
                              capture_output=True, text=True, cwd=root, timeout=300)
    except subprocess.TimeoutExpired:
        raise InventoryError(f"cannot read inventory {inventory}: pyinfra did not answer in 300 s (fix: an "
                             "inventory file that does not wait on anything when it is loaded)") from None
    if proc.returncode != 0:
        raise InventoryError(f"cannot read inventory {inventory}: {_why(proc.stderr)} ({FIX}, that Python can "
                             "load)")
    found = json.loads(proc.stdout)
    return _limited(inventory, found, limit) if limit else found


def validated(inventory: str, data: list[str] | None = None, limit: list[str] | None = None) -> list[tuple]:
    """[(host as `read` gives it, its validated Settings)]; a host whose data is refused stops it
    (InventoryError, with the host, the setting and the fix)."""
    from llmfleet.settings import SettingsError, validate

    out = []
    for h in read(inventory, data, limit):
        try:
            out.append((h, validate(h["name"], h["data"])))
        except SettingsError as exc:
            raise InventoryError(str(exc)) from None
    return out


def _limited(inventory: str, found: list[dict], limit: list[str]) -> list[dict]:
    chosen: set[str] = set()
    for pattern in limit:
        hosts = [h for h in found if pattern in h.get("groups", [])] or \
            [h for h in found if fnmatch(h["name"], pattern)]
        if not hosts:
            groups = sorted({g for h in found for g in h.get("groups", [])})
            raise InventoryError(
                f"--limit {pattern}: no such host or group in {inventory} (pyinfra would say: No host matches "
                f"found for --limit pattern: {pattern}; it has hosts {', '.join(h['name'] for h in found) or 'none'}"
                f" and groups {', '.join(groups) or 'none'}) (fix: one --limit per host or group name)")
        chosen |= {h["name"] for h in hosts}
    return [h for h in found if h["name"] in chosen]  # in the inventory's order


def _why(stderr: str) -> str:
    """What went wrong, from pyinfra's error output without its progress lines."""
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.lstrip().startswith("-->") or "exception" in ln]
    return "\n".join(keep).strip()[-800:] or "pyinfra failed with no message"
