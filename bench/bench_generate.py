"""Generation benchmark: how well the `/generate` client keeps SGLang slots busy, and what it costs in CPU.

Servers are stand-in SGLang processes (`eagle-datagen serve-sim`, 64 slots each); the client is
`run_generation`, the real pipeline (tokenization, preflight with canary, shard plan, one shared window
over all shards, checkpoints, then publishing), run in its own subprocess so that its CPU is measured
apart from the servers'. Its generation phase (`generate_pending`: loading the shards' plans, every
request, the checkpoint writes) is timed with getrusage around it, and so, separately, is publishing
(validation, data and quarantine shards, statistics, draft vocabulary, report, manifest). The servers'
counters are reset just before generation starts, so the canary does not count.

(a) Saturation, for each profile (realistic: 25 ms/token, 200-600 tokens; fast: 2 ms/token, 50-150
    tokens) and 1 and 2 replicas; prompts sized so that the run lasts about --realistic-seconds or
    --fast-seconds, split into shards of --shard-size. While it runs, /sim/stats of each server is polled
    every 0.5 s. Per case: steady-state slot occupancy (busy slot-seconds between the polls nearest 25%
    and 75% of the run, over slots x seconds), whole-run occupancy (all busy slot-seconds over slots x
    (last completion - first request), per replica; the last completion is the client's last answer
    from that replica, since /sim/stats has only the last arrival), requests/s and output tokens/s over
    the generation phase, the share of the modelled capacity (replicas x slots / decode seconds per
    token) those tokens/s reach, and client CPU-seconds per 1,000 requests. With two replicas the
    worse replica's occupancy is shown.
(b) Client cost against a zero-latency stand-in (--profile instant, 64 slots): requests/s of the
    generation phase against a minimal aiohttp loop (one ClientSession, the same window of 80 workers,
    the same /generate bodies, each answer read as JSON), each in a fresh subprocess, interleaved within
    every repeat (baseline, ours, ...), the server pinned to CPU 0 and the clients to CPU 1; medians over
    --repeats and the ratio of the medians, from the same run. Publishing is skipped in these rounds.

Run (about 14 minutes with the defaults on 2 cores; --quick is a ~2.5-minute smoke run whose realistic
cases are too short to meet the occupancy targets):
`EAGLE_DATAGEN_CACHE=.cache HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error .venv/bin/python
bench/bench_generate.py [--realistic-seconds 300] [--fast-seconds 30] [--shard-size 150]
[--instant-requests 5000] [--repeats 5] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "include" / "data" / "demo_prompts"
CLI = [sys.executable, "-m", "eagle_datagen.cli"]
SLOTS = 64
POLL_S = 0.5
TARGETS = {"realistic": 0.999, "fast": 0.99}  # steady-state occupancy
WHOLE_RUN_TARGET = 0.97
CPU_TARGET = 1.0  # client CPU-seconds per 1,000 requests, fast profile
RATIO_TARGET = 0.8  # ours / minimal loop, requests/s, instant profile


def write_prompts(path: Path, n: int) -> Path:
    """N distinct prompt records (JSONL): the demo prompts cycled, each copy's last message made unique."""
    demo = [json.loads(line) for file in sorted(DEMO.glob("*.jsonl")) for line in file.open() if line.strip()]
    with path.open("w") as out:
        for i in range(n):
            raw = copy.deepcopy(demo[i % len(demo)])
            raw.pop("id", None)
            raw["messages"][-1]["content"] += f" (variant {i})"
            out.write(json.dumps(raw) + "\n")
    return path


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of another process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_json(url: str, data: bytes | None = None) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as response:
        return json.loads(response.read())


