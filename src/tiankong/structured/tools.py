"""Tool calls, fail-closed: the decision to call (with its probability), the call under a grammar.

A chat request with ``tools`` runs as two constrained steps instead of hoping the model writes a parsable call:

1. **Decide** (``tool_choice`` auto, or required with several tools): the label-probability path
   (``choose_flow``) scores the declared function names and, under ``auto``, ``reply`` — one forward pass per
   branching token, so the decision carries its probability.
2. **Call**: the arguments are generated under a grammar built from the tools' JSON Schemas (the name is one of
   the declared functions, the arguments valid against that function's ``parameters``) and validated with the
   same fail-closed flow as any structured answer (``constrained_flow``: retry with the validator's errors,
   then an error — never a call with invalid arguments). With ``parallel_tool_calls`` the answer is a JSON list
   whose first item is the decided function's call; without, exactly one call.

Earlier turns of the conversation are rendered as text the same way the model is asked to answer (an
assistant's ``tool_calls`` as that JSON list, a ``tool`` message as a user turn naming the call it answers),
so any chat template can read them.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..client._shared import Usage
from ..errors import ConfigError, InvalidSchema, SchemaNotSupported
from .constraints import schema_constraint
from .flow import Call, Flow, Structured, check_attempts, choose_flow, constrained_flow
from .slots import SlotPin
from .tool_template import MAX_PARALLEL, _call, _lifted, call_object, first_step, template_flow, template_prompt

MAX_TOOLS = 128
#: most calls in one parallel answer (a small model that does not close its list stops here)
REPLY = "reply"
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
CHOICES = ("auto", "none", "required")
#: a reply in words: at most this many tokens unless the request says otherwise
REPLY_TOKENS = 512

LISTING = "You can call these functions (parameters as JSON Schema):\n{tools}"
OPEN = ('If one of the functions serves the request, answer with a JSON list of calls: [{"name": "<function '
        'name>", "arguments": {<the parameters>}}]. Otherwise answer in words.')
DECIDE = "Answer with the name of the function to call now."
#: the first token of an answer that starts a call (a JSON list or object, a code fence, a tool-call tag)
CALL_STARTS = ("[", "{", "`", "<tool")
OPEN_PROBS = 40
COUNT = ("How many separate function calls does the request need? Count one call per item, place, person or value "
         "the user asks about. Answer with the number.")
CALL = ('Call {which} now. Answer with a JSON list of calls: [{{"name": "<function name>", "arguments": '
        '{{<the parameters>}}}}]. {count} Take the argument values from the conversation.')
ONE = "Exactly one call."
MANY = "{count} calls: one item per call the request needs, the calls of the same function with different arguments."


@dataclass(frozen=True)
class Tool:
    """One declared function: its name, description and ``parameters`` JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]

    def listing(self) -> str:
        return json.dumps({"name": self.name, "description": self.description, "parameters": self.parameters},
                          ensure_ascii=False, separators=(",", ":"))


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_openai(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": "function",
                               "function": {"name": self.name,
                                            "arguments": json.dumps(self.arguments, ensure_ascii=False)}}
        return out if index is None else {"index": index, **out}


@dataclass
class ToolCalls:
    """The model's next step: calls (validated) or a reply in words, with the decision's probabilities."""

    calls: list[ToolCall]
    content: str | None
    #: P(each function name) and, under ``auto``, P(reply); empty when nothing was left to decide
    probabilities: dict[str, float]
    attempts: int
    usage: Usage
    #: the call step's answer (path, fast-forwarded tokens, …); None for a reply
    structured: Structured[Any] | None = None
    finish_reason: str = "tool_calls"
    duplicates_dropped: int = 0
    #: P(the request needs n calls), n = 1…MAX_PARALLEL, when ``parallel_tool_calls`` let the count be decided
    counts: dict[str, float] = field(default_factory=dict)

    @property
    def decision(self) -> str:
        return "call" if self.calls else REPLY

    def evidence(self) -> dict[str, Any]:
        found: dict[str, Any] = {"decision": self.decision, "probabilities": self.probabilities,
                                 "attempts": self.attempts, "validated": bool(self.calls)}
        if self.structured is not None:
            found.update(self.structured.evidence())
        if self.counts:
            found["count_probabilities"] = self.counts
        if self.duplicates_dropped:
            found["duplicates_dropped"] = self.duplicates_dropped
        return found

    def to_json(self) -> dict[str, Any]:
        # finish_reason, counts and duplicates_dropped too: a client of the gateway made finish_reason up
        # ("stop" for a reply cut at its length)
        return {"tool_calls": [c.to_openai() for c in self.calls], "content": self.content,
                "decision": self.decision, "probabilities": self.probabilities, "attempts": self.attempts,
                "finish_reason": self.finish_reason, "counts": self.counts,
                "duplicates_dropped": self.duplicates_dropped, "usage": {"prompt_tokens": self.usage.prompt_tokens,
                          "completion_tokens": self.usage.completion_tokens,
                          "total_tokens": self.usage.total_tokens}}


