"""The loop closed on the CPU: the project's on-policy data -> an EAGLE-3 drafter -> acceptance in the real SGLang.

`make eval-loop` (`python -m eagle_datagen_stack.cpu_loop`) and tests/engine/test_cpu_loop.py run it; the page
docs/internals/evaluation-cpu-loop.md says what it shows and what it costs. With the project's own parts, on one machine
without a GPU:

1. the prompts: the shipped demo prompts of four categories, all of them, with the product's frozen held-out split
   (`--heldout-fraction`, heldout.py: a stable hash of each prompt sets about 4 in 10 aside, the same in every run);
2. on-policy data: `eagle-datagen run` of the prompts against the real SGLang serving the loop's target, a small
   Llama trained at build time so that its answer depends on the prompt (engine/build_loop_models.py); off-policy
   data: the same run against the real SGLang serving the other model built there (the same phrases, other choices
   and answers: another model's answers to the same prompts); both under one output root, so both hold out the same
   prompts. `--target DIR` / `--other DIR` take other models (the older chain target: engine/build_loop_target.py),
   `--other serve-sim` the stand-in's random-id answers;
3. `eagle-datagen export --format speculators` of each run (which never exports a held-out row); the target's
   hidden states for the exported rows,
   computed in process with transformers; `speculators train` (0.9.0) on the CPU with one step budget and one
   draft vocabulary (the on-policy run's) for both, and the same draft saved untrained (the random drafter);
   each checkpoint converted to the layout SGLang serves (drafter_training.py, engine/cpu_loop/);
4. the real SGLang serving the target with each drafter (`--speculative-algorithm EAGLE3`, 3 steps, top-k 1),
   two side by side, measured by the paired A/B of `eagle-datagen evaluate --output ROOT --run-id onpolicy
   --sglang-url A --compare-url B` (acceptance.py): the on-policy run's held-out prompts, their stored ids sent to
   both as a run sends them: accept length per category and the paired difference, with 95% intervals. Two A/Bs:
   on-policy against off-policy, then on-policy against random.
At most two SGLang servers run at once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.manifest import run_artifact_key
from eagle_datagen_stack import drafter_training as side
from eagle_datagen_stack.acceptance import EvalRequest, evaluate_drafter
from eagle_datagen_stack.process_tree import TreeUsage
from eagle_datagen_stack.sglang_engine import (
    PROJECT,
    Drafter,
    ServerOptions,
    SGLangServer,
    cache_root,
    missing_engine,
)

CLI = [sys.executable, "-m", "eagle_datagen.cli"]
DEMO_PROMPTS = PROJECT / "include" / "data" / "demo_prompts"
DRAFTERS = ("random", "off-policy", "on-policy")
OTHER_SIM = "serve-sim"


@dataclass(frozen=True)
class LoopSettings:
    work: Path
    target: Path | None = None  # default: the trained loop target, built into the cache by engine/build_loop_models.py
    other: Path | str | None = None  # the off-policy data's model (real SGLang); default: the loop's other model;
    # OTHER_SIM: the stand-in serve-sim's answers (random ids)
    tokenizer: str = "standin:kimi-k2.5"
    trust_remote_code: bool = True
    prompts: Path = DEMO_PROMPTS  # a folder of <category>.jsonl prompt records
    categories: tuple[str, ...] = ("chat", "code", "math", "multilingual")
    heldout_fraction: float = 0.4  # the product's split: 26 of the 71 demo prompts, 6 to 8 per category
    samples_per_prompt: int = 1
    max_new_tokens: int = 160  # generation
    temperature: float = 1.0  # the profile's; acceptance is measured greedily on the CPU whatever it is
    draft_vocab_size: int = 256  # at most; fewer when a run's trained tokens hold fewer distinct ids (said on stdout)
    aux_layers: tuple[int, ...] | None = None  # speculators' ids; default: drafter_training.aux_layer_ids
    train: side.TrainSettings = field(default_factory=side.TrainSettings)
    eval_max_new_tokens: int = 32


@dataclass
class LoopResult:
    reports: dict[str, dict[str, Any]]  # drafter label -> evaluation report (schema eagle-datagen/evaluation/v1)
    seconds: dict[str, float]  # step -> wall seconds
    cpu_seconds: dict[str, float]  # step -> CPU seconds of this process and every process under it (servers too)
    peak_memory_bytes: int
    settings: LoopSettings
    comparisons: dict[str, dict[str, Any]] = field(default_factory=dict)  # rival -> the A/B's "comparison" block


def missing_parts() -> str | None:
    return missing_engine() or side.missing_side_environment()


def prompt_set(settings: LoopSettings) -> Path:
    """prompts.jsonl: every prompt of the loop's categories (the runs hold some out by the product's split)."""
    lines = []
    for category in settings.categories:
        text = (settings.prompts / f"{category}.jsonl").read_text(encoding="utf-8")
        lines += [line for line in text.splitlines() if line.strip()]
    path = settings.work / "prompts.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


class BackgroundServer:
    """An SGLang server starting in a thread from construction on; `url()` waits until it answers. `stop()` (any
    number of times) waits for its start to end, then stops it, so nothing is left behind whatever failed."""

    def __init__(self, server: SGLangServer) -> None:
        self.server = server
        self._pool = ThreadPoolExecutor(1)
        self._starting = self._pool.submit(server.start)

    def url(self) -> str:
        return self._starting.result().url

    def stop(self) -> None:
        try:
            self._starting.result()
        except BaseException:  # noqa: BLE001 - its error was raised by url(), or the loop's own error is the one
            pass
        self.server.stop()
        self._pool.shutdown()


class LoopRun:
    """One run of the loop under settings.work (removed and made again)."""

    def __init__(self, settings: LoopSettings) -> None:
        self.settings = settings
        self.usage = TreeUsage()
        self.work = settings.work
        self.logs = settings.work / "logs"
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.draft_vocab_sizes: dict[str, int] = {}  # run id -> its export's draft vocabulary (fitted to its data)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Times a step: wall seconds, and CPU seconds (a measure that other jobs on the machine do not inflate)."""
        began, cpu = time.monotonic(), self.usage.cpu_seconds()
        print(f"[eval-loop] {name} ...", flush=True)
        yield
        self.seconds[name] = time.monotonic() - began
        self.cpu_seconds[name] = self.usage.cpu_seconds() - cpu
        print(f"[eval-loop] {name}: {self.seconds[name]:.0f}s ({self.cpu_seconds[name]:.0f} CPU-s)", flush=True)

    def cli(self, name: str, *args: str) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as out:
            done = subprocess.run([*CLI, *args], stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise RuntimeError(f"eagle-datagen {args[0]} ({name}) exited {done.returncode}: see {self.logs}/{name}.log")

    def tokenizer_args(self) -> list[str]:
        return ["--tokenizer", self.settings.tokenizer, *(["--trust-remote-code"] if self.settings.trust_remote_code
                                                          else [])]

    def generate(self, url: str, prompts: Path, run_id: str) -> None:
        self.cli(f"run-{run_id}", "run", "--prompts", str(prompts), *self.tokenizer_args(), "--sglang-url", url,
                 "--output", str(self.output), "--run-id", run_id, "--no-canary",
                 "--samples-per-prompt", str(self.settings.samples_per_prompt),
                 "--max-new-tokens", str(self.settings.max_new_tokens),
                 "--temperature", str(self.settings.temperature),
                 "--heldout-fraction", str(self.settings.heldout_fraction))

    def export(self, run_id: str) -> Path:
        """The run's rows for speculators, with a draft vocabulary (speculators needs one; the drafters all take the
        on-policy export's)."""
        to = self.work / f"{run_id}-speculators"
        self.cli(f"export-{run_id}", "export", "--output", str(self.output), "--run-id", run_id,
                 "--format", "speculators", "--to", str(to), "--shuffle-seed", "0",
                 "--draft-vocab-size", str(self.draft_vocab_sizes[run_id]))
        return to

    def off_policy_run(self, prompts: Path, other: Path | str) -> None:
        """Another model's answers to the same prompts: `other` served by the real SGLang, or the stand-in's."""
        if other != OTHER_SIM:
            server = BackgroundServer(self.server(Path(other), "sglang-other"))
            try:
                self.generate(server.url(), prompts, "offpolicy")
            finally:
                server.stop()
            return
        config = replace(SimConfig().with_profile("fast"), output_tokens_min=20, output_tokens_max=100)
        with SimServerThread(config) as sim:
            self.generate(sim.url, prompts, "offpolicy")

    def server(self, target: Path, name: str, drafter: Path | None = None) -> SGLangServer:
        # An idle SGLang scheduler otherwise spins on a core (measured: 70%), slowing whatever trains beside it.
        extra = ("--sleep-on-idle", *dtype_args(target))
        options = ServerOptions(drafter=Drafter(drafter) if drafter else None, extra_args=extra)
        return SGLangServer(target, self.logs, options, name=name)

    def run(self) -> LoopResult:
        s = self.settings
        with self.usage as usage:
            with self.step("prepare: target, prompts"):
                target = s.target or build_loop_model("target")
                other = s.other or build_loop_model("other")
                layers = json.loads((target / "config.json").read_text())["num_hidden_layers"]
                aux = list(s.aux_layers or side.aux_layer_ids(layers))
                prompts = prompt_set(s)
            with self.step("generate: on-policy (real SGLang) and off-policy"):
                plain = BackgroundServer(self.server(target, "sglang-target"))  # starts while the other answers
                try:
                    self.off_policy_run(prompts, other)
                    self.generate(plain.url(), prompts, "onpolicy")
                finally:
                    plain.stop()
            with self.step("export and target hidden states"):
                self.draft_vocab_sizes = {run: fitting_draft_vocab(self.output, run, s.draft_vocab_size)
                                          for run in ("onpolicy", "offpolicy")}
                on_data, off_data = self.export("onpolicy"), self.export("offpolicy")
                side.target_hidden_states(target, [on_data, off_data], aux, self.logs / "hidden-states.log")
            request = EvalRequest(self.output, "onpolicy", s.tokenizer, s.trust_remote_code, s.eval_max_new_tokens)
            for label, data in (("random", on_data), ("on-policy", on_data), ("off-policy", off_data)):
                with self.step(f"{label} drafter" + ("" if label == "random" else f" ({s.train.steps} steps)")):
                    self.drafter(target, data, on_data, aux, label)
            reports: dict[str, dict[str, Any]] = {}
            comparisons: dict[str, dict[str, Any]] = {}
            on_policy = self.background(target, "on-policy")
            servers = [on_policy]
            try:
                for rival in ("off-policy", "random"):  # one rival at a time beside the on-policy drafter
                    servers.append(other_server := self.background(target, rival))
                    with self.step(f"A/B: on-policy against {rival}"):
                        report = self.evaluate(on_policy.url(), other_server.url(), request, rival)
                    other_server.stop()
                    reports["on-policy"] = report
                    reports[rival] = side_b(report)
                    comparisons[rival] = report["comparison"]
            finally:
                for server in servers:
                    server.stop()
        reports = {label: reports[label] for label in DRAFTERS}
        result = LoopResult(reports, self.seconds, self.cpu_seconds, usage.peak_bytes, s, comparisons)
        (self.work / "loop-result.json").write_text(json.dumps(result_json(result), indent=2) + "\n")
        return result

    @property
    def output(self) -> Path:
        return self.work / "out"

    @property
    def drafters(self) -> Path:
        return self.work / "drafters"

    def drafter(self, target: Path, data: Path, vocab: Path, aux: list[int], label: str) -> Path:
        """Train (or, for "random", only initialise) a drafter on `data` with `vocab`'s draft vocabulary; convert."""
        s, checkpoint = self.settings, self.work / "checkpoints" / label
        make = side.random_drafter if label == "random" else side.train_drafter
        log = self.logs / f"train-{label}.log"
        size = self.draft_vocab_sizes["onpolicy"]  # one draft vocabulary for every drafter: the on-policy run's
        return make(target, data, vocab, size, aux, checkpoint, s.train, self.drafters / label, log)

    def background(self, target: Path, label: str) -> BackgroundServer:
        return BackgroundServer(self.server(target, f"sglang-{label}", self.drafters / label))

    def evaluate(self, url: str, rival_url: str, request: EvalRequest, rival: str) -> dict[str, Any]:
        return evaluate_drafter(url, request, "on-policy", self.work / "evaluations" / f"on-policy-vs-{rival}.json",
                                compare=(rival_url, rival))


def cached_engine_model(script: str, *flags: str) -> Path:
    """A model folder that an engine/ builder script makes in the cache on first use and prints."""
    done = subprocess.run([sys.executable, str(PROJECT / "engine" / script), str(cache_root()), *flags],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"engine/{script} {' '.join(flags)} failed: {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def build_loop_target(*flags: str) -> Path:
    """The chain target the loop used before its trained models (tests/engine/test_convert_drafter_served.py)."""
    return cached_engine_model("build_loop_target.py", *flags)


def build_loop_model(kind: str) -> Path:
    """The loop's trained target or other model (engine/build_loop_models.py; `make loop-models` builds both)."""
    return cached_engine_model("build_loop_models.py", *(["--other"] if kind == "other" else []))


def dtype_args(model: Path) -> tuple[str, ...]:
    """`--dtype float32` for a float32 checkpoint: SGLang's `auto` serves one as float16, whose greedy ids drift from
    the float32 model's (tests/engine/test_loop_models_served.py); the drafter is served in the target's dtype."""
    config = json.loads((model / "config.json").read_text())
    return ("--dtype", "float32") if (config.get("torch_dtype") or config.get("dtype")) == "float32" else ()


def fitting_draft_vocab(output: Path, run_id: str, wanted: int) -> int:
    """`wanted`, or fewer when the run's trained tokens hold fewer distinct ids (a small target's answers may), said
    on stdout: a draft vocabulary cannot be larger than what the data supervises."""
    summary = json.loads((output / run_artifact_key(run_id, "summary.json")).read_text())
    distinct = int(summary["token_frequency"]["distinct_tokens"])
    if distinct >= wanted:
        return wanted
    print(f"[eval-loop] run {run_id}'s draft vocabulary: {distinct} tokens (its trained tokens hold only {distinct} "
          f"distinct ids, fewer than the {wanted} asked)", flush=True)
    return distinct


def side_b(report: dict[str, Any]) -> dict[str, Any]:
    """Deployment B's results of an A/B, shaped as a report of its own (label, prompts, categories, overall)."""
    comparison = report["comparison"]
    return {**comparison["results"], "label": comparison["label"], "prompts": report["prompts"]}


def run_loop(settings: LoopSettings) -> LoopResult:
    shutil.rmtree(settings.work, ignore_errors=True)
    (settings.work / "evaluations").mkdir(parents=True)
    return LoopRun(settings).run()


def _cell(stats: dict[str, Any]) -> str:
    """The evaluation's headline: output tokens / verify steps [95% bootstrap interval over prompts]."""
    accept = stats["accept_length_total"]
    if accept["value"] is None:
        return "n/a"
    if not accept["ci95"]:
        return f"{accept['value']:.2f}"
    low, high = accept["ci95"]
    return f"{accept['value']:.2f} [{low:.2f}, {high:.2f}]"


def format_table(result: LoopResult) -> str:
    """Accept length per category and overall, one column per drafter: output tokens / verify steps [95%
    interval]."""
    reports = result.reports
    categories = sorted(reports["on-policy"]["categories"])
    rows = [("category (prompts)", *DRAFTERS)]
    for category in categories:
        prompts = reports["on-policy"]["categories"][category]["requests"]
        rows.append((f"{category} ({prompts})", *(_cell(reports[d]["categories"][category]) for d in DRAFTERS)))
    rows.append((f"overall ({reports['on-policy']['overall']['requests']})",
                 *(_cell(reports[d]["overall"]) for d in DRAFTERS)))
    for rival, comparison in result.comparisons.items():  # the paired differences, prompt for prompt
        diff = comparison["overall"]["accept_length_total_diff"]
        interval = f" [{diff['ci95'][0]:+.2f}, {diff['ci95'][1]:+.2f}]" if diff.get("ci95") else ""
        cell = f"{diff['value']:+.2f}{interval} ({comparison['overall']['paired_prompts']} paired)"
        rows.append((f"on-policy - {rival}", *(cell if d == "on-policy" else "" for d in DRAFTERS)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    s = result.settings
    head = (f"accept length = output tokens / verify steps, held-out prompts (3 draft steps, top-k 1: at most 4 "
            f"per step, plus each answer's prefill token) [95% bootstrap interval]; drafters trained {s.train.steps} "
            "steps")
    costs = ", ".join(f"{name.split(' (')[0].split(':')[0]} {seconds:.0f}s" for name, seconds in result.seconds.items())
    return "\n".join([head, *lines, f"took {sum(result.seconds.values()):.0f}s, "
                      f"{sum(result.cpu_seconds.values()):.0f} CPU-s ({costs}); "
                      f"peak memory {result.peak_memory_bytes / 2**30:.1f} GiB"])


def result_json(result: LoopResult) -> dict[str, Any]:
    settings = asdict(result.settings)
    return {"reports": result.reports, "comparisons": result.comparisons, "seconds": result.seconds,
            "cpu_seconds": result.cpu_seconds,
            "peak_memory_bytes": result.peak_memory_bytes,
            "settings": json.loads(json.dumps(settings, default=str))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eagle_datagen_stack.cpu_loop", description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=PROJECT / ".eval-loop", help="working folder (made anew)")
    parser.add_argument("--target", type=Path, default=None, help="a target model folder (default: the loop's trained "
                        "target, engine/build_loop_models.py; the older chain target: engine/build_loop_target.py)")
    parser.add_argument("--tokenizer", default="standin:kimi-k2.5", help="the target's tokenizer")
    parser.add_argument("--no-trust-remote-code", action="store_true", help="load the tokenizer without remote code")
    parser.add_argument("--other", default=None, help="a model folder whose answers, served by the real SGLang, are "
                        f"the off-policy data (default: the loop's other model), or {OTHER_SIM} for the stand-in's "
                        "random-id answers")
    parser.add_argument("--train-steps", type=int, default=side.TrainSettings.steps)
    parser.add_argument("--draft-vocab-size", type=int, default=LoopSettings.draft_vocab_size,
                        help="the drafters' vocabulary (fewer when the on-policy answers hold fewer distinct ids)")
    parser.add_argument("--aux-layers", default=None, help="speculators aux layer ids, e.g. 1,2,3 (default: chosen "
                        "from the target's layer count)")
    args = parser.parse_args(argv)
    reason = missing_parts()
    if reason:
        sys.exit(f"eval-loop: error: {reason}")
    settings = LoopSettings(
        work=args.work.resolve(), target=args.target.resolve() if args.target else None, tokenizer=args.tokenizer,
        other=args.other if args.other in (None, OTHER_SIM) else Path(args.other).resolve(),
        draft_vocab_size=args.draft_vocab_size,
        trust_remote_code=not args.no_trust_remote_code, train=side.TrainSettings(steps=args.train_steps),
        aux_layers=tuple(int(x) for x in args.aux_layers.split(",")) if args.aux_layers else None,
    )
    print(format_table(run_loop(settings)), flush=True)


if __name__ == "__main__":
    main()
