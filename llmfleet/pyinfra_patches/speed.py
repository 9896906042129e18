"""Two of pyinfra's costs that every operation pays on every host, paid once or made cheap, with the
same results: what a deploy's control machine spends per host (benchmarks/fleet_scale.py).

pyinfra 3.10 (the version pyproject.toml pins), profiled in a no-change dry run of deploy.py on 12
lab hosts (cProfile, `python -m cProfile -m pyinfra benchmarks/inventories/lab.py deploy.py --dry`):

- `pyinfra.api.util.get_operation_order_from_stack`, called for every operation on every host in CLI
  mode (pyinfra/api/operation.py: solve_operation_consistency), lists the call stack with
  `inspect.stack()`. That reads a line of source for every frame of the stack, and finds each frame's
  module by a search of sys.modules (inspect.getmodule): 22 % of the dry run's profiled time. What it
  keeps of each frame is its file name and line number, which the frame holds:
  `order_from_stack` reads them from the frames themselves, in the same order, with the same rules.
- `pyinfra.api.arguments.all_global_arguments`, called at every operation and every fact read
  (pop_global_arguments), computes `typing.get_type_hints` of a class that never changes: 9 %.
  `global_arguments` computes it once and hands out a fresh list each time, as pyinfra does.

tests/unit/test_pyinfra_patches_speed.py runs pyinfra's own functions and these side by side and asks for the
same answers. deploy.py calls install() first; LLMFLEET_PYINFRA_SPEED=off leaves pyinfra as it is.
"""

from __future__ import annotations

import importlib
import itertools
import os
import sys
from types import FrameType
from typing import Any

import pyinfra

from llmfleet import hints

# the modules (pyinfra.api's own names `operation`... are its functions, not these)
pyinfra_arguments: Any = importlib.import_module("pyinfra.api.arguments")
pyinfra_operation: Any = importlib.import_module("pyinfra.api.operation")
pyinfra_util: Any = importlib.import_module("pyinfra.api.util")

_ORIGINAL: dict[str, Any] = {}


def order_from_stack(state: Any) -> list[int]:
    """pyinfra.api.util.get_operation_order_from_stack, read from the frames. The stack starts at the
    caller's frame: pyinfra's own function starts at its own, which lies in pyinfra's folder and so
    never adds a line number."""
    frames: list[FrameType] = []
    at: FrameType | None = sys._getframe(1)
    while at is not None:
        frames.append(at)
        at = at.f_back
    frames.reverse()  # outermost first, as pyinfra reverses inspect.stack()
    start = 0
    if state.current_deploy_filename:
        start = len(frames)  # pyinfra's loop without a match leaves its own (pyinfra) frame: no line
        for i, f in enumerate(frames):
            if f.f_code.co_filename == state.current_deploy_filename:
                start = i
                break
    line_numbers: list[int] = []
    if pyinfra.is_cli:
        line_numbers.append(state.current_op_file_number)
    for f in frames[start:]:
        if f.f_code.co_filename.startswith(pyinfra_util.PYINFRA_INSTALL_DIR):
            continue
        line_numbers.append(_line(f))
    return line_numbers


_LINES: dict[tuple[Any, int], int] = {}  # (code, instruction) -> line: a deploy has few call sites


def _line(frame: FrameType) -> int:
    """The line inspect.getframeinfo gives a frame: the first line of the instruction's position (for
    a call over several lines, the line it starts on, where f_lineno can be a later one)."""
    key = (frame.f_code, frame.f_lasti)
    line = _LINES.get(key)
    if line is None:
        position = next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None), (None,)) \
            if frame.f_lasti >= 0 else (None,)
        line = _LINES[key] = position[0] if position[0] is not None else frame.f_lineno
    return line


_HINTS: list[tuple[str, type]] = []


def global_arguments() -> list[tuple[str, type]]:
    """pyinfra.api.arguments.all_global_arguments, computed once."""
    if not _HINTS:
        _HINTS.extend(_ORIGINAL.get("all_global_arguments", pyinfra_arguments.all_global_arguments)())
    return list(_HINTS)


def install() -> None:
    """Put both in pyinfra's place (once per process); a no-op with LLMFLEET_PYINFRA_SPEED=off."""
    if _ORIGINAL or os.environ.get("LLMFLEET_PYINFRA_SPEED", "on").lower() in hints.OFF:
        return
    _ORIGINAL["get_operation_order_from_stack"] = pyinfra_operation.get_operation_order_from_stack
    _ORIGINAL["all_global_arguments"] = pyinfra_arguments.all_global_arguments
    pyinfra_operation.get_operation_order_from_stack = order_from_stack  # type: ignore[assignment]
    pyinfra_arguments.all_global_arguments = global_arguments


def uninstall() -> None:
    """pyinfra as it was (the tests use it)."""
    if not _ORIGINAL:
        return
    pyinfra_operation.get_operation_order_from_stack = _ORIGINAL.pop("get_operation_order_from_stack")
    pyinfra_arguments.all_global_arguments = _ORIGINAL.pop("all_global_arguments")
