"""`llmfleet onboard INVENTORY --limit HOST`: bring a new server in and prove it is as good as the others.

Stages, each recorded in <state dir>/hosts/<host>/onboarding.json when it succeeds, so that running
the command again continues where it stopped (``--restart`` starts over):

1. preflight: the host answers; a supported OS; the GPUs its profile expects (model, count, PCIe
   width); free space for models on the filesystem of ``vllm_models_dir``, and its speed (fio:
   ``storage_thresholds``; a host without fio gets it first, with the mirrors of group data:
   onboard_preflight.py).
2. deploy: `pyinfra INV deploy.py -y --limit HOST` (reboots as the deploy decides).
3. verify: the verify suite on the host (state checks), every check passing.
4. acceptance: the verify checks marked ``onboarding`` (the GPU interconnect: topology, peer
   access, all-reduce bus bandwidth, skipped with fewer than two GPUs; the model storage's speed;
   DCGM's long diagnostic; the GPU burn-in), then the probe's check trial (verify/test_probe.py's),
   within the SLOs and, with a stored baseline for the host's group (``probe_baseline_file``),
   within its tolerance. Their figures are kept as the host's acceptance result
   (<state dir>/hosts/<host>/acceptance.json, llmfleet/onboard_acceptance.py) that later runs
   (``--recheck``) and audits compare with.
5. record: the hardware fingerprint (audits compare against it).
6. audit: the host's first audit, which must be clean; only then is the host marked onboarded.

A host that fails a stage is reported with the reasons and is not marked onboarded.

Each stage is one function ``stage(run: Run) -> dict | None`` in ``STAGES`` (name -> function): it
returns what is recorded with the stage, or raises ``StageFailed`` with the reasons. ``run_stages``
alone knows the order, what is recorded, resuming, ``--stop-after`` and ``--restart``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmfleet.errors import OnboardError
from llmfleet.inventory import ROOT
from llmfleet.inventory import read as read_inventory

if TYPE_CHECKING:
    from llmfleet.settings import Settings

SUPPORTED_OS = {("ubuntu", "20.04"), ("ubuntu", "22.04"), ("ubuntu", "24.04"), ("debian", "12")}


class StageFailed(Exception):
    """A stage found the host not ready: the reasons, each with its fix where there is one."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass
class Run:
    """What every stage gets: the host's inventory entry (name, groups, data; read once), its
    validated settings, where records and reports go, and the progress record (a stage may add
    a key of its own)."""

    inventory: str
    entry: dict
    settings: Settings
    state_dir: Path
    out_dir: Path
    log: Callable[[str], None] = print
    progress: dict = field(default_factory=dict)

    @property
    def host(self) -> str:
        return self.entry["name"]


def progress_path(state_dir: Path, host: str) -> Path:
    return state_dir / "hosts" / host / "onboarding.json"


def _load(state_dir: Path, host: str) -> dict:
    p = progress_path(state_dir, host)
    return json.loads(p.read_text()) if p.is_file() else {"host": host, "stages": {}}


def _save(state_dir: Path, host: str, progress: dict) -> None:
    p = progress_path(state_dir, host)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(progress, indent=2) + "\n")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _facts(inventory: str, host: str, settings) -> dict:
    """{fact: value} of the preflight facts on one host, read in one pyinfra run."""
    models_dir = str(settings.vllm_models_dir)
    args = [sys.executable, "-m", "pyinfra", inventory, "fact", "llmfleet.facts.Preflight",
            "llmfleet.facts.HardwareFingerprint", "llmfleet.facts.DiskFree", f"path={models_dir}",
            "llmfleet.facts.ModelStorage", f"path={models_dir}", f"size_mib={settings.storage_fio_size_mib}",
            f"runtime_s={settings.storage_fio_runtime_s}", "--json", "-y", "--limit", host]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600)
    try:
        data = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        data = {}
    facts = {name.split(" (")[0]: values.get(host) for name, values in data.items()}
    if len(facts) < 4 or any(v is None for v in facts.values()):
        tail = " | ".join(ln.strip() for ln in proc.stderr.splitlines() if host in ln)[-500:]
        raise StageFailed([f"{host} did not answer ({tail or 'no reply'}) (fix: check that it is up and reachable "
                           "with the inventory's ssh settings)"])
    return facts


