"""The package's module-level imports form no cycle (data and dependencies flow one way)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ssd_demo"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """ssd_demo modules imported at module level (imports inside functions are deliberate deferrals)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports never run
            continue
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in modules and c != name}
    return found


def test_no_import_cycle_in_the_package():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports(p, modules) for p in paths}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for dependency in sorted(graph[module]):
            if state.get(dependency) == 1:
                cycle = path[path.index(dependency):] + [dependency]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dependency not in state:
                visit(dependency)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert graph["ssd_demo.config"] >= {"ssd_demo.rules.registry"}  # the walk sees real edges
