"""Keep credentials out of what the command line prints.

Credentials reach the package only through the standard AWS environment variables (an Airflow task sets
them from its connection). Nothing in the package logs them, but libraries may: at `--log-level debug`
botocore logs every request's `Authorization` header, which carries the access key id. The command line's
log formatter and its error line therefore replace the current values of these variables with `***`.
"""

from __future__ import annotations

import logging
import os

SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
MASK = "***"
# Shorter values would mask ordinary words ("test"); real access keys are 16 characters or more.
MIN_SECRET_CHARS = 6


def secret_values() -> list[str]:
    """The credential values in the environment now (an Airflow task changes them per task), longest first."""
    values = {os.environ.get(name, "") for name in SECRET_VARIABLES}
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact(text: str) -> str:
    for secret in secret_values():
        text = text.replace(secret, MASK)
    return text


class RedactingFormatter(logging.Formatter):
    """A formatter whose output (message, arguments and traceback) never holds a credential value."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
