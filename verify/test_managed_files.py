"""managed_files: everything the deploy manages is as it wrote it, and nothing overrides it.

The deploy records each file, link and folder it manages in the host's manifest
(llmfleet/managed_files.py: MANIFEST, root-only): path, content hash, mode, owner and group, a
link's target, a removed file's absence. These checks compare every entry with the host, and look
for foreign files in the managed files' drop-in chains (sysctl.d, limits.d, system.conf.d,
modprobe.d, apt's preferences.d and apt.conf.d, unit drop-ins, grub.d) that override a managed key
for the next boot. Both read the host alone, so the host's self-audit runs them as the control
audit does. A secret's content is never shown, only that it differs.
"""

from __future__ import annotations

import pytest

from llmfleet import managed_files
from verify.helpers import expect, run_remote


@pytest.fixture(scope="module")
def manifest(host, host_name):
    state = run_remote(host, "managed_files_state", managed_files.MANIFEST)
    expect(host_name, f"manifest of what the deploy manages ({managed_files.MANIFEST})", "present",
           state["manifest"])
    return state


def test_every_managed_file_link_and_folder_is_as_the_deploy_wrote_it(host_name, manifest):
    expected, actual = {}, {}
    for entry in manifest["entries"]:
        differs = managed_files.differences(entry, manifest["found"].get(entry["path"]))
        if differs:
            where = f"{entry['path']} ({entry['what']})"
            expected[where] = {attribute: want for attribute, (want, _) in differs.items()}
            actual[where] = {attribute: got for attribute, (_, got) in differs.items()}
    expect(host_name, "managed file", expected, actual)


def test_no_foreign_drop_in_overrides_a_managed_key(host, host_name, manifest):
    found = run_remote(host, "managed_files_dropins", f"@{managed_files.MANIFEST}")
    expected, actual = {}, {}
    for o in found["overrides"]:
        where = f"{o['file']} line {o['line']} overrides {o['managed']}"
        expected.setdefault(where, {})[o["key"]] = o["managed_value"]
        actual.setdefault(where, {})[o["key"]] = o["value"]
    expect(host_name, "drop-in override", expected, actual)
    unreadable = [f"{u['file']}: {u['why']}" for u in found.get("unreadable", [])]
    expect(host_name, "drop-in files that cannot be read", [], unreadable)
