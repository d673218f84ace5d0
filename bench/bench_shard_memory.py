"""Shard memory benchmark: peak memory and wall time of publishing one shard, finalizing the run and exporting it
(jsonl, plain, with --shuffle-seed, and with a training mix that resamples: --mix chat=1.5, ours only), at a
shard's size in output tokens, ours against a baseline checkout.

Each size is one shard of Kimi-K2.5-like samples, 4 per prompt, 24k-32k output tokens each (1,000 prompts: the
112M-token shard of issue 22), with its plan and checkpoint chunks synthesized on a local output root
(bench/shard_inputs.py: no server). Each step runs in a subprocess (PYTHONPATH the checkout's include/), its PSS
sampled every 0.2 s (bench_plan.measure). The baseline publishes first; its files' sha256 are compared with ours
(identical bytes), then removed so that ours are the run's; the exports' sha256 are compared the same way.

    .venv/bin/python bench/bench_shard_memory.py --sizes 10M,112M --baseline /work/wt-base-pub --workdir /tmp/shardmem
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_plan  # noqa: E402
from eagle_datagen.storage.output_root import LocalOutputRoot  # noqa: E402
from shard_inputs import synthesize_shard  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PER_PROMPT_TOKENS = 4 * 28_000
SIZES = {"toy": (3, 2, (100, 300)), **{f"{m}M": None for m in (10, 16, 100, 112)}}

PUBLISH = """
import sys
from eagle_datagen.generation.plan import load_plan
from eagle_datagen.generation.publish import PublishOptions, {step}
from eagle_datagen.profile import load_profile
from eagle_datagen.storage.output_root import LocalOutputRoot
root = LocalOutputRoot(sys.argv[1])
plan = load_plan(root, sys.argv[2])
profile = load_profile("kimi-k2.5")
{call}
"""
CALLS = {
    "publish": ("publish_shard", "publish_shard(root, plan, 0, profile, PublishOptions())"),
    "finalize": ("finalize_run", "finalize_run(root, plan, profile, PublishOptions(draft_vocab_size=1000))"),
}


def shape(size: str) -> tuple[int, int, tuple[int, int]]:
    """(prompts, samples per prompt, output token range) of a size name."""
    if SIZES.get(size) is not None:
        return SIZES[size]  # type: ignore[return-value]
    tokens = int(float(size.rstrip("M")) * 1_000_000)
    return max(1, round(tokens / PER_PROMPT_TOKENS)), 4, (24_000, 32_000)


def sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(2**24):
            digest.update(chunk)
    return digest.hexdigest()


def _env(checkout: Path) -> dict[str, str]:
    return os.environ | {
        "PYTHONPATH": f"{checkout / 'include'}:{checkout / 'plugins'}:{checkout}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "EAGLE_DATAGEN_LOG_LEVEL": "WARNING",
    }


MIX = "chat=1.5"  # every row once, half of them twice: the mixed export stages rows and writes copies


def step(
    name: str,
    checkout: Path,
    out: Path,
    run_id: str,
    export_to: Path | None = None,
    seed: int | None = None,
    mix: str | None = None,
):
    if name in CALLS:
        function, call = CALLS[name]
        command = [sys.executable, "-c", PUBLISH.format(step=function, call=call), str(out), run_id]
    else:
        command = [sys.executable, "-m", "eagle_datagen.cli", "export", "--output", str(out), "--run-id", run_id]
        command += ["--format", "jsonl", "--to", str(export_to)]
        command += ["--shuffle-seed", str(seed)] if seed is not None else []
        command += ["--mix", mix] if mix is not None else []
    return bench_plan.measure(command, _env(checkout))


def shard_files(out: Path) -> list[Path]:
    return sorted([*out.glob("data/**/*.parquet"), *out.glob("quarantine/**/*.parquet")])


def run_size(size: str, workdir: Path, checkouts: dict[str, Path]) -> dict[str, Any]:
    prompts, samples, lengths = shape(size)
    out = workdir / size / "out"
    shutil.rmtree(workdir / size, ignore_errors=True)
    started = time.monotonic()
    plan, tokens = synthesize_shard(LocalOutputRoot(str(out)), "bench", prompts, samples, lengths, seed=22)
    checkpoint_bytes = sum(p.stat().st_size for p in out.glob("checkpoints/**/*") if p.is_file())
    result: dict[str, Any] = {
        "size": size,
        "prompts": prompts,
        "samples": plan.total_samples,
        "output_tokens": tokens,
        "checkpoint_bytes": checkpoint_bytes,
        "synthesized_s": round(time.monotonic() - started, 1),
    }
    hashes: dict[str, list[str]] = {}
    for who, checkout in checkouts.items():  # the baseline first: ours stay published
        for path in shard_files(out):
            path.unlink()
        result[f"publish_{who}"] = step("publish", checkout, out, "bench")
        hashes[who] = [sha(p) for p in shard_files(out)]
    result["publish_identical"] = len(set(map(tuple, hashes.values()))) == 1
    result["data_bytes"] = sum(p.stat().st_size for p in shard_files(out))
    for who, checkout in checkouts.items():
        (out / "manifests" / "run=bench.json").unlink(missing_ok=True)
        result[f"finalize_{who}"] = step("finalize", checkout, out, "bench")
    for label, seed, mix in (("export", None, None), ("export_shuffled", 7, None), ("export_mixed", 7, MIX)):
        digests = []
        for who, checkout in checkouts.items():
            if mix is not None and who != "ours":
                continue  # the baseline has no mixes
            target = workdir / size / f"{label}-{who}.jsonl"
            result[f"{label}_{who}"] = step("export", checkout, out, "bench", target, seed, mix)
            digests.append(sha(target))
            target.unlink()
            target.with_name(target.name + ".export_info.yaml").unlink(missing_ok=True)
        result[f"{label}_identical"] = len(set(digests)) == 1
    print(json.dumps(result), flush=True)
    return result


def table(results: list[dict[str, Any]], baseline: bool) -> str:
    lines = [
        "| shard | step | ours: peak PSS | ours: wall | main: peak PSS | main: wall | same output |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for label in ("publish", "finalize", "export", "export_shuffled", "export_mixed"):
            ours = r[f"{label}_ours"]
            base = r.get(f"{label}_main") if baseline else None
            same = r.get(f"{label}_identical") if label not in ("finalize", "export_mixed") else None
            base_pss = f"{base['peak_pss_mb']:,} MB" if base else "-"
            base_wall = f"{base['wall_s']} s" if base else "-"
            lines.append(
                f"| {r['output_tokens'] / 1e6:.1f}M tokens ({r['samples']:,} samples) | {label.replace('_', ' ')} "
                f"| {ours['peak_pss_mb']:,} MB | {ours['wall_s']} s | {base_pss} | {base_wall} "
                f"| {'yes' if same else '-' if same is None else 'NO'} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10M,100M,112M")
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with (main)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/eagle-shard-memory"))
    parser.add_argument("--keep", action="store_true", help="keep the workdir")
    args = parser.parse_args()
    bench_plan.POLL_S = 0.2
    checkouts = {"main": args.baseline} if args.baseline else {}
    checkouts["ours"] = REPO
    results = []
    try:
        for size in args.sizes.split(","):
            results.append(run_size(size, args.workdir, checkouts))
            shutil.rmtree(args.workdir / size, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}")
    print(table(results, args.baseline is not None))
    for r in results:
        if r["output_tokens"]:
            print(
                f"{r['size']}: data {r['data_bytes'] / r['output_tokens']:.2f} B/token, "
                f"checkpoints {r['checkpoint_bytes'] / r['output_tokens']:.2f} B/token"
            )


if __name__ == "__main__":
    main()
