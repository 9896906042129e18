"""llmfleet/remote/managed_files_dropins.py, run as a host runs it (python3, from the repository root) on
made-up trees (--root): for each kind of drop-in folder, a foreign file that wins over a managed key is
found with its file, line, key, value and the managed value; the same key where the tool lets ours win is
not; a managed file is never foreign; a file masked by one of its name is not read; --repair comments the
line out in place and a second run finds nothing; a missing folder is fine and a file that cannot be read
is named."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "llmfleet/remote/managed_files_dropins.py"


def run(root: Path, entries, *flags: str) -> dict:
    argument = entries if isinstance(entries, str) else json.dumps(entries)
    proc = subprocess.run(["python3", SCRIPT, "--root", str(root), *flags, argument], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def write(root: Path, path: str, text: str, mode: int = 0o644) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)
    return target


def override(kind: str, managed: str, file: str, line: int, key: str, value: str, managed_value: str) -> dict:
    return {"managed": managed, "folder": kind, "file": file, "line": line, "key": key, "value": value,
            "managed_value": managed_value}


# Per kind: the managed file, a foreign file that wins over one of its keys (and the override it makes), a
# foreign file with the same key that the tool lets ours win over, and a pair of foreign files where the
# first (in a folder read first) masks the second, which would otherwise win.
KINDS = {
    "sysctl": {
        "managed": ("/etc/sysctl.d/90-llmfleet.conf", "vm.max_map_count = 1048576\nnet.core.somaxconn=4096\n"),
        "wins": ("/etc/sysctl.d/99-tuning.conf", "# tuning\nvm.max_map_count=65530\n"),
        "override": (2, "vm.max_map_count", "65530", "1048576"),
        "loses": ("/usr/lib/sysctl.d/50-default.conf", "vm.max_map_count = 262144\n"),
        "masks": ("/etc/sysctl.d/99-vendor.conf", "# disabled here\n",
                  "/usr/lib/sysctl.d/99-vendor.conf", "vm.max_map_count=1\n"),
    },
    "limits": {
        "managed": ("/etc/security/limits.d/90-llmfleet.conf",
                    "*  soft  memlock  unlimited\n*  hard  memlock  unlimited\n"),
        "wins": ("/etc/security/limits.d/95-db.conf", "# db\n*   hard   memlock   64\n"),
        "override": (2, "* hard memlock", "64", "unlimited"),
        "loses": ("/etc/security/limits.conf", "*  -  memlock  32\n"),
    },
    "systemd_manager": {
        "managed": ("/etc/systemd/system.conf.d/90-llmfleet.conf", "[Manager]\nDefaultLimitMEMLOCK=infinity\n"),
        "wins": ("/etc/systemd/system.conf.d/99-site.conf", "[Manager]\n\nDefaultLimitMEMLOCK=64K\n"),
        "override": (3, "Manager.DefaultLimitMEMLOCK", "64K", "infinity"),
        "loses": ("/etc/systemd/system.conf", "[Manager]\nDefaultLimitMEMLOCK=8M\n"),
        "masks": ("/etc/systemd/system.conf.d/99-vendor.conf", "[Manager]\n",
                  "/usr/lib/systemd/system.conf.d/99-vendor.conf", "[Manager]\nDefaultLimitMEMLOCK=1M\n"),
    },
    "systemd_unit": {
        "managed": ("/etc/systemd/system/nvidia-persistenced.service.d/50-llmfleet.conf",
                    "[Service]\nRestart=always\nLimitMEMLOCK=infinity\n"),
        "wins": ("/usr/lib/systemd/system/nvidia-persistenced.service.d/60-vendor.conf", "[Service]\nRestart=no\n"),
        "override": (2, "Service.Restart", "no", "always"),
        "loses": ("/run/systemd/system/nvidia-persistenced.service.d/10-early.conf", "[Service]\nRestart=on-failure\n"),
        "masks": ("/etc/systemd/system/nvidia-persistenced.service.d/70-vendor.conf", "[Service]\n",
                  "/lib/systemd/system/nvidia-persistenced.service.d/70-vendor.conf", "[Service]\nRestart=no\n"),
    },
    "modprobe": {
        "managed": ("/etc/modprobe.d/llmfleet-nvidia.conf",
                    "options nvidia NVreg_EnableGpuFirmware=0 NVreg_RestrictProfilingToAdminUsers=0\n"),
        "wins": ("/etc/modprobe.d/zz-local.conf", "# local\noptions nvidia NVreg_EnableGpuFirmware=1\n"),
        "override": (2, "options nvidia NVreg_EnableGpuFirmware", "1", "0"),
        "loses": ("/lib/modprobe.d/aa-vendor.conf", "options nvidia NVreg_EnableGpuFirmware=1\n"),
        "masks": ("/etc/modprobe.d/zz-vendor.conf", "# disabled here\n",
                  "/usr/lib/modprobe.d/zz-vendor.conf", "options nvidia NVreg_EnableGpuFirmware=1\n"),
    },
    "apt_preferences": {  # the first matching record wins: the winner is read BEFORE ours
        "managed": ("/etc/apt/preferences.d/llmfleet-nvidia.pref",
                    "Package: nvidia-driver-580\nPin: version 580.95.05-1\nPin-Priority: 1001\n"),
        "wins": ("/etc/apt/preferences.d/00-site.pref",
                 "# site\nPackage: nvidia-driver-580\nPin: release o=Ubuntu\nPin-Priority: 1002\n"),
        "override": (2, "Package: nvidia-driver-580", "Pin: release o=Ubuntu Pin-Priority: 1002",
                     "Pin: version 580.95.05-1 Pin-Priority: 1001"),
        "commented": [2, 3, 4],  # the whole record
        "loses": ("/etc/apt/preferences.d/zz-late.pref",
                  "Package: nvidia-driver-580\nPin: version 590.*\nPin-Priority: 1001\n"),
    },
    "apt_conf": {
        "managed": ("/etc/apt/apt.conf.d/90llmfleet-proxy", 'Acquire::http::Proxy "http://mirror:3142";\n'),
        "wins": ("/etc/apt/apt.conf.d/95site",
                 '// site\nAcquire {\n  http {\n    proxy "http://other:8080";\n  };\n};\n'),
        "override": (4, "Acquire::http::Proxy", "http://other:8080", "http://mirror:3142"),
        "loses": ("/etc/apt/apt.conf.d/01proxy", 'Acquire::http::Proxy "http://old:3128";\n'),
    },
    "grub": {
        "managed": ("/etc/default/grub.d/90-llmfleet.cfg", 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n'),
        "wins": ("/etc/default/grub.d/99-site.cfg", '# site\nGRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=off"\n'),
        "override": (2, "iommu", "iommu=off", "iommu=pt"),
        "loses": ("/etc/default/grub", 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="iommu=off quiet"\n'),
    },
}
MASKING = [kind for kind in KINDS if "masks" in KINDS[kind]]


def managed_entry(kind: str, root: Path, written: bool = True) -> list[dict]:
    path, text = KINDS[kind]["managed"]
    if written:
        write(root, path, text)
        return [{"path": path, "folder": kind, "mode": "0644", "owner": "root"}]
    return [{"path": path, "folder": kind, "content": text}]


def expected(kind: str) -> dict:
    line, key, value, managed_value = KINDS[kind]["override"]
    return override(kind, KINDS[kind]["managed"][0], KINDS[kind]["wins"][0], line, key, value, managed_value)


@pytest.mark.parametrize("kind", KINDS)
def test_a_foreign_file_that_wins_over_a_managed_key_is_an_override(tmp_path, kind):
    entries = managed_entry(kind, tmp_path)
    write(tmp_path, *KINDS[kind]["wins"])
    assert run(tmp_path, entries) == {"overrides": [expected(kind)], "unreadable": []}


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_key_in_a_foreign_file_the_tool_reads_so_that_ours_wins_is_not_an_override(tmp_path, kind):
    """For most kinds a file read BEFORE ours; for apt_preferences (the first record wins) one read after."""
    entries = managed_entry(kind, tmp_path)
    write(tmp_path, *KINDS[kind]["loses"])
    assert run(tmp_path, entries) == {"overrides": [], "unreadable": []}


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_listed_in_the_entries_is_never_foreign_whatever_its_folder(tmp_path, kind):
    entries = managed_entry(kind, tmp_path)
    write(tmp_path, *KINDS[kind]["wins"])
    entries.append({"path": KINDS[kind]["wins"][0], "folder": "something-else"})
    assert run(tmp_path, entries) == {"overrides": [], "unreadable": []}


@pytest.mark.parametrize("kind", MASKING)
def test_a_foreign_file_masked_by_one_of_its_name_in_an_earlier_folder_is_not_read(tmp_path, kind):
    entries = managed_entry(kind, tmp_path)
    first, first_text, masked, masked_text = KINDS[kind]["masks"]
    write(tmp_path, masked, masked_text)
    assert run(tmp_path, entries)["overrides"] != []  # alone, it would win
    write(tmp_path, first, first_text)
    assert run(tmp_path, entries) == {"overrides": [], "unreadable": []}


@pytest.mark.parametrize("kind", KINDS)
def test_repair_comments_the_line_out_in_place_and_a_second_run_finds_nothing(tmp_path, kind):
    entries = managed_entry(kind, tmp_path)
    path, text = KINDS[kind]["wins"]
    target = write(tmp_path, path, text, mode=0o640)
    inode = target.stat().st_ino
    item = expected(kind)
    out = run(tmp_path, entries, "--repair")
    assert out == {"repaired": [item], "units": ["nvidia-persistenced.service"] if kind == "systemd_unit" else [],
                   "unreadable": []}
    commented = KINDS[kind].get("commented", [item["line"]])
    prefix = f"# llmfleet: {item['key']} is managed in {item['managed']} ({item['managed_value']}); was: "
    assert target.read_text().split("\n") == [prefix + line if n in commented else line
                                              for n, line in enumerate(text.split("\n"), 1)]
    assert (target.stat().st_mode & 0o777, target.stat().st_ino) == (0o640, inode)
    assert run(tmp_path, entries) == {"overrides": [], "unreadable": []}


@pytest.mark.parametrize("kind", KINDS)
def test_missing_folders_are_fine_and_content_not_written_yet_is_read_in_its_place(tmp_path, kind):
    assert run(tmp_path, managed_entry(kind, tmp_path, written=False)) == {"overrides": [], "unreadable": []}
    write(tmp_path, *KINDS[kind]["wins"])
    assert run(tmp_path, managed_entry(kind, tmp_path, written=False)) == {"overrides": [expected(kind)],
                                                                          "unreadable": []}


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_in_the_chain_that_cannot_be_read_lands_in_unreadable(tmp_path, kind):
    entries = managed_entry(kind, tmp_path)
    path = KINDS[kind]["wins"][0]
    link = tmp_path / path.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("nowhere")  # a dangling link in the folder
    assert run(tmp_path, entries) == {"overrides": [],
                                      "unreadable": [{"file": path, "why": "No such file or directory"}]}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_a_file_this_user_may_not_read_lands_in_unreadable(tmp_path):
    entries = managed_entry("sysctl", tmp_path)
    write(tmp_path, "/etc/sysctl.d/99-secret.conf", "vm.max_map_count=1\n", mode=0o000)
    assert run(tmp_path, entries)["unreadable"] == [{"file": "/etc/sysctl.d/99-secret.conf",
                                                     "why": "Permission denied"}]


def test_the_output_for_a_clean_tree_is_no_override_and_nothing_unreadable(tmp_path):
    entries = [e for kind in KINDS for e in managed_entry(kind, tmp_path)]
    write(tmp_path, "/usr/lib/sysctl.d/50-default.conf", "kernel.sysrq = 16\n")
    write(tmp_path, "/etc/security/limits.conf", "# nothing\n")
    assert run(tmp_path, entries) == {"overrides": [], "unreadable": []}
    assert run(tmp_path, entries, "--repair") == {"repaired": [], "units": [], "unreadable": []}


def test_the_entries_can_come_from_the_manifest_whose_other_keys_are_ignored(tmp_path):
    entries = managed_entry("sysctl", tmp_path) + [{"path": "/etc/llmfleet/x", "sha256": "ab"}]
    write(tmp_path, "/etc/llmfleet/managed.json", json.dumps({"version": 3, "entries": entries}))
    write(tmp_path, *KINDS["sysctl"]["wins"])
    assert run(tmp_path, "@/etc/llmfleet/managed.json") == {"overrides": [expected("sysctl")], "unreadable": []}


def test_the_script_runs_as_python_script_sends_it(tmp_path):
    from llmfleet.remote import python_script

    entries = managed_entry("modprobe", tmp_path)
    write(tmp_path, *KINDS["modprobe"]["wins"])
    command = python_script("managed_files_dropins", "--root", str(tmp_path), json.dumps(entries))
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert json.loads(proc.stdout) == {"overrides": [expected("modprobe")], "unreadable": []}


# --- sysctl ---
def test_debians_99_sysctl_link_is_reported_by_its_name_and_repaired_in_its_target(tmp_path):
    entries = managed_entry("sysctl", tmp_path)
    target = write(tmp_path, "/etc/sysctl.conf", "#kernel.domainname = example.com\nnet.core.somaxconn = 128\n")
    (tmp_path / "etc/sysctl.d/99-sysctl.conf").symlink_to("../sysctl.conf")
    item = override("sysctl", "/etc/sysctl.d/90-llmfleet.conf", "/etc/sysctl.d/99-sysctl.conf", 2,
                    "net.core.somaxconn", "128", "4096")
    assert run(tmp_path, entries)["overrides"] == [item]
    assert run(tmp_path, entries, "--repair")["repaired"] == [item]
    assert (tmp_path / "etc/sysctl.d/99-sysctl.conf").is_symlink()
    assert target.read_text().split("\n")[1].startswith("# llmfleet: net.core.somaxconn is managed in")
    assert run(tmp_path, entries)["overrides"] == []


def test_a_sysctl_key_with_slashes_or_a_leading_dash_is_the_same_key(tmp_path):
    entries = managed_entry("sysctl", tmp_path)
    write(tmp_path, "/etc/sysctl.d/99-a.conf",
          "-net/core/somaxconn = 1024\n; a comment\nvm.max_map_count =  1048576 \n")
    assert run(tmp_path, entries)["overrides"] == [override(
        "sysctl", "/etc/sysctl.d/90-llmfleet.conf", "/etc/sysctl.d/99-a.conf", 1, "net.core.somaxconn", "1024", "4096")]


def test_a_foreign_sysctl_glob_never_beats_an_explicit_key_but_an_explicit_key_beats_a_managed_glob(tmp_path):
    managed = "/etc/sysctl.d/90-llmfleet.conf"
    write(tmp_path, managed, "net.ipv4.conf.all.rp_filter = 2\nnet.ipv4.conf.*.accept_redirects = 0\n")
    write(tmp_path, "/etc/sysctl.d/99-later.conf", "net.ipv4.conf.*.rp_filter = 1\n")
    write(tmp_path, "/usr/lib/sysctl.d/10-early.conf", "net.ipv4.conf.eth0.accept_redirects = 1\n")
    assert run(tmp_path, [{"path": managed, "folder": "sysctl"}])["overrides"] == [override(
        "sysctl", managed, "/usr/lib/sysctl.d/10-early.conf", 1, "net.ipv4.conf.eth0.accept_redirects", "1", "0")]


def test_a_managed_file_masked_by_a_foreign_file_of_its_name_is_reported_and_left_to_a_person(tmp_path):
    managed = "/usr/local/lib/sysctl.d/90-llmfleet.conf"
    write(tmp_path, managed, "vm.max_map_count = 1048576\n")
    write(tmp_path, "/etc/sysctl.d/90-llmfleet.conf", "kernel.sysrq = 1\n")
    entries = [{"path": managed, "folder": "sysctl"}]
    item = override("sysctl", managed, "/etc/sysctl.d/90-llmfleet.conf", 0, "*", "masked", "the managed file")
    assert run(tmp_path, entries) == {"overrides": [item], "unreadable": []}
    out = run(tmp_path, entries, "--repair")
    assert out["repaired"] == [] and out["unreadable"][0]["file"] == "/etc/sysctl.d/90-llmfleet.conf"
    assert "masks the managed file" in out["unreadable"][0]["why"]


# --- limits ---
def test_a_user_or_group_limit_beats_a_managed_star_limit_wherever_it_is_read(tmp_path):
    entries = managed_entry("limits", tmp_path)
    write(tmp_path, "/etc/security/limits.conf", "vllm  hard  memlock  65536  # the service user\n"
                                                 "@gpu  -  memlock  infinity\n*  hard  memlock  64\n")
    assert run(tmp_path, entries)["overrides"] == [override(
        "limits", KINDS["limits"]["managed"][0], "/etc/security/limits.conf", 1, "vllm hard memlock", "65536",
        "unlimited")]


# --- systemd ---
def test_every_key_a_foreign_drop_in_sets_on_a_unit_llmfleet_owns_is_an_override(tmp_path):
    unit = "/etc/systemd/system/vllm-a.service"
    write(tmp_path, unit, "[Unit]\nDescription=vLLM\n[Service]\nExecStart=/opt/vllm/bin/vllm serve\nNice=0\n")
    write(tmp_path, "/etc/systemd/system/vllm-a.service.d/override.conf",
          "[Service]\nNice=0\nEnvironment=CUDA_VISIBLE_DEVICES=0\nCPUQuota=50%\n")
    write(tmp_path, "/run/systemd/system.control/vllm-a.service.d/50-MemoryMax.conf", "[Service]\nMemoryMax=8G\n")
    out = run(tmp_path, [{"path": unit, "folder": "systemd_unit"}])["overrides"]
    dropin = "/etc/systemd/system/vllm-a.service.d/override.conf"
    assert out == [
        override("systemd_unit", unit, dropin, 3, "Service.Environment", "CUDA_VISIBLE_DEVICES=0", "not set"),
        override("systemd_unit", unit, dropin, 4, "Service.CPUQuota", "50%", "not set"),
        override("systemd_unit", unit, "/run/systemd/system.control/vllm-a.service.d/50-MemoryMax.conf", 2,
                 "Service.MemoryMax", "8G", "not set")]


def test_a_list_setting_is_compared_as_the_list_in_effect_after_all_drop_ins(tmp_path):
    managed = "/etc/systemd/system/dcgm.service.d/50-llmfleet.conf"
    write(tmp_path, managed, "[Service]\nExecStart=\nExecStart=/usr/bin/nv-hostengine -n --service-account dcgm\n")
    later = write(tmp_path, "/etc/systemd/system/dcgm.service.d/90-site.conf",
                  "[Service]\nExecStart=\nExecStart=/usr/bin/nv-hostengine -n \\\n  --service-account dcgm\n")
    entries = [{"path": managed, "folder": "systemd_unit"}]
    assert run(tmp_path, entries)["overrides"] == []  # reset and set again to the same list
    later.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/nv-hostengine -n \\\n  # the old way\n  -f -\n")
    cmd, site = "/usr/bin/nv-hostengine -n --service-account dcgm", "/etc/systemd/system/dcgm.service.d/90-site.conf"
    assert run(tmp_path, entries)["overrides"] == [
        override("systemd_unit", managed, site, 2, "Service.ExecStart", "", cmd),
        override("systemd_unit", managed, site, 3, "Service.ExecStart", "/usr/bin/nv-hostengine -n -f -", cmd)]
    assert run(tmp_path, entries, "--repair")["units"] == ["dcgm.service"]
    assert later.read_text().split("\n")[1:5] == [
        f"# llmfleet: Service.ExecStart is managed in {managed} ({cmd}); was: {line}"
        for line in ("ExecStart=", "ExecStart=/usr/bin/nv-hostengine -n \\")] + ["  # the old way",
        f"# llmfleet: Service.ExecStart is managed in {managed} ({cmd}); was:   -f -"]
    assert run(tmp_path, entries)["overrides"] == []


def test_drop_ins_of_the_units_dash_prefix_and_type_folders_count(tmp_path):
    managed = "/etc/systemd/system/vllm-a.service.d/50-llmfleet.conf"
    write(tmp_path, managed, "[Service]\nRestart=always\n")
    write(tmp_path, "/usr/lib/systemd/system/vllm-.service.d/60-x.conf", "[Service]\nRestart=no\n")
    write(tmp_path, "/etc/systemd/system/service.d/70-y.conf", "[Service]\nRestart=on-abort\n")
    write(tmp_path, "/etc/systemd/system/other.service.d/99-z.conf", "[Service]\nRestart=no\n")
    out = run(tmp_path, [{"path": managed, "folder": "systemd_unit"}])["overrides"]
    assert [(o["file"], o["value"]) for o in out] == [
        ("/etc/systemd/system/service.d/70-y.conf", "on-abort"),
        ("/usr/lib/systemd/system/vllm-.service.d/60-x.conf", "no")]


# --- modprobe ---
def test_the_first_install_line_wins_so_a_foreign_one_read_before_ours_overrides_it(tmp_path):
    managed = "/etc/modprobe.d/llmfleet-nouveau.conf"
    write(tmp_path, managed, "blacklist nouveau\ninstall nouveau /bin/false\n")
    write(tmp_path, "/etc/modprobe.d/00-nouveau.conf", "install nouveau /sbin/modprobe --ignore-install nouveau\n")
    write(tmp_path, "/etc/modprobe.d/zz-nouveau.conf", "install nouveau /bin/true\nblacklist nvidiafb\n")
    write(tmp_path, "/usr/lib/modprobe.d/50-other.conf", "options nouveau modeset=1\n")
    assert run(tmp_path, [{"path": managed, "folder": "modprobe"}])["overrides"] == [override(
        "modprobe", managed, "/etc/modprobe.d/00-nouveau.conf", 1, "install nouveau",
        "/sbin/modprobe --ignore-install nouveau", "/bin/false")]


def test_module_and_parameter_names_take_dash_or_underscore(tmp_path):
    managed = "/etc/modprobe.d/llmfleet.conf"
    write(tmp_path, managed, "options nvidia_uvm uvm_perf_prefetch_enable=1\n")
    write(tmp_path, "/etc/modprobe.d/zz.conf", "options nvidia-uvm uvm-perf-prefetch-enable=0\n")
    assert [o["key"] for o in run(tmp_path, [{"path": managed, "folder": "modprobe"}])["overrides"]] == [
        "options nvidia_uvm uvm_perf_prefetch_enable"]


# --- apt ---
def test_an_apt_pin_pattern_read_before_ours_that_matches_our_package_wins_and_a_general_record_does_not(tmp_path):
    entries = managed_entry("apt_preferences", tmp_path)
    write(tmp_path, "/etc/apt/preferences", "Package: *\nPin: release o=NVIDIA\nPin-Priority: 1\n\n"
                                            "Explanation: hold the drivers\nPackage: /^nvidia-driver/ cuda*\n"
                                            "Pin: version 570.*\nPin-Priority: 1001\n")
    write(tmp_path, "/etc/apt/preferences.d/00-ignored.txt", "Package: nvidia-driver-580\nPin: version 1\n"
                                                            "Pin-Priority: 1\n")
    assert run(tmp_path, entries)["overrides"] == [override(
        "apt_preferences", KINDS["apt_preferences"]["managed"][0], "/etc/apt/preferences", 5,
        "Package: nvidia-driver-580", "Pin: version 570.* Pin-Priority: 1001",
        "Pin: version 580.95.05-1 Pin-Priority: 1001")]
    assert run(tmp_path, entries, "--repair")["repaired"][0]["line"] == 5
    text = (tmp_path / "etc/apt/preferences").read_text().split("\n")
    assert text[:4] == ["Package: *", "Pin: release o=NVIDIA", "Pin-Priority: 1", ""]
    assert all(line.startswith("# llmfleet: Package: nvidia-driver-580 is managed in ") for line in text[4:8])
    assert run(tmp_path, entries)["overrides"] == []


def test_apt_conf_keys_are_case_insensitive_comments_are_skipped_and_clear_erases(tmp_path):
    managed = "/etc/apt/apt.conf.d/90llmfleet"
    write(tmp_path, managed, 'Acquire::http::Proxy "http://mirror:3142";\nAPT::Install-Recommends "false";\n')
    write(tmp_path, "/etc/apt/apt.conf.d/99site", '/* Acquire::http::Proxy "http://x:1";\n */\n'
                                                   '# acquire::http::proxy "http://y:2";\n'
                                                   'ACQUIRE::HTTP::PROXY "http://mirror:3142";\n'
                                                   'apt::install-recommends "true";\n')
    write(tmp_path, "/etc/apt/apt.conf", "#clear Acquire::http;\n")
    write(tmp_path, "/etc/apt/apt.conf.d/99site.disabled", 'APT::Install-Recommends "1";\n')  # apt skips it
    assert run(tmp_path, [{"path": managed, "folder": "apt_conf"}])["overrides"] == [
        override("apt_conf", managed, "/etc/apt/apt.conf", 1, "Acquire::http::Proxy", "#clear Acquire::http",
                 "http://mirror:3142"),
        override("apt_conf", managed, "/etc/apt/apt.conf.d/99site", 5, "APT::Install-Recommends", "true", "false")]


# --- grub ---
def test_a_later_grub_file_that_drops_a_managed_token_is_an_override_and_repair_comments_the_whole_assignment(
        tmp_path):
    managed = "/etc/default/grub.d/90-llmfleet.cfg"
    write(tmp_path, "/etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n')
    write(tmp_path, managed, 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt pci=realloc"\n')
    site = write(tmp_path, "/etc/default/grub.d/95-site.cfg",
                 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="console=ttyS0\n  nomodeset"\necho sourced\n')
    write(tmp_path, "/etc/default/grub.d/99-cloud.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT"\n')
    entries = [{"path": managed, "folder": "grub"}]
    assert run(tmp_path, entries)["overrides"] == [
        override("grub", managed, "/etc/default/grub.d/95-site.cfg", 2, "iommu", "missing", "iommu=pt"),
        override("grub", managed, "/etc/default/grub.d/95-site.cfg", 2, "pci", "missing", "pci=realloc")]
    run(tmp_path, entries, "--repair")
    assert site.read_text().split("\n")[0] == "GRUB_TIMEOUT=5"
    assert site.read_text().split("\n")[1:3] == [
        f'# llmfleet: iommu is managed in {managed} (iommu=pt); was: GRUB_CMDLINE_LINUX="console=ttyS0',
        f'# llmfleet: iommu is managed in {managed} (iommu=pt); was:   nomodeset"']
    assert run(tmp_path, entries)["overrides"] == []


def test_a_grub_parameter_given_again_in_the_default_line_after_ours_is_an_override(tmp_path):
    managed = "/etc/default/grub.d/90-llmfleet.cfg"
    write(tmp_path, managed, 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n')
    write(tmp_path, "/etc/default/grub.d/99-z.cfg", 'export GRUB_CMDLINE_LINUX_DEFAULT+=" iommu=off"\n')
    assert run(tmp_path, [{"path": managed, "folder": "grub"}])["overrides"] == [
        override("grub", managed, "/etc/default/grub.d/99-z.cfg", 1, "iommu", "iommu=off", "iommu=pt")]


def test_entries_that_are_not_json_are_refused_with_an_error(tmp_path):
    proc = subprocess.run(["python3", SCRIPT, "--root", str(tmp_path), "not json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "cannot read ENTRIES" in json.loads(proc.stdout)["error"]


def test_the_entries_can_come_compressed_as_the_deploy_sends_them(tmp_path):
    entries = managed_entry("sysctl", tmp_path)
    write(tmp_path, *KINDS["sysctl"]["wins"])
    packed = "z:" + base64.b64encode(zlib.compress(json.dumps(entries).encode())).decode()
    assert run(tmp_path, packed) == {"overrides": [expected("sysctl")], "unreadable": []}