def pin(cpus: set[int] | None) -> Callable[[], None] | None:
    """A preexec_fn that restricts the child process to these CPUs (None: no restriction)."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)


# --- the stand-in servers -------------------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen
    url: str

    @classmethod
    def start(cls, profile: str, cpus: set[int] | None = None) -> Server:
        proc = subprocess.Popen(
            [*CLI, "serve-sim", "--port", "0", "--profile", profile, "--max-running-requests", str(SLOTS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=pin(cpus),
        )
        line = proc.stdout.readline().strip()
        if not line.startswith("serving SGLang stand-in on "):
            proc.kill()
            raise RuntimeError(f"serve-sim did not start: {line!r}")
        return cls(proc, line.rsplit(" ", 1)[1])

    def stats(self) -> dict[str, Any]:
        return http_json(self.url + "/sim/stats")

    def cpu(self) -> float:
        return proc_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Servers(list[Server]):
    def __init__(self, profile: str, count: int, cpus: set[int] | None = None) -> None:
        super().__init__()
        try:
            for _ in range(count):
                self.append(Server.start(profile, cpus))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in self:
            server.stop()

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- subprocess modes: ours (run_generation) and the minimal loop ----------------------------------------


def timed_generation_phase(
    original: Callable[..., Any],
    phase: dict[str, Any],
    reset_sim_stats: bool = True,
    on_start: Callable[[], None] | None = None,
    more: Callable[[Any], dict[str, Any]] | None = None,
) -> Callable[..., Any]:
    """`generate_pending` (the generation phase of `run_generation`) wrapped so that its wall and CPU time and
    the client's counts land in `phase` (`more(client)` adds a benchmark's own); with `reset_sim_stats`, the
    stand-in servers' /sim/stats are reset first, so that they count from the first real request, not the
    canary; `on_start` runs as the phase begins."""

    async def timed(root, plan, shard_indices, servers, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        for server in servers if reset_sim_stats else ():
            http_json(server.url.rstrip("/") + "/sim/reset_stats", b"{}")
        if on_start is not None:
            on_start()
        usage, wall, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), time.time()
        resumed, to_do, client = await original(root, plan, shard_indices, servers, *args, **kwargs)
        elapsed, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
        phase.update(
            started=started,
            wall_s=elapsed,
            cpu_s=cpu_seconds(after) - cpu_seconds(usage),
            requests=client.stats.completed,
            failed=client.stats.failed,
            retries=client.stats.retries,
            output_tokens=client.stats.output_tokens,
            window=client.pool.total_window,
            **(more(client) if more else {}),
        )
        return resumed, to_do, client

    return timed


def client_main(spec: dict[str, Any]) -> None:
    """Run `run_generation` with its generation phase timed; write the figures to spec["result"]."""
    import eagle_datagen.generation.stage as stage
    import eagle_datagen.generation.steps as steps
    from eagle_datagen.generation.publish import PublishOptions
    from eagle_datagen.tokenization.stage import TokenizeOptions

    last_done: dict[str, float] = {}  # endpoint -> wall time of its last answer
    phase: dict[str, Any] = {}

    class TimedClient(stage.GenerateClient):
        async def generate(self, request):  # noqa: ANN001, ANN202
            phase.setdefault("first_sent", time.time())
            result = await super().generate(request)
            last_done[result.endpoint] = time.time()
            return result

    def timed_publish(publish):  # noqa: ANN001, ANN202
        def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            published = publish(*args, **kwargs)
            after = resource.getrusage(resource.RUSAGE_SELF)
            phase["publish_wall_s"] = phase.get("publish_wall_s", 0.0) + time.perf_counter() - wall
            phase["publish_cpu_s"] = phase.get("publish_cpu_s", 0.0) + cpu_seconds(after) - cpu_seconds(usage)
            return published

        return run

    stage.GenerateClient = TimedClient  # the run's steps look these names up at call time
    steps.generate_pending = timed_generation_phase(stage.generate_pending, phase)
    if spec.get("publish", True):  # publishing: the shards (generate step), then the run (finalize step)
        steps.publish_shard = timed_publish(steps.publish_shard)
        steps.finalize_run = timed_publish(steps.finalize_run)
    else:
        steps.publish_shard = lambda *args, **kwargs: 0
        steps.finalize_step = lambda *args, **kwargs: {}
    summary = steps.run_generation(
        stage.RunOptions(
            prompts=TokenizeOptions(
                output=spec["output"], tokenizer="standin:kimi-k2.5", trust_remote_code=True, prompts=[spec["prompts"]]
            ),
            sglang_urls=spec["urls"],
            run_id=spec["run_id"],
            shard_size=spec["shard_size"],
            publish=PublishOptions(draft_vocab_size=spec.get("draft_vocab_size", 32000)),
        )
    )
    assert summary.pending == 0 and summary.generated == summary.samples, summary
    Path(spec["result"]).write_text(
        json.dumps(
            phase
            | {
                "last_done": last_done,
                "shards": summary.shards,
                "samples": summary.samples,
                "finish": summary.finish,
                "run_s": summary.elapsed_s,
            }
        )
    )


async def minimal_loop(url: str, bodies: list[dict[str, Any]], concurrency: int) -> int:
    """The baseline: one session, `concurrency` workers posting /generate and reading the JSON answer."""
    import aiohttp

    pending, tokens = iter(bodies), 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            nonlocal tokens
            for body in pending:
                async with session.post(url + "/generate", json=body) as response:
                    answer = await response.json()
                    assert response.status == 200, answer
                    tokens += len(answer["output_ids"])

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens


def baseline_main(spec: dict[str, Any]) -> None:
    bodies = json.loads(Path(spec["bodies"]).read_text())
    usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    tokens = asyncio.run(minimal_loop(spec["urls"][0], bodies, spec["concurrency"]))
    elapsed, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
    Path(spec["result"]).write_text(
        json.dumps(
            {
                "wall_s": elapsed,
                "cpu_s": cpu_seconds(after) - cpu_seconds(usage),
                "requests": len(bodies),
                "output_tokens": tokens,
            }
        )
    )


def machine_busy_seconds() -> float:
    """CPU-seconds all processes of the machine have used so far (every column of /proc/stat but idle and iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def run_subprocess(
    mode: str,
    spec: dict[str, Any],
    servers: list[Server],
    workdir: Path,
    cpus: set[int] | None = None,
    poll: bool = True,
) -> tuple[dict, list]:
    """Run a client mode in a subprocess, polling the servers' /sim/stats meanwhile. Returns (result, polls).

    The result gains `background_cpu_s`: CPU-seconds that processes other than this script, the client and
    the servers used meanwhile (another job on the machine), and `elapsed_s`, the subprocess's lifetime."""
    spec = spec | {"result": str(workdir / f"result-{time.time_ns()}.json")}
    own_before = (
        cpu_seconds(resource.getrusage(resource.RUSAGE_SELF))
        + cpu_seconds(resource.getrusage(resource.RUSAGE_CHILDREN))
        + sum(s.cpu() for s in servers)
    )
    machine_before, started = machine_busy_seconds(), time.monotonic()
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    log_path = workdir / f"{mode}.log"
    polls: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in servers] if poll else []
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, __file__, f"--{mode}", str(spec_path)], stdout=log, stderr=log, preexec_fn=pin(cpus)
        )
        while proc.poll() is None:
            for server, samples in zip(servers if poll else [], polls, strict=True):
                sent = time.time()
                stats = server.stats()
                samples.append(((sent + time.time()) / 2, stats))
            time.sleep(POLL_S)
    own = (
        cpu_seconds(resource.getrusage(resource.RUSAGE_SELF))
        + cpu_seconds(resource.getrusage(resource.RUSAGE_CHILDREN))
        + sum(s.cpu() for s in servers)
        - own_before
    )
    background = machine_busy_seconds() - machine_before - own
    if proc.returncode != 0:
        sys.exit(f"{mode} subprocess failed ({proc.returncode}):\n" + log_path.read_text()[-3000:])
    result = json.loads(Path(spec["result"]).read_text())
    return result | {"background_cpu_s": background, "elapsed_s": time.monotonic() - started}, polls


