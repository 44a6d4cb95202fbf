"""Combinators rewritten into shapes the engine's grammar enforces. Pure (no I/O); works on the engine's copy.

llama-server's converter reads a node with ``oneOf``/``anyOf`` as *only* its alternatives (the sibling
``properties``, ``required`` and ``type`` are dropped), reads ``allOf`` by making every property of every
part required, and ignores a ``required`` name that has no property schema. So
``{"properties": {...}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}`` — a common shape — becomes
"any object" for the grammar, and a small model rarely guesses right.

``flatten`` merges the siblings into every alternative (and the parts of an ``allOf`` into one schema), the
way a validator reads them: keywords are conjunctive, so a merge without conflicting keywords accepts exactly
the instances the original accepts. Where two parts disagree on a keyword, or an ``additionalProperties``
would change meaning, the node is left as it was (validation still checks it). For ``oneOf`` whose branches
differ by their ``required`` lists, each branch also leaves out the properties only the other branches
require, so an answer cannot match two branches at once.
"""

from __future__ import annotations

import copy
import json
from typing import Any

ANNOTATIONS = {"title", "description", "$comment", "examples", "default", "$id", "$schema", "deprecated",
               "readOnly", "writeOnly"}
_MAPS = ("$defs", "definitions")
MAX_GROWTH = 4


def flatten(node: dict[str, Any], root: dict[str, Any]) -> None:
    """Rewrite ``node`` in place (its children are left to the caller's walk): ``allOf`` first, then the
    alternatives (which a merged ``allOf`` part may have brought in)."""
    if isinstance(node.get("allOf"), list) and node["allOf"]:
        _merge_all_of(node, root)
    for key in ("oneOf", "anyOf"):
        if isinstance(node.get(key), list) and node[key]:
            _distribute(node, key, root)
            return


def _siblings(node: dict[str, Any], combinator: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != combinator and k not in ANNOTATIONS and k not in _MAPS}


def _distribute(node: dict[str, Any], key: str, root: dict[str, Any]) -> None:
    siblings = _siblings(node, key)
    if not siblings:
        return
    merged = [_merge(copy.deepcopy(siblings), _inline(branch, root)) for branch in node[key]]
    if any(branch is None for branch in merged):
        return
    branches = [branch for branch in merged if branch is not None]
    if len(json.dumps(branches)) > MAX_GROWTH * len(json.dumps(node)) + 20_000:
        return  # siblings copied into many branches (and again below them) would bloat the grammar
    _complete_required(branches)
    if key == "oneOf":
        _exclude_other_required(branches)
    for name in list(node):
        if name not in ANNOTATIONS and name not in _MAPS:
            del node[name]
    node["anyOf"] = branches


def _merge_all_of(node: dict[str, Any], root: dict[str, Any]) -> None:
    merged: dict[str, Any] | None = copy.deepcopy(_siblings(node, "allOf"))
    for part in node["allOf"]:
        merged = _merge(merged, _inline(part, root)) if merged is not None else None
    if merged is None:
        return
    for name in list(node):
        if name not in ANNOTATIONS and name not in _MAPS:
            del node[name]
    node.update(merged)


def _inline(branch: Any, root: dict[str, Any]) -> Any:
    """A branch that is only a local ``$ref`` (plus annotations) → a copy of its target."""
    if isinstance(branch, dict) and isinstance(branch.get("$ref"), str) \
            and all(k == "$ref" or k in ANNOTATIONS for k in branch):
        target = resolve_ref(root, branch["$ref"])
        if isinstance(target, dict) and "$ref" not in target:
            return copy.deepcopy(target)
    return copy.deepcopy(branch)


def _merge(a: dict[str, Any] | None, b: Any) -> dict[str, Any] | None:
    """The conjunction of two schemas as one, or None when they cannot be merged without changing meaning."""
    if a is None or not isinstance(b, dict) or "$ref" in b or "$ref" in a:
        return None
    out = {k: v for k, v in a.items()}
    for name, value in b.items():
        if name in ANNOTATIONS or name in _MAPS:
            continue
        if name not in out or out[name] == value:
            out[name] = value
        elif name == "required" and isinstance(value, list) and isinstance(out[name], list):
            out[name] = list(dict.fromkeys([*out[name], *value]))
        elif name == "properties" and isinstance(value, dict) and isinstance(out[name], dict):
            shared = set(value) & set(out[name])
            if any(value[p] != out[name][p] and value[p] != {} and out[name][p] != {} for p in shared):
                return None
            out[name] = {**out[name], **{p: s for p, s in value.items() if s != {} or p not in out[name]}}
        elif name == "type":
            both = set(_types(out[name])) & set(_types(value))
            if not both:
                return None
            out[name] = sorted(both)[0] if len(both) == 1 else sorted(both)
        else:
            return None
    if _changes_additional(a, b) or _changes_additional(b, a):
        return None
    return out


