"""`min_endpoints`: how many endpoints must pass preflight, as a count (2) or a share of those given ("50%").

Every front end takes either (the flag `--min-endpoints 2` or `--min-endpoints 50%`, the recipe key, the trigger
form and a DAG run's conf, where `2` and `"2"` are the same); a fraction below 1 (`0.5`) is a share too. A share
is normalised to its percent string, so a run's settings stay plain JSON, and resolved against the endpoints
the run was given, rounding up: "50%" of 3 endpoints is 2; never fewer than one.
"""

from __future__ import annotations

import math
import re

from eagle_datagen.errors import ConfigError

MinEndpoints = int | str  # a count, or a share as "NN%"
_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)\s*%$")


def _share(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def parse_min_endpoints(value: object) -> MinEndpoints:
    """A count (a positive integer, or its digits) or a share ("50%", or a fraction in (0, 1)); one line on
    anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, float) and 0 < value < 1:
        return _share(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and int(text) >= 1:
            return int(text)
        percent = _PERCENT.match(text)
        if percent and 0 < float(percent.group(1)) <= 100:
            return _share(float(percent.group(1)) / 100)
        try:
            fraction = float(text)
        except ValueError:
            fraction = 0.0
        if 0 < fraction < 1:
            return _share(fraction)
    raise ConfigError(
        f"min_endpoints {value!r} is neither a number of endpoints (1, 2, ...) nor a share of them (50%, or 0.5): "
        "give one of those"
    )


def required_endpoints(minimum: MinEndpoints, given: int) -> int:
    """The endpoints of the `given` that must pass: the count, or the share of them rounded up (at least 1)."""
    parsed = parse_min_endpoints(minimum)
    if isinstance(parsed, int):
        return parsed
    share = float(parsed.removesuffix("%")) / 100
    return max(1, math.ceil(round(share * given, 9)))
