"""A shared operation: a kernel tunable file (sysfs/procfs) holds a value now.

Used by thp, cpu_governor and sysctls. Where the file is missing or read-only (a container host
shares the machine's kernel), nothing is changed and the output says why.
"""

from __future__ import annotations

import re
import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from llmfleet.facts import SysfsValues


def current_choice(raw: str) -> str:
    """`always madvise [never]` -> `never`; a plain value is returned as it is (whitespace folded)."""
    m = re.search(r"\[([^\]]+)\]", raw)
    return m.group(1) if m else " ".join(raw.split())


@operation()
def value(path: str, wanted: str, label: str):
    """
    Write `wanted` to a kernel tunable file unless it already holds it.

    + path: the file (under /sys or /proc/sys)
    + wanted: the value it must hold
    + label: the setting's name, for the output
    """
    fact = host.get_fact(SysfsValues, paths=[path])[path]
    if fact["value"] is None:
        host.noop(f"{label}: not applied: {path} does not exist on this host")
        return
    if current_choice(fact["value"]) == wanted:
        host.noop(f"{label}: already {wanted}")
        return
    if not fact["writable"]:
        host.noop(f"{label}: not applied: {path} is read-only here (a container host shares the "
                  f"machine's kernel); it holds {current_choice(fact['value'])!r}")
        return
    yield StringCommand(f"echo {shlex.quote(wanted)} > {shlex.quote(path)}")
