"""Fast-forward decoding: forced text is prompt, only free values are decoded (sans-I/O, like ``flow.py``).

The answer is built left to right on one engine slot. Forced text (``structured/forced.py``) is appended to the
assistant prefix; each free value is one ``/completion`` call on ``chat template + prefix`` under a grammar for
that value alone, ending at the value's closing character (a stop word, so no step is spent on an
end-of-sequence token). The answer holds one slot of the client's for its calls (``slots.SlotPin``: leased,
sent as ``id_slot``) and ``cache_prompt`` is on, so every call prefills only what was added since the last
one. A choice among literal options (an enum, a
boolean, "another item or the end", an optional key) is greedy constrained decoding of one token at a time
until one option is left; its rest is forced. The forced text is laid out as the model writes JSON (``Layout``,
read from its first tokens) and stops before the text it writes in one token with a value (the space and opening
quote after a key), so the values it decodes are the ones it writes unforced (issue 40).

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


@dataclass(frozen=True)
class Layout:
    """The whitespace the model itself puts in JSON, read from its first tokens (:meth:`Walk.probe`).

    ``indent`` None: compact (``{"a":1,"b":[1,2]}``). Otherwise the layout Qwen2.5 writes under a grammar and
    free alike: members one a line, indented by ``indent`` a level, ``": "`` after keys, lists of scalars on one
    line (``["a", "b"]``), lists of objects one item a line. Forcing the compact layout on a model that writes
    this one changed the values it decoded after the forced text (issue 40: usaddress ``po_box`` filled with
    other fields' text, MSRA lists repeated to maxItems)."""

    indent: str | None = None

    @property
    def lead(self) -> str:
        """What comes between a key's colon and its value."""
        return "" if self.indent is None else " "

    @property
    def comma(self) -> str:
        """What separates the items of a list on one line."""
        return "," if self.indent is None else ", "

    def line(self, depth: int) -> str:
        return "" if self.indent is None else "\n" + self.indent * depth


COMPACT = Layout()
_PROBE = 'root ::= "{" ([ \\t]* "\\n" [ \\t]{0,16})? ("\\"" | "}")'


class Walk:
    """Builds one answer; ``run`` is a flow returning the answer's text."""

    def __init__(self, prompt: str, budget: int, seed: int | None, pin: SlotPin | None = None) -> None:
        self.prompt = prompt
        self.budget = budget
        self.seed = seed
        self.pin = pin
        self.first_prompt = 0
        self.progress = Progress()
        self.layout = COMPACT

    def run(self, root: Obj | Arr) -> Generator[list[Call], list[Any], Progress]:
        if isinstance(root, Obj):
            self.layout = yield from self.probe()
        yield from self.value(root, [""], 0)
        counts = yield [Call("POST", "/tokenize", {"content": text, "add_special": False})
                        for text in (self.prompt, self.progress.text)]
        prompt, answer = (len(c["tokens"]) if isinstance(c, dict) and isinstance(c.get("tokens"), list) else None
                          for c in counts)
        self.progress.prompt_tokens = prompt if prompt is not None else self.first_prompt
        self.progress.answer_tokens = answer if answer is not None else self.progress.decoded
        return self.progress

    def probe(self) -> Generator[list[Call], list[Any], Layout]:
        """The model's own first tokens of a JSON object (``{`` and the whitespace before its first key, under a
        grammar): a newline there means it lays JSON out, indented as it wrote. Nothing is kept in the answer;
        the call reads the prompt the next call then finds in the slot's cache."""
        decoded = self.progress.decoded
        content, _, _ = yield from self.complete({"grammar": _PROBE, "stop": ['"', "}"]}, 12)
        self.progress.decoded = decoded  # the probe's tokens are not the answer's
        if "\n" not in content:
            return COMPACT
        return Layout(content.rsplit("\n", 1)[1])

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

    def value(self, node: Node, follow: list[str], depth: int, lead: str = "") -> Steps:
        """Emit ``lead`` (the layout's space after a key's colon) and ``node`` (at nesting ``depth``), then one of
        ``follow`` (the literal texts that may come next); returns the one taken. Where the model writes the
        space in one token with what comes next (`` "``, `` ["``, `` ""``) the lead is left to it."""
        if isinstance(node, Const):
            self.force(lead + node.text)
            return (yield from self.choose(follow))
        if isinstance(node, Pick):
            # the option and what follows it in one choice: the model may write them in one token (``true,``)
            taken = yield from self.choose([lead + o + f for o in node.options for f in follow])
            return next(f for o in node.options for f in follow if taken == lead + o + f)
        if isinstance(node, Str):
            return (yield from self.string(node, follow, lead=lead))
        if isinstance(node, Num):
            return (yield from self.number(node, follow, lead))
        if isinstance(node, Obj):
            self.force(lead)
            return (yield from self.object(node, follow, depth))
        if isinstance(node, Arr):
            return (yield from self.array(node, follow, depth, lead))
        self.force(lead)
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

    def string(self, node: Str, follow: list[str], opened: bool = False, lead: str = "") -> Steps:
        """A string's characters; its grammar goes on with what may follow, so the model can close it with the
        token it prefers (``",`` or ``"}`` rather than a bare quote), and the stop word ends the call there.
        The opening quote (after ``lead``, the layout's space after a colon) is the model's to write too: a
        forced ``"unit": "`` split the token Qwen2.5 writes for an empty value (`` ""``), and it wrote a value
        where the grammar path wrote ``""``."""
        opening = "" if opened else lead + '"'
        if opening == '"':  # compact JSON: ``":"`` is one token to SmolLM2, so the quote is forced with the colon
            self.force(opening)
            opening = ""
        after = [f for f in follow if f]
        tail = ' "\\"" (' + _alternatives(after) + ")" if after else ' "\\""'
        stops = sorted({'"' + f[0] for f in after}) or ['"']
        body = ""
        while True:
            low = max(0, node.min_length - len(body))
            high = max(low, node.max_length - len(body))
            head = _gbnf(opening) + " " if opening else ""
            grammar = f"root ::= {head}char{{{low},{high}}}{tail}\n{_CHAR}"
            content, word, stop = yield from self.complete({"grammar": grammar, "stop": stops}, high + 4)
            if not word:
                raise Abandoned(f"a string value did not close ({stop or 'no stop'}, {len(content)} characters)")
            if opening:
                if not content.startswith(opening):  # the value began with a closing character: `"}` stopped
                    raise Abandoned("a string value began with a character that closes it")
                self.force(opening)
                content, opening = content[len(opening):], ""
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

    def number(self, node: Num, follow: list[str], lead: str = "") -> Steps:
        after = [f for f in follow if f]
        if not after:  # the number is the whole answer's end: nothing closes it
            raise Abandoned("a number with nothing after it")
        head = _gbnf(lead) + " " if lead else ""
        grammar = f"root ::= {head}{_INTEGER if node.integer else _NUMBER} ({_alternatives(after)})"
        stops = sorted({f[0] for f in after})
        content, word, stop = yield from self.complete({"grammar": grammar, "stop": stops}, 24)
        if lead and content.startswith(lead):
            self.force(lead)
            content = content[len(lead):]
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

    def object(self, node: Obj, follow: list[str], depth: int, opened: bool = False) -> Steps:
        inner = self.layout.line(depth + 1)
        colon, lead = ":", self.layout.lead
        if not opened:
            self.force("{")
        close = self.layout.line(depth) + "}"
        ends = [close + f for f in follow]
        optional = list(node.optional)
        if node.required:
            self.force(inner + literal(node.required[0][0]) + colon)
            for index, (_, sub) in enumerate(node.required):
                last = index == len(node.required) - 1
                after = (_keys(optional, "," + inner, colon) + ends if last
                         else ["," + inner + literal(node.required[index + 1][0]) + colon])
                taken = yield from self.value(sub, after, depth + 1, lead)
        else:
            taken = yield from self.choose(_keys(optional, inner, colon) + ["}" + f for f in follow])
        while True:
            ended = next((f for f in follow if taken in (close + f, "}" + f)), None)
            if ended is not None:
                return ended
            names = [literal(name) + colon for name, _ in optional]
            position = next(i for i, name in enumerate(names) if taken in (inner + name, "," + inner + name))
            sub = optional[position][1]
            optional = optional[position + 1:]
            taken = yield from self.value(sub, _keys(optional, "," + inner, colon) + ends, depth + 1, lead)

    def array(self, node: Arr, follow: list[str], depth: int, lead: str = "") -> Steps:
        """Items until the model ends the list (or ``max_items``); the end's choice carries what follows the
        list (``"],`` is one token to Qwen2.5: a grammar ending at ``]`` kept it from closing the list)."""
        pretty = self.layout.indent is not None
        if node.fallback is not None and not pretty:
            self.force(lead)
            return (yield from self.subschema(node.fallback, follow))
        lines = pretty and isinstance(node.item, Obj)  # lists of objects: one item a line
        inner = self.layout.line(depth + 1) if lines else ""
        sep = "," + inner if lines else self.layout.comma
        close = (self.layout.line(depth) if lines else "") + "]"
        first = starts(node.item)
        empty = [lead + "[]" + f for f in follow] if node.min_items == 0 else []
        taken = yield from self.choose([lead + "[" + inner + s for s in first] + empty, force_common=False)
        if taken in empty:
            return taken[len(lead) + 2:]
        taken = taken[len(lead) + 1 + len(inner):]
        ends = [close + f for f in follow]
        count = 0
        while True:
            count += 1
            more = [sep + s for s in first] if count < node.max_items else []
            after = more + (ends if count >= node.min_items else [])
            taken = yield from self.item(node.item, taken, after, depth + 1 if lines else depth)
            ended = next((f for f in follow if taken == close + f), None)
            if ended is not None:
                return ended
            taken = taken[len(sep):]

    def item(self, node: Node, start: str, follow: list[str], depth: int) -> Steps:
        if isinstance(node, Obj):
            return (yield from self.object(node, follow, depth, opened=True))
        if isinstance(node, Str):
            return (yield from self.string(node, follow, opened=True))
        return (yield from self.choose(follow))  # a Pick/Const item is complete in ``start``


def _keys(optional: Any, before: str, colon: str) -> list[str]:
    return [before + literal(name) + colon for name, _ in optional]


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
