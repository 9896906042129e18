"""model_storage: fio, the distribution's package, on every host: onboarding measures the filesystem
that holds vllm_models_dir with it (its preflight, and verify/test_model_storage.py in its acceptance).
No settings of its own to deploy: the measurement's bounds and thresholds (storage_*) are verify's."""

from pyinfra.api import deploy

from llmfleet.settings import Settings
from operations import apt_installed

PACKAGES = ["fio"]


@deploy("model_storage")
def install(settings: Settings):
    """Install fio; the apt index is refreshed first (when older than `apt_cache_valid_s`) only when it is missing."""
    apt_installed("fio is installed (the model storage's measurement)", PACKAGES, settings.apt_cache_valid_s,
                  no_recommends=True)
