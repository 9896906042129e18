"""llmfleet/hints.py: where hints live, and that a hint is never a reason for a run to fail."""

from __future__ import annotations

from llmfleet import hints


def test_the_folder_follows_llmfleet_hints_then_xdg_cache_home_and_off_turns_hints_off(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMFLEET_HINTS", str(tmp_path / "h"))
    assert hints.folder("verify") == tmp_path / "h" / "verify"
    monkeypatch.delenv("LLMFLEET_HINTS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert hints.folder("facts") == tmp_path / "cache" / "llmfleet" / "hints" / "facts"
    for off in ("off", "OFF", "0", "no", "false"):
        monkeypatch.setenv("LLMFLEET_HINTS", off)
        assert hints.folder("facts") is None


def test_two_names_or_two_selections_never_share_a_file(tmp_path):
    assert hints.path_for(tmp_path, "a/b") != hints.path_for(tmp_path, "a_b")
    assert hints.path_for(tmp_path, "lab-c1", "x") != hints.path_for(tmp_path, "lab-c1", "y")
    assert hints.path_for(tmp_path, "lab-c1").name.startswith("lab-c1-")


def test_a_hint_is_written_whole_and_private_and_read_back(tmp_path):
    path = hints.path_for(tmp_path / "facts", "lab-c1")
    hints.save(path, [{"a": 1}, "b"])
    assert hints.load(path) == [{"a": 1}, "b"]
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_a_missing_damaged_or_unwritable_hint_is_no_error(tmp_path):
    assert hints.load(tmp_path / "none.json") == []
    (tmp_path / "bad.json").write_text("{not json")
    assert hints.load(tmp_path / "bad.json") == []
    (tmp_path / "obj.json").write_text('{"a": 1}')
    assert hints.load(tmp_path / "obj.json") == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    hints.save(blocker / "sub" / "h.json", ["x"])  # its folder cannot be made: the run goes on
    assert blocker.is_file()