# --- (a) saturation --------------------------------------------------------------------------------------


def mean_request_seconds(profile: str) -> float:
    from eagle_datagen.standin.sglang.config import SimConfig

    cfg = SimConfig().with_profile(profile)
    return cfg.decode_s_per_token * (cfg.output_tokens_min + cfg.output_tokens_max) / 2


def nearest(samples: list[tuple[float, dict]], at: float) -> tuple[float, dict]:
    return min(samples, key=lambda s: abs(s[0] - at))


def saturation_case(
    profile: str, replicas: int, seconds: float, shard_size: int, draft_vocab_size: int, workdir: Path
) -> dict[str, Any]:
    from eagle_datagen.standin.sglang.config import SimConfig

    requests = math.ceil(seconds * replicas * SLOTS / mean_request_seconds(profile))
    case_dir = Path(tempfile.mkdtemp(prefix=f"{profile}-{replicas}-", dir=workdir))
    prompts = write_prompts(case_dir / "prompts.jsonl", requests)
    with Servers(profile, replicas) as servers:
        cpu_before = [s.cpu() for s in servers]
        spec = {
            "prompts": str(prompts),
            "output": str(case_dir / "out"),
            "urls": [s.url for s in servers],
            "run_id": f"bench-{profile}-{replicas}",
            "shard_size": shard_size,
            "draft_vocab_size": draft_vocab_size,
        }
        result, polls = run_subprocess("client", spec, servers, case_dir)
        final = [s.stats() for s in servers]
        server_cpu = sum(s.cpu() - c for s, c in zip(servers, cpu_before, strict=True))
    shutil.rmtree(case_dir)

    steady, whole, per_replica = [], [], []
    for server, samples, stats in zip(servers, polls, final, strict=True):
        first, last = stats["first_request_at"], result["last_done"][server.url]
        span = last - first
        (t1, s1), (t2, s2) = nearest(samples, first + 0.25 * span), nearest(samples, first + 0.75 * span)
        steady.append((s2["busy_slot_seconds"] - s1["busy_slot_seconds"]) / (SLOTS * (t2 - t1)))
        whole.append(stats["busy_slot_seconds"] / (SLOTS * span))
        per_replica.append(
            f"{stats['generations']} generations, span {span:.1f}s, window {t2 - t1:.1f}s, "
            f"steady {steady[-1]:.4f}, whole {whole[-1]:.4f}"
        )
    decode_s = SimConfig().with_profile(profile).decode_s_per_token
    wall = result["wall_s"]
    row = {
        "profile": profile,
        "replicas": replicas,
        "requests": result["requests"],
        "shards": result["shards"],
        "wall_s": wall,
        "steady": min(steady),
        "whole": min(whole),
        "req_s": result["requests"] / wall,
        "tok_s": result["output_tokens"] / wall,
        "capacity": result["output_tokens"] / wall / (replicas * SLOTS / decode_s),
        "cpu_per_1k": 1000 * result["cpu_s"] / result["requests"],
        "server_cpu_per_1k": 1000 * server_cpu / result["requests"],
        "publish_cpu_per_1k": 1000 * result["publish_cpu_s"] / result["requests"],
        "publish_wall_s": result["publish_wall_s"],
        "window": result["window"],
        "preamble_s": result["first_sent"] - result["started"],
        "background": result["background_cpu_s"] / (result["elapsed_s"] * os.cpu_count()),
        "failed": result["failed"],
        "retries": result["retries"],
    }
    print(
        f"  {profile} x{replicas}: {result['requests']:,} requests in {result['shards']} shards, "
        f"{wall:.1f}s ({row['preamble_s']:.2f}s before the first request); window {result['window']}; "
        f"failed {result['failed']}, retries {result['retries']}; "
        f"client CPU {result['cpu_s']:.2f}s, servers {server_cpu:.2f}s; publish {result['publish_wall_s']:.1f}s, "
        f"CPU {result['publish_cpu_s']:.2f}s; other processes {result['background_cpu_s']:.1f} CPU-s "
        f"({row['background']:.0%} of the machine over {result['elapsed_s']:.0f}s)",
        flush=True,
    )
    for line in per_replica:
        print(f"    replica: {line}", flush=True)
    return row


