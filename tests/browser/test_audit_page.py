"""The audit's HTML page as a person sees it: rendered by headless Chromium (the distribution's
`chromium`, Makefile SYSDEPS), its DOM read back and a screenshot taken."""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest

from llmfleet.audit import report
from tests import audit_samples

# the flags that keep Chromium off the (closed) network; without them it hangs
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HOSTILE = "<b>ntp & co</b>"


def chromium(tmp_path, page, *args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed (fix: make sysdeps, as root)")
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=True, stdin=subprocess.DEVNULL)


class Tables(HTMLParser):
    """The text of every table cell, by table id, as the browser's DOM holds it; and every element."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.tags: list[str] = []
        self._table = self._cell = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "span" and self._cell is not None and dict(attrs).get("class") == "sub":
            self._cell.append(" | ")  # a line of its own under the cell's value

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


class Reading(HTMLParser):
    """What a person reads top to bottom: each heading, each row of the problems table (its host) and
    each note, in the DOM's order, as ("h2" | "h3" | "problem" | "note", text)."""

    def __init__(self):
        super().__init__()
        self.order: list[tuple[str, str]] = []
        self._open: tuple[str, list[str]] | None = None
        self._table = ""
        self._row = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._table = dict(attrs).get("id", "")
        elif tag == "tr" and self._table == "problems":
            self._row = True
        elif tag == "td" and self._row:
            self._open, self._row = ("problem", []), False  # the row's first cell: its host
        elif tag in ("h2", "h3", "li"):
            self._open = ("note" if tag == "li" else tag, [])

    def handle_endtag(self, tag):
        if tag in ("td", "h2", "h3", "li") and self._open is not None:
            self.order.append((self._open[0], " ".join("".join(self._open[1]).split())))
            self._open = None
        elif tag == "table":
            self._table = ""

    def handle_data(self, data):
        if self._open is not None:
            self._open[1].append(data)


SKIPS = [f"{i} verify check(s) skipped: reason {i}" for i in range(1, 10)]
OWN = "decided at run time, not counted: vllm"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit")
    return report.write(audit_samples.every_kind(hostile=HOSTILE), folder)["html"]


def test_the_page_shows_one_row_per_problem_with_host_what_expected_actual_and_repair(tmp_path, page):
    dom = chromium(tmp_path, page, "--dump-dom").stdout
    tables = Tables()
    tables.feed(dom)
    header, *rows = tables.tables["problems"]
    assert header == ["host", "kind", "what", "expected", "actual", "repair"]
    inv = audit_samples.INVENTORY
    seen = {(r[0], r[1].split(" | ")[0], r[2].split(" | ")[0]): (r[3], r[4], r[5]) for r in rows}
    assert len(seen) == len(rows) == 7
    assert seen == {
        ("lab-c1", "config", "sysctls"):
            ("sysctl drop-in", "differs: the deploy would change it", f"pyinfra {inv} deploy.py --limit lab-c1"),
        ("lab-c1", "state", "limits (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile"):
            ("65536", "not set", f"pyinfra {inv} deploy.py --limit lab-c1"),
        ("lab-c1", "state", "chrony_servers"): ("ntp.example", HOSTILE, f"pyinfra {inv} deploy.py --limit lab-c1"),
        ("lab-c2", "hardware", "nvlink"):
            ("GPU1-GPU2: NV2", "GPU1-GPU2: SYS", f"check the part on lab-c2; if the change is intended, record the "
             f"hardware again: llmfleet onboard {inv} --limit lab-c2 --restart"),
        ("lab-c2", "state", "sysctls in force (/proc/sys): vm.swappiness"):
            ("1", "37", f"pyinfra {inv} deploy.py --limit lab-c2"),
        ("lab-c3", "unreachable", "SSH"):
            ("answers", "no answer: Connection refused",
             f"check SSH to the host (pyinfra {inv} exec --limit lab-c3 -- true), then audit again"),
        ("lab-c*", "waiver", "waiver of deploy: chrony* (hosts lab-c*)"):
            ("valid on 2026-11-29", "expired on 2026-01-01",
             "resolve the problems it covered, or give the waiver a later expires: in waivers.yml")}
    config = next(r for r in rows if r[1] == "config")
    assert " ".join(config).count("sysctl drop-in") == 1  # the operation's name once
    assert rows[1][2] == ("limits (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile | "
                          "check: verify/test_limits.py::test_limits")  # the id a waiver names, where it adds
    waived = next(r for r in rows if r[2].startswith("sysctls in force"))
    assert waived[1] == "state | waived: swappiness trial OPS-1 (until 2099-12-31)"
    # nothing a person reads is a Python repr, and nothing is escaped twice or not at all
    text = " ".join(c for r in rows for c in r)
    for repr_like in ("{'", "('", "['", "None", "&lt;", "&amp;"):
        assert repr_like not in text, repr_like
    assert "b" not in tables.tags and "script" not in tables.tags  # the host's markup stays text
    assert [r[0] for r in tables.tables["hosts"][1:]] == ["lab-c1", "lab-c2", "lab-c3"]


def test_the_page_renders_as_a_screenshot(tmp_path, page):
    shot = tmp_path / "audit.png"
    chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1400,1000", "--hide-scrollbars")
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1400, 1000)


@pytest.fixture(scope="module")
def noted_page(tmp_path_factory):
    """The same audit, each host that answered with the same nine skip notes, lab-c1 with one of its own."""
    doc = audit_samples.every_kind()
    for h in doc["hosts"].values():
        h["notes"] += SKIPS if h["reachable"] else []
    doc["hosts"]["lab-c1"]["notes"].append(OWN)
    return report.write(doc, tmp_path_factory.mktemp("noted"))["html"]


def test_a_person_reads_the_problems_first_and_a_note_said_on_several_hosts_once(tmp_path, noted_page):
    reading = Reading()
    reading.feed(chromium(tmp_path, noted_page, "--dump-dom").stdout)
    kinds = [k for k, _ in reading.order]
    assert "problem" in kinds and "note" in kinds
    assert max(i for i, k in enumerate(kinds) if k == "problem") < kinds.index("note")  # every problem above
    assert ("h3", "notes on lab-c1") in reading.order
    under = _headings(reading.order)
    notes = [(heading, text) for (k, text), heading in zip(reading.order, under, strict=True) if k == "note"]
    assert notes == [("notes on lab-c1", OWN), *[("notes on every reachable host", n) for n in SKIPS]]


def _headings(order: list[tuple[str, str]]) -> list[str]:
    """The heading each entry of `order` stands under."""
    out, last = [], ""
    for k, text in order:
        last = text if k in ("h2", "h3") else last
        out.append(last)
    return out