def install_fio(inventory: str, host: str, log=print) -> None:
    """fio on a host that lacks it (onboard_preflight.py: the mirrors of group data, then fio)."""
    log(f"{host}: preflight: fio is not installed: installing it (onboard_preflight.py: the mirrors of group data "
        "and the distribution's fio) to measure the model storage")
    proc = subprocess.run([sys.executable, "-m", "pyinfra", inventory, "onboard_preflight.py", "-y", "--limit", host],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        raise StageFailed([f"installing fio failed (exit {proc.returncode}): " + " | ".join(lines[-6:])
                           + " (fix: let the host reach its apt mirror (apt_proxy), or install fio by hand)"])


def preflight_checks(inventory: str, host: str, settings, log=print) -> tuple[list[str], dict]:
    """(problems, what is recorded) of the preflight facts of one host."""
    from llmfleet import model_storage

    facts = _facts(inventory, host, settings)
    if facts["llmfleet.facts.ModelStorage"].get("missing") == "fio":
        install_fio(inventory, host, log)
        facts = _facts(inventory, host, settings)
    pre = facts["llmfleet.facts.Preflight"]
    fp = facts["llmfleet.facts.HardwareFingerprint"]
    disk = facts["llmfleet.facts.DiskFree"]
    problems = []
    if (pre["os"], pre["os_version"]) not in SUPPORTED_OS:
        problems.append(f"OS {pre['os']} {pre['os_version']} is not supported (supported: "
                        f"{', '.join(f'{o} {v}' for o, v in sorted(SUPPORTED_OS))})")
    profile = settings.profile
    gpus = fp.get("gpus", [])
    if profile:
        if len(gpus) != profile.count:
            problems.append(f"gpu_profile {settings.gpu_profile} expects {profile.count} x {profile.model_name}, "
                            f"the host shows {len(gpus)} GPU(s) (fix: check the hardware, or the host's gpu_profile)")
        for i, g in enumerate(gpus):
            name = g.get("name") or g.get("device")
            if name not in (profile.model_name, profile.pci_device_id):
                problems.append(f"GPU {i}: {name}, expected {profile.model_name}")
            width = g.get("pcie.link.width.max")
            if width and str(width).isdigit() and int(width) < profile.pcie_width:
                problems.append(f"GPU {i} ({g.get('pci.bus_id')}): PCIe x{width}, expected x{profile.pcie_width} "
                                "(an x8 slot or a bad riser)")
    elif gpus:
        problems.append(f"the host has {len(gpus)} NVIDIA GPU(s) but gpu_profile is None (fix: set its gpu_profile)")
    need = settings.onboard_min_free_gb * 1024 ** 3
    if disk["free"] < need:
        problems.append(f"{disk['free'] / 1024 ** 3:.1f} GiB free on {disk['mount']} (holding vllm_models_dir "
                        f"{settings.vllm_models_dir}), onboard_min_free_gb = {settings.onboard_min_free_gb} "
                        "(fix: free space or a larger disk)")
    measured: dict | str
    try:
        figures = model_storage.figures(facts["llmfleet.facts.ModelStorage"])
    except model_storage.StorageError as exc:
        problems.append(f"model storage (fio on vllm_models_dir {settings.vllm_models_dir}): expected measured, "
                        f"actual: {exc}")
        measured = str(exc)
    else:
        log(f"{host}: preflight: model storage: {figures.describe()}")
        problems += model_storage.problems(figures, settings.storage_thresholds)
        measured = figures.as_dict()
    return problems, {"os": f"{pre['os']} {pre['os_version']}", "kernel": pre["kernel"], "gpus": len(gpus),
                      "disk_free_gib": round(disk["free"] / 1024 ** 3, 1), "model_storage": measured,
                      "fingerprint": fp}


def preflight(run: Run) -> dict:
    problems, info = preflight_checks(run.inventory, run.host, run.settings, run.log)
    if problems:
        raise StageFailed(problems)
    run.progress["preflight_fingerprint"] = info.pop("fingerprint")
    return info


def deploy(run: Run) -> None:
    proc = subprocess.run([sys.executable, "-m", "pyinfra", run.inventory, "deploy.py", "-y", "--limit", run.host],
                          capture_output=True, text=True, cwd=ROOT, timeout=7200)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        raise StageFailed([f"the deploy failed (exit {proc.returncode}): " + " | ".join(lines[-6:])])


def verify(run: Run) -> dict:
    from llmfleet.audit import state_drift

    figures: dict[str, dict] = {}
    problems, counts, _ = state_drift.verify(run.inventory, [run.entry], workers=1, figures=figures)
    if problems:
        raise StageFailed([f"{p.check}: {p.message}" for p in problems])
    # this start's weights load time: the acceptance result keeps it (no second read of the journal)
    return {"checks": counts.get(run.host, 0),
            "vllm_weights_load": figures.get(run.host, {}).get("vllm_weights_load")}


def measure(run: Run) -> tuple[dict, dict]:
    """The acceptance checks on the host: (what the stage records, the acceptance result to keep:
    every figure the checks recorded, the weights load time of the running servers, the probe's).
    StageFailed with every reason when a check fails."""
    from llmfleet.audit import state_drift
    from llmfleet.probe import fleet
    from llmfleet.probe.config import ProbeError
    from llmfleet.probe.run import run_probe

    host, settings = run.host, run.settings
    figures: dict[str, dict] = {}
    problems, counts, notes = state_drift.verify(run.inventory, [run.entry], workers=1, marker="onboarding",
                                                 figures=figures)
    if problems:
        raise StageFailed([f"{p.check}: {p.message}" for p in problems])
    result = dict(figures.get(host, {}))
    if settings.vllm_enabled:  # this start's weights load time: what audits later compare with
        verified = run.progress.get("stages", {}).get("verify", {}).get("vllm_weights_load")
        if verified is None:  # --recheck, or a verify stage recorded before load times were
            load: dict[str, dict] = {}
            state_drift.verify(run.inventory, [run.entry], workers=1, figures=load,
                               marker="not acceptance and weights_load")
            verified = load.get(host, {}).get("vllm_weights_load")
        if verified is not None:
            result["vllm_weights_load"] = verified
    interconnect = {"acceptance_checks": counts.get(host, 0), "acceptance_notes": notes.get(host, [])}
    if not settings.vllm_enabled:
        return {**interconnect, "probe": "vllm_enabled is False: nothing to measure"}, result
    t = fleet.target_of(host, settings, run.entry["data"].get("ssh_hostname") or host)
    try:
        rep = run_probe(t.url, t.model, t.api_key, t.config, tokenizer=t.tokenizer, host=host,
                        gpu_profile=t.gpu_profile, tensor_parallel=t.tensor_parallel, model_dir=t.model_dir,
                        model_dtype=t.model_dtype, baseline_file=t.baseline_file, log=lambda m: None)
    except ProbeError as exc:
        raise StageFailed([f"the probe could not run: {exc}"]) from None
    folder = run.state_dir / "hosts" / host
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "acceptance-probe.json").write_text(rep.model_dump_json(indent=2) + "\n")
    if not rep.passed:
        raise StageFailed(rep.reasons)
    o = rep.trials[-1].overall
    result["probe"] = {"rate": rep.trials[-1].offered_rps, "p95_e2e_ms": o.e2e_ms.p95}
    return {**interconnect, "rate": rep.trials[-1].offered_rps, "p95_e2e_ms": o.e2e_ms.p95,
            "baseline": rep.gate.message if rep.gate else "no baseline stored for this host's group"}, result


