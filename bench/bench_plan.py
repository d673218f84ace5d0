"""Planner benchmark: memory and time of sourcing + tokenizing (`eagle-datagen tokenize`) and of building a run's
plan (the same, then claims and shards: `source_and_plan`) at 10k, 100k and 1M prompts.

The prompt set is synthetic and shaped like the users' (issue 22): 8 categories, each with its own system
prompt, a third of the records with a history (user, assistant, user), 5% long prompts (about 6x the others),
about 1,300 stand-in Kimi-K2.5 tokens per prompt on average, written as one JSONL file. Each case runs in a
subprocess; its memory is sampled every 0.5 s as the PSS of the process and its workers together (shared pages
counted once), and the peak is reported with the wall time. With --incremental-new F a second `plan` follows the
first, over the same records plus F (a fraction) new ones, as an incremental run under the same output root:
it must tokenize about F of the prompts (its `tokenized` count). With --catalog N a store of N published sample
ids (one run, shards of 100,000 ids) is written and the catalog an incremental run reads first (`read_catalog`) is
loaded from it in a subprocess: its load time and peak memory (PYTHONPATH picks the code measured).

Run: `.venv/bin/python bench/bench_plan.py --prompts 10000,100000 [--mode tokenize,plan] [--workdir DIR]`
with EAGLE_DATAGEN_CACHE set (the stand-in tokenizer is built once there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
CATEGORIES = ["chat", "code", "math", "agent", "writing", "science", "legal", "support"]
LONG_EVERY = 20  # 5% long prompts
POLL_S = 0.5


def _words(rng: random.Random, vocabulary: list[str], n: int) -> str:
    return " ".join(rng.choices(vocabulary, k=n))


def write_prompts(path: Path, n: int, seed: int = 0, start: int = 0, scale: float = 1.0) -> Path:
    """`n` distinct prompt records numbered from `start` (the same number gives the same record); `scale`
    multiplies their length."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(5000)] + [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "with",
        "as",
    ] * 50
    systems = {c: f"You are the {c} assistant. " + _words(rng, vocabulary, 75) for c in CATEGORIES}
    with path.open("w") as out:
        for i in range(start, start + n):
            r = random.Random(f"{seed}:{i}")
            category = CATEGORIES[i % len(CATEGORIES)]
            words = 165 if i % LONG_EVERY != 7 else 1200
            messages = [{"role": "system", "content": systems[category]}]
            if i % 3 == 0:
                messages += [
                    {"role": "user", "content": _words(r, vocabulary, words // 3)},
                    {"role": "assistant", "content": _words(r, vocabulary, words // 3)},
                ]
                words //= 3
            words = max(1, int(words * scale))
            messages.append({"role": "user", "content": f"Request {i}: " + _words(r, vocabulary, words)})
            out.write(json.dumps({"id": f"p{i}", "category": category, "messages": messages}) + "\n")
    return path


def measure(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall time and peak PSS (the process tree, sampled) of `command`; its last stdout line as JSON, if any."""
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    parent = psutil.Process(process.pid)
    peak = peak_parent = 0
    while process.poll() is None:
        total = 0
        try:
            tree = [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for proc in tree:
            try:
                pss = proc.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += pss
            if proc.pid == parent.pid:
                peak_parent = max(peak_parent, pss)
        peak = max(peak, total)
        time.sleep(POLL_S)
    out = process.stdout.read() if process.stdout else ""
    if process.wait() != 0:
        raise SystemExit(f"{command} failed with {process.returncode}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    return {
        "wall_s": round(time.monotonic() - started, 1),
        "peak_pss_mb": round(peak / 2**20),
        "peak_parent_pss_mb": round(peak_parent / 2**20),
        **result,
    }


def plan_child(prompts: str, output: str, run_id: str, incremental: bool) -> None:
    """Build a run's plan (no servers: the claims and shards of `run`'s plan step) and print what it did."""
    from eagle_datagen.generation.incremental import NothingToDo, claim_samples, read_catalog, skip_published
    from eagle_datagen.generation.plan_build import source_and_plan
    from eagle_datagen.generation.plan_lock import PlanLockPolicy
    from eagle_datagen.generation.stage import SamplingOverrides, category_settings
    from eagle_datagen.storage.output_root import open_output_root
    from eagle_datagen.tokenization import stage as tokenize_stage
    from eagle_datagen.tokenization.stage import TokenizeOptions, setup_tokenize

    counted = {"tokenized": 0}
    inner = tokenize_stage.tokenize_stream

    def counting(loaded: Any, records: Any, *args: Any, **kwargs: Any) -> Any:
        def each() -> Any:
            for record in records:
                counted["tokenized"] += 1
                yield record

        return inner(loaded, each(), *args, **kwargs)

    tokenize_stage.tokenize_stream = counting  # type: ignore[assignment]  (the records handed to the tokenizer)
    fast_path = os.environ.get("BENCH_TIKTOKEN_FAST_PATH") == "1"  # the parent's --tiktoken-fast-path
    options = TokenizeOptions(output=output, tokenizer="standin:kimi-k2.5", prompts=[prompts], trust_remote_code=True,
                              tiktoken_fast_path=fast_path)  # fmt: skip
    setup = setup_tokenize(options)
    root = open_output_root(output)
    model = setup.profile.model

    def settings_for(categories: list[str]) -> Any:
        return category_settings(categories, None, setup.profile, SamplingOverrides())

    catalog = read_catalog(root, model, None, False) if incremental else None  # as prepare_plan does
    skip = skip_published(catalog, model, setup.loaded.provenance(), settings_for) if catalog else None

    def choose(planned: Any, settings: Any) -> Any:
        return claim_samples(
            root,
            run_id,
            planned,
            settings,
            model,
            None,
            incremental=incremental,
            per_weight_version=False,
            claim_ttl_s=3600,
            lock_policy=PlanLockPolicy(),
            catalog=catalog,
        )

    try:
        plan = source_and_plan(
            setup,
            root,
            run_id,
            model=model,
            provenance={},
            shard_size=1000,
            settings_for=settings_for,
            choose=choose,
            skip=skip,
        )
        result = {"samples": plan.total_samples, "shards": len(plan.shards)}
    except NothingToDo:
        result = {"samples": 0, "shards": 0}
    print(json.dumps(result | counted))


def publish_child(output: str, run_id: str) -> None:
    """Make the planned run `run_id` a published one in the catalog's eyes, without generating: a manifest whose
    data file holds the sample ids its claim lists (the catalog reads only that column)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from eagle_datagen.generation.claims import claim_key
    from eagle_datagen.profile import load_profile
    from eagle_datagen.storage.manifest import Manifest, ManifestFile, write_manifest
    from eagle_datagen.storage.objects import put_once
    from eagle_datagen.storage.output_root import open_output_root
    from eagle_datagen.tokenization.loader import load_tokenizer

    root = open_output_root(output)
    ids = pq.read_table(io.BytesIO(root.read_bytes(claim_key(run_id)))).column("sample_id")
    buffer = io.BytesIO()
    pq.write_table(pa.table({"sample_id": ids}), buffer)
    stored = put_once(root, f"data/run={run_id}/ids.parquet", buffer.getvalue())
    profile = load_profile("kimi-k2.5")
    provenance = load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True).provenance()
    counts = {"samples": len(ids), "data": len(ids), "quarantine": 0, "reasons": {}}
    files = [ManifestFile.of(stored, "data", rows=len(ids), category="chat")]
    write_manifest(root, Manifest(run_id, profile.model, profile.name, provenance, {}, counts, files))
    print(json.dumps({"published": len(ids)}))


CATALOG_SHARD = 100_000


def write_catalog(output: str, n: int) -> None:
    """A published run of `n` samples, as the catalog sees it: data shards holding the sample_id column (PLAIN, as
    `encode_shard` writes it) and a manifest listing them."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from eagle_datagen.profile import load_profile
    from eagle_datagen.storage.manifest import Manifest, ManifestFile, write_manifest
    from eagle_datagen.storage.objects import put_once
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(output)
    files = []
    for start in range(0, n, CATALOG_SHARD):
        ids = [hashlib.sha256(b"%d" % i).hexdigest()[:32] for i in range(start, min(n, start + CATALOG_SHARD))]
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"sample_id": ids}), sink, use_dictionary=False, compression="zstd")
        key = f"data/category=chat/run=stored/part-{start // CATALOG_SHARD:05d}.parquet"
        stored = put_once(root, key, sink.getvalue().to_pybytes())
        files.append(ManifestFile.of(stored, "data", rows=len(ids), category="chat"))
    profile = load_profile("kimi-k2.5")
    counts = {"samples": n, "data": n, "quarantine": 0, "reasons": {}}
    write_manifest(root, Manifest("stored", profile.model, profile.name, {}, {}, counts, files))


def catalog_child(output: str) -> None:
    from eagle_datagen.generation.incremental import read_catalog
    from eagle_datagen.profile import load_profile
    from eagle_datagen.storage.output_root import open_output_root

    started = time.monotonic()
    catalog = read_catalog(open_output_root(output), load_profile("kimi-k2.5").model, None, False)
    print(json.dumps({"catalog_ids": len(catalog.sample_ids), "load_s": round(time.monotonic() - started, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="10000,100000")
    parser.add_argument("--mode", default="tokenize,plan")
    parser.add_argument("--workdir", default="/tmp/bench-plan")
    parser.add_argument("--incremental-new", type=float, default=0.0)
    parser.add_argument("--scale", type=float, default=1.0, help="prompt length factor (0.05: ~250 tokens)")
    parser.add_argument("--catalog", type=int, default=0, help="also load a catalog of this many stored ids")
    parser.add_argument("--tiktoken-fast-path", action="store_true",
                        help="plan with the opt-in tiktoken fast path, not the tokenizer's own call (the default)")
    parser.add_argument("--plan-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--catalog-child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--publish-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.catalog_child:
        catalog_child(*args.catalog_child)
        return
    if args.publish_child:
        publish_child(*args.publish_child)
        return
    if args.plan_child:
        prompts, output, run_id, incremental = args.plan_child
        plan_child(prompts, output, run_id, incremental == "1")
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"HF_HUB_OFFLINE": "1", "BENCH_TIKTOKEN_FAST_PATH": "1" if args.tiktoken_fast_path else "0"}
    rows = []
    if args.catalog:
        store = work / f"catalog-{args.catalog}"
        if not store.exists():
            write_catalog(str(store), args.catalog)
        row = {"mode": "catalog load", "prompts": args.catalog}
        row |= measure([sys.executable, __file__, "--catalog-child", str(store)], env)
        print(json.dumps(row), flush=True)
        rows.append(row)
    for n in [int(x) for x in args.prompts.split(",") if x]:
        source = work / f"prompts-{n}{'' if args.scale == 1 else f'-x{args.scale}'}.jsonl"
        if not source.exists():
            started = time.monotonic()
            write_prompts(source, n, scale=args.scale)
            print(f"wrote {n:,} prompts ({source.stat().st_size / 2**20:.0f} MB) in {time.monotonic() - started:.0f}s")
        for mode in args.mode.split(","):
            output = work / f"out-{mode}-{source.stem}"
            subprocess.run(["rm", "-rf", str(output)], check=True)
            if mode == "tokenize":
                command = [
                    str(ROOT / ".venv/bin/eagle-datagen"),
                    "tokenize",
                    "--prompts",
                    str(source),
                    "--tokenizer",
                    "standin:kimi-k2.5",
                    "--trust-remote-code",
                    "--output",
                    str(output),
                    *(["--tiktoken-fast-path"] if args.tiktoken_fast_path else []),
                ]
            else:
                command = [sys.executable, __file__, "--plan-child", str(source), str(output), "full", "0"]
            row = {"mode": mode if args.scale == 1 else f"{mode} (x{args.scale} length)", "prompts": n,
                   "encode_path": "tiktoken_fast_path" if args.tiktoken_fast_path else "own_call"}  # fmt: skip
            row |= measure(command, env)
            print(json.dumps(row), flush=True)
            rows.append(row)
            if mode == "plan" and args.incremental_new:
                new = max(1, int(n * args.incremental_new))
                grown = work / f"prompts-{n}-plus-{new}.jsonl"
                if not grown.exists():
                    subprocess.run(f"cat {source} > {grown}", shell=True, check=True)
                    extra = work / f"extra-{n}-{new}.jsonl"
                    write_prompts(extra, new, start=n)
                    subprocess.run(f"cat {extra} >> {grown}", shell=True, check=True)
                # the first run published as if generated (a manifest listing its sample ids), then the refresh
                subprocess.run([sys.executable, __file__, "--publish-child", str(output), "full"], env=env, check=True)
                command = [sys.executable, __file__, "--plan-child", str(grown), str(output), "refresh", "1"]
                row = {"mode": f"plan --incremental (+{new:,} new)", "prompts": n + new, **measure(command, env)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| mode | prompts | wall s | peak PSS MB (tree) | peak PSS MB (main) | tokenized |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['prompts']:,} | {r['wall_s']} | {r['peak_pss_mb']} | {r['peak_parent_pss_mb']} | "
            f"{r.get('tokenized', '')} |"
        )


if __name__ == "__main__":
    main()
