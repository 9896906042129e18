"""The one inventory reader (llmfleet/inventory.py) on small real inventories: pyinfra's
debug-inventory reads them without connecting to any host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmfleet.errors import InventoryError
from llmfleet.inventory import ROOT, limit_args, read, unmatched


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root of its own: group data for all and for one group, an inventory of two groups."""
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text('where = "all"\nport = 8000\nfrom_all = True\n')
    (tmp_path / "group_data" / "gpus.py").write_text('where = "group gpus"\nport = 9000\n')
    (tmp_path / "inventories").mkdir()
    (tmp_path / "inventories" / "small.py").write_text(
        'gpus = [("gpu-1", {"where": "host gpu-1"}), "gpu-2"]\n'
        'cpus = ["cpu-1"]\n')
    return tmp_path


def data_of(hosts: list[dict]) -> dict[str, dict]:
    return {h["name"]: h["data"] for h in hosts}


def test_host_data_wins_over_group_data_which_wins_over_all(project):
    found = data_of(read("inventories/small.py", root=project))
    assert [found[h]["where"] for h in ("gpu-1", "gpu-2", "cpu-1")] == ["host gpu-1", "group gpus", "all"]
    assert found["gpu-2"]["port"] == 9000 and found["cpu-1"]["port"] == 8000 and found["gpu-2"]["from_all"] is True


def test_data_pairs_win_over_every_host_and_group(project):
    found = data_of(read("inventories/small.py", ["where=cli", "extra=1"], root=project))
    assert {h: d["where"] for h, d in found.items()} == {"gpu-1": "cli", "gpu-2": "cli", "cpu-1": "cli"}
    assert found["gpu-2"]["port"] == 9000  # only the named setting is overridden


def test_every_host_has_its_groups_and_the_file_name_group(project):
    groups = {h["name"]: set(h["groups"]) for h in read("inventories/small.py", root=project)}
    assert groups == {"gpu-1": {"gpus", "small"}, "gpu-2": {"gpus", "small"}, "cpu-1": {"cpus", "small"}}


def test_a_limit_by_host_name_keeps_that_host(project):
    assert [h["name"] for h in read("inventories/small.py", limit=["gpu-2"], root=project)] == ["gpu-2"]


def test_a_limit_by_group_keeps_its_hosts_and_limits_add_up_in_inventory_order(project):
    assert [h["name"] for h in read("inventories/small.py", limit=["gpus"], root=project)] == ["gpu-1", "gpu-2"]
    both = read("inventories/small.py", limit=["cpu-1", "gpus"], root=project)
    assert [h["name"] for h in both] == ["gpu-1", "gpu-2", "cpu-1"]


def test_a_limit_matches_host_names_as_pyinfra_does_with_shell_patterns(project):
    assert [h["name"] for h in read("inventories/small.py", limit=["gpu-*"], root=project)] == ["gpu-1", "gpu-2"]


def test_a_limit_matching_no_host_stops_with_what_the_inventory_has(project):
    with pytest.raises(InventoryError) as exc:
        read("inventories/small.py", limit=["gpu-1", "gpu-9"], root=project)
    assert str(exc.value) == (
        "--limit gpu-9: no such host or group in inventories/small.py (pyinfra would say: No host matches found "
        "for --limit pattern: gpu-9; it has hosts gpu-1, gpu-2, cpu-1 and groups cpus, gpus, small) "
        "(fix: one --limit per host or group name)")


def test_a_comma_separated_limit_matches_nothing_as_in_pyinfra(project):
    with pytest.raises(InventoryError, match="--limit gpu-1,cpu-1: no such host or group .* No host matches"):
        read("inventories/small.py", limit=["gpu-1,cpu-1"], root=project)


def test_a_missing_inventory_file_is_refused_not_taken_for_a_host_name(project):
    # pyinfra reads an argument that is not a file as a host name and carries on
    with pytest.raises(InventoryError) as exc:
        read("inventories/nope.py", root=project)
    assert str(exc.value) == (f"cannot read inventory inventories/nope.py: no such file ({project}/inventories/"
                              "nope.py; a relative path is taken from the project root) (fix: the path of a pyinfra "
                              "inventory, e.g. inventories/prod.py)")


def test_an_inventory_python_cannot_load_is_refused_with_its_error(project):
    (project / "inventories" / "broken.py").write_text('gpus = ["gpu-1"]\nimport no_such_module_here\n')
    with pytest.raises(InventoryError) as exc:
        read("inventories/broken.py", root=project)
    message = str(exc.value)
    assert message.startswith("cannot read inventory inventories/broken.py: ")
    assert "ModuleNotFoundError: No module named 'no_such_module_here'" in message
    assert message.endswith("(fix: the path of a pyinfra inventory, e.g. inventories/prod.py, that Python can load)")
    assert "--> Loading inventory" not in message  # pyinfra's progress lines are left out


def test_an_inventory_with_a_syntax_error_is_refused_with_the_line(project):
    (project / "inventories" / "typo.py").write_text('gpus = ["gpu-1"\n')
    with pytest.raises(InventoryError, match=r"(?s)cannot read inventory inventories/typo.py: .*SyntaxError"):
        read("inventories/typo.py", root=project)


def test_group_data_comes_from_the_project_root_not_from_where_the_command_runs(project, tmp_path_factory,
                                                                                 monkeypatch):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "group_data").mkdir()
    (elsewhere / "group_data" / "all.py").write_text('where = "elsewhere"\n')
    monkeypatch.chdir(elsewhere)
    found = data_of(read("inventories/small.py", root=project))
    assert found["cpu-1"]["where"] == "all"


def test_the_project_inventories_read_with_the_project_group_data_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = read("inventories/prod.py", limit=["v100_sxm2"])
    assert ROOT == Path(__file__).resolve().parents[2]
    assert found and all("prod" in h["groups"] and "_sudo" in h["data"] for h in found)  # from group_data/all.py


def test_limits_go_to_pyinfra_one_flag_each_and_a_limit_matching_nothing_stops_a_pyinfra_run():
    # pyinfra 3 matches "lab-c1,lab-vm1" against no host (and carries on with none)
    assert limit_args(["lab-c1", "lab-vm1"]) == ["--limit", "lab-c1", "--limit", "lab-vm1"]
    unmatched("--> Loading inventory...\n--> Connecting to hosts...\n")
    with pytest.raises(InventoryError, match="No host matches found for --limit pattern: lab-c1,lab-vm1"):
        unmatched("--> Loading inventory...\n    No host matches found for --limit pattern: lab-c1,lab-vm1\n")


def test_the_monitoring_command_reports_an_unreadable_inventory_with_exit_2():
    from llmfleet.cli import main

    result = CliRunner().invoke(main, ["monitoring", "--inventory", "inventories/nope.py"])
    assert result.exit_code == 2
    assert "cannot read inventory inventories/nope.py: no such file" in " ".join(result.output.split())


def test_the_probe_reports_a_limit_matching_no_host(project):
    from llmfleet.probe.fleet import targets

    with pytest.raises(InventoryError, match="--limit gpu-9: no such host or group in .*small.py"):
        targets(str(project / "inventories" / "small.py"), ["gpu-9"])


def test_the_verify_suite_stops_with_exit_2_and_the_message_when_the_inventory_cannot_be_read(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "verify" / "test_sysctls.py"), "-q",
                           "-p", "no:cacheprovider", "--hosts=local://", "--inventory", "inventories/nope.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out[-2000:]
    assert "cannot read inventory inventories/nope.py: no such file" in out