# --- (b) ours against the minimal loop, zero-latency server -----------------------------------------------


def instant_bodies(prompts: Path, path: Path) -> None:
    """The /generate bodies run_generation sends for these prompts (same ids, sampling and seeds)."""
    from eagle_datagen.generation.stage import SamplingOverrides, category_settings
    from eagle_datagen.inference.samples import SampleRequest
    from eagle_datagen.profile import load_profile
    from eagle_datagen.records import PromptRecord, validate_record
    from eagle_datagen.tokenization.loader import load_tokenizer
    from eagle_datagen.tokenization.tokenize import tokenize_prompts

    profile = load_profile("kimi-k2.5")
    records = [validate_record(json.loads(line), origin=f"bench:{i}") for i, line in enumerate(prompts.open())]
    assert all(isinstance(r, PromptRecord) for r in records)
    result = tokenize_prompts(
        load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True), records, max_prompt_tokens=32768
    )
    sampling = category_settings(["bench"], None, profile, SamplingOverrides())["bench"].sampling
    bodies = [
        SampleRequest.create(
            prompt_id=p.record.prompt_id,
            record_id=None,
            category=p.record.category,
            sample_index=0,
            prompt_ids=p.prompt_ids,
            model=profile.model,
            sampling=sampling,
        ).body()
        for p in result.prompts
    ]
    path.write_text(json.dumps(bodies))


