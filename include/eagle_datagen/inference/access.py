"""How a client reaches a deployment: its API key (sent as `Authorization: Bearer` on every request) and the CA
bundle that checks its https certificate. Every aiohttp session that talks to SGLang is made by `ServerAccess.session`,
so a new caller sends the key without knowing about it.

SGLang started with `--api-key` (0.5.23, srt/utils/auth.py) answers 401 to every request without the key, except
paths starting /health, /ready and /metrics: a health check proves nothing about the key. A router in front of it
does the same with its own client keys.

The key never travels as a setting value: settings name where it is (an environment variable, a file), and it is
read here when a session is made. It is kept out of `repr`, and `redaction.remember_secret` masks it in the command
line's logs and error line.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from eagle_datagen.errors import ConfigError
from eagle_datagen.redaction import remember_secret

API_KEY_VARIABLE = "EAGLE_DATAGEN_API_KEY"  # Airflow sets it from the SGLang connection's password for each task
COMPARE_API_KEY_VARIABLE = "EAGLE_DATAGEN_COMPARE_API_KEY"  # evaluate's deployment B, when its key differs
REFUSED_STATUSES = frozenset({401, 403})  # the key, not the server: never retried, never held against an endpoint


class KeyRefused(ConfigError):
    """A server refused the API key (401/403): the run stops in one line; another attempt cannot cure it.
    `url` is the route that refused it; `ServerAccess.refused` words the line with where the key came from."""

    def __init__(self, url: str, status: int, message: str | None = None) -> None:
        super().__init__(message or f"{url} answered {_answer(status)}: check the API key")
        self.url, self.status = url, status


def _answer(status: int) -> str:
    return {401: "401 Unauthorized", 403: "403 Forbidden"}.get(status, str(status))


@dataclass(frozen=True)
class ServerAccess:
    api_key: str | None = field(default=None, repr=False)
    source: str = "no API key was given"  # where the key came from, for messages ("$EAGLE_DATAGEN_API_KEY")
    ca_bundle: str | None = None  # None: the system's CA certificates
    fix: str = f"set ${API_KEY_VARIABLE} or pass --api-key-file"  # how to give the key, in the front end's words

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def ssl_context(self) -> ssl.SSLContext | bool:
        """Only the bundle's CA certificates (a private CA, a self-signed certificate), else True: aiohttp's
        default context, which checks against the system's."""
        return ssl.create_default_context(cafile=self.ca_bundle) if self.ca_bundle else True

    def connector(self, **kwargs: Any) -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(ssl=self.ssl_context(), **kwargs)

    def session(self, connector: dict[str, Any] | None = None, **kwargs: Any) -> aiohttp.ClientSession:
        """A session whose every request carries the key: `connector` holds TCPConnector arguments (limit, ...),
        `kwargs` ClientSession's (timeout, base_url)."""
        return aiohttp.ClientSession(headers=self.headers(), connector=self.connector(**(connector or {})), **kwargs)

    def refused(self, url: str, status: int) -> KeyRefused:
        """The one line for a 401/403 from `url` (the endpoint and route that answered it)."""
        if self.api_key:
            problem = (
                f"the API key from {self.source} is wrong or lacks the rights this route needs; give the key the "
                "deployment was started with (SGLang's --api-key, or the router's client key)"
            )
        else:
            problem = f"the deployment wants an API key and none was given; {self.fix}"
        return KeyRefused(url, status, f"{url} answered {_answer(status)}: {problem}")


NO_ACCESS = ServerAccess()


def _read_key(path: str, flag: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the API key file {flag} {path}: {type(exc).__name__}") from None
    return text.strip()


def server_access(
    api_key_file: str | None = None,
    ca_bundle: str | None = None,
    *,
    variable: str = API_KEY_VARIABLE,
    flag: str = "--api-key-file",
    fallback: ServerAccess | None = None,
    front_end: str = "cli",
) -> ServerAccess:
    """The access a deployment's settings describe: the key from `api_key_file`, else from the environment
    variable `variable`, else `fallback`'s (evaluate's deployment B falls back to A's), else none. In Airflow the
    task sets the variable from the SGLang connection's password (plugins/eagle_datagen_airflow/deployment.py)."""
    fix = f"set ${variable} or pass {flag} FILE"
    env_source = f"${variable}"
    if front_end == "airflow":
        fix = f"set the SGLang connection's password (or ${variable} on the workers)"
        env_source = f"the SGLang connection's password (${variable})"
    if api_key_file:
        key, source = _read_key(api_key_file, flag), f"{flag} {api_key_file}"
        if not key:
            raise ConfigError(f"the API key file {flag} {api_key_file} is empty: write the key into it")
    elif os.environ.get(variable, "").strip():
        key, source = os.environ[variable].strip(), env_source
    elif fallback is not None and fallback.api_key:
        key, source, fix = fallback.api_key, fallback.source, fallback.fix
    else:
        key, source = None, "no API key was given"
    if key is not None and any(c.isspace() or not c.isprintable() for c in key):
        raise ConfigError(f"the API key from {source} holds spaces or control characters: give the key alone")
    if ca_bundle is not None and not Path(ca_bundle).is_file():
        raise ConfigError(f"the CA bundle {ca_bundle} is not a file: give a PEM file of CA certificates")
    if key is not None:
        remember_secret(key)
    return ServerAccess(key, source, ca_bundle, fix)