def acceptance(run: Run) -> dict:
    from llmfleet import onboard_acceptance as kept

    detail, result = measure(run)
    path = kept.record(run.state_dir, run.host, {"at": _now(), "figures": result})
    return {**detail, "result": str(path)}


def recheck(inventory: str, host: str, state_dir: Path, out_dir: Path, log=print) -> list:
    """The acceptance checks again on an onboarded host, kept beside its acceptance result (which stays)
    and compared with it: the differences beyond acceptance_tolerance (an empty list: as good as then)."""
    from llmfleet import onboard_acceptance as kept

    run = _run(inventory, host, state_dir, out_dir, log)
    before = kept.load(state_dir, host)
    if before is None:
        raise OnboardError(f"{host}: no acceptance result kept in {kept.path_for(state_dir, host)}: onboard it "
                           f"first (llmfleet onboard {inventory} --limit {host})")
    log(f"{host}: acceptance checks again (kept result of {before['at']}) ...")
    try:
        _, result = measure(run)
    except StageFailed as exc:
        raise OnboardError(f"{host}: the acceptance checks failed: " + "; ".join(exc.reasons)) from None
    path = kept.record_run(state_dir, host, {"at": _now(), "figures": result})
    log(f"{host}: kept in {path}")
    return kept.compare(before["figures"], result, run.settings.acceptance_tolerance)


