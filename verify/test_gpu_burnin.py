"""The GPU burn-in: every GPU of the host under a full FP16 matrix-multiply load for
gpu_burnin_duration_s, every product checked against the exactly known one, NVML read every
gpu_burnin_sample_interval_s (llmfleet/remote/gpu_burnin.py, with the vLLM environment's PyTorch);
a GPU fails with a wrong element, too few TFLOP/s for its profile, too hot, or a thermal, slowdown
or power-brake clock event reason (llmfleet/gpu_burnin.py). The run's samples (TFLOP/s, temperatures,
clocks, power, reasons) are printed and kept in the report.

Onboarding's acceptance (`-m onboarding`); audits skip it. Read-only: the GPUs' settings stay as they
are. On a machine with a GPU, from itself, for a bounded time: `make burnin-device BURNIN_S=60`.
"""

import pytest

from llmfleet import gpu_burnin
from verify.helpers import run_remote

pytestmark = [pytest.mark.acceptance, pytest.mark.onboarding, pytest.mark.burnin]


@pytest.fixture(scope="module")
def python(host, host_name, settings, gpu_profile) -> str:
    python = f"{settings.vllm_venv}/bin/python3"
    if host.run("test -x %s", python).rc != 0:
        pytest.fail(f"{host_name}: vllm_venv: expected a python at {python}, actual: none "
                    "(deploy the vLLM environment, or point vllm_venv at one with torch and nvidia-ml-py)")
    return python


def test_gpu_burnin(host, host_name, settings, gpu_profile, python, record_property):
    result = run_remote(host, "gpu_burnin", str(settings.gpu_burnin_duration_s), str(settings.gpu_burnin_matrix_size),
                        str(settings.gpu_burnin_sample_interval_s), python=python)
    limits = gpu_burnin.Limits.of(gpu_profile, settings.gpu_burnin_min_tflops_fraction,
                              settings.gpu_burnin_max_temperature_c)
    if "gpus" in result:
        print(f"{host_name}: {gpu_burnin.describe(result, limits)}")
        record_property("gpu_burnin", {str(i): s for i, s in gpu_burnin.summary(result).items()})
    problems = gpu_burnin.problems(result, limits, gpu_profile.count)
    floor = (f"{settings.gpu_burnin_min_tflops_fraction:g} x gpu_profiles.{settings.gpu_profile}.fp16_tensor_tflops "
             f"{gpu_profile.fp16_tensor_tflops}" if gpu_profile.fp16_tensor_tflops else "no TFLOP/s floor")
    assert not problems, "\n".join(f"{host_name} {p}" if p.startswith("GPU") else f"{host_name}: {p}"
                                   for p in problems) + f"\n(floor: {floor})"
