"""SGLang 0.5.23's `/v1/tokenize` (and `/tokenize`): a prompt encoded, or chat `messages` rendered and encoded;
and `/v1/detokenize` (and `/detokenize`): ids decoded.

With `messages`, the server renders them with its tokenizer's own `apply_chat_template` (tools passed on,
`add_generation_prompt` as given, default true) and encodes the text without added special tokens, as the real
chat endpoint does. A server without a tokenizer (`--skip-tokenizer-init`) cannot answer.

`SimConfig.tokenize_api` "prompt" answers as SGLang before 0.5.23 does: its TokenizeRequest has a required `prompt`
and no `messages` (an unknown field, ignored), so a body without `prompt` fails FastAPI's validation, which SGLang
answers 400 with the validation error as the message. ("none": no route at all, app.py.)
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from eagle_datagen.standin.sglang.state import STATE_KEY


def _error(message: str, status: int = 400) -> web.Response:
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


# SGLang's answer (its RequestValidationError handler: 400, ErrorResponse) to a body without the required `prompt`
PROMPT_REQUIRED = (
    "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'} "
    "[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]"
)


def _tokens(tokenizer: Any, body: dict[str, Any], api: str = "messages") -> list[int] | list[list[int]]:
    if api == "prompt":
        if body.get("prompt") is None:
            raise ValueError(PROMPT_REQUIRED)
        body = {k: v for k, v in body.items() if k != "messages"}  # not a field before 0.5.23: ignored
    if (body.get("prompt") is None) == (body.get("messages") is None):
        raise ValueError("Exactly one of 'prompt' or 'messages' must be provided.")
    add_special = bool(body.get("add_special_tokens", True))
    if body.get("messages") is not None:
        generation = body.get("add_generation_prompt")
        text = tokenizer.apply_chat_template(
            body["messages"],
            tools=body.get("tools") or None,
            add_generation_prompt=generation is not False,
            tokenize=False,
            **(body.get("chat_template_kwargs") or {}),
        )
        return tokenizer.encode(text, add_special_tokens=False)
    prompt = body["prompt"]
    if isinstance(prompt, list):
        return [tokenizer.encode(text, add_special_tokens=add_special) for text in prompt]
    return tokenizer.encode(prompt, add_special_tokens=add_special)


async def handle_tokenize(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if state.codec is None:
        return _error("the server runs with --skip-tokenizer-init: it has no tokenizer", 500)
    try:
        body = json.loads(await request.read() or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        tokens = _tokens(state.codec.tokenizer, body, state.config.tokenize_api)
    except (ValueError, TypeError) as exc:
        return _error(str(exc))
    count = [len(t) for t in tokens] if tokens and isinstance(tokens[0], list) else len(tokens)
    answer = {"tokens": tokens, "count": count, "max_model_len": state.config.context_length}
    return web.Response(body=json.dumps(answer).encode(), content_type="application/json")


async def handle_detokenize(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if state.codec is None:
        return _error("the server runs with --skip-tokenizer-init: it has no tokenizer", 500)
    try:
        body = json.loads(await request.read() or b"{}")
        tokens = body["tokens"]
        skip = bool(body.get("skip_special_tokens", True))
        nested = bool(tokens) and isinstance(tokens[0], list)
        rows = tokens if nested else [tokens]
        if not all(isinstance(t, int) for row in rows for t in row):
            raise ValueError("Invalid input: 'tokens' must be a list of integers.")
        texts = [state.codec.tokenizer.decode(row, skip_special_tokens=skip) for row in rows]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return _error(str(exc))
    answer = {"text": texts if nested else texts[0]}
    return web.Response(body=json.dumps(answer).encode(), content_type="application/json")
