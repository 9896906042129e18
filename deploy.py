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
                        gpu_clocks,
                        kernel_cmdline,
                        limits,
                        log_forwarding,
                        mirrors,
                        model_storage,
                        module_blacklist,
                        node_exporter,
                        nvidia_driver,
                        nvidia_persistence,
                        reboot,
                        sysctls,
                        thp,
                        vllm,
)

pyinfra_patches.install()  # what llmfleet changes in pyinfra, each with its off switch: llmfleet/pyinfra_patches/
settings = settings_for(host)

# `# type: ignore[call-arg, arg-type]` below: pyinfra's typing of a deploy (PyinfraOperation.__call__,
# pyinfra/api/arguments_typed.py) puts pyinfra's global arguments (_sudo, _sudo_user, ...) before the
# deploy's own, so mypy reads a positional argument (settings) as _sudo; at run time pyinfra passes a
# deploy's positional arguments on to it as they are

# host baseline
mirrors.configure(settings)  # type: ignore[call-arg, arg-type]
base_packages.install(settings)  # type: ignore[call-arg, arg-type]
# (model storage: fio, onboarding measures the models' filesystem with it)
model_storage.install(settings)  # type: ignore[call-arg, arg-type]
kernel_cmdline.configure(settings)  # type: ignore[call-arg, arg-type]
thp.configure(settings)  # type: ignore[call-arg, arg-type]
limits.configure(settings)  # type: ignore[call-arg, arg-type]
sysctls.configure(settings)  # type: ignore[call-arg, arg-type]
chrony.configure(settings)  # type: ignore[call-arg, arg-type]
module_blacklist.configure(settings)  # type: ignore[call-arg, arg-type]
cpu_governor.configure(settings)  # type: ignore[call-arg, arg-type]

# GPU stack (does nothing, visibly, on a host without an NVIDIA GPU)
# (the driver: with Fabric Manager's packages on NVSwitch boards)
driver_reboot = nvidia_driver.install(settings)  # type: ignore[call-arg, arg-type]
fabric_manager.configure(settings, driver_reboot)  # type: ignore[call-arg, arg-type]
cuda_toolkit.install(settings)  # type: ignore[call-arg, arg-type]
nvidia_persistence.configure(settings)  # type: ignore[call-arg, arg-type]
gpu_clocks.configure(settings)  # type: ignore[call-arg, arg-type]

# one reboot, if the kernel command line or the driver needs it
reboot.reboot_if_needed(settings, also=driver_reboot)  # type: ignore[call-arg, arg-type]

# telemetry: the host's and the GPUs' exporters (DCGM does nothing, visibly, without a GPU), and its
# logs sent off the host
node_exporter.configure(settings)  # type: ignore[call-arg, arg-type]
dcgm_exporter.install(settings)  # type: ignore[call-arg, arg-type]
log_forwarding.configure(settings)  # type: ignore[call-arg, arg-type]

# the service: rolled out in batches, each host ready before the next
vllm.serve(settings, gpu=nvidia_driver.skip_reason(settings, "vllm") is None)  # type: ignore[call-arg, arg-type]
# with a serving layout, its one endpoint on vllm_port (after vllm: a host moving to a layout has
# just stopped vllm.service, whose port it takes)
frontdoor.configure(settings)  # type: ignore[call-arg, arg-type]
