"""Applies eagle3_torch_native's patches inside every process of a speculative CPU test server (tests only).

`eagle_datagen_stack.sglang_engine` puts this folder on the engine's PYTHONPATH only for a server started with a
drafter; Python imports `sitecustomize` at startup, so the patch reaches the scheduler process SGLang spawns too.
Each patch runs right after its SGLang module is first imported (a meta-path finder wraps that module's loader),
so nothing of SGLang is imported early and nothing in the shared environment is edited.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

_PATCHES = {
    "sglang.srt.layers.attention.torch_native_backend": "patch_torch_native_backend",
    "sglang.srt.speculative.draft_utils": "patch_draft_backend_factory",
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _PATCHES:
            return None
        sys.meta_path.remove(self)  # find the module's real spec with the other finders
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        plain_exec = spec.loader.exec_module

        def exec_module(module):
            plain_exec(module)
            import eagle3_torch_native

            getattr(eagle3_torch_native, _PATCHES[fullname])(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchAfterImport())
