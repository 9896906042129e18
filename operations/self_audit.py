"""self_audit: the host audits itself on a timer and writes llmfleet_audit_* metrics for its own node
exporter (install, configure, activate). What it renders and what a run does: llmfleet/self_audit.py."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from llmfleet import self_audit
from llmfleet.audit import fingerprint
from llmfleet.settings import Settings
from operations import managed_files

UNIT_DIR = "/etc/systemd/system"


def inventory_name() -> str:
    """The inventory this deploy runs with, as the audit names it (pyinfra's command line: the first
    Python file given that is not the deploy itself)."""
    for arg in sys.argv[1:]:
        if arg.endswith(".py") and Path(arg).is_file() and Path(arg).name != "deploy.py":
            return arg
    return "inventory"


@deploy("self_audit")
def configure(settings: Settings):
    """The self-audit's environment, llmfleet's code, the host's settings and its timer; removed
    where self_audit_enabled is False."""
    units = self_audit.units(settings)
    if not settings.self_audit_enabled:
        _removed(settings, units)
        return
    q = shlex.quote
    # install: the environment (a folder per package set: complete once its marker is there) and the code
    venv = self_audit.venv_dir(settings)
    if host.get_fact(File, path=f"{venv}/.complete") is None:
        server.shell(name=f"self-audit environment ({len(settings.self_audit_packages)} pinned packages)",
                     commands=[f"rm -rf {q(venv)} && python3 -m venv {q(venv)} && {q(venv)}/bin/python3 -m pip "
                               "install -q --no-cache-dir --disable-pip-version-check "
                               + " ".join(q(p) for p in settings.self_audit_packages)
                               + f" && touch {q(venv)}/.complete",
                               _others(settings.self_audit_dir, "venv-*", Path(venv).name)])
    src = self_audit.src_dir(settings)
    bundle = f"{settings.self_audit_dir}/bundles/{self_audit.bundle_id()}.tar.gz"
    managed_files.directory("self-audit bundles folder", f"{settings.self_audit_dir}/bundles")
    managed_files.put("llmfleet's code for the self-audit (one bundle)", bundle, self_audit.bundle())
    if host.get_fact(File, path=f"{src}/.complete") is None:
        server.shell(name="self-audit code unpacked and compiled",
                     commands=[f"rm -rf {q(src)} && mkdir -p {q(src)} && tar -xzf {q(bundle)} -C {q(src)} && "
                               f"{q(venv)}/bin/python3 -m compileall -q {q(src)} >/dev/null && "
                               f"touch {q(src)}/.complete",
                               _others(f"{settings.self_audit_dir}/src", "*", Path(src).name, "current"),
                               _others(f"{settings.self_audit_dir}/bundles", "*", Path(bundle).name)])
    managed_files.link("self-audit code in use", self_audit.current_src(settings), src)
    # configure: what the host checks itself against (root only), its recorded hardware
    managed_files.directory("self-audit settings folder", self_audit.CONF_DIR, mode="700")
    managed_files.put("the host's settings for its self-audit (root only)", self_audit.SETTINGS_FILE,
                      self_audit.settings_document(host.name, inventory_name(), settings, list(host.groups)),
                      mode="600")
    recorded = fingerprint.path_for(fingerprint.state_dir(), host.name)
    if recorded.is_file():
        managed_files.put("hardware fingerprint recorded at onboarding", self_audit.FINGERPRINT_FILE,
                          recorded.read_bytes(), mode="600")
    else:
        managed_files.absent("no hardware fingerprint recorded (llmfleet onboard records one)",
                             self_audit.FINGERPRINT_FILE)
    managed_files.directory("self-audit state folder", self_audit.STATE_DIR)
    written = [managed_files.put(name, f"{UNIT_DIR}/{name}", content) for name, content in units.items()]
    # activate
    changed = any(u.will_change for u in written)
    systemd.service(name="self-audit timer is enabled and running", service=f"{self_audit.UNIT}.timer",
                    running=True, enabled=True, restarted=changed, daemon_reload=changed)


def _others(folder: str, pattern: str, *keep: str) -> str:
    """Remove what a new environment or bundle replaced: the entries of ``folder`` matching ``pattern``
    but ``keep``."""
    names = " ".join(f"! -name {shlex.quote(k)}" for k in keep)
    return (f"find {shlex.quote(folder)} -mindepth 1 -maxdepth 1 -name {shlex.quote(pattern)} {names} "
            "-exec rm -rf {} +")


def _removed(settings: Settings, units: dict[str, str]) -> None:
    if host.get_fact(File, path=f"{UNIT_DIR}/{self_audit.UNIT}.timer") is not None:
        systemd.service(name="self-audit timer is stopped and disabled (self_audit_enabled = False)",
                        service=f"{self_audit.UNIT}.timer", running=False, enabled=False)
    for name in units:
        files.file(name=f"{name} removed", path=f"{UNIT_DIR}/{name}", present=False)
    files.directory(name="self-audit files removed", path=settings.self_audit_dir, present=False)
    files.directory(name="self-audit settings removed", path=self_audit.CONF_DIR, present=False)
