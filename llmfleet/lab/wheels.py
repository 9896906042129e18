"""The lab's wheel mirror: a folder of wheels on the machine, served to lab hosts over HTTP."""

from __future__ import annotations

import sys

from llmfleet.lab import sh
from llmfleet.lab.config import LabPaths


def add_wheels(requirements: list[str]) -> list[str]:
    """Download wheels for requirements (and dependencies) into the mirror; list what it holds."""
    paths = LabPaths.from_env()
    paths.wheels_dir.mkdir(parents=True, exist_ok=True)
    sh.run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest",
            str(paths.wheels_dir), *requirements], timeout=3600)
    return sorted(p.name for p in paths.wheels_dir.iterdir() if p.suffix == ".whl")
