"""Error families.

`DataGenError` and its subclasses are *expected* failures: the command line prints their message as one
line (it names the problem and the fix) and exits with the family's `exit_status` without a traceback: 1 for
something to fix, 3 for a run that is not finished yet (`RunUnfinished`). Anything else is a bug.
Transient errors (worth retrying) are separate from terminal ones so that retry code can tell them apart.
"""


class DataGenError(Exception):
    """An expected, terminal failure whose message is one line that says what is wrong and how to fix it."""

    exit_status = 1  # the command line's exit status for it


class RunUnfinished(DataGenError):
    """The run ended without publishing, and nothing needs fixing: its message says what is missing and when a
    rerun (the same run id) finishes it (samples held by another run in flight, say)."""

    exit_status = 3


class ConfigError(DataGenError):
    """Bad flags, recipe, profile or tokenizer: found before any prompt is sent."""


class SourceError(DataGenError):
    """A prompt source is missing or unreadable (as a whole; bad records are rejected one by one)."""


class RejectRateExceeded(DataGenError):
    """Too many input records were rejected for the run to be trusted."""


class TransientError(Exception):
    """A failure that may succeed when retried (network blips, overloaded servers, throttling)."""
