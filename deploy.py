# mypy: disable-error-code="call-arg,arg-type"
# (pyinfra's typing of a deploy, PyinfraOperation.__call__ in pyinfra/api/arguments_typed.py, puts its
# global arguments (_sudo, ...) before the deploy's own, so mypy reads the positional `settings` of
# every call below as _sudo; at run time pyinfra passes a deploy's positional arguments on as they are)
"""Converge a host to the state group_data/ describes.

    pyinfra inventories/lab.py deploy.py -y
    pyinfra inventories/prod.py deploy.py

Settings are validated first: invalid group data stops the deploy before any host is touched.
"""

from pyinfra import host

from llmfleet import pyinfra_patches
from llmfleet.settings import settings_for
from operations import (
                        base_packages,
                        chrony,
                        cpu_governor,
                        cuda_toolkit,
                        dcgm_exporter,
                        fabric_manager,
                        frontdoor,
                        gateway,
                        gpu_clocks,
                        kernel_cmdline,
                        limits,
                        log_forwarding,
                        managed_files,
                        mirrors,
                        model_storage,
                        module_blacklist,
                        node_exporter,
                        nvidia_driver,
                        nvidia_persistence,
                        reboot,
                        self_audit,
                        sysctls,
                        thp,
                        vllm,
)

pyinfra_patches.install()  # what llmfleet changes in pyinfra, each with its off switch: llmfleet/pyinfra_patches/
settings = settings_for(host)

# host baseline
mirrors.configure(settings)
base_packages.install(settings)
# (model storage: fio, onboarding measures the models' filesystem with it)
model_storage.install(settings)
kernel_cmdline.configure(settings)
thp.configure(settings)
limits.configure(settings)
sysctls.configure(settings)
chrony.configure(settings)
module_blacklist.configure(settings)
cpu_governor.configure(settings)

# GPU stack (does nothing, visibly, on a host without an NVIDIA GPU)
# (the driver: with Fabric Manager's packages on NVSwitch boards)
driver_reboot = nvidia_driver.install(settings)
fabric_manager.configure(settings, driver_reboot)
cuda_toolkit.install(settings)
nvidia_persistence.configure(settings)
gpu_clocks.configure(settings)

# one reboot, if the kernel command line or the driver needs it
reboot.reboot_if_needed(settings, also=driver_reboot)

# telemetry: the host's and the GPUs' exporters (DCGM does nothing, visibly, without a GPU), and its
# logs sent off the host
node_exporter.configure(settings)
dcgm_exporter.install(settings)
log_forwarding.configure(settings)

# the fleet gateway on its hosts (gateway_group), and on each serving host the agent it asks (before
# vllm: a roll drains a host there while it restarts)
gateway.configure(settings)

# the service: rolled out in batches, each host ready before the next
vllm.serve(settings, gpu=nvidia_driver.skip_reason(settings, "vllm") is None)
# with a serving layout, its one endpoint on vllm_port (after vllm: a host moving to a layout has
# just stopped vllm.service, whose port it takes)
frontdoor.configure(settings)

# the host's own audit on a timer: its drift as metrics for its node exporter (llmfleet/self_audit.py)
self_audit.configure(settings)

# what the deploy manages, as one root-only manifest the audits compare the host with; no foreign
# drop-in left overriding a managed key (operations/managed_files.py)
managed_files.written(settings)
