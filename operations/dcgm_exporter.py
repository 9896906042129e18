"""dcgm_exporter: on a GPU host, NVIDIA DCGM 4 (nvidia-dcgm.service, the host engine) and
dcgm-exporter (nvidia-dcgm-exporter.service) with group data's counters, both from NVIDIA's CUDA
repository (configured by nvidia_driver) pinned and held like the driver; dcgm-exporter from its
release archive (a URL in group data, checked by sha256) where the repository has no package.
Nothing on a host without an NVIDIA GPU, and the output says why (install, configure, activate).
What it renders: llmfleet/dcgm_exporter.py. Sources: github.com/NVIDIA/DCGM (cmake/packaging.cmake: the
datacenter-gpu-manager-4-* packages; config-files/systemd/nvidia-dcgm.service.in) and
github.com/NVIDIA/dcgm-exporter (packaging/config-files/systemd/nvidia-dcgm-exporter.service,
etc/default-counters.csv)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.facts.files import Directory
from pyinfra.operations import files, systemd

from llmfleet import dcgm_exporter
from llmfleet.settings import Settings
from operations import managed_files
from operations.nvidia_driver import installed, skipped


@operation()
def unpacked(archive: str, dest: str):
    """
    A release archive of dcgm-exporter unpacked into its own versioned folder (its top folder,
    dcgm_exporter/, stripped), once: a folder that is there is the version it is named after.

    + archive: the archive on the host
    + dest: the folder (<EXPORTER_ARCHIVE_ROOT>/<version>)
    """
    if host.get_fact(Directory, path=dest):
        host.noop(f"dcgm_exporter: {dest} unpacked")
        return
    tmp = shlex.quote(dest + ".tmp")
    yield StringCommand(f"rm -rf {tmp} && mkdir -p {tmp} && tar -xzf {shlex.quote(archive)} -C {tmp} "
                        f"--strip-components=1 && test -x {tmp}{dcgm_exporter.EXPORTER_PACKAGE_BINARY} && "
                        f"mv {tmp} {shlex.quote(dest)}")


@deploy("dcgm_exporter")
def install(settings: Settings):
    """DCGM and dcgm-exporter installed, pinned and held; the exporter's counters file and unit;
    both services enabled and running (the exporter restarted when what it runs with changed)."""
    if skipped(settings, "dcgm_exporter"):
        return
    # install: DCGM (and the exporter, where it is NVIDIA's package), exact versions, held
    packages = installed(name=f"DCGM {settings.dcgm_version}", packages=dcgm_exporter.dcgm_packages(settings),
                         label="dcgm_exporter")
    archive = settings.dcgm_exporter_archive
    unpack = None
    if settings.dcgm_exporter_package is None and archive is not None:
        cached = f"{dcgm_exporter.EXPORTER_ARCHIVE_CACHE}/{archive.url.rsplit('/', 1)[-1]}"
        files.directory(name="download folder", path=dcgm_exporter.EXPORTER_ARCHIVE_CACHE)
        files.download(name=f"dcgm-exporter {archive.version} release archive", src=archive.url, dest=cached,
                       sha256sum=archive.sha256)
        unpack = unpacked(name=f"dcgm-exporter {archive.version} unpacked", archive=cached,
                          dest=f"{dcgm_exporter.EXPORTER_ARCHIVE_ROOT}/{archive.version}")
    # configure
    managed_files.directory("dcgm-exporter folder", "/etc/dcgm-exporter")
    counters = managed_files.put("dcgm-exporter counters (dcgm_exporter_counters)", dcgm_exporter.EXPORTER_COUNTERS,
                                 dcgm_exporter.counters_csv(settings))
    unit = managed_files.put("dcgm-exporter unit", dcgm_exporter.EXPORTER_UNIT_PATH,
                             dcgm_exporter.exporter_unit(settings))
    # activate
    systemd.service(name="DCGM host engine is enabled and running", service=dcgm_exporter.DCGM_SERVICE, running=True,
                    enabled=True, restarted=packages.will_change)
    changed = any(op is not None and op.will_change for op in (packages, unpack, counters, unit))
    systemd.service(name="dcgm-exporter is enabled and running", service=dcgm_exporter.EXPORTER_SERVICE, running=True,
                    enabled=True, restarted=changed, daemon_reload=unit.will_change)
