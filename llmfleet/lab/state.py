"""The lab's recorded state: what was created, so that `lab down` and recovery can undo it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from llmfleet.lab.config import LabPaths


class Proc(BaseModel):
    """A process the lab started; `marker` must appear in its command line (guards PID reuse)."""

    pid: int
    marker: str

    def alive(self) -> bool:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        # Right after exec the kernel can still show an empty command line for a moment (seen on
        # these machines): wait for it rather than call a starting process dead.
        raw = b""
        for _ in range(100):
            try:
                raw = Path(f"/proc/{self.pid}/cmdline").read_bytes()
            except OSError:
                return False
            if raw:
                break
            time.sleep(0.01)
        return self.marker in raw.replace(b"\0", b" ").decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 15.0) -> None:
        """Signal the process, wait up to grace_s, then kill its whole process group."""
        if not self.alive():
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.1)
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)
            while self.alive():
                time.sleep(0.05)


class Service(BaseModel):
    name: str
    address: str
    port: int
    proc: Proc


class Host(BaseModel):
    name: str
    kind: Literal["container", "vm"]
    # what the host is in the lab's inventory: a serving host (lab_containers, lab_vms) or the fleet
    # gateway (lab_gateways: a container that serves no model, llmfleet/gateway.py)
    role: Literal["serving", "gateway"] = "serving"
    address: str
    ssh_port: int = 22
    image: str
    netns: str | None = None
    link: str  # veth (container) or tap (vm) on the bridge
    root: str | None = None  # overlay mount point of a container
    proc: Proc | None = None


class LabState(BaseModel):
    version: int = 1
    subnet: str
    gateway: str
    bridge: str
    user: str
    services: dict[str, Service] = Field(default_factory=dict)
    hosts: dict[str, Host] = Field(default_factory=dict)

    @classmethod
    def load(cls, paths: LabPaths) -> LabState | None:
        if not paths.state_file.is_file():
            return None
        return cls.model_validate_json(paths.state_file.read_text())

    def save(self, paths: LabPaths) -> None:
        paths.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = paths.state_file.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(paths.state_file)
