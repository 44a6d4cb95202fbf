"""Fast-forward decoding: forced text is prompt, only free values are decoded (sans-I/O, like ``flow.py``).

The answer is built left to right on one engine slot. Forced text (``structured/forced.py``) is appended to the
assistant prefix; each free value is one ``/completion`` call on ``chat template + prefix`` under a grammar for
that value alone, ending at the value's closing character (a stop word, so no step is spent on an
end-of-sequence token). The answer holds one slot of the client's for its calls (``slots.SlotPin``: leased,
sent as ``id_slot``) and ``cache_prompt`` is on, so every call prefills only what was added since the last
one. A choice among literal options (an enum, a
boolean, "another item or the end", an optional key) is greedy constrained decoding of one token at a time
until one option is left; its rest is forced.

The result is checked by the caller against the original schema like every other answer; anything unexpected
(a cut-off value, an engine error, a pinned slot that went away) abandons the plan, and the caller runs the
whole-answer grammar instead (``Abandoned`` carries the reason).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .calls import Call
from .forced import Arr, Const, Node, Num, Obj, Pick, Str, Value, literal, starts
from .slots import SlotPin

_CHAR = r'''char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'''
_INTEGER = '"-"? ("0" | [1-9] [0-9]{0,15})'
_NUMBER = _INTEGER + ' ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})?'
_STRING_BODY = re.compile(r'(?:[^"\\\x00-\x1f\x7f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")

Steps = Generator[list[Call], list[Any], Any]


class Abandoned(Exception):
    """The plan could not finish; ``reason`` is reported with the answer of the fallback."""


@dataclass
class Progress:
    """What one fast-forwarded answer cost."""

    text: str = ""
    calls: int = 0
    decoded: int = 0
    prompt_tokens: int = 0  # the chat prompt's (counted once the answer is done)
    answer_tokens: int = 0  # the finished answer's, as the engine tokenizes it
    total_tokens: int = 0  # prompt + answer so far, as the engine counted at the last call

    @property
    def forced(self) -> int:
        """Answer tokens that were not decoded (read as prompt, or never sent: the answer's last characters)."""
        return max(0, self.answer_tokens - self.decoded)


def _gbnf(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _alternatives(options: list[str]) -> str:
    return " | ".join(_gbnf(o) for o in options)


class Walk:
    """Builds one answer; ``run`` is a flow returning the answer's text."""

    def __init__(self, prompt: str, budget: int, seed: int | None, pin: SlotPin | None = None) -> None:
        self.prompt = prompt
        self.budget = budget
        self.seed = seed
        self.pin = pin
        self.first_prompt = 0
        self.progress = Progress()

    def run(self, root: Obj | Arr) -> Generator[list[Call], list[Any], Progress]:
        yield from self.value(root, [""])
        counts = yield [Call("POST", "/tokenize", {"content": text, "add_special": False})
                        for text in (self.prompt, self.progress.text)]
        prompt, answer = (len(c["tokens"]) if isinstance(c, dict) and isinstance(c.get("tokens"), list) else None
                          for c in counts)
        self.progress.prompt_tokens = prompt if prompt is not None else self.first_prompt
        self.progress.answer_tokens = answer if answer is not None else self.progress.decoded
        return self.progress

    # --- engine calls -------------------------------------------------------------------------------------

    def force(self, text: str) -> None:
        self.progress.text += text

    def complete(self, fields: dict[str, Any], n_predict: int) -> Steps:
        """One ``/completion`` on the prefix so far; returns (content, stopping word, stop type)."""
        used = self.progress.total_tokens - self.first_prompt if self.progress.calls else 0
        left = self.budget - used
        if left < 1:
            raise Abandoned(f"the answer reached its budget of {self.budget} tokens")
        body: dict[str, Any] = {"prompt": self.prompt + self.progress.text, "n_predict": min(n_predict, left),
                                "temperature": 0.0, "cache_prompt": True, **fields}
        if self.seed is not None:
            body["seed"] = self.seed
        if self.pin is not None:
            body = self.pin.pin(body)
        (answer,) = yield [Call("POST", "/completion", body)]
        if isinstance(answer, Exception) or not isinstance(answer, dict):
            raise Abandoned(f"engine call failed: {str(answer)[:200]}")
        progress = self.progress
        if self.pin is not None:
            self.pin.saw(answer)
        if not progress.calls:
            self.first_prompt = int(answer.get("tokens_evaluated") or 0)
        progress.calls += 1
        predicted = int(answer.get("tokens_predicted") or 0)
        progress.decoded += predicted
        progress.total_tokens = int(answer.get("tokens_evaluated") or 0) + predicted
        content = str(answer.get("content") or "")
        return content, str(answer.get("stopping_word") or ""), str(answer.get("stop_type") or "")

    # --- values -------------------------------------------------------------------------------------------

    def value(self, node: Node, follow: list[str]) -> Steps:
        """Emit ``node`` then one of ``follow`` (the literal texts that may come next); returns the one taken."""
        if isinstance(node, Const):
            self.force(node.text)
            return (yield from self.choose(follow))
        if isinstance(node, Pick):
            yield from self.choose(list(node.options))
            return (yield from self.choose(follow))
        if isinstance(node, Str):
            return (yield from self.string(node, follow))
        if isinstance(node, Num):
            return (yield from self.number(node, follow))
        if isinstance(node, Obj):
            return (yield from self.object(node, follow))
        if isinstance(node, Arr):
            return (yield from self.array(node, follow))
        return (yield from self.subschema(node, follow))

    def choose(self, options: list[str], force_common: bool = True) -> Steps:
        """One of ``options`` (literal texts, none a prefix of another): forced when one is left, else decoded a
        token at a time under a grammar of the options, each token narrowing them. ``force_common=False``
        leaves the options' common start to the model too (``[`` before ``"`` or ``]``: forced alone, it
        splits the token the model would write, ``["``, and made SmolLM2 close lists at once)."""
        remaining = list(dict.fromkeys(options))
        taken = ""
        while True:
            if len(remaining) == 1:
                self.force(remaining[0])
                return taken + remaining[0]
            common = _common_prefix(remaining) if force_common or taken else ""
            if common:
                self.force(common)
                taken, remaining = taken + common, [o[len(common):] for o in remaining]
                continue
            content, _, _ = yield from self.complete({"grammar": "root ::= " + _alternatives(remaining)}, 1)
            narrowed = [o for o in remaining if o.startswith(content)] if content else []
            if not narrowed:
                raise Abandoned(f"the engine answered {content!r} where one of {remaining!r} was due")
            self.force(content)
            taken, remaining = taken + content, [o[len(content):] for o in narrowed]
            if "" in remaining:  # cannot happen for prefix-free options; kept as a guard
                return taken

    def string(self, node: Str, follow: list[str], opened: bool = False) -> Steps:
        """A string's characters; its grammar goes on with what may follow, so the model can close it with the
        token it prefers (``",`` or ``"}`` rather than a bare quote), and the stop word ends the call there."""
        if not opened:
            self.force('"')
        after = [f for f in follow if f]
        tail = ' "\\"" (' + _alternatives(after) + ")" if after else ' "\\""'
        stops = sorted({'"' + f[0] for f in after}) or ['"']
        body = ""
        while True:
            low = max(0, node.min_length - len(body))
            high = max(low, node.max_length - len(body))
            grammar = f"root ::= char{{{low},{high}}}{tail}\n{_CHAR}"
            content, word, stop = yield from self.complete({"grammar": grammar, "stop": stops}, high + 2)
            if not word:
                raise Abandoned(f"a string value did not close ({stop or 'no stop'}, {len(content)} characters)")
            body += content
            self.force(content)
            if _escaped(body):  # the stop word's quote was an escaped one: the string goes on
                body += word
                self.force(word)
                if word[1:]:
                    raise Abandoned("an escaped quote followed by a closing character")
                continue
            if not _STRING_BODY.fullmatch(body):
                raise Abandoned("a string value is not valid JSON")
            self.force(word)
            return (yield from self.choose_after(follow, word[1:]))

    def number(self, node: Num, follow: list[str]) -> Steps:
        after = [f for f in follow if f]
        if not after:  # the number is the whole answer's end: nothing closes it
            raise Abandoned("a number with nothing after it")
        grammar = f"root ::= {_INTEGER if node.integer else _NUMBER} ({_alternatives(after)})"
        stops = sorted({f[0] for f in after})
        content, word, stop = yield from self.complete({"grammar": grammar, "stop": stops}, 24)
        if not word or not _NUMBER_TEXT.fullmatch(content):
            raise Abandoned(f"a number did not end ({stop or 'no stop'}: {content[:40]!r})")
        self.force(content + word)
        return (yield from self.choose_after(follow, word))

    def subschema(self, node: Value, follow: list[str]) -> Steps:
        content, _, stop = yield from self.complete({"json_schema": node.schema}, self.budget)
        if stop != "eos":
            raise Abandoned(f"a value under its own grammar did not finish ({stop or 'no stop'})")
        self.force(content)
        return (yield from self.choose(follow))

    def choose_after(self, follow: list[str], done: str) -> Steps:
        """The rest of a follow option whose first characters ``done`` are already in the answer."""
        left = [f[len(done):] for f in follow if f.startswith(done)]
        if not left:
            raise Abandoned(f"{done!r} does not start any of {follow!r}")
        return done + (yield from self.choose(left))

    def object(self, node: Obj, follow: list[str], opened: bool = False) -> Steps:
        if not opened:
            self.force("{")
        ends = ["}" + f for f in follow]
        optional = list(node.optional)
        if node.required:
            self.force(literal(node.required[0][0]) + ":")
            for index, (_, sub) in enumerate(node.required):
                last = index == len(node.required) - 1
                after = _keys(optional, True) + ends if last else ["," + literal(node.required[index + 1][0]) + ":"]
                taken = yield from self.value(sub, after)
        else:
            taken = yield from self.choose(_keys(optional, False) + ends)
        while True:
            ended = next((f for f in follow if taken == "}" + f), None)
            if ended is not None:
                return ended
            names = [literal(name) + ":" for name, _ in optional]
            position = next(i for i, name in enumerate(names) if taken in (name, "," + name))
            sub = optional[position][1]
            optional = optional[position + 1:]
            taken = yield from self.value(sub, _keys(optional, True) + ends)

    def array(self, node: Arr, follow: list[str]) -> Steps:
        first = starts(node.item)
        taken = (yield from self.choose(["[" + s for s in first] + (["[]"] if node.min_items == 0 else []),
                                        force_common=False))[1:]
        count = 0
        while taken != "]":
            count += 1
            more = [("," + s) for s in first] if count < node.max_items else []
            after = more + (["]"] if count >= node.min_items else [])
            taken = yield from self.item(node.item, taken, after)
            if taken.startswith(","):
                taken = taken[1:]
        return (yield from self.choose(follow))

    def item(self, node: Node, start: str, follow: list[str]) -> Steps:
        if isinstance(node, Obj):
            return (yield from self.object(node, follow, opened=True))
        if isinstance(node, Str):
            return (yield from self.string(node, follow, opened=True))
        return (yield from self.choose(follow))  # a Pick/Const item is complete in ``start``


def _keys(optional: Any, comma: bool) -> list[str]:
    return [("," if comma else "") + literal(name) + ":" for name, _ in optional]


def _common_prefix(options: list[str]) -> str:
    first, last = min(options), max(options)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def _escaped(body: str) -> bool:
    """Whether ``body`` ends with an odd number of backslashes (the quote after it is escaped)."""
    run = len(body) - len(body.rstrip("\\"))
    return run % 2 == 1


def fast_forward_flow(messages: list[dict[str, Any]], root: Obj | Arr, *, budget: int, seed: int | None,
                      pin: SlotPin | None = None) -> Generator[list[Call], list[Any], tuple[Progress, str]]:
    """The answer's text and what it cost, or the reason it was abandoned (``""`` when it finished)."""
    (template,) = yield [Call("POST", "/apply-template", {"messages": messages})]
    if isinstance(template, Exception) or not isinstance(template, dict) or "prompt" not in template:
        return Progress(), f"the engine cannot apply its chat template: {str(template)[:200]}"
    walk = Walk(str(template["prompt"]), budget, seed, pin)
    leased = pin is not None and pin.slot is None
    if leased and pin is not None:
        yield from pin.lease()
    try:
        yield from walk.run(root)
    except Abandoned as exc:
        walk.progress.prompt_tokens = walk.first_prompt
        return walk.progress, str(exc)
    finally:
        if leased and pin is not None:
            pin.release()
    return walk.progress, ""
