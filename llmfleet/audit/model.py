"""What an audit finds: per problem, the host, the kind, what differs (a setting or a file), the
expected and the actual value, and the command that repairs it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

KINDS = ("unreachable", "config", "state", "hardware", "waiver")


@dataclass
class Problem:
    host: str
    kind: str  # one of KINDS
    check: str  # a stable id: "deploy: <operation>", "verify/test_x.py::test_y", "hardware: gpus[3].serial"
    message: str  # one sentence with all of it, for a log line or a JUnit message
    expected: object = None
    actual: object = None
    waived: str | None = None  # the waiver's reason when waived
    what: str = ""  # the setting, file or part that differs ("vm.swappiness", "gpus[3].serial")
    why: str = ""  # what the difference means, where the check says ("a swapped GPU")
    repair: str = ""  # the command (or the step) that repairs it

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
    figures: dict = field(default_factory=dict)  # what verify's checks measured (record_property), for trends

    @property
    def open_problems(self) -> list[Problem]:
        return [p for p in self.problems if not p.waived]


def deploy_command(inventory: str, host: str, data: list[str] | None = None) -> str:
    """The command that puts a host back to its group data: the deploy, on that host only."""
    return " ".join(["pyinfra", inventory, "deploy.py", "--limit", host, *(f"--data {kv}" for kv in data or [])])


def show(value: object) -> str:
    """A value as a person reads it: no Python reprs (None is "not set", a list its items, a dict
    its `key: value` pairs)."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{show_key(k)}: {show(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple | set | frozenset):
        runs: list[list] = []  # equal neighbours once, with a count: "performance ×80"
        for v in value:
            if runs and runs[-1][0] == v:
                runs[-1][1] += 1
            else:
                runs.append([v, 1])
        return ", ".join(show(v) + (f" ×{n}" if n > 1 else "") for v, n in runs) or "none"
    text = str(value)
    if not text:
        return "empty"
    return text if text.strip() == text else f'"{text}"'


def show_key(key: object) -> str:
    return " ".join(show(k) for k in key) if isinstance(key, tuple) else show(key)
