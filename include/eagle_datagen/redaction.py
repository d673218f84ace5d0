"""Keep credentials out of what the command line prints.

Credentials reach the package through the standard AWS environment variables and the SGLang API key's (an Airflow
task sets them from its connections), or, for the API key, a file (inference/access.py remembers the key it read).
Nothing in the package logs them, but libraries may: at `--log-level debug` botocore logs every request's
`Authorization` header, which carries the access key id. The command line's log formatter and its error line
therefore replace the current values of these variables, and the keys remembered, with `***`.
"""

from __future__ import annotations

import logging
import os

SECRET_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "EAGLE_DATAGEN_API_KEY",  # inference/access.py: the SGLang API key
    "EAGLE_DATAGEN_COMPARE_API_KEY",
)
MASK = "***"
# Shorter values would mask ordinary words ("test"); real access keys are 16 characters or more.
MIN_SECRET_CHARS = 6
_REMEMBERED: set[str] = set()  # secrets read from elsewhere than the environment (an API key file)


def remember_secret(value: str) -> None:
    """Mask `value` from now on, wherever it came from."""
    if len(value) >= MIN_SECRET_CHARS:
        _REMEMBERED.add(value)


def secret_values() -> list[str]:
    """The credential values in the environment now (an Airflow task changes them per task), longest first."""
    values = {os.environ.get(name, "") for name in SECRET_VARIABLES} | _REMEMBERED
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact(text: str) -> str:
    for secret in secret_values():
        text = text.replace(secret, MASK)
    return text


class RedactingFormatter(logging.Formatter):
    """A formatter whose output (message, arguments and traceback) never holds a credential value."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
