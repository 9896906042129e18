"""The GPU interconnect of a multi-GPU host against its profile: which GPU pairs are NVLink-connected
and with how many links, which go over PCIe, each GPU's NUMA node, peer-to-peer access, and the
bus bandwidth of an all-reduce across all GPUs.

Pure functions on what the host reported (`nvidia-smi topo -m` as printed, llmfleet/remote's JSON),
so they are tested on the CPU with real outputs (tests/unit/test_gpu_interconnect.py); the verify
suite (verify/test_gpu_interconnect.py) reads the host and calls them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmfleet.schema import GpuProfile

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")
# nvidia-smi topo -m's legend: how two devices are connected, nearest first
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


class TopologyError(ValueError):
    """`nvidia-smi topo -m` printed something this parser does not know."""


@dataclass
class Topology:
    """What `nvidia-smi topo -m` says about the GPUs (other devices, such as NICs, are left out)."""

    gpus: int
    # (i, j) with i < j -> the cell: "NV18", "PIX", "SYS", ...
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    numa: list[int | None] = field(default_factory=list)
    cpu_affinity: list[str] = field(default_factory=list)

    def nvlinks(self, i: int, j: int) -> int:
        m = _NV.match(self.links[(min(i, j), max(i, j))])
        return int(m.group(1)) if m else 0


def parse_topo(text: str) -> Topology:
    """Parse `nvidia-smi topo -m` (tab-separated matrix, headers possibly underlined with ANSI codes;
    the columns after the GPUs and NICs vary by driver: CPU Affinity, NUMA Affinity, GPU NUMA ID)."""
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header_at = next((k for k, ln in enumerate(lines) if ln.split("\t")[1:2] and
                      _GPU.match(ln.split("\t")[1].strip())), None)
    if header_at is None:
        raise TopologyError("no header line with GPU0 in the output of nvidia-smi topo -m")
    header = [c.strip() for c in lines[header_at].split("\t")[1:]]
    gpu_cols = [c for c in header if _GPU.match(c)]
    n_dev = next((k for k, c in enumerate(header) if not re.match(r"^(GPU|NIC|mlx)\w*$", c)), len(header))
    rows: dict[int, list[str]] = {}
    for ln in lines[header_at + 1:]:
        cells = [c.strip() for c in ln.split("\t")]
        row = _GPU.match(cells[0]) if cells else None
        if row is None:
            continue
        rows[int(row.group(1))] = cells[1:]
    n = len(gpu_cols)
    # gpu_cols hold only names _GPU matches
    if sorted(rows) != list(range(n)) or [int(c.removeprefix("GPU")) for c in gpu_cols] != list(range(n)):
        raise TopologyError(f"GPU rows {sorted(rows)} do not match the GPU columns {gpu_cols}")
    topo = Topology(gpus=n)
    for i, cells in rows.items():
        if len(cells) < n:
            raise TopologyError(f"row GPU{i} has {len(cells)} cells, fewer than the {n} GPU columns")
        for j in range(n):
            cell = cells[j]
            if i == j:
                if cell != "X":
                    raise TopologyError(f"GPU{i} to itself: expected X, found {cell!r}")
                continue
            if not (_NV.match(cell) or cell in PCIE_PATHS):
                raise TopologyError(f"GPU{i} to GPU{j}: unknown connection {cell!r} (known: NV#, "
                                    f"{', '.join(PCIE_PATHS)})")
            key = (min(i, j), max(i, j))
            if key in topo.links and topo.links[key] != cell:
                raise TopologyError(f"GPU{i}-GPU{j}: the matrix is not symmetric ({topo.links[key]} and {cell})")
            topo.links[key] = cell
        rest = cells[n_dev:]
        named = dict(zip(header[n_dev:], rest, strict=False))
        topo.cpu_affinity.append(named.get("CPU Affinity", ""))
        numa = named.get("NUMA Affinity", "")
        topo.numa.append(int(numa) if numa.isdigit() else None)
    return topo


def expected_links(profile: GpuProfile) -> dict[tuple[int, int], int]:
    """(i, j) -> NVLink links the profile says, for every pair (0: over PCIe)."""
    out = {pair: 0 for pair in combinations(range(profile.count), 2)}
    for key, links in profile.nvlink_pairs.items():
        i, j = (int(x) for x in key.split("-"))
        out[(min(i, j), max(i, j))] = links
    return out


def topology_problems(profile: GpuProfile, topo: Topology) -> list[str]:
    """Each pair whose connection differs from the profile: 'GPU0-GPU3: expected NV2, actual NV1'."""
    if topo.gpus != profile.count:
        return [f"GPUs in the topology: expected {profile.count}, actual {topo.gpus}"]
    wrong = []
    for (i, j), links in expected_links(profile).items():
        actual = topo.links[(i, j)]
        want = f"NV{links}" if links else "PCIe (" + "/".join(PCIE_PATHS) + ")"
        if (links and actual != f"NV{links}") or (not links and actual not in PCIE_PATHS):
            wrong.append(f"GPU{i}-GPU{j}: expected {want}, actual {actual}")
    return wrong


def numa_problems(profile: GpuProfile, topo: Topology) -> list[str]:
    if profile.gpu_numa_nodes is None:
        return []
    return [f"GPU{i}: NUMA node: expected {want}, actual {got if got is not None else 'N/A'}"
            for i, (want, got) in enumerate(zip(profile.gpu_numa_nodes, topo.numa, strict=False)) if want != got]


def p2p_pairs(profile: GpuProfile) -> list[tuple[int, int]]:
    """The pairs between which peer-to-peer access must work, by the profile's `p2p`."""
    if profile.p2p == "none":
        return []
    pairs = list(combinations(range(profile.count), 2))
    if profile.p2p == "all_pairs":
        return pairs
    links = expected_links(profile)
    return [p for p in pairs if links[p]]


