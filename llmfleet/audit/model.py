"""What an audit finds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

KINDS = ("unreachable", "config", "state", "hardware", "waiver")


@dataclass
class Problem:
    host: str
    kind: str  # one of KINDS
    check: str  # a stable id: "deploy: <operation>", "verify/test_x.py::test_y", "hardware: gpus[3].serial"
    message: str
    expected: object = None
    actual: object = None
    waived: str | None = None  # the waiver's reason when waived

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.host, self.kind, self.check)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class HostResult:
    host: str
    reachable: bool = True
    problems: list[Problem] = field(default_factory=list)
    checks_run: int = 0  # verify tests run + deploy operations planned + fingerprint fields compared
    notes: list[str] = field(default_factory=list)

    @property
    def open_problems(self) -> list[Problem]:
        return [p for p in self.problems if not p.waived]
