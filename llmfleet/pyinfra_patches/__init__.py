"""Every change llmfleet makes to pyinfra's internals, in one place: what each patch replaces, why,
the pyinfra version it was written for, and its off switch.

deploy.py calls ``install()`` before anything else. Each patch gives the same results as pyinfra
itself, at a lower cost per host (tests/ops/test_pyinfra_patches_fact_memo.py and
tests/unit/test_pyinfra_patches_speed.py run both side by side; benchmarks/fleet_scale.py measures
the cost). They reach into pyinfra's private functions, so they are written for one pyinfra
version: ``PYINFRA_VERSION``, the one pyproject.toml pins. With any other pyinfra installed,
``install()`` patches nothing and says so (pyinfra then runs as it is: slower, never wrong), and
tests/unit/test_pyinfra_patches.py fails until someone has checked each patch against the new
version and updated ``PYINFRA_VERSION``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from dataclasses import dataclass

from llmfleet import hints
from llmfleet.pyinfra_patches import fact_memo, speed

PYINFRA_VERSION = "3.10.0"  # the pyinfra every patch below was written for and checked against

log = logging.getLogger("llmfleet")


@dataclass(frozen=True)
class Patch:
    name: str
    replaces: tuple[str, ...]  # pyinfra's functions and methods this patch puts itself in the place of
    why: str
    off: str  # the environment variable that turns it off (=off)


PATCHES = (
    Patch("fact_memo",
          ("pyinfra.api.facts._get_fact", "pyinfra.api.host.Host.run_shell_command", "pyinfra.api.host.Host.put_file",
           "pyinfra.api.host.Host.get_file", "pyinfra.api.host.Host.rsync",
           "pyinfra.api.command.FunctionCommand.execute"),
          "pyinfra keeps no fact cache: each fact is read once per host while nothing ran there (fact_memo.py)",
          "LLMFLEET_FACT_MEMO"),
    Patch("fact_prefetch", ("pyinfra.api.facts._get_fact",),
          "the facts a host was asked for last time (its hint) are asked again in one round trip (fact_memo.py)",
          "LLMFLEET_HINTS"),
    Patch("speed",
          ("pyinfra.api.operation.get_operation_order_from_stack", "pyinfra.api.arguments.all_global_arguments"),
          "two per-operation costs (inspect.stack, get_type_hints of a fixed class) paid once (speed.py)",
          "LLMFLEET_PYINFRA_SPEED"),
)


def installed_pyinfra() -> str:
    return importlib.metadata.version("pyinfra")


def is_off(patch: Patch) -> bool:
    return os.environ.get(patch.off, "on").lower() in hints.OFF


def install() -> list[str]:
    """Install every patch not turned off (once per process); the names of those installed."""
    found = installed_pyinfra()
    if found != PYINFRA_VERSION:
        log.warning("llmfleet: pyinfra %s is installed, its patches (llmfleet/pyinfra_patches) were written for "
                    "%s: none installed, pyinfra runs as it is (fix: install pyinfra==%s, as pyproject.toml pins)",
                    found, PYINFRA_VERSION, PYINFRA_VERSION)
        return []
    fact_memo.install()  # reads LLMFLEET_FACT_MEMO and LLMFLEET_HINTS itself
    speed.install()  # reads LLMFLEET_PYINFRA_SPEED itself
    return [p.name for p in PATCHES if not is_off(p)
            and not (p.name == "fact_prefetch" and is_off(PATCHES[0]))]


def uninstall() -> None:
    """pyinfra as it was (the tests use it)."""
    fact_memo.uninstall()
    speed.uninstall()
