"""model_storage: the filesystem that holds vllm_models_dir reads as fast as the group's
storage_thresholds ask, measured with fio (llmfleet/remote/model_storage.py: sequential 1 MiB reads,
then 4 KiB random reads one at a time, on a test file of storage_fio_size_mib for storage_fio_runtime_s
each, removed afterwards; llmfleet/model_storage.py judges the figures).

Onboarding runs it in its acceptance stage (`-m onboarding`; its preflight runs the same measurement
before the deploy); audits skip it (`acceptance`): it writes a test file and loads the disk for
seconds. Between acceptances, each start of vLLM says how long its weights took to load
(verify/test_vllm.py::test_weights_load_time): the trend of the same disk.
"""

import pytest

from llmfleet import model_storage
from verify.helpers import run_remote

pytestmark = [pytest.mark.acceptance, pytest.mark.onboarding, pytest.mark.storage]


@pytest.fixture(scope="module")
def measured(host, settings) -> dict:
    return run_remote(host, "model_storage", settings.vllm_models_dir, str(settings.storage_fio_size_mib),
                      str(settings.storage_fio_runtime_s))


def test_model_storage_speed(host_name, settings, measured, record_property):
    try:
        figures = model_storage.figures(measured)
    except model_storage.StorageError as exc:
        pytest.fail(f"{host_name}: model storage (fio on vllm_models_dir {settings.vllm_models_dir}): expected "
                    f"measured, actual: {exc}")
    record_property("model_storage", figures.as_dict())
    print(f"{host_name}: model storage: {figures.describe()}")
    problems = model_storage.problems(figures, settings.storage_thresholds)
    assert not problems, "\n".join(f"{host_name}: {p}" for p in problems)
