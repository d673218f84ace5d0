"""The product package ships no test-only module: every module of include/eagle_datagen is used by the product
itself (the package, the Airflow plugins and DAGs, the engine's build, the build and deployment files), not only
by tests/ or bench/. Test support (fault proxies, shims, record builders) lives under tests/."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

PRODUCT_CODE = ["include", "plugins", "dags", "engine"]
BUILD_FILES = ["pyproject.toml", "Makefile", "Dockerfile", "docker-compose.yaml"]


def product_texts() -> dict:
    files = [p for d in PRODUCT_CODE for p in (REPO / d).glob("**/*.py")]
    files += [REPO / f for f in BUILD_FILES if (REPO / f).exists()]
    return {p: p.read_text() for p in files}


def package_modules() -> list[tuple[str, object]]:
    modules = []
    for path in (REPO / "include/eagle_datagen").glob("**/*.py"):
        parts = path.relative_to(REPO / "include").with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):  # a package, or what `python -m` runs
            continue
        modules.append((".".join(parts), path))
    return modules


def test_every_package_module_is_used_by_the_product():
    texts = product_texts()
    unused = []
    for name, path in package_modules():
        package, _, leaf = name.rpartition(".")
        used = re.compile(
            rf"{re.escape(name)}\b|from {re.escape(package)} import [^\n]*\b{leaf}\b|from \.{leaf} import"
            rf"|from \. import [^\n]*\b{leaf}\b"
        )
        if not any(used.search(text) for other, text in texts.items() if other != path):
            unused.append(name)
    assert not unused, f"modules only tests or benchmarks use (move them under tests/): {unused}"


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports, imports inside functions included (they hide cycles)."""
    import ast

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_the_package_or_the_benchmarks():
    package = {}
    for path in (REPO / "include/eagle_datagen").glob("**/*.py"):
        parts = path.relative_to(REPO / "include").with_suffix("").parts
        package[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    bench = {path.stem: path for path in (REPO / "bench").glob("*.py")}
    assert cycles(import_graph(package)) == []
    assert cycles(import_graph(bench)) == []
