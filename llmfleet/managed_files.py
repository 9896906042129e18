"""managed_files: everything the deploy manages on a host, recorded in one manifest there.

Every file, link and folder a deploy writes is an entry: its path, content hash (sha256), mode,
owner and group (a link: its target; a file the deploy removes: "absent"). The deploy writes the
manifest (MANIFEST, root-only: it names secrets' hashes) at its end; both audits compare each entry
with what is on the host (verify/test_managed_files.py, which the host's self-audit runs too), and
find foreign files in the drop-in folders of the managed files that override a managed key
(llmfleet/remote/managed_files_dropins.py).

This module is pure: it builds entries and the manifest, and compares an entry with what a host
has (llmfleet/remote/managed_files_state.py reads that); operations/managed_files.py writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

MANIFEST = "/etc/llmfleet/managed-files.json"  # root:root 0600, beside the self-audit's folder
SCHEMA = "llmfleet-managed-files/1"
KINDS = ("file", "link", "directory", "absent")

# Drop-in folders whose files llmfleet writes, by the kind of chain they load in
# (llmfleet/remote/managed_files_dropins.py works out the value in effect in each).
DROPIN_FOLDERS = {
    "/etc/sysctl.d/": "sysctl",
    "/etc/security/limits.d/": "limits",
    "/etc/systemd/system.conf.d/": "systemd_manager",
    "/etc/modprobe.d/": "modprobe",
    "/etc/apt/preferences.d/": "apt_preferences",
    "/etc/apt/apt.conf.d/": "apt_conf",
    "/etc/default/grub.d/": "grub",
}
UNIT_FOLDER = "/etc/systemd/system/"
UNIT_SUFFIXES = (".service", ".timer", ".socket", ".path", ".target", ".mount")

# what a secret's content is shown as: never its content, nor its hash
SECRET_MANAGED = "the managed content (a secret: not shown)"
SECRET_OTHER = "other content (its hash differs; a secret: not shown)"


def dropin_folder(path: str) -> str | None:
    """The drop-in chain a managed file belongs to (DROPIN_FOLDERS, or "systemd_unit" for a unit
    file or a unit's drop-in under /etc/systemd/system), None for a file outside any."""
    for folder, kind in DROPIN_FOLDERS.items():
        if path.startswith(folder) and "/" not in path[len(folder):]:
            return kind
    if path.startswith(UNIT_FOLDER):
        rest = path[len(UNIT_FOLDER):].split("/")
        if len(rest) == 1 and rest[0].endswith(UNIT_SUFFIXES):
            return "systemd_unit"
        if len(rest) == 2 and rest[0].endswith(tuple(s + ".d" for s in UNIT_SUFFIXES)) and rest[1].endswith(".conf"):
            return "systemd_unit"
    return None


def octal(mode: str | int) -> str:
    """A mode as four octal digits ("644" and 0o644 -> "0644")."""
    value = int(mode, 8) if isinstance(mode, str) else mode
    return f"{value:04o}"


def sha256(content: str | bytes) -> str:
    return hashlib.sha256(content.encode() if isinstance(content, str) else content).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One thing the deploy manages. `what` is the operation that manages it, as the deploy names
    it; `folder` the drop-in chain of a file (dropin_folder)."""

    path: str
    kind: str
    what: str
    sha256: str | None = None
    mode: str | None = None
    user: str | None = None
    group: str | None = None
    target: str | None = None
    secret: bool = False
    folder: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.path}: kind {self.kind!r} is not one of {KINDS}")


def file_entry(path: str, content: str | bytes, what: str, mode: str | int, user: str = "root",
               group: str = "root", secret: bool = False) -> Entry:
    return Entry(path, "file", what, sha256=sha256(content), mode=octal(mode), user=user, group=group,
                 secret=secret, folder=dropin_folder(path))


def document(entries: Iterable[Entry]) -> str:
    """The manifest's text: the entries sorted by path (a path given twice: the last wins), so the
    same deploy writes the same bytes."""
    by_path = {e.path: e for e in entries}
    rows = [{k: v for k, v in asdict(by_path[p]).items() if v not in (None, False)} for p in sorted(by_path)]
    return json.dumps({"schema": SCHEMA, "entries": rows}, indent=1, sort_keys=True) + "\n"


def differences(entry: dict, found: dict | None) -> dict[str, tuple[str, str]]:
    """{attribute: (expected, actual)} where what the host has (`found`: managed_files_state.py's
    reading of the path: {"kind", "sha256", "mode", "user", "group", "target"}, None when it could
    not be read) differs from a manifest entry; empty when it matches. A secret's content is named,
    never shown."""
    found = found or {"kind": "missing"}
    kind = found.get("kind", "missing")
    if entry["kind"] == "absent":
        return {} if kind == "missing" else {"present": ("absent", kind)}
    if kind != entry["kind"]:
        return {"kind": (entry["kind"], kind)}
    out = {}
    if entry.get("sha256") and found.get("sha256") != entry["sha256"]:
        out["content"] = ((SECRET_MANAGED, SECRET_OTHER) if entry.get("secret")
                          else (f"sha256 {entry['sha256'][:16]}", f"sha256 {str(found.get('sha256'))[:16]}"))
    if entry.get("target") is not None and found.get("target") != entry["target"]:
        out["target"] = (entry["target"], str(found.get("target")))
    for attribute in ("mode", "user", "group"):
        if entry.get(attribute) is not None and found.get(attribute) != entry[attribute]:
            out[attribute] = (entry[attribute], str(found.get(attribute)))
    return out