def record(run: Run) -> dict:
    from llmfleet.audit import fingerprint

    found, why = fingerprint.read(run.inventory, [run.host])
    if run.host not in found:
        raise StageFailed([f"{run.host} did not answer: {why.get(run.host, 'no reply')}"])
    return {"fingerprint": str(fingerprint.record(run.state_dir, run.host, found[run.host]))}


def audit(run: Run) -> dict:
    from llmfleet.audit.run import audit as fleet_audit

    doc, paths = fleet_audit(run.inventory, [run.host], run.state_dir, run.out_dir, None, workers=1, log=run.log)
    problems = [p for h in doc["hosts"].values() for p in h["problems"] if not p["waived"]]
    if problems:
        raise StageFailed([f"[{p['kind']}] {p['check']}: {p['message']}" for p in problems])
    return {"report": str(paths["json"])}


Stage = Callable[[Run], dict | None]
# the stages in their order; the host is onboarded when the last one is done
STAGES: dict[str, Stage] = {"preflight": preflight, "deploy": deploy, "verify": verify, "acceptance": acceptance,
                            "record": record, "audit": audit}


def onboard(inventory: str, host: str, state_dir: Path, out_dir: Path, restart: bool = False,
            stop_after: str | None = None, log=print) -> dict:
    """Onboard one host of the inventory: every stage not done yet, in order (see ``run_stages``)."""
    return run_stages(_run(inventory, host, state_dir, out_dir, log), STAGES, restart, stop_after)


def _run(inventory: str, host: str, state_dir: Path, out_dir: Path, log) -> Run:
    from llmfleet.settings import SettingsError, validate

    chosen = read_inventory(inventory, limit=[host])
    if len(chosen) != 1 or chosen[0]["name"] != host:
        raise OnboardError(f"--limit {host}: onboarding takes one host by name (it matched "
                           f"{', '.join(h['name'] for h in chosen)})")
    try:
        settings = validate(host, chosen[0]["data"])
    except SettingsError as exc:
        raise OnboardError(str(exc)) from None
    return Run(inventory, chosen[0], settings, state_dir, out_dir, log)


def run_stages(run: Run, stages: dict[str, Stage], restart: bool = False, stop_after: str | None = None) -> dict:
    """Run the stages not recorded as done, in order, recording each as it succeeds in
    <state dir>/hosts/<host>/onboarding.json; the host is onboarded when the last is done.
    ``restart`` forgets what was done; ``stop_after`` stops after that stage. A failing stage is
    recorded as failed with its reasons (OnboardError); an interrupt records nothing of its stage."""
    host, log = run.host, run.log
    run.progress = {"host": host, "stages": {}} if restart else _load(run.state_dir, host)
    progress = run.progress
    progress.pop("failed", None)
    if progress.get("onboarded") and not restart:
        log(f"{host}: onboarded on {progress['onboarded']}; nothing to do (--restart to run every stage again)")
        return progress
    last = list(stages)[-1]
    for name, stage in stages.items():
        done = progress["stages"].get(name)
        if done:
            log(f"{host}: {name}: done on {done['at']}, skipped")
            continue
        log(f"{host}: {name} ...")
        try:
            detail = stage(run)
        except KeyboardInterrupt:
            log(f"{host}: interrupted during {name}; nothing of it is recorded: run the same command again to "
                f"continue from {name}")
            raise
        except StageFailed as exc:
            progress["failed"] = {"stage": name, "reasons": exc.reasons, "at": _now()}
            _save(run.state_dir, host, progress)
            raise OnboardError(f"{host}: onboarding stopped at {name}: " + "; ".join(exc.reasons)
                               + f" (not onboarded; run again after the fix: it continues from {name})") from None
        progress["stages"][name] = {"at": _now(), **(detail or {})}
        if name == last:
            progress["onboarded"] = progress["stages"][name]["at"]
        _save(run.state_dir, host, progress)
        log(f"{host}: {name}: done")
        if stop_after == name:
            log(f"{host}: stopped after {name} as asked; run the same command again to continue")
            return progress
    return progress
