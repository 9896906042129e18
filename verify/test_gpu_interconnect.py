"""The GPU interconnect as the host's profile says (gpu_profiles in group data): which pairs are
NVLink-connected and with how many links, which go over PCIe, each GPU's NUMA node, peer-to-peer
access, and an all-reduce across all GPUs (PyTorch distributed over NCCL, one process per GPU)
with the right sum and at least the profile's bus bandwidth.

Onboarding acceptance (`llmfleet onboard` runs `-m interconnect`): the all-reduce takes the GPUs
for a minute and needs memory on each, so audits (`-m "not acceptance"`) skip these. Read-only:
nothing is set on any GPU; NCCL_* variables the host sets stay in force.

The pure logic (parsing `nvidia-smi topo -m`, the thresholds) is llmfleet/gpu_interconnect.py,
tested on the CPU; here the host is read: topology and peer access in one round trip, the
all-reduce in another.
"""

import pytest

from llmfleet import gpu_interconnect
from verify.helpers import run_remote

pytestmark = [pytest.mark.acceptance, pytest.mark.onboarding, pytest.mark.interconnect]


@pytest.fixture(scope="module")
def multi_gpu(gpu_profile, settings):
    if gpu_profile.count < 2:
        pytest.skip(f"gpu_profile {settings.gpu_profile}: one GPU, no interconnect to check")
    return gpu_profile


@pytest.fixture(scope="module")
def python(host, host_name, settings) -> str:
    python = f"{settings.vllm_venv}/bin/python3"
    if host.run("test -x %s", python).rc != 0:
        pytest.fail(f"{host_name}: vllm_venv: expected a python at {python}, actual: none "
                    "(deploy the vLLM environment, or point vllm_venv at one with torch and nvidia-ml-py)")
    return python


@pytest.fixture(scope="module")
def links(host, multi_gpu, python) -> dict:
    return run_remote(host, "gpu_interconnect_topology", python=python)


@pytest.fixture(scope="module")
def topology(host_name, links) -> gpu_interconnect.Topology:
    if "error" in links["topo"]:
        pytest.fail(f"{host_name}: nvidia-smi topo -m: expected a matrix, actual: {links['topo']['error']}")
    try:
        return gpu_interconnect.parse_topo(links["topo"]["text"])
    except gpu_interconnect.TopologyError as exc:
        pytest.fail(f"{host_name}: nvidia-smi topo -m: {exc}")


def _assert_none(host_name: str, what: str, problems: list[str]) -> None:
    assert not problems, "\n".join(f"{host_name}: {what}: {p}" for p in problems)


def test_nvlink_topology(host_name, settings, multi_gpu, topology):
    """Every pair as the profile wires it: NV<links> for the NVLink pairs, a PCIe path for the rest."""
    _assert_none(host_name, f"gpu_profiles.{settings.gpu_profile}.nvlink_pairs",
                 gpu_interconnect.topology_problems(multi_gpu, topology))


def test_numa_nodes(host_name, settings, multi_gpu, topology):
    if multi_gpu.gpu_numa_nodes is None:
        pytest.skip(f"gpu_profiles.{settings.gpu_profile}.gpu_numa_nodes is None: not checked")
    _assert_none(host_name, f"gpu_profiles.{settings.gpu_profile}.gpu_numa_nodes",
                 gpu_interconnect.numa_problems(multi_gpu, topology))


def test_peer_to_peer(host_name, settings, multi_gpu, links):
    if multi_gpu.p2p == "none":
        pytest.skip(f"gpu_profiles.{settings.gpu_profile}.p2p is 'none': not checked")
    if "error" in links["p2p"]:
        pytest.fail(f"{host_name}: peer access: expected tested, actual: {links['p2p']['error']}")
    _assert_none(host_name, f"gpu_profiles.{settings.gpu_profile}.p2p = {multi_gpu.p2p}",
                 gpu_interconnect.p2p_problems(multi_gpu, links["p2p"]))


@pytest.fixture(scope="module")
def allreduce(host, settings, multi_gpu, python) -> dict:
    sizes = ",".join(str(s) for s in settings.gpu_allreduce_sizes_mib)
    return run_remote(host, "gpu_interconnect_allreduce", sizes, str(settings.gpu_allreduce_iters),
                      str(settings.gpu_allreduce_warmup), str(settings.gpu_allreduce_timeout_s), python=python)


def test_allreduce(host_name, settings, multi_gpu, allreduce, record_property):
    """The right sum at every size; the profile's bus bandwidth where it sets one. The figures of
    every size are in the report (JUnit property) and in the failure message."""
    if "results" in allreduce:
        figures = gpu_interconnect.describe_allreduce(allreduce)
        record_property("allreduce", figures)
        print(f"{host_name}: all-reduce over {allreduce['world']} GPUs (NCCL {allreduce.get('nccl')}):\n{figures}")
    problems = gpu_interconnect.allreduce_problems(multi_gpu, allreduce)
    detail = ("\n" + gpu_interconnect.describe_allreduce(allreduce)) if "results" in allreduce else ""
    assert not problems, "\n".join(f"{host_name}: gpu_profiles.{settings.gpu_profile}.allreduce_min_busbw_gbs: {p}"
                                   for p in problems) + detail
