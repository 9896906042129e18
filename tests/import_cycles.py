"""`make lint`: fail on an import cycle inside a package (default llmfleet), counting every import
statement: at module level, inside functions and under `if TYPE_CHECKING:` (grimp, the graph
library of import-linter, reads them all).

Two levels:

- modules (the default): a cycle between any two modules;
- packages (``--packages``): each subpackage (llmfleet.audit, llmfleet.lab, llmfleet.probe,
  llmfleet.remote, and any later one) is one node, each core module (llmfleet.schema,
  llmfleet.settings, ...) a node of its own; a cycle between those nodes fails, e.g. the core
  module llmfleet.schema importing llmfleet.probe.config while llmfleet.probe imports the core.
  Each cycle is reported with an import statement (file:line and the line) for each of its steps.

    python tests/import_cycles.py [--packages] [PACKAGE]
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections import deque
from pathlib import Path

import grimp


def import_cycles(package: str) -> list[list[str]]:
    """Each cycle once, as the chain of modules that import each other (the first one again last)."""
    graph = grimp.build_graph(package, cache_dir=None)
    cycles, seen = [], set()
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back and frozenset(back) not in seen:
                seen.add(frozenset(back))
                cycles.append([importer, *back])
    return cycles


def _node(module: str, subpackages: set[str]) -> str:
    """The package-level node of a module: its subpackage (package.<sub>), else the module itself
    (a core module, or the package's own __init__)."""
    parts = module.split(".")
    top = ".".join(parts[:2])
    return top if top in subpackages else module


def _shortest_path(edges: dict[str, set[str]], start: str, end: str) -> list[str] | None:
    """The shortest chain of nodes from start to end (both included), None where there is none."""
    before: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == end:
            path = [node]
            while before[path[-1]] is not None:
                path.append(before[path[-1]])  # type: ignore[arg-type]  # (None ends the loop)
            return path[::-1]
        for nxt in sorted(edges.get(node, ())):
            if nxt not in before:
                before[nxt] = node
                queue.append(nxt)
    return None


def package_graph(graph) -> tuple[dict[str, set[str]], dict[tuple[str, str], list[tuple[str, str]]]]:
    """The imports between package-level nodes of a grimp graph: {node: nodes it imports}, and for
    each such edge the module imports that make it [(importer, imported)], sorted."""
    subpackages = {m for m in graph.modules if m.count(".") == 1 and graph.find_children(m)}
    edges: dict[str, set[str]] = {}
    why: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            a, b = _node(importer, subpackages), _node(imported, subpackages)
            if a != b:
                edges.setdefault(a, set()).add(b)
                why.setdefault((a, b), []).append((importer, imported))
    return edges, why


def package_cycles(package: str) -> list[list[str]]:
    """Each cycle between package-level nodes once, as a chain (the first node again last)."""
    return _cycles(package_graph(grimp.build_graph(package, cache_dir=None))[0])


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles, seen = [], set()
    for a in sorted(edges):
        for b in sorted(edges[a]):
            back = _shortest_path(edges, b, a)
            if back and frozenset(back) not in seen:
                seen.add(frozenset(back))
                cycles.append([a, *back])
    return cycles


def _module_file(module: str) -> str:
    """The module's file (found from its top package's folder: no subpackage is imported), relative
    to the working folder where it is below it."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return module
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def package_cycle_report(package: str) -> list[str]:
    """One message per package-level cycle: the chain, then each step's import statements."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges, why = package_graph(graph)
    out = []
    for cycle in _cycles(edges):
        lines = [f"package import cycle in {package}: {' -> '.join(cycle)}"]
        for a, b in itertools.pairwise(cycle):
            lines.append(f"  {a} -> {b}:")
            for importer, imported in why[(a, b)]:
                for d in graph.get_import_details(importer=importer, imported=imported):
                    lines.append(f"    {_module_file(importer)}:{d['line_number']}: {d['line_contents']}")
        out.append("\n".join(lines))
    return out


def main(argv: list[str]) -> int:
    args = argv[1:]
    packages = "--packages" in args
    args = [a for a in args if a != "--packages"]
    package = args[0] if args else "llmfleet"
    if packages:
        found = package_cycle_report(package)
        for message in found:
            print(message, file=sys.stderr)
        if not found:
            print(f"{package}: no import cycles between packages")
        return 1 if found else 0
    cycles = import_cycles(package)
    for cycle in cycles:
        print(f"import cycle in {package}: {' -> '.join(cycle)}", file=sys.stderr)
    if not cycles:
        print(f"{package}: no import cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
