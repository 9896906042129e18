"""dcgm_exporter as data: DCGM's and dcgm-exporter's packages, unit and counters file (the deploy,
operations/dcgm_exporter.py, writes what they render; verify/test_dcgm_exporter.py compares the host
with the same rendering), and DCGM's diagnostics read. Pure: no I/O.

The diagnostics: the JSON of `dcgmi diag -r LEVEL -j` (run on the host by
llmfleet/remote/dcgm_exporter_diag.py) as per-GPU results of each test, and what fails.

The shape (DCGM 4, dcgmi/Diag.cpp HelperJsonBuildOutput; names in nvvs/include/NvvsJsonStrings.h;
github.com/NVIDIA/DCGM at 72fa3fe, DCGM 4.6.0):

    {"DCGM Diagnostic": {"test_categories": [{"category": "Deployment",
        "tests": [{"name": "software", "results": [{"entity_group": "GPU", "entity_group_id": 1,
                   "entity_id": 0, "status": "Pass", "warnings": [{"warning", "error_id", ...}],
                   "info": ["..."]}], "test_summary": {"status": "Pass"}}]}]},
     "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                        "entities": [{"entity_id": 0, "serial_num": "...", "device_id": "2335"}]}],
     "metadata": {"version": "4.6.0", "Driver Version Detected": "580.159.04"}}

and on an error `{"DCGM Diagnostic": {"version": ..., "runtime_error": "..."}}`. A status is "Pass",
"Skip" or "Fail" (a warning reads "Fail" in the JSON); a result that did not run is left out of the
JSON altogether (Diag.cpp: "Don't record an entry for tests that weren't run"), so a test without
results, or a GPU missing from a test's results, did not run there. Only Pass passes: a skipped
test is not a pass (NVIDIA/DCGM#55: above level 1, tests skip on a SKU DCGM does not list).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmfleet import templates
from llmfleet.addresses import listen

if TYPE_CHECKING:
    from llmfleet.schema import Settings

PASS = "Pass"
GPU_GROUP = "GPU"  # DcgmFieldsGetEntityGroupString(DCGM_FE_GPU)


class DiagError(ValueError):
    """Output that is not a DCGM diagnostic's JSON."""


@dataclass
class Result:
    status: str
    messages: list[str] = field(default_factory=list)  # warnings, then info


@dataclass
class Test:
    category: str
    name: str
    gpus: dict[int, Result] = field(default_factory=dict)  # per GPU (entity_id)
    overall: Result | None = None  # test_summary (absent: the test did not run)
    other: list[tuple[str, Result]] = field(default_factory=list)  # results of other entities (CPU, ...)


@dataclass
class Diag:
    tests: list[Test]
    serials: dict[int, str]  # GPU -> serial
    version: str | None = None
    driver: str | None = None
    runtime_error: str | None = None

    def per_gpu(self) -> dict[int, dict[str, str]]:
        """{GPU: {test: status}} (for the reports), "not run" where a GPU has no result."""
        gpus = sorted(set(self.serials) | {g for t in self.tests for g in t.gpus})
        return {g: {t.name: t.gpus[g].status if g in t.gpus else "not run" for t in self.tests} for g in gpus}


def _result(entry: dict) -> Result:
    messages = [w.get("warning", str(w)) if isinstance(w, dict) else str(w) for w in entry.get("warnings") or []]
    messages += [str(i) for i in entry.get("info") or []]
    return Result(str(entry.get("status", "")), messages)


def parse(doc: object) -> Diag:
    if not isinstance(doc, dict) or not isinstance(doc.get("DCGM Diagnostic"), dict):
        raise DiagError(f"not dcgmi diag -j output (no \"DCGM Diagnostic\" object): {str(doc)[:200]}")
    body = doc["DCGM Diagnostic"]
    meta = doc.get("metadata") or {}
    serials = {}
    for group in doc.get("entity_groups") or []:
        if group.get("entity_group") == GPU_GROUP:
            for e in group.get("entities") or []:
                serials[int(e["entity_id"])] = str(e.get("serial_num", ""))
    tests = []
    for category in body.get("test_categories") or []:
        for t in category.get("tests") or []:
            test = Test(str(category.get("category", "")), str(t.get("name", "")))
            for entry in t.get("results") or []:
                if entry.get("entity_group") == GPU_GROUP and "entity_id" in entry:
                    test.gpus[int(entry["entity_id"])] = _result(entry)
                else:
                    test.other.append((f"{entry.get('entity_group', 'host')}{entry.get('entity_id', '')}",
                                       _result(entry)))
            if isinstance(t.get("test_summary"), dict):
                test.overall = _result(t["test_summary"])
            tests.append(test)
    return Diag(tests, serials, meta.get("version") or body.get("version"), meta.get("Driver Version Detected"),
                body.get("runtime_error"))


def _why(r: Result) -> str:
    return f" ({'; '.join(m.strip() for m in r.messages)[:400]})" if r.messages else ""


