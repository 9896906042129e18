#!/usr/bin/env python3
"""Measure the lab's lifecycle: image build (cold and cached), `lab up`, `lab down`.

    .venv/bin/python benchmarks/lab_lifecycle.py [--hosts 3] [--vm] [--runs 2]

Cold builds go to a scratch cache directory (the real cache is left alone); the lab runs under
its own directory, subnet and prefix, so a demo lab on the same machine is not touched.
Prints one line per figure and a JSON summary at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
LAB_ENV = {"LLMFLEET_LAB_DIR": "/var/lib/llmfleet/bench-lab", "LLMFLEET_LAB_SUBNET": "10.76.0.0/24",
           "LLMFLEET_LAB_PREFIX": "llmb"}


def timed(args: list[str], **env: str) -> float:
    started = time.monotonic()
    subprocess.run(args, check=True, env={**os.environ, **LAB_ENV, **env}, capture_output=True, text=True)
    return time.monotonic() - started


def build(kind: str, cache: str) -> float:
    code = (f"from llmfleet.lab.images import ensure_image; from llmfleet.lab.config import LabPaths; "
            f"ensure_image(LabPaths.from_env(), {kind!r}, log=lambda m: None)")
    return timed([sys.executable, "-c", code], LLMFLEET_CACHE_DIR=cache)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--vm", action="store_true")
    ap.add_argument("--runs", type=int, default=2)
    opts = ap.parse_args()
    figures: dict[str, list[float]] = {}
    kinds = ["container"] + (["vm"] if opts.vm else [])
    with tempfile.TemporaryDirectory(prefix="llmfleet-bench-cache-") as cache:
        for kind in kinds:
            figures[f"image_build_cold_{kind}_s"] = [build(kind, cache)]
            figures[f"image_build_cached_{kind}_s"] = [build(kind, cache)]
    llmfleet = str(BIN / "llmfleet")
    timed([llmfleet, "lab", "down"])
    up_args = [llmfleet, "lab", "up", "--hosts", str(opts.hosts)] + (["--vm"] if opts.vm else [])
    for _ in range(opts.runs):
        figures.setdefault("lab_up_s", []).append(timed(up_args))
        figures.setdefault("lab_up_again_s", []).append(timed(up_args))
        figures.setdefault("lab_down_s", []).append(timed([llmfleet, "lab", "down"]))
    label = f"{opts.hosts} containers" + (" + 1 VM" if opts.vm else "")
    for name, values in figures.items():
        spread = f" (runs: {', '.join(f'{v:.1f}' for v in values)})" if len(values) > 1 else ""
        print(f"{name:32s} {statistics.median(values):7.1f} s{spread}")
    print(json.dumps({"hosts": label, "figures_s": figures}))


if __name__ == "__main__":
    main()
