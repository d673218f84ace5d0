"""The product package ships no test-only module: every module of include/eagle_datagen is used by the product
itself (the package, the Airflow plugins and DAGs, the engine's build, the build and deployment files), not only
by tests/ or bench/. Test support (fault proxies, shims, record builders) lives under tests/."""

from __future__ import annotations

import re

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
