"""A stand-in for SGLang's `sgl_kernel` package, so SGLang's CPU engine imports without its native kernels.

PyPI's `sgl-kernel`/`sglang-kernel` wheels are CUDA-only; with SGLANG_USE_CPU_ENGINE=1 about 26 SGLang modules
import CPU kernels from `sgl_kernel` (and its submodules) at import time, though the Llama path on the CPU
calls only one of them: `assign_req_to_token_pool_cpu`, written below in plain torch. Every other name, in
this module or any `sgl_kernel.*` submodule, is a stub that raises when called, so a code path that does need a
real kernel fails loudly instead of computing something wrong. Test support only: never used in production.
The seven more that SGLang's EAGLE-3 path calls (speculative decoding with a drafter) are in speculative_ops.py.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

from sgl_kernel.speculative_ops import (  # noqa: F401  (names SGLang imports from sgl_kernel)
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    build_tree_kernel_efficient_cpu,
    copy_all_layer_kv_cache_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    verify_tree_greedy_cpu,
)

__version__ = "0.0.0+eagle-datagen-stub"


class _Stub:
    """A kernel that is not here: importable, raises when called."""

    def __init__(self, qualified_name: str) -> None:
        self._name = qualified_name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._name} is a stub of eagle-datagen's engine/shims/sgl_kernel: this SGLang code path needs a "
            "real sgl_kernel build (CUDA), which the CPU test engine does not have"
        )

    def __getattr__(self, attribute: str) -> _Stub:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Stub(f"{self._name}.{attribute}")

    def __repr__(self) -> str:
        return f"<sgl_kernel stub {self._name}>"


def _stub_attribute(module_name: str, attribute: str):
    if attribute.startswith("__"):
        raise AttributeError(attribute)
    return _Stub(f"{module_name}.{attribute}")


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len: int) -> None:
    """Write each request's new cache slots into its row of the request-to-token table.

    Request i's slots are the next (end_offset[i] - start_offset[i]) entries of out_cache_loc, stored at
    req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]] (what SGLang's triton kernel
    assign_req_to_token_pool does on a GPU).
    """
    del pool_len  # the row length; torch indexing knows it
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    taken = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[taken : taken + count].to(req_to_token.dtype)
        taken += count


class _StubSubmodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers any `import sgl_kernel.x.y` with a module whose every name is a stub."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attribute: _stub_attribute(spec.name, attribute)
        return module

    def exec_module(self, module) -> None:
        return None


def __getattr__(attribute: str):
    return _stub_attribute(__name__, attribute)


sys.meta_path.append(_StubSubmodules())
