"""How many tokens a compact JSON answer to a schema needs, estimated from the schema alone (pure): the answer's
token budget (``max_tokens``) when the caller gives none."""

from __future__ import annotations

import json
from typing import Any

from .combinators import MISSING as _MISSING
from .combinators import resolve_ref as _resolve
from .patterns import pattern_chars

DEFAULT_MAX_STRING = 128  # the maxLength a bounded copy gives an unbounded string
DEFAULT_MAX_ITEMS = 8  # the maxItems a bounded copy gives an unbounded array


def estimate_tokens(node: Any, root: dict[str, Any], depth: int = 0) -> float:
    """Upper-ish estimate of the tokens a compact JSON answer needs (≈ 2.5 characters per token)."""
    if depth > 12 or not isinstance(node, dict):
        return 16.0
    if "$ref" in node and isinstance(node["$ref"], str) and node["$ref"].startswith("#"):
        target = _resolve(root, node["$ref"])
        return estimate_tokens(target, root, depth + 1) if target is not _MISSING else 16.0
    if "const" in node:
        return len(json.dumps(node["const"])) / 2.5 + 1
    if "enum" in node and isinstance(node["enum"], list) and node["enum"]:
        return max(len(json.dumps(v)) for v in node["enum"]) / 2.5 + 1
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list) and node[key]:
            return max(estimate_tokens(s, root, depth + 1) for s in node[key])
    if isinstance(node.get("allOf"), list) and node["allOf"]:
        return max(estimate_tokens(s, root, depth + 1) for s in node["allOf"])
    types = node.get("type")
    kind = types[0] if isinstance(types, list) and types else types
    if isinstance(node.get("pattern"), str):
        return pattern_chars(node["pattern"]) / 1.5 + 3
    if kind == "string" or (kind is None and "maxLength" in node):
        return int(node.get("maxLength", DEFAULT_MAX_STRING)) / 2.0 + 3 if "format" not in node else 14
    if kind in ("integer", "number"):
        return 8.0
    if kind in ("boolean", "null"):
        return 2.0
    if kind == "array" or "items" in node or "prefixItems" in node:
        items = node.get("items") if isinstance(node.get("items"), dict) else {}
        prefix = sum(estimate_tokens(s, root, depth + 1) for s in node.get("prefixItems", []) or [])
        return prefix + int(node.get("maxItems", DEFAULT_MAX_ITEMS)) * (estimate_tokens(items, root, depth + 1) + 1) + 2
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    extra = node.get("additionalProperties")
    # an open map (additionalProperties with a schema): room for two entries with short keys
    more = 2 * (estimate_tokens(extra, root, depth + 1) + 8) if isinstance(extra, dict) and extra else 0.0
    if props:
        return sum(len(name) / 2.5 + 3 + estimate_tokens(s, root, depth + 1) for name, s in props.items()) + 2 + more
    return max(64.0, more)
