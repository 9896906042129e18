"""The one way llmfleet runs code on a host (llmfleet.remote.python_script), tried with this
machine's shell: a script run through the command prints what it read, with its arguments
verbatim and the interpreter it was given; every script in the folder compiles as a host gets it
and finds what it imports from _helpers; and the shared readers of host state (PCI GPUs, the
loaded NVIDIA module, the API key file) read made-up files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmfleet.remote import FOLDER, python_script, script_names

ROOT = Path(__file__).resolve().parents[2]


def run(command: str) -> dict:
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def heredoc_body(command: str) -> str:
    """The program the host's python reads on standard input."""
    first, rest = command.split("\n", 1)
    marker = first.rsplit("<<", 1)[1].strip("'")
    assert rest.endswith("\n" + marker)
    return rest[: -len(marker)]


def test_a_script_run_through_the_runner_prints_what_it_read(tmp_path):
    odd = tmp_path / "it's $HOME a \"file\""
    odd.write_text("line one\nline two\n")
    missing = tmp_path / "missing"
    assert run(python_script("read_files", str(odd), str(missing))) == {str(odd): "line one\nline two\n",
                                                                        str(missing): None}


def test_the_runner_runs_the_interpreter_it_is_given():
    # gpu_state reports which python ran it, and each section's own error where a module is missing
    state = run(python_script("gpu_state", python=sys.executable))
    assert state["python"] == sys.executable
    assert set(state) == {"python", "nvml", "module", "xid", "torch"}


