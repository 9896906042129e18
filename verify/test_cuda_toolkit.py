"""cuda_toolkit: the CUDA toolkit of cuda_toolkit_version is installed, by the package that names
its version (cuda-toolkit-<major>-<minor>), and held at the version the fleet tested."""

from verify.helpers import dpkg_states, expect


def test_toolkit_installed_and_held(host, host_name, settings, gpu_profile):
    name = "cuda-toolkit-" + settings.cuda_toolkit_version.replace(".", "-")
    out = host.run("dpkg-query -W -f '${Package} ${db:Status-Want} ${db:Status-Status}\\n' %s", name)
    expect(host_name, f"cuda_toolkit_version {settings.cuda_toolkit_version} ({name}: dpkg selection, status)",
           "hold installed", dpkg_states(out.stdout, [name])[name])
