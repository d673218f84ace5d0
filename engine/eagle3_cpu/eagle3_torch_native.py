"""The draft and verify attention SGLang 0.5.23's `torch_native` backend lacks, patched in at run time (tests only).

SGLang serves EAGLE-3 on a CPU only with its `intel_amx` backend, whose kernels come from a CPU build of sgl-kernel
that PyPI does not have; the CPU test engine runs `--attention-backend torch_native` instead, which has neither:
- **target verify**: the verify forward (`ForwardMode.TARGET_VERIFY`) carries no `extend_*` fields; each request
  extends its committed prefix (`seq_lens`) by the `draft_token_num` draft tokens, so they are derived here as
  intel_amx's `_build_extend_metadata` does. With top-k 1 the draft tokens form a chain, whose visibility is exactly
  the causal mask `torch_native` already applies (intel_amx skips the tree mask for top-k 1 for the same reason);
- **the multi-step draft decode backend**: draft step i's query sees the committed prefix plus draft tokens 0..i,
  whose slots follow the prefix in `req_to_token` (`assign_draft_cache_locs_contiguous`), so it is a decode over
  `seq_lens + i + 1` tokens (intel_amx's `IntelAMXMultiStepDraftBackend` with top-k 1);
- `DraftBackendFactory` entries for `torch_native` (draft decode: the backend above; draft extend: a plain
  `TorchNativeAttnBackend`, since SGLang's draft extend is an ordinary extend with `extend_*` fields).
Top-k > 1 (a real tree) would need the tree mask in the attention and is refused at startup in one line.

`sitecustomize.py` beside this file applies `patch_torch_native_backend` and `patch_draft_backend_factory` when those
SGLang modules are first imported, in every engine process (SGLang spawns its scheduler).
"""

from __future__ import annotations

import torch


class _BatchView:
    """A ForwardBatch with some fields replaced, read through to the batch for everything else."""

    def __init__(self, batch, **fields) -> None:
        self.__dict__["_batch"] = batch
        self.__dict__.update(fields)

    def __getattr__(self, name):
        return getattr(self._batch, name)


def _verify_view(forward_batch):
    """The verify batch as an extend: prefix = committed tokens, extend = the draft tokens."""
    draft_tokens = forward_batch.spec_info.draft_token_num
    prefix = forward_batch.seq_lens
    extend = torch.full_like(prefix, draft_tokens)
    return _BatchView(forward_batch, seq_lens=prefix + draft_tokens, extend_prefix_lens=prefix,
                      extend_seq_lens=extend)


def patch_torch_native_backend(module) -> None:
    """Give TorchNativeAttnBackend target verify, and add the per-step draft decode backends."""
    backend_class = module.TorchNativeAttnBackend
    if getattr(backend_class, "_eagle_datagen_patched", False):
        return
    plain_forward_extend = backend_class.forward_extend

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        if forward_batch.forward_mode.is_target_verify():
            if getattr(forward_batch.spec_info, "tree_topk", 1) != 1:
                raise NotImplementedError("the CPU stand-in verifies only top-k 1 drafts (a chain)")
            forward_batch = _verify_view(forward_batch)
        return plain_forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    class TorchNativeDraftStepBackend(backend_class):
        """Draft decode step `step`: the prefix and draft tokens 0..step (top-k 1)."""

        def __init__(self, model_runner, step: int) -> None:
            super().__init__(model_runner)
            self.step = step

        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            seen = _BatchView(forward_batch, seq_lens=forward_batch.seq_lens + self.step + 1)
            return super().forward_decode(q, k, v, layer, seen, save_kv_cache=save_kv_cache, **kwargs)

    class TorchNativeMultiStepDraftBackend:
        """One TorchNativeDraftStepBackend per draft decode step but the last (which only samples)."""

        def __init__(self, model_runner, topk: int, speculative_num_steps: int) -> None:
            if topk != 1:
                raise NotImplementedError(
                    f"--speculative-eagle-topk {topk}: the CPU stand-in's torch_native draft attention supports "
                    "top-k 1 only (a chain of draft tokens)"
                )
            self.topk = topk
            self.speculative_num_steps = speculative_num_steps
            self.attn_backends = [TorchNativeDraftStepBackend(model_runner, step)
                                  for step in range(speculative_num_steps - 1)]

        def init_forward_metadata(self, forward_batch) -> None:
            for backend in self.attn_backends:
                backend.init_forward_metadata(forward_batch)

    backend_class.forward_extend = forward_extend
    backend_class._eagle_datagen_patched = True
    module.TorchNativeDraftStepBackend = TorchNativeDraftStepBackend
    module.TorchNativeMultiStepDraftBackend = TorchNativeMultiStepDraftBackend


def patch_draft_backend_factory(module) -> None:
    """Map `torch_native` in DraftBackendFactory: per-step decode backends, a plain backend for draft extend."""
    factory = module.DraftBackendFactory
    if getattr(factory, "_eagle_datagen_patched", False):
        return
    plain_create_backend = factory._create_backend

    def _create_backend(self, backend_name, backend_map, error_template, stamps_children=False):
        from sglang.srt.layers.attention import torch_native_backend

        patch_torch_native_backend(torch_native_backend)
        runner = self.draft_model_runner
        if stamps_children:  # the multi-step draft decode container
            def make():
                return "torch_native", torch_native_backend.TorchNativeMultiStepDraftBackend(
                    runner, self.topk, self.speculative_num_steps)
        else:
            def make():
                return "torch_native", torch_native_backend.TorchNativeAttnBackend(runner)
        backend_map = {**backend_map, "torch_native": make}
        return plain_create_backend(self, backend_name, backend_map, error_template, stamps_children)

    factory._create_backend = _create_backend
    factory._eagle_datagen_patched = True
