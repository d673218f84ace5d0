"""Let PyPI's torchvision import beside the CPU torch of the engine environment.

PyPI's torchvision wheel is a CUDA build: beside torch's CPU build its `_C` extension does not load, so its ops
are absent, and the two fake-op registrations of `torchvision/_meta_registrations.py` (`torchvision::nms`,
`torchvision::qnms`) raise `operator torchvision::nms does not exist` at import. SGLang imports torchvision
(its multimodal configs, through transformers' image utilities) even to serve a text model, and never calls
those ops on this path. This rewrites the two decorators so they register only when torchvision's ops loaded,
as torchvision's own `register_meta` already does for the other ops. Idempotent: a patched file is left alone.

Usage: python engine/patch_torchvision.py   (with the engine environment's python)
"""

from __future__ import annotations

import sys
from pathlib import Path

_GUARD = "if torchvision.extension._has_ops() else (lambda fn: fn))"
_OPS = ("torchvision::nms", "torchvision::qnms")


def patch(source: str) -> str:
    for op in _OPS:
        plain = f'@torch.library.register_fake("{op}")\n'
        guarded = f'@(torch.library.register_fake("{op}") {_GUARD}\n'
        if guarded in source:
            continue
        if plain not in source:
            raise SystemExit(f"patch_torchvision: {op}'s registration not found: is this torchvision's layout?")
        source = source.replace(plain, guarded)
    return source


def main() -> None:
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise SystemExit("patch_torchvision: torchvision is not installed in this environment")
    target = Path(spec.origin).parent / "_meta_registrations.py"
    before = target.read_text()
    after = patch(before)
    if after != before:
        target.write_text(after)
        print(f"patch_torchvision: guarded {', '.join(_OPS)} in {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