def instant_comparison(requests: int, repeats: int, shard_size: int, workdir: Path) -> dict[str, dict[str, list]]:
    case_dir = Path(tempfile.mkdtemp(prefix="instant-", dir=workdir))
    prompts = write_prompts(case_dir / "prompts.jsonl", requests)
    instant_bodies(prompts, case_dir / "bodies.json")
    figures: dict[str, dict[str, list]] = {
        name: {"req_s": [], "loop_req_s": [], "cpu_per_1k": [], "background": []} for name in ("baseline", "ours")
    }
    # One core each (server on CPU 0, clients on CPU 1 where there are two): with the kernel moving the two
    # busy processes around two cores, rounds varied by up to 3x (700-2,300 requests/s); pinned, much less.
    server_cpus, client_cpus = ({0}, {1}) if len(os.sched_getaffinity(0)) >= 2 else (None, None)
    with Servers("instant", 1, server_cpus) as servers:
        window = math.ceil(1.25 * SLOTS)  # run_generation's default window for a 64-slot server
        for repeat in range(repeats):
            base, _ = run_subprocess(
                "baseline",
                {"bodies": str(case_dir / "bodies.json"), "urls": [servers[0].url], "concurrency": window},
                servers,
                case_dir,
                client_cpus,
                poll=False,
            )
            out = case_dir / f"out-{repeat}"
            ours, _ = run_subprocess(
                "client",
                {
                    "prompts": str(prompts),
                    "output": str(out),
                    "urls": [servers[0].url],
                    "run_id": f"bench-instant-{repeat}",
                    "shard_size": shard_size,
                    "publish": False,
                },
                servers,
                case_dir,
                client_cpus,
                poll=False,
            )
            assert ours["window"] == window and ours["requests"] == base["requests"] == requests
            shutil.rmtree(out)
            ours_loop_s = max(ours["last_done"].values()) - ours["first_sent"]  # without loading the shards
            for name, r, loop_s in (("baseline", base, base["wall_s"]), ("ours", ours, ours_loop_s)):
                figures[name]["req_s"].append(r["requests"] / r["wall_s"])
                figures[name]["loop_req_s"].append(r["requests"] / loop_s)
                figures[name]["cpu_per_1k"].append(1000 * r["cpu_s"] / r["requests"])
                figures[name]["background"].append(r["background_cpu_s"] / (r["elapsed_s"] * os.cpu_count()))
            print(
                f"  repeat {repeat + 1}/{repeats}: baseline {figures['baseline']['req_s'][-1]:,.0f} req/s, "
                f"ours {figures['ours']['req_s'][-1]:,.0f} req/s; other processes "
                f"{figures['baseline']['background'][-1]:.0%} / {figures['ours']['background'][-1]:.0%} of the machine",
                flush=True,
            )
    shutil.rmtree(case_dir)
    return figures


# --- report -----------------------------------------------------------------------------------------------


def mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--realistic-seconds",
        type=float,
        default=300.0,
        help="target length of each realistic run; whole-run occupancy ~ 1 - 8s/this (default 300)",
    )
    parser.add_argument("--fast-seconds", type=float, default=30.0, help="target length of each fast run (default 30)")
    parser.add_argument("--shard-size", type=int, default=150, help="prompts per shard (default 150)")
    parser.add_argument("--replicas", default="1,2", help="comma-separated replica counts (default 1,2)")
    parser.add_argument(
        "--profiles", default="realistic,fast", help="saturation profiles; '' skips (a) (default realistic,fast)"
    )
    parser.add_argument("--instant-requests", type=int, default=5000, help="requests per round in (b) (default 5000)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds in (b); 0 skips (b) (default 5)")
    parser.add_argument(
        "--draft-vocab-size",
        type=int,
        default=32000,
        help="publish's draft vocabulary size (default 32000, the package's; --quick: 4000)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 30s realistic, 8s fast, 1000 instant requests, 2 repeats"
    )
    parser.add_argument("--client", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        return client_main(json.loads(Path(args.client).read_text()))
    if args.baseline:
        return baseline_main(json.loads(Path(args.baseline).read_text()))
    if args.quick:
        args.realistic_seconds, args.fast_seconds, args.instant_requests, args.repeats = 30.0, 8.0, 1000, 2
        args.draft_vocab_size = 4000  # a short run generates fewer distinct tokens than 32000

    import aiohttp

    started = time.monotonic()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    print(
        f"commit {commit.strip() or '?'}; python {platform.python_version()}, aiohttp {aiohttp.__version__}, "
        f"{os.cpu_count()} CPUs; "
        f"{SLOTS} slots per server; realistic {args.realistic_seconds:g}s, fast {args.fast_seconds:g}s, "
        f"shard size {args.shard_size}; instant {args.instant_requests:,} requests x {args.repeats}",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-generate-"))
    try:
        rows = []
        print("(a) saturation", flush=True)
        for profile in filter(None, args.profiles.split(",")):
            seconds = args.realistic_seconds if profile == "realistic" else args.fast_seconds
            for replicas in (int(r) for r in args.replicas.split(",")):
                rows.append(
                    saturation_case(profile, replicas, seconds, args.shard_size, args.draft_vocab_size, workdir)
                )
        print("(b) ours against a minimal aiohttp loop, instant profile", flush=True)
        figures = (
            instant_comparison(args.instant_requests, args.repeats, args.shard_size, workdir) if args.repeats else {}
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\ntotal {time.monotonic() - started:.0f}s\n")
    if rows:
        print(
            "| profile | replicas | requests (shards) | wall (s) | steady-state occupancy | whole-run occupancy "
            "| requests/s | output tok/s | of capacity | client CPU-s / 1k req | other load |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            steady_ok = r["steady"] >= TARGETS.get(r["profile"], 0.99)
            print(
                f"| {r['profile']} | {r['replicas']} | {r['requests']:,} ({r['shards']}) | {r['wall_s']:.0f} "
                f"| {r['steady']:.4f} ({mark(steady_ok)}) | {r['whole']:.4f} ({mark(r['whole'] >= WHOLE_RUN_TARGET)}) "
                f"| {r['req_s']:,.1f} | {r['tok_s']:,.0f} | {r['capacity']:.3f} | {r['cpu_per_1k']:.2f}"
                + (f" ({mark(r['cpu_per_1k'] <= CPU_TARGET)})" if r["profile"] == "fast" else "")
                + f" | {r['background']:.0%} |"
            )
        print(
            "\nper 1k requests, server CPU-s (all replicas) / publish CPU-s (after generation; wall): "
            + ", ".join(
                f"{r['profile']} x{r['replicas']} {r['server_cpu_per_1k']:.2f} / {r['publish_cpu_per_1k']:.2f} "
                f"({r['publish_wall_s']:.1f}s)"
                for r in rows
            )
        )

    if not figures:
        return
    base = statistics.median(figures["baseline"]["req_s"])
    base_loop = statistics.median(figures["baseline"]["loop_req_s"])
    print(
        "\n| variant | median requests/s | vs baseline | requests only: req/s | vs baseline "
        "| median client CPU-s / 1k req |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in (("baseline", "minimal aiohttp loop"), ("ours", "ours (generation phase)")):
        rate, loop = statistics.median(figures[name]["req_s"]), statistics.median(figures[name]["loop_req_s"])
        ok = f" ({mark(rate / base >= RATIO_TARGET)})" if name == "ours" else ""
        print(
            f"| {label} | {rate:,.0f} | {rate / base:.2f}x{ok} | {loop:,.0f} | {loop / base_loop:.2f}x "
            f"| {statistics.median(figures[name]['cpu_per_1k']):.2f} |"
        )
    print(
        "\nper repeat, requests/s: "
        + "; ".join(
            f"{b:,.0f} / {o:,.0f}" for b, o in zip(figures["baseline"]["req_s"], figures["ours"]["req_s"], strict=True)
        )
    )


if __name__ == "__main__":
    main()
