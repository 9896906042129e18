"""What `llmfleet tune` deploys on its host for each candidate, and to put the host back: the
serving components of deploy.py only (vLLM and its front door), deployed as deploy.py deploys
them, with the candidate's vllm_flags, vllm_env and vllm_layout given as --data. The same
validation and guardrails (settings_for), the same flag check by the host's own vLLM before any
restart, the same roll (a server that does not come up is switched back).

    pyinfra INVENTORY tune_serving.py -y --limit HOST --data vllm_flags=... (llmfleet/probe/tune_host.py)
"""

from pyinfra import host

from llmfleet import pyinfra_patches
from llmfleet.settings import settings_for
from operations import frontdoor, nvidia_driver, vllm

pyinfra_patches.install()
settings = settings_for(host)

vllm.serve(settings, gpu=nvidia_driver.skip_reason(settings, "vllm") is None)
frontdoor.configure(settings)
