"""The package's imports flow one way: no cycle, deferred imports included, and the layers (library <- cli <-
app) import downwards only: the library imports neither the command line nor the app, the app never the
command line, and nothing in the package (or the vLLM plugin) imports the developer scripts."""

from support.paths import REPOSITORY

import ast
from pathlib import Path

ROOT = REPOSITORY
PACKAGE = ROOT / "ssd_demo"
ROOT_MODULES = {"__init__.py", "__main__.py", "config.py", "errors.py"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Nodes under `if TYPE_CHECKING:`: those imports never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(child) for child in ast.walk(node)}
    return skipped


def _imported_names(path: Path, modules: frozenset[str] = frozenset()) -> set[str]:
    """Every module an import in the file names, anywhere in it (functions included), absolute; of
    `from package import a, b`, the submodules among a and b when there are any (else the package)."""
    name = _module_name(path) if path.is_relative_to(PACKAGE) else path.stem
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules
            found |= submodules or {target}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    modules = frozenset(modules)
    return {_module_name(p): {m for m in _imported_names(p, modules) if m in modules and m != _module_name(p)}
            for p in paths}


def test_no_import_cycle_in_the_package_deferred_imports_included():
    graph = _graph()
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
    assert "ssd_demo.engine.static_cache" in graph["ssd_demo.engine.generate"] | graph["ssd_demo.engine.kv"]


def _layer(module: str) -> str:
    if module.startswith("ssd_demo.app"):
        return "app"
    if module.startswith("ssd_demo.server"):
        return "server"
    if module.startswith("ssd_demo.cli") or module == "ssd_demo.__main__":
        return "cli"
    return "library"


def test_layers_import_downwards_only():
    # The library imports no front end (command line, app, HTTP server); the app does not import the command
    # line (front ends call the library); the command line never imports the app, and starts the server.
    allowed = {"library": {"library"}, "cli": {"library", "cli", "server"}, "app": {"library", "app"},
               "server": {"library", "server"}}
    graph = _graph()
    wrong = [f"{module} -> {imported}" for module, imports in sorted(graph.items()) for imported in sorted(imports)
             if _layer(imported) not in allowed[_layer(module)]]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
    assert {_layer(m) for m in graph} == {"library", "cli", "app", "server"}


def test_nothing_imports_the_developer_scripts():
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "ssd_vllm_plugin").rglob("*.py"), ROOT / "app.py",
             *(ROOT / "tests").rglob("*.py")]
    wrong = [f"{path.relative_to(ROOT)} -> {name}" for path in files for name in sorted(_imported_names(path))
             if name.split(".")[0] == "scripts"]
    assert not wrong, "scripts/ is developer-only; move what these need into the package:\n" + "\n".join(wrong)


def test_the_vllm_plugin_imports_nothing_of_ssd_demo():
    wrong = [f"{path.relative_to(ROOT)} -> {name}" for path in (ROOT / "ssd_vllm_plugin").rglob("*.py")
             for name in sorted(_imported_names(path)) if name.split(".")[0] == "ssd_demo"]
    assert not wrong, wrong


def test_the_package_root_holds_only_the_entry_points_config_and_errors():
    assert {p.name for p in PACKAGE.glob("*.py")} == ROOT_MODULES
    assert not [d.name for d in PACKAGE.iterdir() if d.is_dir() and not (d / "__init__.py").exists()
                and d.name != "__pycache__" and any(d.rglob("*.py"))]


def test_package_init_files_hold_no_code_beyond_imports_and_lazy_lookups():
    # An __init__ re-exports and documents; the code lives in a module of its own (a reader finds it by name).
    allowed = (ast.Import, ast.ImportFrom, ast.Expr, ast.Assign, ast.AnnAssign, ast.FunctionDef)
    wrong = []
    for path in PACKAGE.rglob("__init__.py"):
        for node in ast.parse(path.read_text()).body:
            is_lookup = isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__")
            if not isinstance(node, allowed) or (isinstance(node, ast.FunctionDef) and not is_lookup):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not wrong, "code in package __init__ files: " + ", ".join(wrong)


def test_config_and_the_listening_stores_import_without_torch():
    import subprocess
    import sys

    code = ("import sys, ssd_demo.config, ssd_demo.listening.study_store, ssd_demo.listening.ab_mos, "
            "ssd_demo.listening.migrations; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_developer_scripts_stay_outside_the_package():
    names = {p.stem for p in PACKAGE.rglob("*.py")}
    assert not names & {"click_timing", "race_bench", "smoke"} and not any(n.startswith("parity") for n in names)
