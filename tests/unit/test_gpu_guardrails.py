"""Compatibility guardrails: every combination a GPU cannot run is refused with the host, the
setting, the value, why and the fix, before any host is touched (settings validation)."""

from pathlib import Path

import pytest
from packaging.version import Version

from llmfleet import compat
from llmfleet.gpu_guardrails import app_clocks
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]


MODEL = {"name": "llama-3.1-8b-instruct", "version": "2024-07-23", "source": "https://models.internal/l.tar",
         "sha256": "a" * 64, "torch_dtype": "bfloat16", "num_attention_heads": 32}
FLAGS = {"dtype": "half", "tensor-parallel-size": 8}


def defaults(**override) -> dict:
    data = schema_defaults()
    data = {k: v for k, v in data.items() if not k.startswith("__")} | {"vllm_model": MODEL}
    flags = override.pop("flags", {})
    if "vllm_version" in override and "vllm_packages" not in override:
        override["vllm_packages"] = [f"vllm=={override['vllm_version']}"]
    return data | {"vllm_flags": data["vllm_flags"] | flags} | override


def refused(**override) -> str:
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", defaults(**override))
    return str(exc.value)


def test_fleet_defaults_pass_on_v100():
    s = validate("gpu-7", defaults())
    assert s.gpu_profile == "v100_sxm2_32gb_x8"
    assert app_clocks(s).model_dump() == {"memory": 877, "graphics": 1530}


V100 = "Tesla V100-SXM2-32GB (compute capability 7.0, profile v100_sxm2_32gb_x8)"


@pytest.mark.parametrize("override,expected", [
    # driver branch and flavour
    ({"nvidia_driver_version": "590.44.01"},
     f"nvidia_driver_version = '590.44.01': driver branch R590 does not support {V100}: R580 is its last branch "
     "(fix: a 580.x version)"),
    ({"nvidia_driver_flavour": "open"},
     f"nvidia_driver_flavour = 'open': {V100} cannot use the open kernel modules"),
    ({"gpu_profile": "h200_141gb_x1", "flags": {"tensor-parallel-size": 1}, "nvidia_driver_version": "535.216.03"},
     "driver branch R535 is older than NVIDIA H200"),
    # CUDA
    ({"cuda_toolkit_version": "13.0"},
     f"cuda_toolkit_version = '13.0': CUDA 13 cannot build for {V100}: its last CUDA is 12.x"),
    ({"gpu_profile": "h200_141gb_x1", "flags": {"tensor-parallel-size": 1}, "nvidia_driver_flavour": "open",
      "nvidia_driver_version": "570.195.03", "cuda_toolkit_version": "13.0"},
     "cuda_toolkit_version = '13.0': CUDA 13 needs driver branch R580 or newer, nvidia_driver_version is R570"),
    # clocks: `nvidia-smi -ac 2505,1177`, advised for V100 in places, is no pair a V100 supports: memory
    # comes first and runs at 877 MHz only (a V100-SXM2-32GB's nvidia-smi -q in NVIDIA/nvidia-docker#1076)
    ({"gpu_app_clocks": {"memory": 2505, "graphics": 1177}},
     "gpu_app_clocks = {'memory': 2505, 'graphics': 1177}: not a supported application clock pair of "
     "Tesla V100-SXM2-32GB (memory 877 MHz with graphics 135-1530 MHz). The memory clock comes first "
     "(nvidia-smi -ac MEMORY,GRAPHICS), and this GPU's memory runs at 877 MHz only."),
    ({"gpu_app_clocks": {"memory": 1530, "graphics": 877}},
     "The values look swapped: nvidia-smi -ac takes MEMORY,GRAPHICS."),
    ({"gpu_app_clocks": {"memory": 877, "graphics": 1600}},
     "gpu_app_clocks = {'memory': 877, 'graphics': 1600}: not a supported application clock pair"),
    # dtype
    ({"flags": {"dtype": "bfloat16"}},
     f"vllm_flags.dtype = 'bfloat16': bfloat16 needs compute capability 8.0, which {V100} lacks"),
    ({"flags": {"dtype": "auto"}},
     "vllm_flags.dtype = 'auto': 'auto' takes the checkpoint's dtype (vllm_model.torch_dtype = 'bfloat16')"),
    # quantization
    ({"flags": {"quantization": "awq"}},
     f"vllm_flags.quantization = 'awq': its kernels need compute capability 7.5 in vLLM 0.19.1, which {V100} lacks "
     "(vLLM 0.19.1 model_executor/layers/quantization/awq.py:75 (75)"),
    ({"flags": {"quantization": "awq"}},
     "(fix: one of bitsandbytes, compressed-tensors, gguf, gptq, moe_wna16, or none"),
    ({"flags": {"quantization": "gptq_marlin"}},
     "vllm_flags.quantization = 'gptq_marlin': its kernels need compute capability 7.5 in vLLM 0.19.1"),
    ({"flags": {"quantization": "gptq_marlin"}, "vllm_version": "0.10.1"},
     "vllm_flags.quantization = 'gptq_marlin': its kernels need compute capability 8.0 in vLLM 0.10.1"),
    ({"flags": {"quantization": "awq_marlin"}},
     "vllm_flags.quantization = 'awq_marlin': its kernels need compute capability 7.5 in vLLM 0.19.1"),
    ({"flags": {"quantization": "bitsy"}}, "vllm_flags.quantization = 'bitsy': not in llmfleet's table"),
    # fp8 KV cache with a V1-engine vLLM
    ({"flags": {"kv-cache-dtype": "fp8"}},
     f"vllm_flags.kv-cache-dtype = 'fp8': on {V100}, vLLM 0.19.1 gives it to TRITON_ATTN, passing over FLASH_ATTN "
     "(not on compute capability 7.0), FLASHINFER (not on compute capability 7.0), and there Triton cannot compile "
     "an fp8 (fp8e4nv) cache below SM89"),
    ({"flags": {"kv-cache-dtype": "fp8"}, "vllm_version": "0.12.0"},
     "vllm_flags.kv-cache-dtype = 'fp8': vLLM 0.12.0 runs the V1 engine on " + V100),
    ({"flags": {"kv-cache-dtype": "fp8_e5m2"}, "vllm_version": "0.10.2"}, "vllm_flags.kv-cache-dtype = 'fp8_e5m2'"),
    # vLLM / PyTorch without sm_70
    ({"vllm_version": "0.20.0"},
     f"vllm_version = '0.20.0': vLLM 0.20.0 has no kernels for {V100}: its wheels start at compute capability 7.5"),
    ({"vllm_version": "0.99.0"}, "vllm_version = '0.99.0': not in llmfleet's compatibility table"),
    ({"vllm_torch_version": "2.11.0"}, "vllm_torch_version = '2.11.0': PyTorch 2.11.0 has no sm_70 kernels"),
    # tensor parallelism
    ({"flags": {"tensor-parallel-size": 16}},
     "vllm_flags.tensor-parallel-size = 16: more than the 8 GPUs of profile"),
    ({"flags": {"tensor-parallel-size": 3}},
     "vllm_flags.tensor-parallel-size = 3: does not divide the model's 32 attention heads "
     "(vllm_model.num_attention_heads) (fix: one of [1, 2, 4, 8])"),
    # the profile itself
    ({"gpu_profile": "v100"}, "gpu_profile = 'v100': no such profile in gpu_profiles (fix: one of a100_pcie_80gb, "),
])
def test_guardrail_refuses_with_message(override, expected):
    msg = refused(**override)
    assert msg.startswith("host gpu-7: ")
    assert expected in msg


