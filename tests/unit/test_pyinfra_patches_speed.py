"""llmfleet/pyinfra_patches/speed.py: pyinfra's own functions and their replacements, side by side, give the
same answers (the operation order from a deploy file's call stack, multi-line calls included, and
the global arguments), and install/uninstall put them in and back."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pyinfra
import pytest

from llmfleet.pyinfra_patches import speed as pyinfra_speed

pyinfra_arguments = importlib.import_module("pyinfra.api.arguments")
pyinfra_operation = importlib.import_module("pyinfra.api.operation")
pyinfra_util = importlib.import_module("pyinfra.api.util")

DEPLOY = '''
def operation(state):
    both = ORIGINAL(state), FAST(state)  # one line: the same line for both
    return both


def group(state):
    return operation(
        state,
    )


RESULT = group(
    STATE,
)
'''


def both_from_a_deploy_file(tmp_path, deploy_name: bool, found: bool) -> tuple[list, list]:
    """pyinfra's get_operation_order_from_stack and order_from_stack, each called on the same line of
    a deploy file's code (compiled under its own file name, as pyinfra's CLI runs it)."""
    path = tmp_path / "deploy.py"
    path.write_text(DEPLOY)
    state = SimpleNamespace(current_deploy_filename=(str(path) if found else str(tmp_path / "other.py"))
                            if deploy_name else None, current_op_file_number=7)
    scope = {"ORIGINAL": pyinfra_util.get_operation_order_from_stack, "FAST": pyinfra_speed.order_from_stack,
             "STATE": state}
    exec(compile(DEPLOY, str(path), "exec"), scope)
    return scope["RESULT"]


@pytest.mark.parametrize("cli", [True, False])
@pytest.mark.parametrize("deploy_name,found", [(True, True), (True, False), (False, True)])
def test_the_operation_order_is_pyinfras_own_from_a_deploy_files_stack(tmp_path, monkeypatch, cli, deploy_name,
                                                                       found):
    monkeypatch.setattr(pyinfra, "is_cli", cli)
    original, fast = both_from_a_deploy_file(tmp_path, deploy_name, found)
    assert fast == original
    if deploy_name and found:
        # the deploy file's lines, outermost first: the call of group(), of operation(), of the tuple's
        # entry (a call over several lines: its first line, as inspect reads it)
        assert original[int(cli):][:3] == [13, 8, 3], original
    if deploy_name and not found:
        assert original == ([7] if cli else [])


def test_the_global_arguments_are_pyinfras_own_and_a_fresh_list_each_time():
    original = pyinfra_arguments.all_global_arguments()
    first = pyinfra_speed.global_arguments()
    assert first == original and len(first) > 10
    first.clear()
    assert pyinfra_speed.global_arguments() == original


def test_install_puts_both_in_pyinfras_place_and_uninstall_puts_pyinfras_back(monkeypatch):
    monkeypatch.delenv("LLMFLEET_PYINFRA_SPEED", raising=False)
    before = (pyinfra_operation.get_operation_order_from_stack, pyinfra_arguments.all_global_arguments)
    pyinfra_speed.install()
    try:
        assert pyinfra_operation.get_operation_order_from_stack is pyinfra_speed.order_from_stack
        assert pyinfra_arguments.all_global_arguments is pyinfra_speed.global_arguments
    finally:
        pyinfra_speed.uninstall()
    assert (pyinfra_operation.get_operation_order_from_stack, pyinfra_arguments.all_global_arguments) == before


def test_llmfleet_pyinfra_speed_off_leaves_pyinfra_as_it_is(monkeypatch):
    monkeypatch.setenv("LLMFLEET_PYINFRA_SPEED", "off")
    before = pyinfra_operation.get_operation_order_from_stack
    pyinfra_speed.install()
    assert pyinfra_operation.get_operation_order_from_stack is before
    pyinfra_speed.uninstall()
