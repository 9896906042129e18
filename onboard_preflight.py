"""What `llmfleet onboard` installs in its preflight on a host without fio, before it measures the
filesystem of vllm_models_dir: the package mirrors of group data (the deploy's first component) and
fio (the model_storage component). Nothing else; the deploy that follows does the same again.

    pyinfra INVENTORY onboard_preflight.py -y --limit HOST
"""

from pyinfra import host

from llmfleet.settings import settings_for
from operations import mirrors, model_storage

settings = settings_for(host)

mirrors.configure(settings)
model_storage.install(settings)
