"""The Python packages' import graph, read from the source with `ast` (nothing is imported):
no module imports itself through others (a cycle works only as long as the imports happen in the
right order, and breaks when someone moves one), and the layers of docs/architecture.md hold:
hora.common knows no framework and no frontend; a frontend (hora.torch, ...) reaches hora's
engine only through hora.common; the runners (hora.run, hora.spark, hora.ray) import no frontend
and no framework."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Each folder whose subfolders are top-level Python packages, as installed.
SOURCE_ROOTS = [os.path.join(ROOT, "python"), os.path.join(ROOT, "python", "horovod_compat")]
FRONTENDS = ("hora.torch", "hora.tensorflow", "hora.keras", "hora._keras")
# A frontend built on another's public API, as Horovod's Keras modules are on horovod.tensorflow:
# the Keras implementation shared by both Keras modules (hora._keras) calls hora.tensorflow's
# collectives, and each Keras module binds it to its Keras.
BUILT_ON = {"hora._keras": ("hora.tensorflow",), "hora.tensorflow": ("hora._keras",),
            "hora.keras": ("hora._keras", "hora.tensorflow")}
FRAMEWORKS = ("torch", "tensorflow", "keras")
RUNNERS = ("hora.runner", "hora._run_worker", "hora._elastic_job", "hora._worker_proxy", "hora.spark", "hora.ray")


def module_files():
    """{dotted module name: path} of every module under python/ (a package is its __init__)."""
    modules = {}
    for source_root in SOURCE_ROOTS:
        for entry in sorted(os.listdir(source_root)):
            top = os.path.join(source_root, entry)
            if not os.path.isfile(os.path.join(top, "__init__.py")):
                continue
            for folder, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py"))]
                package = os.path.relpath(folder, source_root).replace(os.sep, ".")
                for f in files:
                    if f.endswith(".py"):
                        name = package if f == "__init__.py" else f"{package}.{f[:-3]}"
                        modules[name] = os.path.join(folder, f)
    return modules


def imported_names(name, path):
    """Every module name `name` imports, anywhere in the file (an import inside a function
    closes a cycle as surely as one at the top, only later)."""
    is_package = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                anchor = parts[:len(parts) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            # `from package import submodule` imports the submodule.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph():
    """{module: set of modules of python/ it imports}."""
    modules = module_files()
    return {name: {m for m in imported_names(name, path) if m in modules and m != name}
            for name, path in modules.items()}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm), each
    sorted; a module in one can reach every other and itself."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_covers_the_packages():
    graph = import_graph()
    assert {"hora.common.basics", "hora.torch.mpi_ops", "horovod.torch"} <= set(graph)
    assert "hora.torch.basics" in graph["hora.torch.mpi_ops"]


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    found = cycles(import_graph())
    assert found == [], f"modules that import each other (directly or through others): {found}"


def in_package(module, packages):
    return any(module == p or module.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("name,path", sorted(module_files().items()))
def test_layers(name, path):
    imports = imported_names(name, path)
    if in_package(name, ("hora.common",)):
        wrong = [m for m in imports if in_package(m, FRONTENDS + FRAMEWORKS)]
        assert wrong == [], f"{name} is framework-neutral, but imports {wrong}"
    for frontend in FRONTENDS:
        if in_package(name, (frontend,)):
            # hora itself (the package, for hora.run) and hora.common; not the extension, nor
            # another frontend's modules unless it is built on that frontend.
            allowed = ("hora.common", frontend) + BUILT_ON.get(frontend, ())
            wrong = [m for m in imports if in_package(m, ("hora",)) and m != "hora" and not in_package(m, allowed)]
            assert wrong == [], f"{name} is part of {frontend}, which reaches hora through hora.common, " \
                                f"but imports {wrong}"
    if in_package(name, RUNNERS):
        # The user's function imports the frontend it uses; a runner must work with any.
        wrong = [m for m in imports if in_package(m, FRONTENDS + FRAMEWORKS)]
        assert wrong == [], f"{name} runs functions of any frontend, but imports {wrong}"
