"""The deployments an evaluation measures: each endpoint checked as a run's preflight checks it (health, model,
weight version, watermarking, the client's tokenizer against the server's), then refused in one line unless its
`/server_info` says it runs a drafter, and its speculative settings recorded beside the numbers.

No `/generate` request is sent before every endpoint of both deployments has passed.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.access import NO_ACCESS, ServerAccess
from eagle_datagen.inference.preflight import ServerInfo, get_server_info, judge_endpoints
from eagle_datagen.inference.tokenizer_agreement import AgreementCheck
from eagle_datagen.profile import ModelProfile

# /server_info keys recorded per endpoint: what the acceptance depends on, and what the numbers were measured with
SPECULATIVE_KEYS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_draft_model_revision",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc",
    "speculative_token_map",
)


@dataclass(frozen=True)
class SpeculativeServer:
    url: str
    model_path: str
    weight_version: str | None
    sglang_version: str | None
    max_running_requests: int | None
    speculative: dict[str, Any]  # SPECULATIVE_KEYS as /server_info reports them
    sampling_settings: dict[str, Any]  # the server's sampling-relevant settings (preflight.SAMPLING_SETTINGS)
    replicas: int = 1  # behind the URL (inference/fleet.py)
    slots: int | None = None  # summed over the replicas

    @property
    def draft_model(self) -> str:
        return str(self.speculative.get("speculative_draft_model_path") or self.speculative["speculative_algorithm"])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SpeculativeServer:
        return cls(**raw)


def not_speculative(url: str) -> str:
    return (
        f"{url}: not a speculative server (speculative_algorithm is None in /server_info): start SGLang with "
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path ..."
    )


def speculative_facts(url: str, server_info: dict[str, Any]) -> dict[str, Any]:
    """The endpoint's speculative settings; ConfigError (one line) for a server without a drafter."""
    if not server_info.get("speculative_algorithm"):
        raise ConfigError(not_speculative(url))
    return {key: server_info.get(key) for key in SPECULATIVE_KEYS}


async def check_deployment(
    urls: list[str],
    profile: ModelProfile,
    model: str,
    agreement: AgreementCheck | None,  # the client's tokenizer against the servers' (tokenizer_agreement.py)
    wait_s: float,
    front_end: str = "cli",
    replicas_behind_url: int | None = None,
    access: ServerAccess = NO_ACCESS,  # this deployment's API key and CA bundle (access.py)
) -> list[SpeculativeServer]:
    """Every endpoint must pass (a deployment is measured whole): the run's preflight without its canary, then the
    speculative check. The replicas must serve one drafter."""
    verdicts = await judge_endpoints(
        urls,
        profile,
        model,
        canary_body=None,
        wait_s=wait_s,
        min_endpoints=len(urls),
        agreement=agreement,
        front_end=front_end,
        replicas_behind_url=replicas_behind_url,
        access=access,
    )
    async with access.session(timeout=aiohttp.ClientTimeout(total=120, sock_connect=10)) as session:
        infos = await asyncio.gather(*(get_server_info(session, s.url) for s in verdicts.servers))
    servers = [_server(s, speculative_facts(s.url, info)) for s, info in zip(verdicts.servers, infos, strict=True)]
    drafters = sorted({(s.draft_model, s.speculative.get("speculative_num_steps")) for s in servers}, key=str)
    if len(drafters) > 1:
        raise ConfigError(
            f"the endpoints {urls} serve different drafters or draft settings {drafters}: one deployment per "
            "evaluation (compare two with --compare-url)"
        )
    return servers


def _server(info: ServerInfo, speculative: dict[str, Any]) -> SpeculativeServer:
    return SpeculativeServer(
        url=info.url,
        model_path=info.model_path,
        weight_version=info.weight_version,
        sglang_version=info.version,
        max_running_requests=info.max_running_requests,
        speculative=speculative,
        sampling_settings=dict(info.sampling_settings),
        replicas=info.replicas,
        slots=info.fleet.slots,
    )
