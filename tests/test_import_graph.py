"""The package's imports flow one way: no cycle at module level, and the layers (library <- tools <- app)
import downwards only, deferred imports included."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ssd_demo"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str], deferred: bool = False) -> set[str]:
    """ssd_demo modules imported at module level (imports inside functions are deliberate deferrals), or
    anywhere in the file with `deferred`."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    # `if TYPE_CHECKING:` imports never run, so the cycle check skips module-level ifs.
    nodes = ast.walk(tree) if deferred else (node for node in tree.body if not isinstance(node, ast.If))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules]
            candidates = submodules or [target]  # `from . import charts` imports charts, not the package again
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


def _layer(module: str) -> str:
    if module.startswith("ssd_demo.app"):
        return "app"
    if module.startswith("ssd_demo.tools") or module == "ssd_demo.__main__":
        return "tools"
    return "library"


def test_layers_import_downwards_only():
    # library <- tools <- app: the library never imports the app or the tools, the tools never the app.
    allowed = {"library": {"library"}, "tools": {"library", "tools"}, "app": {"library", "tools", "app"}}
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    wrong = [f"{_module_name(p)} -> {imported}" for p in paths for imported in sorted(_imports(p, modules, deferred=True))
             if _layer(imported) not in allowed[_layer(_module_name(p))]]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
    assert {_layer(m) for m in modules} == {"library", "tools", "app"}


def test_developer_scripts_stay_outside_the_package():
    names = {p.stem for p in PACKAGE.rglob("*.py")}
    assert not names & {"click_timing", "stream_bench", "smoke"} and not any(n.startswith("parity") for n in names)
