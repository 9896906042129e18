"""The GPU generations beyond V100: every shipped profile validates, and the guardrails of Ampere,
Ada and Hopper (bfloat16, FP8 weights and KV cache, AWQ/GPTQ/Marlin, CUDA 13, vLLM without sm_70,
driver branches and kernel-module flavours, application clocks) accept what the pinned vLLM runs on
the GPU and refuse the rest with the reason, before any host is touched."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from llmfleet import compat, gpu_health
from llmfleet.gpu_guardrails import app_clocks, precision_paths, profile_problems
from llmfleet.schema import GpuProfile
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]
ALL = {k: v for k, v in schema_defaults().items() if not k.startswith("__")}
MODEL = {"name": "llama-3.1-70b-instruct", "version": "2024-07-23", "source": "https://models.internal/l.tar",
         "sha256": "a" * 64, "torch_dtype": "bfloat16", "num_attention_heads": 64}
NEW_PROFILES = ["a100_sxm4_80gb_x8", "a100_pcie_80gb", "a100_pcie_80gb_nvlink", "h100_sxm5_80gb_x8",
                "h800_sxm5_80gb_x8", "h200_sxm_141gb_x8", "rtx4090_24gb"]


def data(profile: str, **override) -> dict:
    """group_data/all.py for a host of `profile`, with the flavour NVIDIA recommends for it, a CUDA
    it takes and the tensor-parallel size of its GPU count."""
    p = ALL["gpu_profiles"][profile]
    flags = {"dtype": "auto" if p["compute_capability"] >= 8.0 else "half",
             "tensor-parallel-size": p["count"]} | override.pop("flags", {})
    if "vllm_version" in override and "vllm_packages" not in override:
        override["vllm_packages"] = [f"vllm=={override['vllm_version']}"]
    return ALL | {"gpu_profile": profile, "nvidia_driver_flavour": p["driver_flavours"][0],
                  "cuda_toolkit_version": "12.9" if p["cuda_max_major"] == 12 else "13.0",
                  "vllm_model": MODEL, "vllm_flags": ALL["vllm_flags"] | flags} | override


def refused(profile: str, **override) -> str:
    with pytest.raises(SettingsError) as exc:
        validate("gpu-9", data(profile, **override))
    return str(exc.value)


@pytest.mark.parametrize("name", sorted(ALL["gpu_profiles"]))
def test_every_shipped_profile_validates_and_agrees_with_its_generation(name):
    profile = GpuProfile(**ALL["gpu_profiles"][name])
    settings = validate("gpu-9", data(name))
    assert profile_problems(settings, profile) == []
    assert compat.generation(profile.compute_capability) is not None


@pytest.mark.parametrize("name", NEW_PROFILES)
def test_the_new_profiles_run_cuda_13_bfloat16_and_a_vllm_without_sm70(name):
    """CUDA 13 where the GPU supports it (Turing and newer), bf16 from 8.0, vLLM 0.33.0 (sm_75 and up)."""
    validate("gpu-9", data(name, cuda_toolkit_version="13.0", vllm_version="0.33.0", flags={"dtype": "bfloat16"}))


@pytest.mark.parametrize("name,nvswitches,fabric", [
    ("a100_sxm4_80gb_x8", 6, "not_supported"), ("a100_pcie_80gb", 0, "not_supported"),
    ("h100_sxm5_80gb_x8", 4, "completed"), ("h800_sxm5_80gb_x8", 4, "completed"),
    ("h200_sxm_141gb_x8", 4, "completed"), ("rtx4090_24gb", 0, "not_supported"),
    ("h200_141gb_x1", 0, "not_supported"), ("v100_sxm2_32gb_x8", 0, "not_supported")])
def test_nvswitch_boards_need_fabric_manager_and_say_what_the_fabric_reports(name, nvswitches, fabric):
    profile = GpuProfile(**ALL["gpu_profiles"][name])
    assert (profile.nvswitches, profile.fabric_manager, profile.gpu_fabric) == (nvswitches, nvswitches > 0, fabric)


def test_h800_has_the_reduced_nvlink_of_eight_links():
    h800, h100 = (GpuProfile(**ALL["gpu_profiles"][n]) for n in ("h800_sxm5_80gb_x8", "h100_sxm5_80gb_x8"))
    assert (h800.nvlink_links, set(h800.nvlink_pairs.values()), len(h800.nvlink_pairs)) == (8, {8}, 28)
    assert (h100.nvlink_links, set(h100.nvlink_pairs.values())) == (18, {18})


def test_the_geforce_profile_has_no_ecc_nvlink_or_application_clocks():
    s = validate("gpu-9", data("rtx4090_24gb"))
    p = s.gpu_profiles["rtx4090_24gb"]
    assert (p.ecc, p.nvlink_links, p.app_clocks, p.supported_clocks, p.p2p) == ("off", 0, None, {}, "none")
    assert app_clocks(s) is None


def test_application_clocks_on_a_gpu_without_them_are_refused():
    msg = refused("rtx4090_24gb", gpu_app_clocks={"memory": 10501, "graphics": 2520})
    assert ("gpu_app_clocks = {'memory': 10501, 'graphics': 2520}: NVIDIA GeForce RTX 4090 has no application "
            "clocks (profile rtx4090_24gb: app_clocks None; GeForce boards refuse nvidia-smi -ac) "
            "(fix: gpu_app_clocks = None)") in msg


# --- FP8: FP8 weights and KV cache, as advised for H800, and the same data elsewhere -------------

DESIGN_NOTES_FP8 = {"quantization": "fp8", "kv-cache-dtype": "fp8"}


def test_the_design_notes_fp8_advice_passes_on_h800_natively_with_flashattention_3():
    s = validate("gpu-9", data("h800_sxm5_80gb_x8", flags=DESIGN_NOTES_FP8))
    assert precision_paths(s) == [
        "quantization fp8 (vllm_flags.quantization): vLLM 0.19.1 runs it natively on the FP8 tensor cores of "
        "NVIDIA H800 (compute capability 9.0, profile h800_sxm5_80gb_x8) (W8A8: weights and activations in FP8)",
        "kv-cache-dtype fp8: fp8 KV cache on FLASH_ATTN"]


def test_the_same_fp8_data_on_a_v100_group_is_refused_with_the_reasons():
    msg = refused("v100_sxm2_32gb_x8", flags=DESIGN_NOTES_FP8 | {"dtype": "half"})
    v100 = "Tesla V100-SXM2-32GB (compute capability 7.0, profile v100_sxm2_32gb_x8)"
    assert f"vllm_flags.quantization = 'fp8': its kernels need compute capability 7.5 in vLLM 0.19.1, which {v100} " \
           "lacks" in msg
    assert f"vllm_flags.kv-cache-dtype = 'fp8': on {v100}, vLLM 0.19.1 gives it to TRITON_ATTN" in msg
    assert "Triton cannot compile an fp8 (fp8e4nv) cache below SM89" in msg


def test_fp8_on_ampere_runs_weight_only_through_marlin_and_the_kv_cache_on_flashinfer():
    s = validate("gpu-9", data("a100_sxm4_80gb_x8", flags=DESIGN_NOTES_FP8))
    quant, kv = precision_paths(s)
    assert "runs weight-only FP8 through Marlin (MarlinFP8ScaledMMLinearKernel)" in quant
    assert "(native from compute capability 8.9)" in quant
    assert kv == ("kv-cache-dtype fp8: fp8 KV cache on FLASHINFER, passing over FLASH_ATTN (no fp8 cache on compute "
                  "capability 8.0)")


def test_fp8_on_ada_is_native_and_its_kv_cache_goes_to_flashinfer():
    s = validate("gpu-9", data("rtx4090_24gb", flags=DESIGN_NOTES_FP8))
    quant, kv = precision_paths(s)
    assert "natively on the FP8 tensor cores of NVIDIA GeForce RTX 4090" in quant
    assert "on FLASHINFER" in kv


def test_an_fp8_checkpoint_without_the_flag_is_checked_as_the_checkpoint_says():
    msg = refused("v100_sxm2_32gb_x8", vllm_model=MODEL | {"quantization": "fp8", "torch_dtype": "float16"},
                  flags={"dtype": "half"})
    assert "vllm_model.quantization = 'fp8': its kernels need compute capability 7.5" in msg
    assert "(fix: a checkpoint quantized with bitsandbytes or compressed-tensors or gguf or gptq or moe_wna16" in msg
    s = validate("gpu-9", data("h100_sxm5_80gb_x8", vllm_model=MODEL | {"quantization": "fp8"}))
    assert precision_paths(s)[0].startswith("quantization fp8 (vllm_model.quantization): vLLM 0.19.1 runs it natively")


def test_fp8_e5m2_kv_cache_on_hopper_is_refused_in_0_19_1_and_taken_by_flashinfer_in_0_33():
    msg = refused("h100_sxm5_80gb_x8", flags={"kv-cache-dtype": "fp8_e5m2"})
    assert "vllm_flags.kv-cache-dtype = 'fp8_e5m2': on NVIDIA H100 80GB HBM3 (compute capability 9.0, profile " \
           "h100_sxm5_80gb_x8), vLLM 0.19.1 gives it to FLASH_ATTN, and there fp8_e5m2 stops the engine at start: " \
           "FlashAttention 3 takes e4m3 only" in msg
    assert "(fix: vllm_flags.kv-cache-dtype = 'fp8')" in msg
    s = validate("gpu-9", data("h100_sxm5_80gb_x8", vllm_version="0.33.0", flags={"kv-cache-dtype": "fp8_e5m2"}))
    assert precision_paths(s) == ["kv-cache-dtype fp8_e5m2: fp8_e5m2 KV cache on FLASHINFER, passing over FLASH_ATTN "
                                  "(no fp8_e5m2 cache on compute capability 9.0)"]


def test_a_vllm_version_whose_fp8_paths_the_table_does_not_know_is_said_and_not_guessed():
    msg = refused("h100_sxm5_80gb_x8", vllm_version="0.15.0", flags={"quantization": "fp8"})
    assert "vllm_flags.quantization = 'fp8': not in llmfleet's table for vLLM 0.15.0 (it knows awq, awq_marlin, " \
           "gptq, gptq_marlin, marlin)" in msg
    s = validate("gpu-9", data("h100_sxm5_80gb_x8", vllm_version="0.15.0", flags={"kv-cache-dtype": "fp8"}))
    assert "is not in llmfleet's table" in precision_paths(s)[0]


# --- AWQ / GPTQ / Marlin minimums, as vLLM declares them ------------------------------------------

@pytest.mark.parametrize("method,version,cc_needed", [
    ("awq", "0.19.1", 7.5), ("gptq", "0.19.1", 6.0), ("awq_marlin", "0.19.1", 7.5), ("gptq_marlin", "0.19.1", 7.5),
    ("gptq_marlin", "0.10.1", 8.0), ("marlin", "0.10.1", 8.0), ("fp8", "0.19.1", 7.5),
    ("compressed-tensors", "0.19.1", 7.0),
    ("awq_marlin", "0.33.0", 7.5), ("fp8", "0.33.0", 7.5)])
def test_quantization_minimums_as_vllm_declares_them(method, version, cc_needed):
    assert compat.quantization_rule(method, version).min_cc == cc_needed


@pytest.mark.parametrize("profile", ["a100_sxm4_80gb_x8", "h100_sxm5_80gb_x8", "rtx4090_24gb"])
@pytest.mark.parametrize("method", ["awq", "awq_marlin", "gptq", "gptq_marlin"])
def test_int4_methods_run_on_ampere_ada_and_hopper(profile, method):
    validate("gpu-9", data(profile, flags={"quantization": method}))


def test_marlin_is_no_method_of_vllm_0_19_1():
    assert "vllm_flags.quantization = 'marlin': not in llmfleet's table for vLLM 0.19.1" in \
        refused("a100_sxm4_80gb_x8", flags={"quantization": "marlin"})


# --- driver branches and kernel-module flavours ---------------------------------------------------

@pytest.mark.parametrize("profile,version,expected", [
    ("a100_sxm4_80gb_x8", "440.118.02", "driver branch R440 is older than NVIDIA A100-SXM4-80GB (compute capability "
                                        "8.0, profile a100_sxm4_80gb_x8) needs (R450 or newer)"),
    ("h100_sxm5_80gb_x8", "520.61.05", "driver branch R520 is older than NVIDIA H100 80GB HBM3"),
    ("h200_sxm_141gb_x8", "535.216.03", "driver branch R535 is older than NVIDIA H200"),
    ("a100_sxm4_80gb_x8", "470.256.02", "nvidia_driver_version = '470.256.02': driver branch R470 has no open kernel "
                                        "modules: they start with R515 (fix: a version of branch 515 or newer, or "
                                        "nvidia_driver_flavour = 'proprietary')"),
])
def test_driver_branches_each_generation_supports(profile, version, expected):
    assert expected in refused(profile, nvidia_driver_version=version, cuda_toolkit_version="11.8")


def test_the_proprietary_modules_still_run_an_a100_on_r470():
    validate("gpu-9", data("a100_sxm4_80gb_x8", nvidia_driver_version="470.256.02", nvidia_driver_flavour="proprietary",
                           cuda_toolkit_version="11.8"))


def own_profile(**fields) -> dict:
    return ALL["gpu_profiles"]["h100_sxm5_80gb_x8"] | fields


@pytest.mark.parametrize("fields,expected", [
    ({"compute_capability": 10.0, "driver_flavours": ["open", "proprietary"]},
     "gpu_profiles.mine.driver_flavours = ['open', 'proprietary']: NVIDIA supports only the open kernel modules on "
     "Blackwell"),
    ({"compute_capability": 7.0, "driver_flavours": ["open"], "driver_branch_max": 580, "cuda_max_major": 12,
      "gpu_fabric": "not_supported"},
     "gpu_profiles.mine.driver_flavours = ['open']: Volta GPUs cannot run NVIDIA's open kernel modules"),
    ({"compute_capability": 7.0, "driver_flavours": ["proprietary"], "cuda_max_major": 12,
      "gpu_fabric": "not_supported"},
     "gpu_profiles.mine.driver_branch_max = None: R580 is the last driver branch for Volta"),
    ({"compute_capability": 7.0, "driver_flavours": ["proprietary"], "driver_branch_max": 580,
      "gpu_fabric": "not_supported"},
     "gpu_profiles.mine.cuda_max_major = None: CUDA 12 is the last toolkit for Volta"),
    ({"compute_capability": 4.0, "gpu_fabric": "not_supported"},
     "gpu_profiles.mine.compute_capability = 4.0: not a compute capability of a GPU "
                                  "generation llmfleet's table knows"),
])
def test_a_profile_that_claims_what_its_generation_cannot_is_refused(fields, expected):
    msg = refused("h100_sxm5_80gb_x8", gpu_profiles=ALL["gpu_profiles"] | {"mine": own_profile(**fields)},
                  gpu_profile="mine", nvidia_driver_flavour="proprietary", nvidia_driver_version="580.95.05",
                  cuda_toolkit_version="12.9")
    assert expected in msg


@pytest.mark.parametrize("fields,expected", [
    ({"nvlink_links": 0, "nvlink_pairs": {}}, "nvswitches = 4 with nvlink_links = 0"),
    ({"compute_capability": 8.0}, "gpu_fabric = 'completed' on compute capability 8.0: NVML reports GPU fabric state "
                                  "for Hopper (9.0) and newer only"),
    ({"supported_clocks": {}}, "app_clocks without supported_clocks"),
    ({"app_clocks": None}, "supported_clocks on a profile without application clocks"),
])
def test_a_profile_that_contradicts_itself_is_refused(fields, expected):
    with pytest.raises(ValidationError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        GpuProfile(**own_profile(**fields))


# torch.cuda.get_arch_list() of the CUDA 13.0 build, read on an H200 (llmfleet/compat.py)
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize(("arch_list", "cc", "runs"), [
    (CU130, 8.9, ["sm_80", "sm_86"]),  # an RTX 4090 runs the sm_86 cubin (same major, lower minor)
    (CU130, 9.0, ["sm_90"]),
    (CU130, 7.0, []),  # Volta: none (the build has no sm_70)
    (["sm_70", "sm_80"], 7.5, ["sm_70"]),
    (["sm_90a"], 9.0, ["sm_90a"]), (["sm_90a"], 10.0, []),  # arch-specific: that GPU only
    (["sm_80", "compute_80"], 9.0, ["compute_80"]),  # PTX: compiled by the driver for newer GPUs
    (["compute_90"], 8.9, []),
    (["sm_100"], 10.3, ["sm_100"]), (["sm_120"], 10.0, []),
])
def test_pytorch_kernels_that_run_on_a_gpu_follow_cudas_binary_compatibility(arch_list, cc, runs):
    assert gpu_health.kernels_that_run(arch_list, cc) == runs