def parse_tools(tools: Any) -> list[Tool]:
    """OpenAI ``tools`` ([{type: function, function: {name, description?, parameters?}}]) → ``Tool``s; every
    problem is a ``ConfigError`` naming the item (``param`` = ``tools``)."""
    if not isinstance(tools, list) or not tools:
        raise field_error("tools must be a non-empty list of {type: 'function', function: {name, parameters}}")
    if len(tools) > MAX_TOOLS:
        raise field_error(f"at most {MAX_TOOLS} tools per request, got {len(tools)}")
    found: dict[str, Tool] = {}
    for i, item in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(item, dict) or item.get("type", "function") != "function" \
                or not isinstance(item.get("function"), dict):
            raise field_error(f"{where} must be {{type: 'function', function: {{name, parameters}}}}")
        spec = item["function"]
        name = spec.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise field_error(f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.'")
        if name in found:
            raise field_error(f"{where}: the function name {name!r} is declared twice")
        parameters = spec.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise field_error(f"{where}.function.parameters must be a JSON Schema object")
        description = spec.get("description") or ""
        if not isinstance(description, str):
            raise field_error(f"{where}.function.description must be a string")
        found[name] = Tool(name, description, parameters)
    return list(found.values())


def parse_tool_choice(choice: Any, tools: list[Tool]) -> tuple[str, str | None]:
    """``tool_choice`` → (mode, the one function it names or None); default ``auto``."""
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise field_error(f"tool_choice must be one of {', '.join(CHOICES)} or "
                               "{type: 'function', function: {name}}", param="tool_choice")
        return choice, None
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) and \
        isinstance(choice.get("function"), dict) else None
    if not isinstance(name, str):
        raise field_error("tool_choice must name a function: {type: 'function', function: {name}}",
                           param="tool_choice")
    if name not in {tool.name for tool in tools}:
        raise field_error(f"tool_choice names {name!r}, which is not among the tools", param="tool_choice")
    return "function", name


def field_error(message: str, param: str = "tools") -> ConfigError:
    """A ``ConfigError`` naming the request field at fault (``param``), pointing to the tool-call docs."""
    error = ConfigError(message, hint="see docs/structured.md#tool-calls")
    error.param = param
    return error


def plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as plain text turns any chat template reads: an assistant's ``tool_calls`` become the
    JSON list the model is asked to write, a ``tool`` message a user turn naming the call it answers."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                names[str(call.get("id"))] = str(function.get("name"))
                arguments = function.get("arguments")
                with contextlib.suppress(ValueError):  # not JSON: shown as the text it is
                    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                calls.append({"name": function.get("name"), "arguments": arguments})
            text = (str(message.get("content") or "") + "\n").lstrip() + json.dumps(calls, ensure_ascii=False)
            out.append({"role": "assistant", "content": text})
        elif role in ("tool", "function"):
            name = message.get("name") or names.get(str(message.get("tool_call_id")), "the function")
            out.append({"role": "user", "content": f"Result of {name}: {_text(message.get('content'))}"})
        else:
            copy = dict(message)
            if role == "developer":  # OpenAI's newer name for the system turn
                copy["role"] = "system"
            out.append(copy)
    return out


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def with_instruction(messages: list[dict[str, Any]], tools: list[Tool], instruction: str) -> list[dict[str, Any]]:
    """The tool listing in the system turn (after the caller's own system text) and ``instruction`` after the
    conversation: the decision's prompt and the call's share everything up to the instruction, so the engine's
    prompt cache reads the listing and the conversation once."""
    listing = LISTING.format(tools="\n".join(tool.listing() for tool in tools))
    if messages and messages[0].get("role") == "system":
        head = [{"role": "system", "content": f"{_text(messages[0].get('content'))}\n\n{listing}"}]
        messages = messages[1:]
    else:
        head = [{"role": "system", "content": listing}]
    if messages and messages[-1].get("role") == "user":
        last = {"role": "user", "content": f"{_text(messages[-1].get('content'))}\n\n{instruction}"}
        return [*head, *messages[:-1], last]
    return [*head, *messages, {"role": "user", "content": instruction}]


