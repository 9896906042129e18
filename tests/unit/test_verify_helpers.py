"""verify/helpers.py: the parsing the verify checks do on the control machine, and its host
scripts run through testinfra's own local backend, as `make verify-device` runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import testinfra

from verify.helpers import cmdline_tokens, dpkg_states, module_flavour, read_files, run_remote

ROOT = Path(__file__).resolve().parents[2]


def test_dpkg_states_read_selection_and_status_and_name_missing_packages():
    out = "cuda-toolkit-12-9 hold installed\nnumactl install installed\nchrony deinstall config-files\n"
    assert dpkg_states(out, ["cuda-toolkit-12-9", "numactl", "chrony", "cuda-toolkit-12-8"]) == {
        "cuda-toolkit-12-9": "hold installed", "numactl": "install installed", "chrony": "deinstall config-files",
        "cuda-toolkit-12-8": "not installed"}


def test_the_module_flavour_follows_the_module_files_license():
    assert module_flavour("Dual MIT/GPL\n") == "open"
    assert module_flavour("NVIDIA") == "proprietary"
    assert module_flavour(None) is None and module_flavour("") is None


def test_cmdline_tokens_are_name_or_name_value_in_name_order():
    assert cmdline_tokens({"transparent_hugepage": "never", "iommu": "pt", "nosmt": None}) == [
        "iommu=pt", "nosmt", "transparent_hugepage=never"]


def test_host_scripts_run_through_testinfras_local_backend(tmp_path):
    host = testinfra.get_host("local://")
    f = tmp_path / "a file with 'quotes' and %s"
    f.write_text("x=1\n")
    assert read_files(host, str(f), str(tmp_path / "none")) == {str(f): "x=1\n", str(tmp_path / "none"): None}
    assert run_remote(host, "gpu_state", python=sys.executable)["python"] == sys.executable


def test_the_verify_suite_collects_from_the_repository_root_and_from_elsewhere(tmp_path):
    """verify/ is a package: pytest puts the repository root on sys.path, so every check imports
    verify.helpers and llmfleet without a sys.path change of its own."""
    for cwd in (ROOT, tmp_path):
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               str(ROOT / "verify")], cwd=cwd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "verify/test_reboot.py::test_loaded_nvidia_module_is_the_installed_one" in proc.stdout
        assert "verify/test_cuda_toolkit.py::test_toolkit_installed_and_held" in proc.stdout
