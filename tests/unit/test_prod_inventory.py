"""The example fleet (inventories/prod.py, a group per hardware generation, group_data/<group>.py
each): every group's resolved data validates as the deploy validates it, each group gets the GPU
profile of its hardware, and the paths its precision settings take are the ones its comments promise.
A user copies a working starting point."""

import pytest

from llmfleet import fabric_manager
from llmfleet.gpu_guardrails import precision_paths
from llmfleet.inventory import read
from llmfleet.settings import SettingsError, validate

GROUPS = {"v100_sxm2": "v100_sxm2_32gb_x8", "a100_sxm4": "a100_sxm4_80gb_x8", "a100_pcie": "a100_pcie_80gb",
          "h100_sxm5": "h100_sxm5_80gb_x8", "h800_sxm5": "h800_sxm5_80gb_x8", "h200_sxm": "h200_sxm_141gb_x8",
          "rtx4090": "rtx4090_24gb"}


@pytest.fixture(scope="module")
def hosts() -> list[dict]:
    return read("inventories/prod.py")


def by_group(hosts, group):
    return [h for h in hosts if group in h["groups"]]


def test_every_group_of_the_example_is_a_hardware_generation_with_hosts(hosts):
    groups = {g for h in hosts for g in h["groups"]} - {"all", "prod"}
    assert groups == set(GROUPS)


@pytest.mark.parametrize("group,profile", sorted(GROUPS.items()))
def test_each_groups_resolved_data_validates_with_its_profile(hosts, group, profile):
    members = by_group(hosts, group)
    assert members, group
    for h in members:
        settings = validate(h["name"], h["data"])
        assert settings.gpu_profile == profile
        p = settings.gpu_profiles[profile]
        assert settings.nvidia_driver_flavour == p.driver_flavours[0]  # open from Turing on, proprietary on Volta
        assert settings.vllm_model is not None


def test_the_nvswitch_groups_get_fabric_manager_and_the_others_do_not(hosts):
    for h in hosts:
        settings = validate(h["name"], h["data"])
        group = next(g for g in h["groups"] if g in GROUPS)
        assert settings.gpu_profiles[settings.gpu_profile].fabric_manager == (group in ("a100_sxm4", "h100_sxm5",
                                                                                         "h800_sxm5", "h200_sxm"))
    h100 = by_group(hosts, "h100_sxm5")[0]
    assert fabric_manager.packages(validate(h100["name"], h100["data"]).nvidia_driver_version) == {
        "nvidia-fabricmanager": "580.95.05-1", "libnvidia-nscq": "580.95.05-1"}


@pytest.mark.parametrize("group,expected", [
    ("h800_sxm5", ["quantization fp8 (vllm_flags.quantization): vLLM 0.19.1 runs it natively on the FP8 tensor cores "
                   "of NVIDIA H800", "kv-cache-dtype fp8: fp8 KV cache on FLASH_ATTN"]),
    ("a100_sxm4", ["kv-cache-dtype fp8: fp8 KV cache on FLASHINFER"]),
    ("rtx4090", ["quantization fp8 (vllm_flags.quantization): vLLM 0.19.1 runs it natively on the FP8 tensor cores "
                 "of NVIDIA GeForce RTX 4090", "kv-cache-dtype fp8: fp8 KV cache on FLASHINFER"]),
    ("v100_sxm2", []),
])
def test_the_paths_each_group_takes(hosts, group, expected):
    h = by_group(hosts, group)[0]
    paths = precision_paths(validate(h["name"], h["data"]))
    assert len(paths) == len(expected) and all(p.startswith(e) for p, e in zip(paths, expected, strict=True)), paths


def test_the_h800_groups_data_on_a_v100_is_refused_with_the_reasons(hosts):
    h = by_group(hosts, "h800_sxm5")[0]
    data = h["data"] | {"gpu_profile": "v100_sxm2_32gb_x8", "nvidia_driver_flavour": "proprietary",
                        "cuda_toolkit_version": "12.9"}
    with pytest.raises(SettingsError) as exc:
        validate(h["name"], data)
    msg = str(exc.value)
    for expected in ("vllm_flags.dtype = 'bfloat16': bfloat16 needs compute capability 8.0",
                     "vllm_flags.quantization = 'fp8': its kernels need compute capability 7.5 in vLLM 0.19.1",
                     "vllm_flags.kv-cache-dtype = 'fp8': on Tesla V100-SXM2-32GB"):
        assert expected in msg, msg