def calls_schema(tools: list[Tool], first: Tool, count: int) -> dict[str, Any]:
    """The answer's schema: a list of ``count`` calls, the first ``first``'s, the others any declared
    function's; every tool's ``$defs`` lifted to the list's root under a per-tool prefix."""
    defs: dict[str, Any] = {}

    def call(tool: Tool) -> dict[str, Any]:
        parameters, lifted = _lifted(tool, f"t{tools.index(tool) if tool in tools else len(tools)}_")
        defs.update(lifted)
        return _call(tool, parameters)

    if count == 1 or len(tools) == 1:
        schema = {"type": "array", "items": call(first), "minItems": count, "maxItems": count}
    else:
        schema = {"type": "array", "prefixItems": [call(first)],
                  "items": {"anyOf": [call(tool) for tool in tools]}, "minItems": count, "maxItems": count}
    return {**schema, **({"$defs": defs} if defs else {})}


def call_flow(messages: list[dict[str, Any]], tools: list[Tool], *, tool_choice: str = "auto",
              function: str | None = None, parallel: bool = True, model: str | None = None,
              max_tokens: int | None = None, max_attempts: int = 2, options: dict[str, Any] | None = None,
              fast_forward: bool = True, pin: SlotPin | None = None) -> Flow[ToolCalls]:
    """The next step of a conversation with ``tools``: validated calls, or a reply (``tool_choice`` auto/none)."""
    check_attempts(max_tokens, max_attempts)
    for tool in tools:  # a parameters schema the grammar cannot hold is the client's to fix, before any call
        try:  # its own schema first: a fault is named where the client wrote it (not under the call's wrapper)
            schema_constraint(tool.parameters)
            schema_constraint(call_object(tool))
        except (InvalidSchema, SchemaNotSupported) as exc:
            raise field_error(f"tool {tool.name!r}: its parameters are not a usable JSON Schema: "
                               f"{exc.message}") from None
    plain = plain_messages(messages)
    by_name = {tool.name: tool for tool in tools}
    probabilities: dict[str, float] = {}
    chosen = function
    if tool_choice == "none":
        return (yield from _reply(plain, model, max_tokens, options, probabilities))
    prompt = yield from template_prompt(messages, tools)
    if prompt is not None:  # the model's own template shows the tools: the calls are written there
        return (yield from _in_template(messages, plain, prompt, tools, tool_choice=tool_choice, function=function,
                                        parallel=parallel, model=model, max_tokens=max_tokens,
                                        max_attempts=max_attempts, options=options, pin=pin))
    p_call = 1.0
    if tool_choice == "auto":
        p_call = yield from call_probability(plain, tools)
        probabilities[REPLY] = 1.0 - p_call
        if p_call < 0.5:
            probabilities.update({tool.name: p_call / len(tools) for tool in tools} if chosen is None else
                                 {str(chosen): p_call})
            return (yield from _reply(plain, model, max_tokens, options, probabilities))
    if chosen is None and len(tools) == 1:
        chosen = tools[0].name
    if chosen is None:
        names = yield from choose_flow(with_instruction(plain, tools, DECIDE), [tool.name for tool in tools])
        chosen = max(names, key=lambda name: names[name])
        probabilities.update({name: p * p_call for name, p in names.items()})
    elif tool_choice == "auto":
        probabilities[str(chosen)] = p_call
    first = by_name[str(chosen)]
    which = f"the function {first.name}" + (" (and any others the request needs)" if parallel and len(tools) > 1
                                            else "")
    count, counts = 1, {}
    if parallel:  # how many calls, decided before any is written: a small model continues a list it has begun
        numbers = [str(n) for n in range(1, MAX_PARALLEL + 1)]
        counts = yield from choose_flow(with_instruction(plain, tools, COUNT), numbers)
        count = int(max(numbers, key=lambda n: counts[n]))
    instruction = CALL.format(which=which, count=ONE if count == 1 else MANY.format(count=count))
    constraint, _ = schema_constraint(calls_schema(tools, first, count))
    result = yield from constrained_flow(with_instruction(plain, tools, instruction), constraint, model=model,
                                         max_tokens=max_tokens, max_attempts=max_attempts, options=options,
                                         fast_forward=fast_forward, pin=pin)
    calls, dropped = [], 0
    seen: set[str] = set()
    for item in result.data:
        key = json.dumps(item, sort_keys=True)
        if key in seen:  # a small model repeating the same call until the list's cap: the call is made once
            dropped += 1
            continue
        seen.add(key)
        calls.append(ToolCall(item["name"], item["arguments"]))
    return ToolCalls(calls, None, probabilities, result.attempts, result.usage, result,
                     duplicates_dropped=dropped, counts=counts)