def problems(diag: Diag, level: int, gpus: list[int]) -> list[str]:
    """Every result that is not Pass, as `[GPU i: ]dcgmi diag -r L <test>: expected Pass, actual X (why)`:
    a GPU of `gpus` (the host's, by NVML index) missing from a test's results did not run it."""
    what = f"dcgmi diag -r {level}"
    if diag.runtime_error:
        return [f"{what}: expected to run, actual: {diag.runtime_error.strip()[:400]}"]
    if not diag.tests:
        return [f"{what}: expected tests, actual: none ran"]
    out = []
    for t in diag.tests:
        name = f"{what} {t.name}"
        if not t.gpus and not t.other and t.overall is None:
            out.append(f"{name}: expected {PASS}, actual not run (no result for any GPU)")
            continue
        for g, r in sorted(t.gpus.items()):
            if r.status != PASS:
                serial = f" (serial {diag.serials[g]})" if diag.serials.get(g) else ""
                out.append(f"GPU {g}{serial}: {name}: expected {PASS}, actual {r.status or 'no status'}{_why(r)}")
        if t.gpus:
            out += [f"GPU {g}: {name}: expected {PASS}, actual not run on this GPU" for g in gpus if g not in t.gpus]
        out += [f"{who}: {name}: expected {PASS}, actual {r.status}{_why(r)}" for who, r in t.other if r.status != PASS]
        gpu_failed = any(r.status != PASS for r in t.gpus.values())
        if t.overall is not None and t.overall.status != PASS and not gpu_failed:
            out.append(f"{name} (overall): expected {PASS}, actual {t.overall.status}{_why(t.overall)}")
    return out


def describe(diag: Diag) -> str:
    """One line per GPU: each test's status."""
    rows = [f"GPU {g}: " + ", ".join(f"{t} {s}" for t, s in tests.items()) for g, tests in diag.per_gpu().items()]
    head = f"DCGM {diag.version or '?'}, driver {diag.driver or '?'}"
    return "\n".join([head, *rows])


# DCGM 4 (DCGM cmake/packaging.cmake: datacenter-gpu-manager-4-core, -4-cuda<major>; epoch 1)
DCGM_PACKAGES = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda{cuda_major}")
DCGM_DEB_VERSION = "1:{version}-1"
DCGM_SERVICE = "nvidia-dcgm.service"  # DCGM config-files/systemd/nvidia-dcgm.service.in (nv-hostengine)
DCGM_HOSTENGINE = "localhost:5555"  # DCGM dcgm_structs.h DCGM_HE_PORT_NUMBER 5555
# dcgm-exporter: its unit's name (dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service);
# llmfleet writes the whole unit in /etc/systemd/system, which takes precedence over a package's
EXPORTER_SERVICE = "nvidia-dcgm-exporter.service"
EXPORTER_UNIT_PATH = f"/etc/systemd/system/{EXPORTER_SERVICE}"
EXPORTER_COUNTERS = "/etc/dcgm-exporter/llmfleet-counters.csv"
EXPORTER_PACKAGE_BINARY = "/usr/bin/dcgm-exporter"  # where the package (and the archive's tree) puts it
EXPORTER_ARCHIVE_ROOT = "/opt/llmfleet/dcgm-exporter"  # <root>/<version>/ holds an unpacked release archive
EXPORTER_ARCHIVE_CACHE = "/var/cache/llmfleet"


def dcgm_packages(settings: Settings) -> dict[str, str]:
    """{package: exact Debian version} of DCGM, and of dcgm-exporter where it comes as NVIDIA's package."""
    cuda_major = settings.cuda_toolkit_version.split(".")[0]
    packages = {name.format(cuda_major=cuda_major): DCGM_DEB_VERSION.format(version=settings.dcgm_version)
                for name in DCGM_PACKAGES}
    if settings.dcgm_exporter_package is not None:
        packages[settings.dcgm_exporter_package.name] = settings.dcgm_exporter_package.version
    return packages


def exporter_binary(settings: Settings) -> str:
    archive = settings.dcgm_exporter_archive
    if settings.dcgm_exporter_package is not None or archive is None:
        return EXPORTER_PACKAGE_BINARY
    return f"{EXPORTER_ARCHIVE_ROOT}/{archive.version}{EXPORTER_PACKAGE_BINARY}"


def exporter_command(settings: Settings) -> list[str]:
    """dcgm-exporter's command line: our counters, the address from group data, DCGM's host engine
    (nvidia-dcgm.service) instead of an engine of its own (without -r it embeds one: dcgm-exporter
    pkg/cmd/app.go, UseRemoteHE only when the flag is given)."""
    return [exporter_binary(settings), "-f", EXPORTER_COUNTERS,
            "-a", listen(settings.dcgm_exporter_address, settings.host_service_ports["dcgm_exporter"]),
            "-r", DCGM_HOSTENGINE, "-c", str(settings.dcgm_exporter_interval_ms)]


def exporter_unit(settings: Settings) -> str:
    return templates.render("dcgm_exporter", "nvidia-dcgm-exporter.service.j2",
                            command=" ".join(exporter_command(settings)))


def counters_csv(settings: Settings) -> str:
    return templates.render("dcgm_exporter", "llmfleet-counters.csv.j2",
                            counters=settings.dcgm_exporter_counters)
