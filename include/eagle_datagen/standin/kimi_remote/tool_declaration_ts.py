"""Render OpenAI-style tool declarations as TypeScript, the way Kimi-K2.5 shows tools to its model.

Written for eagle-datagen's stand-in from the documented behaviour of the real tokenizer (its remote code hands
the chat template a TypeScript rendering of the tools as `tools_ts_str`). Each function becomes a `type` in a
`functions` namespace, its description and every property's description as `//` comments; JSON-schema types map
to TypeScript (`integer` -> `number`, arrays -> `T[]`, enums -> unions of literals, objects -> `{ ... }`).
"""

from __future__ import annotations

import json
from typing import Any

_SCALARS = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}


def _type_of(schema: Any, indent: str) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(value, ensure_ascii=False) for value in schema["enum"]) or "never"
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list):
            return " | ".join(_type_of(part, indent) for part in schema[union]) or "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_type_of(schema | {"type": k}, indent) for k in kind) or "any"
    if kind == "array":
        item = _type_of(schema.get("items"), indent)
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object" or "properties" in schema:
        return _object(schema, indent)
    return _SCALARS.get(kind, "any") if isinstance(kind, str) else "any"


def _comment(text: Any, indent: str) -> list[str]:
    if not isinstance(text, str) or not text:
        return []
    return [f"{indent}// {line}" for line in text.splitlines()]


def _object(schema: dict[str, Any], indent: str) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "object"
    required = set(schema.get("required") or [])
    inner = indent + "  "
    lines = ["{"]
    for name, prop in properties.items():
        lines += _comment(prop.get("description") if isinstance(prop, dict) else None, inner)
        if isinstance(prop, dict) and "default" in prop:
            lines.append(f"{inner}// Default: {json.dumps(prop['default'], ensure_ascii=False)}")
        optional = "" if name in required else "?"
        lines.append(f"{inner}{name}{optional}: {_type_of(prop, inner)},")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _function(tool: dict[str, Any]) -> str:
    function = tool.get("function", tool) if isinstance(tool, dict) else {}
    name = function.get("name", "unnamed")
    lines = _comment(function.get("description"), "")
    parameters = function.get("parameters")
    if isinstance(parameters, dict) and parameters.get("properties"):
        lines.append(f"type {name} = (_: {_object(parameters, '')}) => any;")
    else:
        lines.append(f"type {name} = () => any;")
    return "\n".join(lines)


def encode_tools_to_typescript_style(tools: list[dict[str, Any]]) -> str:
    """The tools as one TypeScript namespace (an empty string for no tools)."""
    if not tools:
        return ""
    functions = "\n".join(_function(tool) for tool in tools)
    return f"# Tools\n\n## functions\nnamespace functions {{\n{functions}\n}}\n"
