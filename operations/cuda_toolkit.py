"""cuda_toolkit: the CUDA toolkit of `cuda_toolkit_version` is installed and held.

The version is in the package's name (cuda-toolkit-12-9), so a toolkit of another minor version
is never installed by an upgrade; the hold keeps its patch level as the fleet tested it. Older
toolkits already on a host are left in place (they coexist under /usr/local/cuda-X.Y).
"""

from pyinfra.api import deploy
from pyinfra.operations import apt

from llmfleet.settings import Settings
from operations import apt_hold
from operations.nvidia_driver import skipped


def package_name(version: str) -> str:
    """"12.9" -> "cuda-toolkit-12-9"."""
    return "cuda-toolkit-" + version.replace(".", "-")


@deploy("cuda_toolkit")
def install(settings: Settings):
    """Install `cuda-toolkit-<major>-<minor>` from the CUDA repository and hold it."""
    if skipped(settings, "cuda_toolkit"):
        return
    name = package_name(settings.cuda_toolkit_version)
    apt.packages(name=f"CUDA toolkit {settings.cuda_toolkit_version}", packages=[name], no_recommends=True)
    apt_hold.held(name="CUDA toolkit held", packages=[name])