def _in_template(messages: list[dict[str, Any]], plain: list[dict[str, Any]], prompt: str, tools: list[Tool], *,
                 tool_choice: str, function: str | None, parallel: bool, model: str | None,
                 max_tokens: int | None, max_attempts: int, options: dict[str, Any] | None,
                 pin: SlotPin | None) -> Flow[ToolCalls]:
    """``tool_template``: the first token decides (``auto``) and picks the opener, then the calls under the
    grammar of the allowed functions, their count the model's own."""
    p_call, opener = yield from first_step(prompt, pin)
    probabilities: dict[str, float] = {}
    if tool_choice == "auto":
        probabilities[REPLY] = 1.0 - p_call
        if p_call < 0.5:
            probabilities.update({tool.name: p_call / len(tools) for tool in tools})
            return (yield from _reply(plain, model, max_tokens, options, probabilities))
    allowed = [tool for tool in tools if function is None or tool.name == function]
    items, result, dropped = yield from template_flow(messages, prompt, allowed, opener, parallel=parallel,
                                                      max_tokens=max_tokens, max_attempts=max_attempts,
                                                      options=options, pin=pin)
    calls = [ToolCall(item["name"], item["arguments"]) for item in items]
    first = calls[0].name if calls else None
    probabilities.update({tool.name: (p_call if tool_choice == "auto" else 1.0) if tool.name == first else 0.0
                          for tool in allowed})
    return ToolCalls(calls, None, probabilities, result.attempts, result.usage, result, duplicates_dropped=dropped)


def call_probability(plain: list[dict[str, Any]], tools: list[Tool]) -> Flow[float]:
    """P(the model's answer starts a call), from the distribution of its first token when it may call or answer
    in words (one forward pass): the mass of tokens that begin a call (a tool-call tag, a JSON list/object, a
    code fence) over the mass of the top tokens read. The prompt is the model's own chat template with the tools
    (``--jinja``: the format the model was trained to call in) when the template shows them; else tiankong's
    listing and an instruction to answer with a JSON list of calls or in words."""
    openai_tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                      "parameters": t.parameters}} for t in tools]
    (native,) = yield [Call("POST", "/apply-template", {"messages": plain, "tools": openai_tools})]
    prompt = str(native.get("prompt", "")) if isinstance(native, dict) else ""
    if not all(t.name in prompt for t in tools):  # the template ignores tools (or the engine refused them)
        (template,) = yield [Call("POST", "/apply-template", {"messages": with_instruction(plain, tools, OPEN)})]
        if isinstance(template, Exception):
            raise template
        prompt = str(template["prompt"])
    body = {"prompt": prompt, "n_predict": 1, "n_probs": OPEN_PROBS, "temperature": 1.0,
            "top_k": 0, "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": True, "seed": 42}
    (answer,) = yield [Call("POST", "/completion", body)]
    if isinstance(answer, Exception):
        raise answer
    top = (answer.get("completion_probabilities") or [{}])[0].get("top_probs", [])
    seen = sum(float(t.get("prob", 0.0)) for t in top)
    calls = sum(float(t.get("prob", 0.0)) for t in top if str(t.get("token", "")).lstrip().startswith(CALL_STARTS))
    return calls / seen if seen > 0 else 0.0


def _reply(plain: list[dict[str, Any]], model: str | None, max_tokens: int | None, options: dict[str, Any] | None,
           probabilities: dict[str, float]) -> Flow[ToolCalls]:
    body: dict[str, Any] = {"messages": plain, "max_tokens": max_tokens or REPLY_TOKENS, "temperature": 0.0,
                            **{k: v for k, v in (options or {}).items() if k in ("temperature", "seed")}}
    if model:
        body["model"] = model
    (answer,) = yield [Call("POST", "/v1/chat/completions", body)]
    if isinstance(answer, Exception):
        raise answer
    choice = answer["choices"][0]
    usage = answer.get("usage") or {}
    return ToolCalls([], str(choice["message"].get("content") or ""), probabilities, 1,
                     Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
                     finish_reason=str(choice.get("finish_reason") or "stop"))
