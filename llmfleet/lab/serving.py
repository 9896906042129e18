"""What the lab's hosts need to serve vLLM, prepared on the machine by `llmfleet lab up`: the CPU
build of vLLM in the wheel folder, the tiny model (built here: nothing can be downloaded), and
an API key (mode 600) for group_data/lab.py's vllm_api_key_file."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from llmfleet.lab.config import LAB_MODEL, LAB_VLLM_INSTALLER, LAB_VLLM_PACKAGES, LabPaths


def model_dir(paths: LabPaths) -> Path:
    name, version = LAB_MODEL
    return paths.cache_dir / "models" / name / version


def api_key_file(paths: LabPaths) -> Path:
    return paths.state_dir / "api-key"


def manifest_sha256(paths: LabPaths) -> str | None:
    manifest = model_dir(paths) / "SHA256SUMS"
    return hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None


def ensure_model(paths: LabPaths, log=print) -> Path:
    from llmfleet.lab.tiny_model import build

    dest = model_dir(paths)
    if not (dest / "SHA256SUMS").is_file():
        partial = dest.with_name(dest.name + ".partial")
        sums = build(partial)
        (partial / "SHA256SUMS").write_text("".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items())))
        partial.rename(dest)
        log(f"tiny model built: {dest}")
    return dest


def ensure_api_key(paths: LabPaths) -> Path:
    path = api_key_file(paths)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path


def self_audit_packages() -> list[str]:
    """What lab hosts' self-audit installs (the default self_audit_packages): from the wheel folder too."""
    from llmfleet.schema import defaults

    return list(defaults()["self_audit_packages"])


def ensure_wheels(paths: LabPaths, log=print) -> None:
    from llmfleet.lab.wheels import add_wheels

    have = {p.name.lower() for p in paths.wheels_dir.glob("*.whl")} if paths.wheels_dir.exists() else set()
    missing = [r for r in [*LAB_VLLM_PACKAGES, LAB_VLLM_INSTALLER, *self_audit_packages()]
               if not any(w.startswith(r.split("==")[0].replace("-", "_") + "-" + r.split("==")[1]) for w in have)]
    if missing:
        log(f"downloading wheels for {', '.join(missing)} into the lab's wheel folder")
        add_wheels(missing)


def ensure_all(paths: LabPaths, log=print) -> None:
    ensure_wheels(paths, log)
    ensure_model(paths, log)
    ensure_api_key(paths)
