"""DCGM's diagnostics, read: the JSON of `dcgmi diag -r LEVEL -j` (run on the host by
llmfleet/remote/dcgm_diag.py) as per-GPU results of each test, and what fails. Pure: no I/O.

The shape (DCGM 4, dcgmi/Diag.cpp HelperJsonBuildOutput; names in nvvs/include/NvvsJsonStrings.h;
../shared/facts/gpu-generations.md section 3):

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
test is not a pass (DCGM issue #55: above level 1, tests skip on a SKU DCGM does not list).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
