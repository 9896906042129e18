"""nvidia_driver: the loaded kernel module is the pinned driver, in the configured flavour, and
the userspace driver (NVML) is the same version."""

from verify.helpers import expect


def test_module_is_the_pinned_driver(host_name, settings, gpu_profile, gpu_state):
    module, nvml = gpu_state["module"], gpu_state["nvml"]
    expect(host_name, "nvidia_driver_version (loaded kernel module)", settings.nvidia_driver_version,
           module.get("version"))
    expect(host_name, "nvidia_driver_version (userspace driver, NVML)", settings.nvidia_driver_version, nvml["driver"])
    # NVML's own version is "<CUDA major>.<driver version>", e.g. 13.580.159.04
    expect(host_name, "NVML library version (driver part)", settings.nvidia_driver_version,
           str(nvml["nvml"]).split(".", 1)[-1])


def test_module_flavour(host_name, settings, gpu_profile, gpu_state):
    expect(host_name, f"nvidia_driver_flavour ({gpu_state['module'].get('banner')})", settings.nvidia_driver_flavour,
           gpu_state["module"].get("flavour"))
