"""Probe targets from a pyinfra inventory: each host's endpoint, key, tokenizer, GPU profile and
probe settings from its validated group data. Used by `llmfleet probe --inventory` and by
verify/test_probe.py, so both measure the same thing."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from llmfleet import frontdoor, vllm_layout
from llmfleet.inventory import read as read_inventory
from llmfleet.probe.config import ProbeConfig, ProbeError, from_settings
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Target:
    host: str | None  # None: a URL given on the command line
    url: str
    model: str
    api_key: str | None = field(repr=False)  # never in a repr: pytest prints reprs in failures
    config: ProbeConfig
    tokenizer: Path | None
    model_dir: Path | None
    model_dtype: str | None
    gpu_profile: object | None
    tensor_parallel: int
    baseline_file: Path | None


def read_key_file(path: str | Path, setting: str) -> str:
    """An API key from a file only its owner can read (the deploy's own rule for vllm_api_key_file)."""
    p = Path(path)
    try:
        st = p.stat()
        text = p.read_text().strip()
    except OSError as exc:
        raise ProbeError(f"{setting} = {str(p)!r}: cannot be read ({exc.strerror}) (fix: the path of the API key "
                         "file, readable by you)") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ProbeError(f"{setting} = {str(p)!r}: readable by others (mode {stat.S_IMODE(st.st_mode):o}) "
                         f"(fix: chmod 600 {p})")
    if not text:
        raise ProbeError(f"{setting} = {str(p)!r}: empty (fix: put the key in it, one line)")
    key = text.split("=", 1)[1].strip() if text.startswith("VLLM_API_KEY=") else text
    return key


def key_from_environment() -> str | None:
    return os.environ.get("LLMFLEET_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def target_of(host: str, settings, address: str) -> Target:
    if not settings.vllm_enabled:
        raise ProbeError(f"host {host}: vllm_enabled is False: nothing to probe")
    source = settings.vllm_model.source if settings.vllm_model else ""
    local = Path(source.removeprefix("file://")) if source.startswith("file://") else None
    tokenizer = local if local and (local / "tokenizer.json").is_file() else None
    profile = settings.profile
    tp = settings.vllm_flags.get("tensor-parallel-size", 1)
    baseline = None
    if settings.probe_baseline_file:
        baseline = Path(settings.probe_baseline_file)
        baseline = baseline if baseline.is_absolute() else ROOT / baseline
    key = read_key_file(settings.vllm_api_key_file, f"host {host}: vllm_api_key_file") \
        if settings.vllm_api_key_file else None
    return Target(host, f"http://{address}:{settings.vllm_port}", settings.vllm_served_model_name, key,
                  from_settings(settings), tokenizer, local, settings.vllm_model.torch_dtype if settings.vllm_model
                  else None, profile, tp if isinstance(tp, int) else 1, baseline)


def instance_targets(host_target: Target, settings) -> list[Target]:
    """Each instance of a host's serving layout on its own, through the front door's
    /instances/<name>/ route (the instances listen on the host only), at its share of the host's
    probe_check_rps: its GPUs over the layout's (an equal share where instances have no GPUs, as
    on the lab's CPU build). No baseline gate: a stored baseline is the host's. [] for a host
    without a layout."""
    instances = vllm_layout.instances(settings)
    if not instances:
        return []
    gpus = sum(len(i.gpus) for i in instances)
    out = []
    for inst in instances:
        share = len(inst.gpus) / gpus if gpus else 1 / len(instances)
        config = host_target.config.model_copy(update={"check_rps": host_target.config.check_rps * share})
        out.append(replace(host_target, host=f"{host_target.host}/{inst.name}",
                           url=host_target.url + frontdoor.instance_path(inst.name), config=config,
                           tensor_parallel=inst.tensor_parallel_size, baseline_file=None))
    return out


def targets(inventory: str, limit: list[str] | None = None, instances: bool = False,
            data: list[str] | None = None) -> list[Target]:
    """Every vLLM host of the inventory (or those named in ``limit``: hosts or groups), with
    ``data`` ("KEY=VALUE", as pyinfra's --data) over each host's; with ``instances``, each
    instance of a host's serving layout after the host (instance_targets)."""
    chosen = read_inventory(inventory, data=data, limit=limit)
    out, problems = [], []
    for h in chosen:
        try:
            s = validate(h["name"], h["data"])
        except SettingsError as exc:
            problems.append(str(exc))
            continue
        if s.vllm_enabled:
            t = target_of(h["name"], s, h["data"].get("ssh_hostname") or h["name"])
            out += [t, *(instance_targets(t, s) if instances else [])]
    if problems:
        raise ProbeError("; ".join(problems))
    if not out:
        raise ProbeError(f"no host with vllm_enabled in {inventory}" + (f" --limit {','.join(limit)}" if limit else ""))
    return out
