"""The model storage's speed, judged: the figures of a measurement (llmfleet/remote/model_storage.py,
fio on the filesystem of vllm_models_dir) against a group's `storage_thresholds`. Pure: no I/O.

Used by onboarding's preflight (llmfleet/onboard.py), verify's acceptance check
(verify/test_model_storage.py) and the comparison with a kept acceptance result (llmfleet/onboard_acceptance.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmfleet.schema import StorageThresholds


class StorageError(ValueError):
    """A measurement that did not run (fio missing, no room for the test file, fio failed)."""


@dataclass(frozen=True)
class StorageFigures:
    path: str  # the folder measured (vllm_models_dir or its nearest existing parent)
    mount: str
    fstype: str
    direct: bool  # O_DIRECT (False: through the page cache, emptied of the file first)
    read_mbs: float  # sequential 1 MiB reads, 16 in flight: MB/s (10^6 bytes a second)
    read_latency_ms: float  # 4 KiB random reads one at a time: mean completion latency
    read_latency_p99_ms: float | None
    read_iops: float  # of the random reads
    fio: str

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        p99 = f", p99 {self.read_latency_p99_ms:.2f} ms" if self.read_latency_p99_ms is not None else ""
        how = "O_DIRECT" if self.direct else "through the page cache (the filesystem refused O_DIRECT)"
        return (f"{self.path} ({self.fstype} on {self.mount}, {self.fio}, {how}): sequential read "
                f"{self.read_mbs:.0f} MB/s, 4 KiB random read {self.read_latency_ms:.3f} ms mean{p99}, "
                f"{self.read_iops:.0f} IOPS")


def figures(result: dict) -> StorageFigures:
    """The figures of one measurement; StorageError with its reason when it did not run."""
    if result.get("error"):
        fix = " (fix: deploy the host, or apt-get install fio)" if result.get("missing") == "fio" else ""
        raise StorageError(f"{result.get('path', result.get('asked'))}: {result['error']}{fix}")
    seq, rand = result["seq_read"], result["rand_read"]
    if not seq.get("runtime") or not rand.get("total_ios"):
        raise StorageError(f"{result['path']}: fio read nothing (sequential {seq.get('io_bytes')} bytes in "
                           f"{seq.get('runtime')} ms, {rand.get('total_ios')} random reads)")
    p99 = (rand.get("clat_ns") or {}).get("percentile", {}).get("99.000000")
    return StorageFigures(path=result["path"], mount=result["mount"], fstype=result["fstype"],
                          direct=bool(result.get("direct")), read_mbs=round(seq["bw_bytes"] / 1e6, 1),
                          read_latency_ms=round(rand["clat_ns"]["mean"] / 1e6, 4),
                          read_latency_p99_ms=round(p99 / 1e6, 4) if p99 is not None else None,
                          read_iops=round(rand["iops"], 1), fio=result.get("fio") or "fio")


def problems(f: StorageFigures, thresholds: StorageThresholds) -> list[str]:
    """What the figures miss, each as `what: expected X, actual Y` with what it means."""
    out = []
    if f.read_mbs < thresholds.min_read_mbs:
        out.append(f"sequential read of {f.path} ({f.fstype}), storage_thresholds.min_read_mbs: expected at least "
                   f"{thresholds.min_read_mbs:g} MB/s, actual {f.read_mbs:g} MB/s (weights load this slowly)")
    if f.read_latency_ms > thresholds.max_read_latency_ms:
        out.append(f"4 KiB random read latency of {f.path} ({f.fstype}), storage_thresholds.max_read_latency_ms: "
                   f"expected at most {thresholds.max_read_latency_ms:g} ms, actual {f.read_latency_ms:g} ms "
                   "(a cold start may time out)")
    return out