def test_fixes_named_by_the_guardrails_are_accepted():
    """The fix each message names is itself valid (no guardrail sends the user in a circle)."""
    validate("gpu-7", defaults(vllm_version="0.19.1", flags={"dtype": "half", "quantization": "gptq",
                                                             "kv-cache-dtype": "auto", "tensor-parallel-size": 4},
                               cuda_toolkit_version="12.9", nvidia_driver_version="580.95.05",
                               gpu_app_clocks={"memory": 877, "graphics": 1290}))


def test_fp8_kv_cache_allowed_where_the_v0_engine_runs_volta():
    validate("gpu-7", defaults(vllm_version="0.10.1", flags={"kv-cache-dtype": "fp8"}))


def test_h200_allows_what_v100_cannot():
    validate("gpu-7", defaults(gpu_profile="h200_141gb_x1", nvidia_driver_flavour="open", vllm_version="0.33.0",
                               flags={"tensor-parallel-size": 1, "dtype": "bfloat16", "kv-cache-dtype": "fp8",
                                      "quantization": "awq_marlin"},
                               cuda_toolkit_version="13.0", nvidia_driver_version="580.159.04"))


def test_every_problem_is_reported_at_once():
    msg = refused(flags={"dtype": "bfloat16", "quantization": "awq", "tensor-parallel-size": 3})
    assert "vllm_flags.dtype = 'bfloat16'" in msg and "vllm_flags.quantization = 'awq'" in msg
    assert "vllm_flags.tensor-parallel-size = 3" in msg


def test_no_gpu_profile_skips_gpu_checks():
    validate("lab-c1", defaults(gpu_profile=None, flags={"dtype": "bfloat16"}))


def test_a_version_given_as_a_number_is_refused_with_the_quoting_fix():
    msg = refused(cuda_toolkit_version=12.9)
    assert "cuda_toolkit_version = 12.9: is a number" in msg and "--data 'KEY=\"12.9\"'" in msg


@pytest.mark.parametrize("version,cc,sm70", [("0.4.3", 7.0, True), ("0.10.1", 7.0, True), ("0.19.1", 7.0, True),
                                             ("0.20.0", 7.5, False), ("0.33.0", 7.5, False)])
def test_compat_table_rows(version, cc, sm70):
    row = compat.vllm_release(version)
    assert row.min_compute_capability == cc
    assert (row.min_compute_capability <= 7.0) is sm70


def test_compat_table_ranges_are_ordered_and_do_not_overlap():
    rows = compat.VLLM_RELEASES
    for a, b in zip(rows, rows[1:], strict=False):
        assert Version(a.last) < Version(b.first), (a, b)
    assert compat.vllm_release("0.10.1").volta_engine == "V0" and compat.vllm_release("0.10.2").volta_engine == "V1"
    assert compat.torch_release("2.10.0").has_sm70 and not compat.torch_release("2.11.0+cu130").has_sm70
