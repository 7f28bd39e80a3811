"""The module structure: `import hearth_plugin` stays cheap (no grpc, protobuf, asyncio
or pydantic until a plugin is served), and the SDK's modules import each other without
cycles (no import hidden in a function to break one)."""

import ast
import json
import subprocess
import sys

from fakebroker import SDK_DIR

PKG = SDK_DIR / "hearth_plugin"
#: Modules a function may import lazily, each measured as a real cost at start-up:
#: the generated protobuf/grpc stubs, and the runtime (grpc + asyncio, ~110 ms).
LAZY = ("v1", "v1.host_pb2", "v1.plugin_pb2", "v1.host_pb2_grpc", "_runtime", "_main")


def modules():
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        if rel.parts[0] == "v1":
            continue
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(parts)] = path
    return out


def _targets(name, node, is_pkg):
    """The modules a relative `from … import` imports, named relative to the package
    root ("" is hearth_plugin itself): `from . import _matrix` imports the submodule."""
    base = name.split(".") if name else []
    if not is_pkg:
        base = base[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    if node.module:
        return [".".join(base + node.module.split("."))]
    known = modules()
    out = []
    for alias in node.names:
        sub = ".".join(base + [alias.name])
        out.append(sub if sub in known or sub.startswith("v1") else ".".join(base))
    return out


def test_import_hearth_plugin_loads_no_grpc_protobuf_asyncio_or_pydantic():
    code = ("import json, sys, hearth_plugin\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('grpc', 'google', 'asyncio', 'pydantic') or m in ('hearth_plugin._runtime', "
            "'hearth_plugin._loader', 'hearth_plugin._schema', 'hearth_plugin.testing'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=str(SDK_DIR))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_every_module_imports_first_on_its_own():
    for name in modules():
        mod = "hearth_plugin" + (f".{name}" if name else "")
        out = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True,
                             timeout=60, cwd=str(SDK_DIR))
        assert out.returncode == 0, f"import {mod}:\n{out.stderr}"


def test_module_imports_form_no_cycle_and_functions_import_only_lazy_modules():
    graph = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                deps.update(_targets(name, node, is_pkg))
        graph[name] = {d for d in deps if d in modules() and d != name}
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(fn):
                    if isinstance(sub, ast.ImportFrom) and sub.level:
                        for target in _targets(name, sub, is_pkg):
                            assert target in LAZY, \
                                f"{path}: function {fn.name} imports {target or 'hearth_plugin'} (import it at module level)"
    # Depth-first search for a cycle among module-level imports.
    state = {}

    def visit(n, stack):
        state[n] = "open"
        for d in sorted(graph.get(n, ())):
            if state.get(d) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack + [n, d]))
            if d not in state:
                visit(d, stack + [n])
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