def p2p_problems(profile: GpuProfile, p2p: dict[str, dict]) -> list[str]:
    """Both directions of each required pair: CUDA allows access, and a copy arrives intact."""
    seen = {int(x) for key in p2p for x in key.split("-")}
    if p2p_pairs(profile) and len(seen) != profile.count:
        return [f"GPUs tested for peer access: expected {profile.count}, actual {len(seen)}"]
    wrong = []
    for i, j in p2p_pairs(profile):
        for a, b in ((i, j), (j, i)):
            r = p2p.get(f"{a}-{b}")
            if r is None:
                wrong.append(f"GPU{a}->GPU{b}: peer access: expected tested, actual not reported")
                continue
            if not r.get("access"):
                wrong.append(f"GPU{a}->GPU{b}: peer access (cudaDeviceCanAccessPeer): expected True, actual False")
            if not r.get("copy_ok"):
                wrong.append(f"GPU{a}->GPU{b}: 64 MiB copy: expected intact, actual "
                             f"{r.get('error') or 'different contents'}")
    return wrong


def busbw(size_bytes: int, seconds: float, world: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce (GB/s): algbw * 2 (n - 1) / n."""
    return size_bytes / seconds / 1e9 * 2 * (world - 1) / world


def allreduce_problems(profile: GpuProfile, result: dict) -> list[str]:
    """A wrong sum at any size, and each thresholded size below the profile's bus bandwidth."""
    if "error" in result:
        fix = (" (fix: the GPUs lack free memory for the largest size: run the check before vLLM takes them, "
               "or lower the largest of gpu_allreduce_sizes_mib)") if "out of memory" in result["error"].lower() else ""
        return [f"all-reduce: expected to run, actual: {result['error']}{fix}"]
    wrong = []
    if result.get("world") != profile.count:
        wrong.append(f"all-reduce ranks: expected {profile.count} (one per GPU), actual {result.get('world')}")
    by_size = {r["size_mib"]: r for r in result["results"]}
    for r in result["results"]:
        if r["wrong_elements"]:
            wrong.append(f"all-reduce {r['size_mib']} MiB: wrong elements: expected 0, actual {r['wrong_elements']}")
    for size, minimum in sorted(profile.allreduce_min_busbw_gbs.items()):
        r = by_size.get(size)
        if r is None:
            wrong.append(f"all-reduce {size} MiB: expected measured (it has a threshold), actual not measured")
        elif r["busbw_gbs"] < minimum:
            wrong.append(f"all-reduce {size} MiB: bus bandwidth: expected >= {minimum:g} GB/s, "
                         f"actual {r['busbw_gbs']:g} GB/s")
    return wrong


def describe_allreduce(result: dict) -> str:
    """One line per size, for the report: '1024 MiB: 3278 us, algbw 327.6, busbw 327.6 GB/s'."""
    return "\n".join(f"{r['size_mib']:>5} MiB: {r['time_us']:>9.1f} us, algbw {r['algbw_gbs']:>7.1f} GB/s, "
                     f"busbw {r['busbw_gbs']:>7.1f} GB/s, wrong {r['wrong_elements']}" for r in result["results"])
