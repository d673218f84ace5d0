"""Every error-body shape of SGLang and its router gives its message (error_body.py)."""

from __future__ import annotations

import json

import pytest

from eagle_datagen.inference.error_body import MAX_MESSAGE_CHARS, error_message


def body(value) -> bytes:
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # a schema error of SGLang 0.5.23: the message is a string in `error`
        (
            body({"error": "unknown field `bogus_key`, expected one of `max_new_tokens`, `temperature`"}),
            "unknown field `bogus_key`, expected one of `max_new_tokens`, `temperature`",
        ),
        (body({"error": 'invalid type: string "x", expected f32'}), 'invalid type: string "x", expected f32'),
        # a value error: an object with a message
        (
            body({"error": {"message": "temperature must be non-negative, got -1.0.", "code": 400}}),
            "temperature must be non-negative, got -1.0.",
        ),
        # the queue-full 503, OpenAI style
        (
            body({"object": "error", "message": "The request queue is full.", "type": "Service Unavailable"}),
            "The request queue is full.",
        ),
        # an error object that names only its code (a router's admission refusal)
        (body({"error": {"code": "admission_queue_full"}}), "admission_queue_full"),
        # a web framework's validation errors
        (
            body({"detail": [{"loc": ["body", "rid"], "msg": "Input should be a valid string"}]}),
            "Input should be a valid string",
        ),
        (body({"detail": "Not Found"}), "Not Found"),
        # not JSON, or JSON of another shape
        (b"Internal Server Error\n", "Internal Server Error"),
        (b"", "(empty body)"),
        (body(["odd"]), '["odd"]'),
        (body({"error": None, "status": 500}), '{"error": null, "status": 500}'),
    ],
)
def test_each_shape_gives_its_message(raw, message):
    assert error_message(raw) == message


def test_the_message_is_one_bounded_line():
    text = error_message(body({"error": {"message": "line one\nline two " + "x" * 1000}}))
    assert "\n" not in text and text.startswith("line one line two") and len(text) == MAX_MESSAGE_CHARS
