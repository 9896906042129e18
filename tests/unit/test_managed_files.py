"""managed_files: the manifest's entries, how a host's state is compared with them (the host script
run on this machine's own files), and that a secret is never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llmfleet import managed_files
from llmfleet.managed_files import Entry, differences, document, dropin_folder, file_entry
from llmfleet.remote import python_script


def state_of(manifest: str) -> dict:
    return json.loads(subprocess.run(["sh", "-c", python_script("managed_files_state", manifest,
                                                                 python=sys.executable)],
                                     capture_output=True, text=True, check=True).stdout)


def test_a_file_entry_carries_its_hash_mode_owner_and_drop_in_chain():
    e = file_entry("/etc/sysctl.d/90-llmfleet.conf", "vm.swappiness = 10\n", "sysctl drop-in", "644")
    assert (e.kind, e.mode, e.user, e.group, e.folder) == ("file", "0644", "root", "root", "sysctl")
    assert e.sha256 == managed_files.sha256(b"vm.swappiness = 10\n")


@pytest.mark.parametrize("path, folder", [
    ("/etc/sysctl.d/90-llmfleet.conf", "sysctl"),
    ("/etc/security/limits.d/90-llmfleet.conf", "limits"),
    ("/etc/systemd/system.conf.d/90-llmfleet-limits.conf", "systemd_manager"),
    ("/etc/modprobe.d/90-llmfleet-blacklist.conf", "modprobe"),
    ("/etc/apt/preferences.d/90-llmfleet-nvidia.pref", "apt_preferences"),
    ("/etc/apt/apt.conf.d/80llmfleet-acquire", "apt_conf"),
    ("/etc/default/grub.d/90-llmfleet.cfg", "grub"),
    ("/etc/systemd/system/llmfleet-thp.service", "systemd_unit"),
    ("/etc/systemd/system/chrony.service.d/90-llmfleet-container.conf", "systemd_unit"),
    ("/etc/chrony/chrony.conf", None),
    ("/etc/sysctl.d/sub/x.conf", None),
])
def test_each_managed_file_is_placed_in_the_drop_in_chain_it_loads_in(path, folder):
    assert dropin_folder(path) == folder


def test_the_manifest_is_the_same_bytes_for_the_same_entries_in_any_order():
    a = file_entry("/etc/a", "a", "a", "644")
    b = Entry("/etc/b", "link", "b", target="/x", user="root", group="root")
    assert document([a, b]) == document([b, a])
    rows = json.loads(document([a, b]))["entries"]
    assert [r["path"] for r in rows] == ["/etc/a", "/etc/b"]
    assert "secret" not in rows[0] and "sha256" not in rows[1]  # what is not set is left out


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind 'socket'"):
        Entry("/x", "socket", "x")


def test_a_file_as_written_has_no_difference(tmp_path):
    path = tmp_path / "f.conf"
    path.write_text("x = 1\n")
    os.chmod(path, 0o644)
    entry = json.loads(document([file_entry(str(path), "x = 1\n", "f", "644", _me(), _my_group())]))["entries"][0]
    manifest = tmp_path / "managed.json"
    manifest.write_text(json.dumps({"entries": [entry]}))
    found = state_of(str(manifest))
    assert found["manifest"] == "present"
    assert differences(entry, found["found"][str(path)]) == {}


def test_changed_content_mode_and_owner_are_each_named_with_expected_and_actual(tmp_path):
    path = tmp_path / "f.conf"
    path.write_text("x = 2\n")
    os.chmod(path, 0o666)
    entry = json.loads(document([file_entry(str(path), "x = 1\n", "f", "644", "nobody", _my_group())]))["entries"][0]
    manifest = tmp_path / "managed.json"
    manifest.write_text(json.dumps({"entries": [entry]}))
    got = differences(entry, state_of(str(manifest))["found"][str(path)])
    assert got["mode"] == ("0644", "0666")
    assert got["user"] == ("nobody", _me())
    want, have = managed_files.sha256("x = 1\n"), managed_files.sha256("x = 2\n")
    assert got["content"] == (f"sha256 {want[:16]}", f"sha256 {have[:16]}")


def test_a_secret_that_differs_is_named_never_shown_nor_its_hash(tmp_path):
    path = tmp_path / "api-key.env"
    path.write_text("VLLM_API_KEY=stolen-and-replaced\n")
    entry = json.loads(document([file_entry(str(path), "VLLM_API_KEY=s3cret\n", "key", "600", _me(), _my_group(),
                                            secret=True)]))["entries"][0]
    manifest = tmp_path / "managed.json"
    manifest.write_text(json.dumps({"entries": [entry]}))
    out = json.dumps(differences(entry, state_of(str(manifest))["found"][str(path)]))
    assert managed_files.SECRET_OTHER in out
    for leaked in ("s3cret", "stolen", managed_files.sha256("VLLM_API_KEY=s3cret\n")[:16],
                   managed_files.sha256("VLLM_API_KEY=stolen-and-replaced\n")[:16]):
        assert leaked not in out


def test_a_link_a_folder_and_a_removed_file_are_compared_by_what_they_are(tmp_path):
    (tmp_path / "v1").mkdir()
    os.chmod(tmp_path / "v1", 0o700)
    (tmp_path / "current").symlink_to(tmp_path / "v0")
    (tmp_path / "gone").write_text("back again")
    entries = [Entry(str(tmp_path / "current"), "link", "model link", target=str(tmp_path / "v1")),
               Entry(str(tmp_path / "v1"), "directory", "folder", mode="0755"),
               Entry(str(tmp_path / "gone"), "absent", "removed"),
               Entry(str(tmp_path / "missing"), "link", "link", target="/x")]
    manifest = tmp_path / "managed.json"
    manifest.write_text(document(entries))
    state = state_of(str(manifest))
    rows = {e["path"]: e for e in state["entries"]}
    assert differences(rows[str(tmp_path / "v1")], state["found"][str(tmp_path / "v1")]) == {
        "mode": ("0755", "0700")}
    assert differences(rows[str(tmp_path / "current")], state["found"][str(tmp_path / "current")]) == {
        "target": (str(tmp_path / "v1"), str(tmp_path / "v0"))}
    assert differences(rows[str(tmp_path / "gone")], state["found"][str(tmp_path / "gone")]) == {
        "present": ("absent", "file")}
    assert differences(rows[str(tmp_path / "missing")], state["found"][str(tmp_path / "missing")]) == {
        "kind": ("link", "missing")}


def test_a_missing_manifest_is_said_so(tmp_path):
    assert state_of(str(tmp_path / "none.json"))["manifest"] == "missing"


def _me() -> str:
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def _my_group() -> str:
    import grp
    return grp.getgrgid(os.getgid()).gr_name
