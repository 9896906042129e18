"""The GPU interconnect checks' logic on the CPU: parsing `nvidia-smi topo -m`, comparing it with a
profile, peer access, the all-reduce's sum and bus-bandwidth thresholds, and the profile/settings
validation.

Fixtures in data/interconnect/: `h200_x2_*` and `h200_x4_*` were captured on the 2 x and 4 x H200
machines the device tool lends (`nvidia-smi topo -m` as printed, with its ANSI underline; the
JSON of llmfleet/remote/gpu_interconnect_topology.py and gpu_interconnect_allreduce.py). The 8-GPU V100 matrices
are rendered here from the profile's pairs in nvidia-smi's format (no V100 host exists here), then altered as a
faulty host would show them.
"""

import json
from pathlib import Path

import pytest
from test_gpu_guardrails import defaults

from llmfleet import gpu_interconnect
from llmfleet.schema import GpuProfile
from llmfleet.settings import SettingsError, validate

DATA = Path(__file__).parent / "data" / "interconnect"
PROFILES = defaults()["gpu_profiles"]


def profile(name: str, **override) -> GpuProfile:
    return GpuProfile(**(PROFILES[name] | override))


def render_topo(n: int, cells: dict[tuple[int, int], str], numa: list[int], default: str = "SYS") -> str:
    """A `nvidia-smi topo -m` matrix as R580 prints it (tabs, a NIC column, three trailing columns)."""
    head = "\t" + "\t".join(f"GPU{j}" for j in range(n)) + "\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    rows = []
    for i in range(n):
        row = [" X " if i == j else cells.get((min(i, j), max(i, j)), default) for j in range(n)]
        cpus = "0-19,40-59" if numa[i] == 0 else "20-39,60-79"
        rows.append(f"GPU{i}\t" + "\t".join(row) + f"\tPIX\t{cpus}\t{numa[i]}\t\tN/A")
    legend = "\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    return head + "\n".join(rows) + legend


def v100_cells(**changes: str) -> dict[tuple[int, int], str]:
    cells = {tuple(int(x) for x in k.split("-")): f"NV{v}" for k, v in PROFILES["v100_sxm2_32gb_x8"]
             ["nvlink_pairs"].items()}
    for key, value in changes.items():  # p0_3="NV1"
        i, j = (int(x) for x in key[1:].split("_"))
        cells[(i, j)] = value
    return cells


NUMA8 = [0, 0, 0, 0, 1, 1, 1, 1]


def test_parses_the_real_h200_x2_matrix():
    topo = gpu_interconnect.parse_topo((DATA / "h200_x2_topo.txt").read_text())
    assert topo.gpus == 2 and topo.links == {(0, 1): "NV18"} and topo.numa == [0, 0]
    assert topo.cpu_affinity == ["0-31", "0-31"] and topo.nvlinks(1, 0) == 18
    assert gpu_interconnect.topology_problems(profile("h200_141gb_x2"), topo) == []
    assert gpu_interconnect.numa_problems(profile("h200_141gb_x2"), topo) == []


def test_the_real_h200_x4_matrix_and_allreduce_pass_their_profile():
    p = profile("h200_141gb_x4")
    topo = gpu_interconnect.parse_topo((DATA / "h200_x4_topo.txt").read_text())
    assert topo.gpus == 4 and set(topo.links.values()) == {"NV18"} and len(topo.links) == 6
    assert gpu_interconnect.topology_problems(p, topo) == [] and gpu_interconnect.numa_problems(p, topo) == []
    links = json.loads((DATA / "h200_x4_links.json").read_text())
    assert len(links["p2p"]) == 12 and gpu_interconnect.p2p_problems(p, links["p2p"]) == []
    result = json.loads((DATA / "h200_x4_allreduce.json").read_text())
    assert result["world"] == 4 and gpu_interconnect.allreduce_problems(p, result) == []
    # the two-GPU profile on this host: said once
    assert gpu_interconnect.topology_problems(profile("h200_141gb_x2"), topo) == [
        "GPUs in the topology: expected 2, actual 4"]


def test_the_dgx1_cube_mesh_matches_the_v100_profile():
    p = profile("v100_sxm2_32gb_x8")
    topo = gpu_interconnect.parse_topo(render_topo(8, v100_cells(), NUMA8))
    assert gpu_interconnect.topology_problems(p, topo) == [] and gpu_interconnect.numa_problems(p, topo) == []
    # every GPU uses its 6 links, as the profile's nvlink_links says
    assert all(sum(topo.nvlinks(i, j) for j in range(8) if j != i) == p.nvlink_links for i in range(8))


