"""What the stand-in SGLang server simulates: the model's ids, its speed, its limits and its faults.

Defaults describe a Kimi-K2.5 deployment at realistic GPU speed. Profiles (`realistic`, `fast`, `instant`)
change only speed and output length, so the same tests run in milliseconds or in real time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from eagle_datagen.standin.sglang.speculative import SpeculativeConfig


@dataclass
class FaultRates:
    """Probability, per request, of each injected fault (section 8 of the design notes)."""

    error_503: float = 0.0  # SGLang's own "The request queue is full."
    error_429: float = 0.0  # a router whose queue is full
    error_408: float = 0.0  # a router queue timeout
    abort: float = 0.0  # HTTP 200 with finish_reason abort ("Abort before prefill")
    drop: float = 0.0  # the connection closes without a response
    slow: float = 0.0  # the answer comes `slow_seconds` late
    no_think_end: float = 0.0  # the output lacks </think>
    echo: float = 0.0  # SGLang 0.5.0-0.5.4: output_ids start with the prompt's last 1-5 ids
    strip_think: float = 0.0  # something rewriting answers (a proxy, a gateway) removed <think> and </think>
    prompt_tokens: float = 0.0  # meta_info.prompt_tokens disagrees with the ids sent (another tokenizer's count)
    # an instant prompt (it ends in <think></think>) answered with reasoning and </think> anyway, as a model that
    # ignores the template's switch would
    think_in_instant: float = 0.0
    # the request is accepted and never answered: the connection stays open, /health stays 200, and the server's
    # own load (/v1/loads) does not count it, as when a request is lost inside a server
    lose: float = 0.0
    # return_logprob: the answer's output_top_logprobs is one position short of its output_ids (logprobs.py)
    logprobs_shape: float = 0.0

    def __post_init__(self) -> None:
        for name, value in self.to_dict().items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ValueError(f"fault rate {name} must be a number in [0, 1], got {value!r}")

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, rates: dict[str, Any]) -> FaultRates:
        """Rates by kind; kinds left out are 0. An unknown kind is an error that names the known ones."""
        unknown = sorted(set(rates) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; known: {list(FAULT_KINDS)}")
        return cls(**rates)


FAULT_KINDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FaultRates))
LOADS_FAULTS = (None, "hang", "error")
TOKENIZE_APIS = ("messages", "prompt", "none")  # SimConfig.tokenize_api


@dataclass
class SimConfig:
    # what the server reports about itself
    model_path: str = "moonshotai/Kimi-K2.5"
    tokenizer_path: str | None = None  # set: decode `text` with it (else `text` is ""); reported either way
    tool_calls: bool = False  # with a tokenizer: answer prompts that declare tools with Kimi tool calls
    # /v1/tokenize as SGLang answers it: "messages" (0.5.23: `prompt` or chat `messages`), "prompt" (before 0.5.23:
    # `prompt` only, a body without it refused 400 as FastAPI validation), "none" (no /v1/tokenize nor
    # /v1/detokenize: 404, as a gateway that does not pass them on)
    tokenize_api: str = "messages"
    weight_version: str = "default"
    version: str = "0.5.9"  # the SGLang version /get_server_info reports
    tp_size: int = 8
    # SGLang's --enable-deterministic-inference, as /server_info reports it: real SGLang honours sampling_seed
    # only with it (the stand-in's outputs follow the seed either way)
    enable_deterministic_inference: bool = False
    # SGLang's --enable-watermark (0.5.23): /server_info reports it; the stand-in's outputs are never watermarked
    enable_watermark: bool = False
    # any other server argument as /server_info reports it (e.g. {"reasoning_parser": "kimi_k2"}): what the server
    # says it runs with; the stand-in's outputs do not change (server_flags.py judges these)
    server_args: dict[str, Any] = field(default_factory=dict)
    # a drafter (SGLang's --speculative-algorithm ...): /server_info reports it and every finished request's
    # meta_info carries known acceptance metrics (speculative.py); None: a server without a drafter
    speculative: SpeculativeConfig | None = None
    # the model's token facts
    context_length: int = 262144
    vocab_size: int = 163840
    ordinary_vocab: int = 163584  # ids [0, ordinary_vocab) are ordinary text; special ids start here
    think_start_id: int = 163606
    think_end_id: int = 163607
    eos_id: int = 163586
    # capacity and speed
    max_running_requests: int = 64
    max_queued_requests: int = 4096
    prefill_s_per_token: float = 0.00002
    decode_s_per_token: float = 0.025
    # KV held for prefix reuse (SGLang's radix cache), in tokens; 0 disables it (--disable-radix-cache). A
    # Kimi-K2.5 replica on 8 x H200 (TP 8, INT4 weights ~74 GB per GPU, MLA latent KV of ~69 KiB per token
    # replicated on every GPU) has room for ~700k tokens of KV; 64 running requests hold ~200k of it, so about
    # 500k are left for cached prefixes (docs/internals/prefix_cache.md).
    prefix_cache_tokens: int = 500_000
    stream_interval: int = 8  # tokens per streamed event, unless the request sets its own
    startup_seconds: float = 0.0  # /health_generate answers 503 this long after every (re)start
    # outputs
    output_tokens_min: int = 200
    output_tokens_max: int = 600
    reasoning_fraction: float = 0.7  # share of an output before </think>
    zipf_exponent: float = 1.1
    vocab_seed: int = 0  # seeds the fixed, BPE-like mapping of Zipf ranks to ordinary ids (outputs.py)
    # faults
    faults: FaultRates = field(default_factory=FaultRates)
    fault_seed: int = 0
    slow_seconds: float = 2.0
    restart_every_s: float | None = None  # periodic restarts; None: never
    lose_after: int | None = None  # every /generate request after this many is lost (the lose fault); None: never
    # GET /v1/loads: "hang" never answers, "error" answers 500 (the scheduler still works); None: answers
    loads_fault: str | None = None
    # the scheduler stops after this many /generate requests: later ones are never answered, /v1/loads hangs
    # (SGLang asks the scheduler for it) and /health_generate answers 503 after 20 s, /health stays 200
    stuck_after: int | None = None
    restart_downtime_s: float = 1.0
    # SGLang's --api-key: every route but /health*, /ready*, /metrics* wants `Authorization: Bearer KEY` (app.py)
    api_key: str | None = field(default=None, repr=False)
    # https: a PEM certificate (chain) and its key; None: plain http
    tls_cert: str | None = None
    tls_key: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.faults, dict):
            self.faults = FaultRates.from_dict(self.faults)
        if isinstance(self.speculative, dict):
            self.speculative = SpeculativeConfig(**self.speculative)
        problems = []
        for name in ("context_length", "vocab_size", "ordinary_vocab", "max_running_requests", "stream_interval"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1")
        non_negative = ("max_queued_requests", "prefix_cache_tokens", "prefill_s_per_token", "decode_s_per_token")
        for name in (*non_negative, "startup_seconds"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative")
        if self.slow_seconds < 0 or self.restart_downtime_s < 0:
            problems.append("slow_seconds and restart_downtime_s must not be negative")
        if self.loads_fault not in LOADS_FAULTS:
            problems.append(f"loads_fault must be one of {LOADS_FAULTS}, got {self.loads_fault!r}")
        for name in ("lose_after", "stuck_after"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                problems.append(f"{name} must not be negative")
        if self.restart_every_s is not None and self.restart_every_s <= 0:
            problems.append("restart_every_s must be positive (or None for no periodic restarts)")
        if self.ordinary_vocab > self.vocab_size:
            problems.append("ordinary_vocab must not exceed vocab_size")
        for name in ("think_start_id", "think_end_id", "eos_id"):
            if not self.ordinary_vocab <= getattr(self, name) < self.vocab_size:
                problems.append(f"{name} must be a special id in [ordinary_vocab, vocab_size)")
        # room for at least </think> and EOS in every natural output
        if not 2 <= self.output_tokens_min <= self.output_tokens_max:
            problems.append("output tokens must satisfy 2 <= output_tokens_min <= output_tokens_max")
        if not 0.0 <= self.reasoning_fraction <= 1.0:
            problems.append("reasoning_fraction must be in [0, 1]")
        if self.zipf_exponent <= 0:
            problems.append("zipf_exponent must be positive")
        if problems:
            raise ValueError("bad stand-in server config: " + "; ".join(problems))

    @property
    def lost_after(self) -> int | None:
        """Every /generate request after this many is never answered: lost, or its scheduler stuck."""
        return min((n for n in (self.lose_after, self.stuck_after) if n is not None), default=None)

    def with_profile(self, name: str) -> SimConfig:
        """A copy with a speed profile's timing and output lengths."""
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r}; known: {sorted(PROFILES)}")
        return dataclasses.replace(self, **PROFILES[name])


# realistic: a GPU serving Kimi-K2.5; fast: quick end-to-end runs; instant: no modelled latency at all.
PROFILES: dict[str, dict[str, Any]] = {
    "realistic": {
        "decode_s_per_token": 0.025,
        "prefill_s_per_token": 0.00002,
        "output_tokens_min": 200,
        "output_tokens_max": 600,
    },
    "fast": {
        "decode_s_per_token": 0.002,
        "prefill_s_per_token": 0.000002,
        "output_tokens_min": 50,
        "output_tokens_max": 150,
    },
    "instant": {
        "decode_s_per_token": 0.0,
        "prefill_s_per_token": 0.0,
        "output_tokens_min": 50,
        "output_tokens_max": 150,
    },
}
