"""Waivers: problems accepted for a while, with a reason. A YAML list:

    - check: "verify/test_sysctls.py::*"     # a check id, or a pattern (fnmatch)
      hosts: "gpu-sxm-0[12]*"                 # host name pattern
      reason: "swappiness experiment, OPS-123"
      expires: 2026-12-31                     # the last day it holds

A waived problem is shown as waived and does not fail the audit; an expired waiver fails it (and
waives nothing), so that accepted drift is looked at again."""

from __future__ import annotations

import datetime as dt
import fnmatch
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmfleet.audit.model import Problem
from llmfleet.errors import AuditError


class Waiver(BaseModel):
    model_config = ConfigDict(extra="forbid")
    check: str = Field(min_length=1)
    hosts: str = Field(min_length=1)
    reason: str = Field(min_length=3)
    expires: dt.date


def load(path: Path) -> list[Waiver]:
    try:
        raw = yaml.safe_load(path.read_text()) or []
    except OSError as exc:
        raise AuditError(f"--waivers {path}: cannot be read ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise AuditError(f"--waivers {path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, list):
        raise AuditError(f"--waivers {path}: expected a list of waivers (check, hosts, reason, expires)")
    out, problems = [], []
    for i, w in enumerate(raw):
        try:
            out.append(Waiver.model_validate(w))
        except ValidationError as exc:
            name = w.get("check", "?") if isinstance(w, dict) else repr(w)
            for e in exc.errors():
                where = ".".join(str(x) for x in e["loc"]) or "entry"
                problems.append(f"waiver {i + 1} ({name}): {where}: missing" if e["type"] == "missing" else
                                f"waiver {i + 1} ({name}): {where} = {e.get('input')!r}: {e['msg']}")
    if problems:
        raise AuditError(f"--waivers {path}: " + "; ".join(problems) + " (fix: each waiver has check, hosts, "
                         "reason and expires: YYYY-MM-DD)")
    return out


def apply(problems: list[Problem], waivers: list[Waiver], today: dt.date) -> list[Problem]:
    """Mark waived problems; return one problem per expired waiver."""
    live = [w for w in waivers if w.expires >= today]
    for p in problems:
        for w in live:
            if fnmatch.fnmatch(p.host, w.hosts) and fnmatch.fnmatch(p.check, w.check):
                p.waived = f"{w.reason} (until {w.expires})"
                break
    return [Problem(w.hosts, "waiver", f"waiver: {w.check}",
                    f"waiver expired on {w.expires} ({w.reason}): the problems it covered count again "
                    "(fix: resolve them, or renew the waiver with a new date)", f"valid on {today}",
                    f"expired on {w.expires}", what=f"waiver of {w.check} (hosts {w.hosts})",
                    why=f"{w.reason}: the problems it covered count again")
            for w in waivers if w.expires < today]