def _types(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def _changes_additional(closed: dict[str, Any], other: Any) -> bool:
    """Merging would let ``other``'s properties through ``closed``'s additionalProperties/patternProperties."""
    if closed.get("additionalProperties", True) is True and "patternProperties" not in closed:
        return False
    mine = set(closed.get("properties") or {})
    theirs = set(other.get("properties") or {}) if isinstance(other, dict) else set()
    return bool(theirs - mine)


def _complete_required(branches: list[dict[str, Any]]) -> None:
    """A required name without a property schema gets one (the engine only writes declared properties)."""
    for branch in branches:
        props = branch.get("properties")
        if isinstance(props, dict) and isinstance(branch.get("required"), list):
            for name in branch["required"]:
                if isinstance(name, str) and name not in props and "additionalProperties" not in branch:
                    props[name] = {}


def _exclude_other_required(branches: list[dict[str, Any]]) -> None:
    required = [set(b.get("required") or []) for b in branches]
    for i, branch in enumerate(branches):
        others = [r for j, r in enumerate(required) if j != i]
        props = branch.get("properties")
        if not isinstance(props, dict) or branch.get("additionalProperties", False) is not False \
                or "patternProperties" in branch or any(not (r - required[i]) for r in others):
            continue
        for name in set().union(*others) - required[i] if others else set():
            props.pop(name, None)
        branch["additionalProperties"] = False


MISSING = object()


def resolve_ref(root: dict[str, Any], ref: str) -> Any:
    """The node a local ``#/…`` reference points to, or ``MISSING``."""
    if not ref.startswith("#"):
        return MISSING
    target: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return MISSING
    return target


def drop_recursive_alternatives(node: dict[str, Any], root: dict[str, Any]) -> None:
    """Alternatives that lead back to ``node`` (a tree whose group holds items that may be groups) are left out
    when others remain, so the smallest answer cannot nest without end."""
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and len(branches) > 1:
            flat = [b for b in branches if not _reaches(b, node, root, set())]
            if flat and len(flat) < len(branches):
                node[key] = flat


def _reaches(current: Any, target: dict[str, Any], root: dict[str, Any], seen: set[int]) -> bool:
    """Whether ``target`` (by identity) is ``current`` or lies under it, following local ``$ref``s."""
    if current is target:
        return True
    if id(current) in seen or not isinstance(current, (dict, list)):
        return False
    seen.add(id(current))
    if isinstance(current, dict) and isinstance(current.get("$ref"), str):
        found = resolve_ref(root, current["$ref"])
        if found is not MISSING and _reaches(found, target, root, seen):
            return True
    values = current.values() if isinstance(current, dict) else current
    return any(_reaches(value, target, root, seen) for value in values if isinstance(value, (dict, list)))


ROOT_NAME = "tiankong_root"


def name_root_refs(schema: dict[str, Any]) -> None:
    """``{"$ref": "#"}`` (a schema that recurses through its root) is not understood by the converter: the copy
    gets the root's keywords as a named definition and the references point there (the same schema)."""
    if not _has_root_ref(schema):
        return
    key = "definitions" if "definitions" in schema and "$defs" not in schema else "$defs"
    body = {k: v for k, v in schema.items() if k not in ("definitions", "$defs", "$schema", "$id", "id")}
    defs = schema.setdefault(key, {})
    if not isinstance(defs, dict) or ROOT_NAME in defs:
        return
    defs[ROOT_NAME] = _point_root_refs(copy.deepcopy(body), f"#/{key}/{ROOT_NAME}")
    _point_root_refs(schema, f"#/{key}/{ROOT_NAME}")


def _has_root_ref(node: Any) -> bool:
    if isinstance(node, dict):
        return node.get("$ref") == "#" or any(_has_root_ref(v) for v in node.values())
    return isinstance(node, list) and any(_has_root_ref(v) for v in node)


def _point_root_refs(node: Any, target: str) -> Any:
    if isinstance(node, dict):
        if node.get("$ref") == "#":
            node["$ref"] = target
        for value in node.values():
            _point_root_refs(value, target)
    elif isinstance(node, list):
        for value in node:
            _point_root_refs(value, target)
    return node
