"""The real SGLang server and the real `smg` router on this machine's CPU: the one place their command lines live.

`make sglang` builds the engine's own environment (.venv-sglang: SGLang 0.5.23 on a CPU torch, smg 1.13.0) and
the tiny reasoning model (engine/build_tiny_model.py); docs/internals/real-engine.md says why each flag is there. Tests,
`make sglang-serve` and the demo start servers through these classes:

    with SGLangServer(model_dir, log_dir) as server:          # a free port, /health 200 before it returns
        with SmgRouter([server.url], log_dir) as router:       # /readiness 200 before it returns
            ...

Each runs in a process group of its own (processes.Component) and is stopped by that group. A server that
dies while starting raises ComponentDied with the tail of its log.

`ServerOptions(drafter=Drafter(DIR))` starts the target with an EAGLE-3 drafter (`--speculative-algorithm EAGLE3`,
top-k 1): its /generate then answers each request's `spec_*` metrics in `meta_info`. SGLang needs more on the CPU
for that than the plain server: seven kernels in the sgl_kernel shim (engine/shims/sgl_kernel/speculative_ops.py)
and the draft/verify attention of `torch_native` (engine/eagle3_cpu/, put on the PYTHONPATH of such a server only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from eagle_datagen_stack.processes import Component, ComponentDied, free_port, http_ok, wait_until

PROJECT = Path(__file__).resolve().parents[2]
SHIMS = PROJECT / "engine" / "shims"  # the sgl_kernel stand-in, put on the server's PYTHONPATH
EAGLE3_CPU = PROJECT / "engine" / "eagle3_cpu"  # torch_native's draft/verify attention, for a server with a drafter
TINY_MODEL_HOME = "sglang-tiny-model"  # under the cache folder; engine/build_tiny_model.py writes it
TINY_MODEL_NAME = "Kimi-K2.5"


class EngineMissing(RuntimeError):
    """The engine environment or the tiny model is not built: `make sglang` builds both."""


def engine_venv() -> Path:
    return Path(os.environ.get("EAGLE_DATAGEN_SGLANG_VENV", PROJECT / ".venv-sglang"))


def cache_root() -> Path:
    return Path(os.environ.get("EAGLE_DATAGEN_CACHE", PROJECT / ".cache"))


def tiny_model_dir() -> Path:
    return cache_root() / TINY_MODEL_HOME / TINY_MODEL_NAME


def missing_engine(model_path: Path | None = None) -> str | None:
    """Why the real engine cannot start here (None when it can): what is missing and the command that builds it."""
    venv = engine_venv()
    model_path = model_path or tiny_model_dir()
    if not (venv / "bin" / "python").exists() or not list(venv.glob(".installed-*")):
        return f"the SGLang engine environment {venv} is not built: run `make sglang`"
    if not (model_path / "config.json").exists():
        return f"the model {model_path} is not there (the tiny one is built by `make sglang`)"
    return None


def engine_env(base: dict[str, str] | None = None, speculative: bool = False) -> dict[str, str]:
    """The environment of an engine process: SGLang's CPU engine, one OpenMP thread, the sgl_kernel shim (and, for a
    server with a drafter, the patch giving torch_native its draft/verify attention)."""
    env = dict(os.environ if base is None else base)
    env.update(
        SGLANG_USE_CPU_ENGINE="1",
        OMP_NUM_THREADS="1",  # two busy cores: more threads only fight each other
        # replaces the caller's: nothing of the project's .venv may leak in
        PYTHONPATH=os.pathsep.join(map(str, [SHIMS, EAGLE3_CPU] if speculative else [SHIMS])),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env.pop("VIRTUAL_ENV", None)
    return env


@dataclass(frozen=True)
class Drafter:
    """An EAGLE-3 drafter served beside the target (SGLang's `LlamaForCausalLMEagle3` layout). On the CPU only top-k
    1 works (the draft tokens form a chain); 3 steps and 4 draft tokens make an accept length of at most 4."""

    model_path: Path
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4

    def args(self) -> list[str]:
        return [
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(self.model_path),
            "--speculative-num-steps", str(self.num_steps),
            "--speculative-eagle-topk", str(self.eagle_topk),
            "--speculative-num-draft-tokens", str(self.num_draft_tokens),
        ]


@dataclass(frozen=True)
class ServerOptions:
    """The size of one CPU server; small numbers keep its memory near 2 GB."""

    context_length: int = 8192  # the canary asks for 4096 new tokens
    max_total_tokens: int = 65536
    max_running_requests: int = 8
    skip_tokenizer_init: bool = True  # the pipeline sends token ids; a tokenizer adds ~20 s to the start
    extra_args: tuple[str, ...] = ()  # e.g. ("--reasoning-parser", "kimi_k2") to test preflight's warning
    drafter: Drafter | None = None  # serve an EAGLE-3 drafter: per-request spec_* metrics in meta_info
    api_key: str | None = field(default=None, repr=False)  # --api-key: 401 on every route but /health*, /metrics


def sglang_command(
    model_path: Path, port: int, options: ServerOptions = ServerOptions(), nccl_port: int | None = None
) -> list[str]:
    args = [
        str(engine_venv() / "bin" / "python"), "-m", "sglang.launch_server",
        "--model-path", str(model_path),
        "--device", "cpu",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--attention-backend", "torch_native",  # the CPU's only attention without sgl_kernel
        "--sampling-backend", "pytorch",
        "--grammar-backend", "none",
        "--context-length", str(options.context_length),
        "--max-total-tokens", str(options.max_total_tokens),
        "--max-running-requests", str(options.max_running_requests),
    ]
    if nccl_port:  # SGLang picks its own free one and binds it later: two servers starting together can collide
        args += ["--nccl-port", str(nccl_port)]
    if options.skip_tokenizer_init:
        args.append("--skip-tokenizer-init")
    else:  # the model dir's tokenizer is remote code over tiktoken, served as the real Kimi-K2.5 is
        args.append("--trust-remote-code")
    if options.drafter is not None:
        args += options.drafter.args()
    if options.api_key:
        args += ["--api-key", options.api_key]
    return args + list(options.extra_args)


@dataclass
class SGLangServer:
    """One real SGLang server on 127.0.0.1; `start()` returns once /health answers 200."""

    model_path: Path
    log_dir: Path
    options: ServerOptions = ServerOptions()
    port: int = 0  # 0: a free port, kept across restarts
    nccl_port: int = 0  # torch.distributed's rendezvous port; 0: a free one, kept across restarts
    name: str = "sglang"
    start_timeout_s: float = 240.0
    component: Component | None = field(default=None, repr=False)
    started_in_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SGLangServer:
        reason = missing_engine(self.model_path)
        drafter = self.options.drafter
        if not reason and drafter is not None and not (drafter.model_path / "config.json").exists():
            reason = f"the drafter {drafter.model_path} has no config.json"
        if reason:
            raise EngineMissing(reason)
        if not self.port:
            self.port = free_port()
        while not self.nccl_port or self.nccl_port == self.port:
            self.nccl_port = free_port()
        began = time.monotonic()
        command = sglang_command(self.model_path, self.port, self.options, nccl_port=self.nccl_port)
        env = engine_env(speculative=self.options.drafter is not None)
        self.component = Component(self.name, command, env, self.log_dir).start()
        try:
            wait_until(lambda: http_ok(f"{self.url}/health"), self.start_timeout_s,
                       f"SGLang {self.name} at {self.url} answering /health", alive=[self.component], every_s=1.0)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    @property
    def pid(self) -> int | None:
        return self.component.pid if self.component else None

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop(term_wait_s=20.0)

    def kill(self) -> None:
        """SIGKILL the server's whole process group (API server, scheduler, detokenizer) at once."""
        if self.component is not None:
            self.component.kill()

    def __enter__(self) -> SGLangServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_side_by_side(servers: Sequence[SGLangServer]) -> list[SGLangServer]:
    """Start the servers at once (each start is 25-65 s, mostly waiting), each in a thread; when one fails,
    stop them all and raise its error."""
    with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
        starts = [pool.submit(server.start) for server in servers]
    errors = [error for start in starts if (error := start.exception()) is not None]
    if errors:
        for server in servers:
            server.stop()
        raise errors[0]
    return list(servers)


def smg_command(
    worker_urls: Sequence[str],
    port: int,
    prometheus_port: int,
    policy: str = "cache_aware",
    api_key: str | None = None,
) -> list[str]:
    # smg binds 0.0.0.0 (ports 30000 and 29000) unless told otherwise: both hosts are always given.
    # --api-key: the key smg sends its workers; measured with smg 1.13.0, it then also wants that key from its
    # clients (401 without it) and passes the client's Authorization on to the workers.
    return [*_smg_base(worker_urls, port, prometheus_port, policy), *(["--api-key", api_key] if api_key else [])]


def _smg_base(worker_urls: Sequence[str], port: int, prometheus_port: int, policy: str) -> list[str]:
    return [
        str(engine_venv() / "bin" / "smg"), "launch",
        "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *worker_urls,
        "--policy", policy,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port),
    ]


