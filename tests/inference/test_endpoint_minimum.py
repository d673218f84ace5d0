"""min_endpoints as a count or a share of the endpoints given, the same from every front end."""

from __future__ import annotations

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.endpoint_minimum import parse_min_endpoints, required_endpoints


@pytest.mark.parametrize(
    ("given", "parsed"),
    [(2, 2), ("2", 2), (" 3 ", 3), ("50%", "50%"), ("50 %", "50%"), (0.5, "50%"), ("0.25", "25%"), ("100%", "100%"),
     ("12.5%", "12.5%")],
)  # fmt: skip
def test_a_count_or_a_share_in_any_front_ends_spelling(given, parsed):
    assert parse_min_endpoints(given) == parsed


@pytest.mark.parametrize("bad", [0, -1, "0", "0%", "101%", "half", "", True, 1.5, None, "1.0", [2]])
def test_anything_else_is_one_line_naming_both_forms(bad):
    with pytest.raises(ConfigError) as info:
        parse_min_endpoints(bad)
    message = str(info.value)
    assert "neither a number of endpoints" in message and "share of them (50%" in message and "\n" not in message


@pytest.mark.parametrize(
    ("minimum", "given", "required"),
    [(2, 5, 2), ("50%", 4, 2), ("50%", 3, 2), ("50%", 1, 1), ("100%", 16, 16), ("10%", 3, 1), ("75%", 16, 12),
     ("33.4%", 3, 2)],
)  # fmt: skip
def test_a_share_is_of_the_endpoints_given_rounded_up_never_below_one(minimum, given, required):
    assert required_endpoints(minimum, given) == required
