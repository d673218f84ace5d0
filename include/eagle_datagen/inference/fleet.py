"""How many replicas, and how many slots, answer behind one URL: a server on its own, or a router's workers.

The client's window (requests in flight) is 1.25 x the slots it feeds. Behind a router one `/get_server_info`
answer is one worker's, so the window must count every worker. Found, in this order:
1. the `replicas_behind_url` setting: that many replicas, each with the slots the one answer reports;
2. the router's `GET /workers` (smg 1.13.0): its healthy workers, each with the `max_running_requests` label the
   router read from it at registration (the one answer's where a worker has none);
3. otherwise one server. When the answer names another port than the URL's (a proxy or a router that does not
   list its workers), the run cannot count what is behind it and says so in one line naming the setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError

# 1 to 1.25 requests in flight per server slot keeps every slot busy; more only adds queue wait.
WINDOW_PER_SLOT = 1.25
DEFAULT_SLOTS = 64  # a server that does not report max_running_requests
SERVER = "server"  # the URL is the server itself
SETTING = "setting"  # replicas_behind_url
ROUTER = "router /workers"
UNKNOWN = "unknown"  # something fronts the server, which says nothing of what else is behind it


@dataclass(frozen=True)
class Fleet:
    replicas: int
    slots: int | None  # summed over the replicas; None when no answer reported max_running_requests
    found_by: str  # SERVER, SETTING, ROUTER or UNKNOWN
    note: str | None = None  # the line a run logs when the count cannot be known

    def window(self, concurrency: int | None = None) -> int:
        return endpoint_window(self.slots, concurrency, self.replicas)

    def describe(self) -> str:
        slots = f"{self.slots} slots" if self.slots else "slots unknown"
        what = "1 server" if self.replicas == 1 else f"{self.replicas} replicas"
        return f"{what} ({self.found_by}), {slots}"


def endpoint_window(slots: int | None, concurrency: int | None = None, replicas: int = 1) -> int:
    """Requests in flight at one URL: `concurrency` when given, else WINDOW_PER_SLOT x the slots behind it."""
    return concurrency or math.ceil(WINDOW_PER_SLOT * (slots or DEFAULT_SLOTS * replicas))


def _positive(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def workers_fleet(answer: Any, one_answer_slots: int | None) -> Fleet | None:
    """The router's `/workers` answer as a fleet; None when it lists no worker (not a router, or none yet)."""
    workers = answer.get("workers") if isinstance(answer, dict) else None
    if not isinstance(workers, list):
        return None
    workers = [w for w in workers if isinstance(w, dict)]
    healthy = [w for w in workers if w.get("is_healthy", True)] or workers  # the router sends to healthy ones
    if not healthy:
        return None
    each = [_positive((w.get("labels") or {}).get("max_running_requests")) or one_answer_slots for w in healthy]
    slots = sum(s for s in each if s) if all(each) else None
    return Fleet(len(healthy), slots, ROUTER)


def fronted_by_another(url: str, server_info: dict[str, Any]) -> bool:
    """Whether the answer comes from a server on another port than the URL's: through smg, /get_server_info is
    one worker's, with that worker's port; a port-mapping proxy shows it too, so this only says "may"."""
    served = _positive(server_info.get("port"))
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    return served is not None and served != port


def unknown_note(url: str, one_answer_slots: int | None, front_end: str) -> str:
    window = endpoint_window(one_answer_slots)
    return (
        f"SGLang at {url} answers for a server on another port and lists no workers (GET /workers): a router or "
        f"proxy may front several replicas, which the run cannot count, so its window counts one server "
        f"({window} requests in flight): set {settings.named('replicas_behind_url', front_end)} to the number of "
        "replicas it fronts"
    )


def find_fleet(
    url: str,
    server_info: dict[str, Any],
    workers: Any,  # the URL's GET /workers answer; None when it has none
    replicas_behind_url: int | None = None,
    front_end: str = "cli",
) -> Fleet:
    if replicas_behind_url is not None and replicas_behind_url < 1:
        raise ConfigError(f"{settings.named('replicas_behind_url', front_end)} must be at least 1")
    one = _positive(server_info.get("max_running_requests"))
    if replicas_behind_url:
        return Fleet(replicas_behind_url, one * replicas_behind_url if one else None, SETTING)
    routed = workers_fleet(workers, one)
    if routed is not None:
        return routed
    if fronted_by_another(url, server_info):
        return Fleet(1, one, UNKNOWN, unknown_note(url, one, front_end))
    return Fleet(1, one, SERVER)