@dataclass
class SmgRouter:
    """The real SGLang model gateway in front of `worker_urls`; `start()` returns once /readiness is 200
    (its /health is 200 even with no worker registered)."""

    worker_urls: Sequence[str]
    log_dir: Path
    policy: str = "cache_aware"
    port: int = 0
    prometheus_port: int = 0
    start_timeout_s: float = 120.0
    api_key: str | None = field(default=None, repr=False)  # smg's --api-key (smg_command)
    component: Component | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SmgRouter:
        self.port = self.port or free_port()
        self.prometheus_port = self.prometheus_port or free_port()
        env = engine_env()
        env.setdefault("RUST_LOG", "info")
        command = smg_command(self.worker_urls, self.port, self.prometheus_port, self.policy, self.api_key)
        self.component = Component("smg", command, env, self.log_dir).start()
        try:
            wait_until(lambda: http_ok(f"{self.url}/readiness"), self.start_timeout_s,
                       f"smg router at {self.url} ready with {len(self.worker_urls)} workers", alive=[self.component])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop(term_wait_s=10.0)

    def __enter__(self) -> SmgRouter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(argv: Sequence[str] | None = None) -> None:
    """`make sglang-serve PORT=P`: one real server on 127.0.0.1:P in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m eagle_datagen_stack.sglang_engine")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--with-tokenizer", action="store_true", help="load the model dir's stand-in tokenizer")
    parser.add_argument("--log-dir", type=Path, default=None, help="default: <cache>/sglang-serve")
    args = parser.parse_args(argv)
    reason = missing_engine()
    if reason:
        sys.exit(f"sglang-serve: error: {reason}")
    log_dir = args.log_dir or cache_root() / "sglang-serve"
    server = SGLangServer(tiny_model_dir(), log_dir, ServerOptions(skip_tokenizer_init=not args.with_tokenizer),
                          port=args.port, name=f"sglang-{args.port}")
    print(f"starting SGLang 0.5.23 on the CPU (model {server.model_path}, log {log_dir}/{server.name}.log) ...",
          flush=True)
    try:
        server.start()
        print(f"SGLang is up at {server.url} (started in {server.started_in_s:.0f} s); Ctrl-C stops it", flush=True)
        while True:
            server.component.check_alive()
            time.sleep(1.0)
    except ComponentDied as exc:
        sys.exit(f"sglang-serve: error: {exc}")
    except KeyboardInterrupt:
        print("stopping SGLang ...", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    serve()