def test_a_link_down_and_a_swapped_card_are_named_by_pair():
    p = profile("v100_sxm2_32gb_x8")
    # one of the two links between GPU0 and GPU3 down; GPU4's card in a slot without its NVLink bridge
    topo = gpu_interconnect.parse_topo(render_topo(8, v100_cells(p0_3="NV1", p0_4="SYS", p4_5="SYS"), NUMA8))
    assert gpu_interconnect.topology_problems(p, topo) == [
        "GPU0-GPU3: expected NV2, actual NV1",
        "GPU0-GPU4: expected NV2, actual SYS",
        "GPU4-GPU5: expected NV1, actual SYS",
    ]


def test_another_boards_wiring_is_drift_against_the_dgx1_profile():
    # the same pairs with other link counts (as in the topo -m of NVIDIA/nccl-tests#29)
    p = profile("v100_sxm2_32gb_x8")
    topo = gpu_interconnect.parse_topo(render_topo(8, v100_cells(p0_1="NV2", p0_3="NV1"), NUMA8))
    assert gpu_interconnect.topology_problems(p, topo) == ["GPU0-GPU1: expected NV1, actual NV2",
                                                       "GPU0-GPU3: expected NV2, actual NV1"]


def test_nvlink_where_the_profile_says_pcie_and_wrong_numa():
    p = profile("v100_pcie_32gb_x8", gpu_numa_nodes=NUMA8)
    topo = gpu_interconnect.parse_topo(render_topo(8, {(2, 3): "NV2"}, [0, 0, 0, 0, 0, 1, 1, 1], default="NODE"))
    assert gpu_interconnect.topology_problems(p, topo) == [
        "GPU2-GPU3: expected PCIe (PIX/PXB/PHB/NODE/SYS), actual NV2"]
    assert gpu_interconnect.numa_problems(p, topo) == ["GPU4: NUMA node: expected 1, actual 0"]


def test_a_host_with_fewer_gpus_than_the_profile():
    topo = gpu_interconnect.parse_topo((DATA / "h200_x2_topo.txt").read_text())
    assert gpu_interconnect.topology_problems(profile("v100_sxm2_32gb_x8"), topo) == [
        "GPUs in the topology: expected 8, actual 2"]