def test_every_host_script_compiles_as_a_host_gets_it(tmp_path):
    assert len(script_names()) >= 15
    for name in script_names():
        program = tmp_path / f"{name}.py"
        program.write_text(heredoc_body(python_script(name)))
        proc = subprocess.run([sys.executable, "-m", "py_compile", str(program)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"


def test_every_name_a_script_takes_from_the_helpers_is_there():
    import ast

    defined = set(helpers())
    for name in script_names():
        tree = ast.parse((FOLDER / f"{name}.py").read_text())
        taken = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "_helpers"
                 for a in node.names}
        assert taken <= defined, f"{name}: {sorted(taken - defined)} not in _helpers.py"


def test_a_script_also_runs_as_it_is_from_the_folder():
    proc = subprocess.run([sys.executable, str(FOLDER / "pci_gpus.py")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == run(python_script("pci_gpus"))


def test_every_script_the_code_runs_is_in_the_folder():
    called = set()
    for path in [*ROOT.glob("llmfleet/**/*.py"), *ROOT.glob("operations/*.py"), *ROOT.glob("verify/*.py")]:
        called |= set(re.findall(r"(?:python_script|run_remote)\((?:host, )?[\"'](\w+)[\"']", path.read_text()))
    assert {"nvidia_driver_host", "vllm_flags", "gpu_state", "read_files", "nvidia_driver_modules"} <= called
    assert called - set(script_names()) == set()


def test_an_unknown_script_is_refused_with_the_names_there():
    with pytest.raises(ValueError, match=r"no host script 'nope' in .*remote \(there are: .*read_files"):
        python_script("nope")
    with pytest.raises(ValueError, match="no host script '_helpers'"):
        python_script("_helpers")


def test_a_script_with_the_end_marker_line_is_refused(tmp_path, monkeypatch):
    import llmfleet.remote as remote

    (tmp_path / "_helpers.py").write_text((FOLDER / "_helpers.py").read_text())
    (tmp_path / "cut.py").write_text('TEXT = """\nLLMFLEET_EOF\n"""\n')
    monkeypatch.setattr(remote, "FOLDER", tmp_path)
    with pytest.raises(ValueError, match="host script 'cut' has a line 'LLMFLEET_EOF'"):
        remote.python_script("cut")


def helpers() -> dict:
    namespace: dict = {}
    exec(compile((FOLDER / "_helpers.py").read_text(), "_helpers.py", "exec"), namespace)
    return namespace


def pci_device(root: Path, slot: str, vendor: str, cls: str, device: str, width: str = "16") -> None:
    d = root / slot
    d.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("class", cls), ("device", device), ("max_link_width", width)):
        (d / name).write_text(value + "\n")


def test_the_pci_reader_lists_nvidia_display_and_3d_controllers_only(tmp_path):
    pci_device(tmp_path, "0000:00:02.0", "0x8086", "0x030000", "0x46a6")  # Intel VGA
    pci_device(tmp_path, "0000:1b:00.0", "0x10de", "0x030200", "0x2335")  # H200: 3D controller
    pci_device(tmp_path, "0000:1b:00.1", "0x10de", "0x040300", "0x22ba")  # NVIDIA HD audio
    pci_device(tmp_path, "0000:65:00.0", "0x10de", "0x030000", "0x1db5", width="8")  # VGA class, x8 slot
    assert helpers()["pci_gpus"](str(tmp_path)) == [
        {"slot": "0000:1b:00.0", "device": "0x2335", "max_link_width": "16"},
        {"slot": "0000:65:00.0", "device": "0x1db5", "max_link_width": "8"}]
    assert [d["vendor"] for d in helpers()["pci_devices"](str(tmp_path))] == ["0x8086", "0x10de", "0x10de", "0x10de"]


def test_the_nvswitch_reader_lists_nvidia_bridges_only(tmp_path):
    """An HGX H100's four NVSwitches (class 0x0680, 10de:22a3) beside its GPUs and a NIC."""
    for i in range(4):
        pci_device(tmp_path, f"0000:{7 + i:02x}:00.0", "0x10de", "0x068000", "0x22a3")
    pci_device(tmp_path, "0000:1b:00.0", "0x10de", "0x030200", "0x2330")  # H100: 3D controller
    pci_device(tmp_path, "0000:2a:00.0", "0x15b3", "0x020700", "0x1021")  # InfiniBand NIC
    pci_device(tmp_path, "0000:3c:00.0", "0x8086", "0x068000", "0x09a2")  # another vendor's 0x0680 device
    assert helpers()["pci_nvswitches"](str(tmp_path)) == [
        {"slot": f"0000:{7 + i:02x}:00.0", "device": "0x22a3"} for i in range(4)]
    assert [g["device"] for g in helpers()["pci_gpus"](str(tmp_path))] == ["0x2330"]


@pytest.mark.parametrize(("version", "banner", "expected"), [
    (None, None, None),
    ("580.95.05", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC 2025\n"
     "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)",
     {"version": "580.95.05", "flavour": "proprietary",
      "banner": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC 2025"}),
    (None, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build",
     {"version": "580.95.05", "flavour": "open",
      "banner": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build"}),
])
def test_the_module_reader_reads_version_and_flavour(tmp_path, version, banner, expected):
    version_file, banner_file = tmp_path / "version", tmp_path / "banner"
    if version:
        version_file.write_text(version + "\n")
    if banner:
        banner_file.write_text(banner + "\n")
    assert helpers()["nvidia_module"](str(version_file), str(banner_file)) == expected


def test_the_gpu_module_and_key_readers_exist_once():
    """The deploy's scripts and the verify suite's read the PCI GPUs, the module flavour and the
    API key file with the helpers, not with a copy of their own."""
    sources = {p.name: p.read_text() for p in FOLDER.glob("*.py")}
    for marker in ("glob.glob(devices", "Open Kernel Module", "0x10de", "/proc/driver/nvidia/version",
                   "VLLM_API_KEY="):
        assert [n for n, text in sources.items() if marker in text] == ["_helpers.py"], marker


def test_the_key_reader_reads_the_key_line_and_minus_means_no_key(tmp_path):
    key_file = tmp_path / "api-key.env"
    key_file.write_text("# vLLM's API key\nVLLM_API_KEY=s3cret-abc\n")
    assert helpers()["api_key"](str(key_file)) == "s3cret-abc"
    assert helpers()["api_key"]("-") is None


def test_the_api_probe_uses_the_key_and_never_prints_it(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on: every call is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key_file = tmp_path / "api-key.env"
    key_file.write_text("VLLM_API_KEY=s3cret-abc\n")
    proc = subprocess.run(["sh", "-c", python_script("vllm_probe", str(port), "tiny", str(key_file))],
                          capture_output=True, text=True, timeout=60)
    assert "s3cret-abc" not in proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["key_set"] is True and out["health"] is None


def test_the_port_reader_names_the_process_listening_and_leaves_free_ports_out():
    import socket

    with socket.socket() as listening, socket.socket() as free:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        free.bind(("127.0.0.1", 0))  # bound, not listening
        port, other = listening.getsockname()[1], free.getsockname()[1]
        proc = subprocess.run(["sh", "-c", python_script("vllm_ports", str(port), str(other))],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    held = json.loads(proc.stdout)
    me = Path("/proc/self/comm").read_text().strip()
    assert list(held) == [str(port)] and [(h["pid"], h["command"]) for h in held[str(port)]] == [(os.getpid(), me)]


# a dpkg status file: held and installed, installed, held of another architecture (and of dpkg's),
# held but not installed, and dpkg itself (its architecture is the host's own)
DPKG_STATUS = "".join(
    f"Package: {name}\nStatus: {want} ok {status}\nPriority: optional\nSection: libs\nMaintainer: x <x@x>\n"
    f"Architecture: {arch}\n{'Multi-Arch: same' + chr(10) if multi else ''}"
    f"{'Version: ' + version + chr(10) if version else ''}Description: x\n\n"
    for name, want, status, arch, multi, version in (
        ("nvidia-driver-580", "hold", "installed", "amd64", False, "580.95.05-1"),
        ("cuda-toolkit-12-8", "install", "installed", "amd64", False, "12.8.1-1"),
        ("libnvidia-compute-580", "hold", "installed", "i386", True, "580.95.05-1"),
        ("libnvidia-compute-580", "hold", "installed", "amd64", True, "580.95.05-1"),
        ("datacenter-gpu-manager-4-core", "hold", "not-installed", "amd64", False, ""),
        ("nvidia-kernel-common-580", "deinstall", "config-files", "amd64", False, "580.95.05-1"),
        ("dpkg", "install", "installed", "amd64", False, "1.21.22")))


def test_nvidia_host_names_the_held_packages_as_apt_mark_showhold_does(tmp_path):
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").write_text(DPKG_STATUS)
    (admin / "available").touch()
    proc = subprocess.run(["/bin/sh", "-c", python_script("nvidia_driver_host")], capture_output=True, text=True,
                          env={**os.environ, "DPKG_ADMINDIR": str(admin)}, check=True)
    fact = json.loads(proc.stdout)
    apt = subprocess.run(["apt-mark", "showhold", "-o", f"Dir::State::status={admin / 'status'}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert fact["held"] == sorted(apt) == ["datacenter-gpu-manager-4-core", "libnvidia-compute-580",
                                           "libnvidia-compute-580:i386", "nvidia-driver-580"]
    assert fact["packages"] == {"nvidia-driver-580": "580.95.05-1", "cuda-toolkit-12-8": "12.8.1-1",
                                "libnvidia-compute-580": "580.95.05-1"}


def metadata_as_importlib_reads_it(paths: list[str]) -> dict:
    """What the scripts read before: importlib.metadata's own Name and version of each distribution."""
    import importlib.metadata

    return {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version
            for d in importlib.metadata.distributions(path=paths) if d.metadata["Name"]}


def test_the_distributions_reader_reads_what_importlib_metadata_reads(tmp_path):
    site = tmp_path / "site-packages"
    body = "A long description.\n\nName: not-a-header\nVersion: 9.9\n" * 50
    for folder, file, text in (
            ("Foo_Bar-1.2.dist-info", "METADATA", f"Metadata-Version: 2.1\nName: Foo_Bar\nVersion: 1.2\n\n{body}"),
            ("zope.interface-6.0.dist-info", "METADATA",
             "Metadata-Version: 2.1\nName: zope.interface\nSummary: folded\n  over two lines\nVersion: 6.0\n"),
            ("old-0.1.egg-info", "PKG-INFO", f"Metadata-Version: 1.0\nname: old\nversion: 0.1\n\n{body}"),
            ("nameless-1.0.dist-info", "METADATA", "Metadata-Version: 2.1\nVersion: 1.0\n\nName: body\n"),
            ("crlf-2.0.dist-info", "METADATA", "Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 2.0\r\n\r\nbody\r\n")):
        (site / folder).mkdir(parents=True)
        (site / folder / file).write_bytes(text.encode())
    read = helpers()["distributions"]
    expected = metadata_as_importlib_reads_it([str(site)])
    assert read([str(site)]) == expected == {"foo-bar": "1.2", "zope-interface": "6.0", "old": "0.1", "crlf": "2.0"}
    # and this machine's own environment: every distribution the project runs on
    ours = [p for p in sys.path if p.endswith("site-packages")]
    assert len(metadata_as_importlib_reads_it(ours)) > 50
    assert read(ours) == metadata_as_importlib_reads_it(ours)