@pytest.mark.parametrize("text, message", [
    ("No devices were found\n", "no header line with GPU0"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n", "not symmetric (NV4 and NV2)"),
    ("\tGPU0\tGPU1\nGPU0\t X \tQPI\nGPU1\tQPI\t X \n", "unknown connection 'QPI'"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "GPU rows [0] do not match"),
])
def test_output_the_parser_does_not_know_is_an_error(text, message):
    with pytest.raises(gpu_interconnect.TopologyError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        gpu_interconnect.parse_topo(text)


def test_old_driver_output_without_numa_columns():
    # R410-era: spaces-padded cells, mlx5 NIC columns, CPU Affinity only
    text = "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\nGPU0\t X \tNV1\tPIX\t0-19,40-59\nGPU1\tNV1\t X \tPIX\t0-19,40-59\n"
    topo = gpu_interconnect.parse_topo(text)
    assert topo.links == {(0, 1): "NV1"} and topo.numa == [None, None] and topo.cpu_affinity[0] == "0-19,40-59"


def test_peer_access_pairs_and_failures():
    links = json.loads((DATA / "h200_x2_links.json").read_text())
    assert gpu_interconnect.p2p_problems(profile("h200_141gb_x2"), links["p2p"]) == []
    v100 = profile("v100_sxm2_32gb_x8")
    assert len(gpu_interconnect.p2p_pairs(v100)) == 16  # the NVLink pairs only, not the 12 across the CPUs
    assert gpu_interconnect.p2p_pairs(profile("v100_pcie_32gb_x8")) == []
    broken = {"0-1": {"access": False, "copy_ok": False, "error": "peer mapping resources exhausted"},
              "1-0": {"access": True, "copy_ok": True}}
    assert gpu_interconnect.p2p_problems(profile("h200_141gb_x2"), broken) == [
        "GPU0->GPU1: peer access (cudaDeviceCanAccessPeer): expected True, actual False",
        "GPU0->GPU1: 64 MiB copy: expected intact, actual peer mapping resources exhausted"]
    assert gpu_interconnect.p2p_problems(profile("h200_141gb_x2"), {"0-1": broken["1-0"]}) == [
        "GPU1->GPU0: peer access: expected tested, actual not reported"]
    # a host with 2 GPUs against the 8-GPU profile: said once, not per pair
    assert gpu_interconnect.p2p_problems(v100, links["p2p"]) == ["GPUs tested for peer access: expected 8, actual 2"]


def test_busbw_is_nccl_tests_formula():
    # 1 GiB in 3278 us over 2 GPUs (measured on the H200 pair): algbw = busbw = 327.56 GB/s
    assert gpu_interconnect.busbw(1 << 30, 3278e-6, 2) == pytest.approx(327.56, abs=0.01)
    # 8 GPUs: busbw = algbw * 14 / 8
    assert gpu_interconnect.busbw(1 << 30, 0.01, 8) == pytest.approx((1 << 30) / 0.01 / 1e9 * 1.75)


def test_the_measured_h200_pair_passes_its_thresholds():
    result = json.loads((DATA / "h200_x2_allreduce.json").read_text())
    assert gpu_interconnect.allreduce_problems(profile("h200_141gb_x2"), result) == []
    assert "1024 MiB:    3278.0 us, algbw   327.6 GB/s, busbw   327.6 GB/s, wrong 0" in \
        gpu_interconnect.describe_allreduce(result)


def test_below_threshold_wrong_sum_and_missing_size_are_named():
    result = json.loads((DATA / "h200_x2_allreduce.json").read_text())
    result["results"][1]["wrong_elements"] = 4096
    result["results"] = [r for r in result["results"] if r["size_mib"] != 64]
    strict = profile("h200_141gb_x2", allreduce_min_busbw_gbs={64: 210.0, 256: 240.0, 1024: 400.0})
    assert gpu_interconnect.allreduce_problems(strict, result) == [
        "all-reduce 4 MiB: wrong elements: expected 0, actual 4096",
        "all-reduce 64 MiB: expected measured (it has a threshold), actual not measured",
        "all-reduce 1024 MiB: bus bandwidth: expected >= 400 GB/s, actual 327.56 GB/s"]


def test_an_allreduce_that_did_not_run_or_ran_on_fewer_gpus():
    p = profile("v100_sxm2_32gb_x8")
    assert gpu_interconnect.allreduce_problems(p, {"error": "rank 3: NCCL error: unhandled system error"}) == [
        "all-reduce: expected to run, actual: rank 3: NCCL error: unhandled system error"]
    oom = gpu_interconnect.allreduce_problems(p, {"error": "rank 0: OutOfMemoryError: CUDA out of memory. Tried to "
                                                       "allocate 1.00 GiB"})
    assert oom[0].endswith("(fix: the GPUs lack free memory for the largest size: run the check before vLLM "
                           "takes them, or lower the largest of gpu_allreduce_sizes_mib)")
    result = json.loads((DATA / "h200_x2_allreduce.json").read_text())
    assert gpu_interconnect.allreduce_problems(p, result)[0] == "all-reduce ranks: expected 8 (one per GPU), actual 2"


@pytest.mark.parametrize("override, message", [
    ({"nvlink_pairs": {"0-8": 2}}, "nvlink_pairs key '0-8': needs two different GPU indexes below count 8"),
    ({"nvlink_pairs": {"0-1": 1, "1-0": 1}}, "names a pair twice"),
    ({"gpu_numa_nodes": [0, 1]}, "gpu_numa_nodes has 2 entries, count is 8"),
    ({"p2p": "some"}, "p2p"),
])
def test_bad_interconnect_data_is_refused_before_any_host(override, message):
    profiles = PROFILES | {"v100_sxm2_32gb_x8": PROFILES["v100_sxm2_32gb_x8"] | override}
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", defaults(gpu_profiles=profiles))
    assert "host gpu-7" in str(exc.value) and message in str(exc.value)


def test_a_one_gpu_profile_cannot_have_allreduce_thresholds():
    profiles = PROFILES | {"h200_141gb_x1": PROFILES["h200_141gb_x1"] | {"allreduce_min_busbw_gbs": {1024: 100.0}}}
    with pytest.raises(SettingsError, match="one-GPU profile"):
        validate("gpu-7", defaults(gpu_profiles=profiles))


def test_a_threshold_at_a_size_not_measured_is_refused():
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", defaults(gpu_allreduce_sizes_mib=[1, 16, 1024]))
    assert ("gpu_profiles.v100_sxm2_32gb_x8.allreduce_min_busbw_gbs has thresholds at [256] MiB, but "
            "gpu_allreduce_sizes_mib = [1, 16, 1024] does not measure them") in str(exc.value)
