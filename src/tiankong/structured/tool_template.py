"""Tool calls written where the model expects to write them: in its own chat template, under a grammar.

The conversation and the tools are rendered by the engine's own chat template (``/apply-template`` with
``tools``; llama-server runs ``--jinja``), so the model sees the tool listing and earlier calls/results exactly
as it was trained to (Qwen2.5: the ``# Tools`` system block, ``<tool_call>`` tags, ``<tool_response>`` turns).
The answer is then written inside the assistant turn, one call at a time:

1. **First step** (one forward pass): the distribution of the first token. Under ``auto`` its mass on tokens
   that start a call (a ``<tool_call>`` tag, a code fence, a JSON object/list) is P(call); below one half the
   model answers in words (the caller's ``tool_choice`` otherwise forces a call). The most likely call-start
   also picks how the call is opened: the template's tag, or the ```` ```json ```` fence some models write.
2. **Each call**: the opener is written for the model and the call object ``{"name": …, "arguments": …}`` is
   decoded under a grammar (the engine's JSON-Schema grammar) that admits only the declared functions (or the
   one ``tool_choice`` names) with arguments valid for their ``parameters``, then closed and validated
   fail-closed (one retry with the validator's errors in the conversation, then an error — never invalid
   arguments returned as success).
3. **Another call or the end** (``parallel_tool_calls``): after a call's object, one forward pass reads the
   calls so far as the start of a JSON list (``opener [call, call``) and takes the model's probability that the
   list goes on (``,`` or another ``{``) against its end (``]``). At ``MORE_AT`` or above the next call is written
   in that list's context (``[call, `` then the next object, under the grammar); below it, a short generation
   under the grammar ``closer newlines? opener?`` lets the model close the call in its own tokens and open another
   one or end its turn, as before. Why both: after a closed call Qwen2.5-Coder-0.5B ends its turn on every BFCL
   parallel question (P(end) ≥ 0.98: parallel accuracy 0.000 on the held-out 100), yet inside a list its
   P(another element) separates the questions that need several calls from those that need one (development,
   BFCL positions 100–129 of ``benchmarks/tool_calls.py``'s order, never the held-out 0–99:
   ``benchmarks/parallel_probe.py``, raw in ``benchmarks/results/structured/tool-calls/parallel-probe-dev-*``;
   one-call questions ≤ 0.0032, several-call questions median ≈ 0.1, 28 of 30 ≥ 0.01). A call identical to one
   already written ends the list (a small model that repeats itself has run out of new calls), as does
   ``MAX_PARALLEL``.

Templates that do not show tools (the engine returns a prompt without their names) are served by the listing
path in ``tools.py``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..client._shared import DEFAULT_SEED, Usage
from ..errors import InvalidSchema, RetriesExhausted, TruncatedOutput
from .constraints import schema_constraint, simplify_schema
from .flow import Call, Flow, Structured, _compile_failure
from .prompts import repair_message

if TYPE_CHECKING:
    from .slots import SlotPin
    from .tools import Tool

#: the most calls one answer may hold
MAX_PARALLEL = 8

#: how a call is opened and closed: the chat template's tag (Qwen2.5, Hermes) or a JSON code fence
OPENERS = {"tag": ("<tool_call>\n", "\n</tool_call>"), "fence": ("```json\n", "\n```")}
#: first-token text that starts a call, and the opener it asks for
CALL_STARTS = {"<tool": "tag", "<": "tag", "`": "fence", "{": "tag", "[": "tag"}
FIRST_PROBS = 40
#: after a call's object: its closer written by the model (its own tokens), then the end of the turn or (up to
#: three newlines and) another call's opener
MORE = ('root ::= "\\n"? {close} "\\n"? "\\n"? "\\n"? ( "<tool_call>\\n" | "```json\\n" )?')
MORE_TOKENS = 8
#: P(the list of calls goes on) at which another call is written (see the module's text: chosen on BFCL
#: development questions, where one-call questions stay ≤ 0.0032)
MORE_AT = 0.01
MORE_PROBS = 20
CALL_TOKENS = 256
MAX_CALL_TOKENS = 2048


def tool_json(tools: list[Tool]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters}} for t in tools]


def native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the engine's template reads it: OpenAI shapes kept (assistant ``tool_calls``,
    ``tool`` turns), ``developer`` as ``system``, call arguments as JSON text."""
    out = []
    for message in messages:
        copy = dict(message)
        if copy.get("role") == "developer":
            copy["role"] = "system"
        if copy.get("role") == "assistant" and copy.get("tool_calls"):
            calls = []
            for call in copy["tool_calls"]:
                call = dict(call) if isinstance(call, dict) else {}
                function = dict(call.get("function") or {})
                if not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
                calls.append({**call, "type": "function", "function": function})
            copy["tool_calls"] = calls
            copy["content"] = copy.get("content") or ""
        out.append(copy)
    return out


def template_prompt(messages: list[dict[str, Any]], tools: list[Tool]) -> Flow[str | None]:
    """The model's own prompt for this conversation with ``tools``; None when its template does not show them
    (or the engine cannot render the conversation that way)."""
    # rendered with and without the tools: a template that ignores them renders the same prompt twice (a tool's
    # name found in the prompt is not enough — the user's own words may name it)
    native = native_messages(messages)
    (answer,) = yield [Call("POST", "/apply-template", {"messages": native, "tools": tool_json(tools)})]
    (bare,) = yield [Call("POST", "/apply-template", {"messages": native})]
    prompt = answer.get("prompt") if isinstance(answer, dict) else None
    without = bare.get("prompt") if isinstance(bare, dict) else None
    if not isinstance(prompt, str) or prompt == without or not all(t.name in prompt for t in tools):
        return None
    return prompt


def next_token_body(prompt: str, n_probs: int, seed: int) -> dict[str, Any]:
    """One forward pass after ``prompt``: the next token's ``n_probs`` most likely tokens, sampling left neutral."""
    return {"prompt": prompt, "n_predict": 1, "n_probs": n_probs, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": True, "seed": seed}


def first_step(prompt: str, pin: SlotPin | None = None) -> Flow[tuple[float, str]]:
    """P(the answer starts a call) from the first token's distribution, and the opener its most likely
    call-start asks for."""
    body = next_token_body(prompt, FIRST_PROBS, seed=42)
    (answer,) = yield [Call("POST", "/completion", pin.pin(body) if pin else body)]
    if isinstance(answer, Exception):
        raise answer
    top = (answer.get("completion_probabilities") or [{}])[0].get("top_probs", [])
    seen, calls, opener, best = 0.0, 0.0, "tag", -1.0
    for item in top:
        prob, text = float(item.get("prob", 0.0)), str(item.get("token", "")).lstrip()
        seen += prob
        kind = next((CALL_STARTS[s] for s in CALL_STARTS if text.startswith(s)), None)
        if kind is not None:
            calls += prob
            if prob > best:
                best, opener = prob, kind
    return (calls / seen if seen > 0 else 0.0), opener


def _lifted(tool: Tool, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``tool.parameters`` without its local ``$defs``/``definitions``, which come back renamed with ``prefix``,
    every ``#/$defs/…`` reference rewritten to match. The parameters sit under ``/properties/arguments`` of the
    call's schema (and several tools under one list), so references relative to the parameters' own root —
    what Pydantic, instructor and LangChain send for any nested model — must move to the document's root."""
    params = tool.parameters
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        found = params.get(key) if isinstance(params, dict) else None
        if isinstance(found, dict):
            defs.update({f"{prefix}{name}": sub for name, sub in found.items()})

    def rewrite(node: Any) -> Any:
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: rewrite(v) for k, v in node.items() if not (node is params and k in ("$defs", "definitions"))}
        ref = out.get("$ref")
        for key in ("$defs", "definitions"):
            if isinstance(ref, str) and ref.startswith(f"#/{key}/"):
                out["$ref"] = f"#/$defs/{prefix}{ref[len(key) + 3:]}"
        return out

    return rewrite(params), {name: rewrite(sub) for name, sub in defs.items()}


def _call(tool: Tool, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"const": tool.name}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def call_object(tool: Tool) -> dict[str, Any]:
    """One call of ``tool`` as a schema of its own (its parameters' ``$defs`` lifted to this root)."""
    parameters, defs = _lifted(tool, "t0_")
    return {**_call(tool, parameters), **({"$defs": defs} if defs else {})}


def call_union(tools: list[Tool]) -> dict[str, Any]:
    """One call object of any of ``tools``: ``{"name": <const>, "arguments": <parameters>}``, each tool's
    ``$defs`` lifted to this root under a per-tool prefix (references rewritten to match)."""
    defs: dict[str, Any] = {}
    options = []
    for index, tool in enumerate(tools):
        parameters, lifted = _lifted(tool, f"t{index}_")
        defs.update(lifted)
        options.append(_call(tool, parameters))
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return {**schema, **({"$defs": defs} if defs else {})}


def template_calls(prompt: str, tools: list[Tool], opener: str, *, parallel: bool, max_tokens: int | None,
                   options: dict[str, Any] | None, pin: SlotPin | None = None
                   ) -> Flow[tuple[list[dict[str, Any]], str, Usage, int, list[str]]]:
    """The calls the model writes after ``prompt`` (each under the grammar of ``tools``' calls): (the call
    objects, the text written, usage, duplicates dropped, the errors of the first invalid call — then the calls
    before it are returned with it, for the caller's retry)."""
    constraint, _ = schema_constraint(call_union(tools))
    # each function's own check, so that the errors name the argument at fault (an anyOf only says "none matched")
    checks = {tool.name: schema_constraint(call_object(tool))[0].check for tool in tools}
    schema = constraint.engine_fields["response_format"]["json_schema"]["schema"]
    simpler = simplify_schema(schema)
    seed = (options or {}).get("seed", DEFAULT_SEED)
    temperature = float((options or {}).get("temperature") or 0.0)
    usage, written, dropped = Usage(), OPENERS[opener][0], 0
    calls: list[dict[str, Any]] = []
    texts: list[str] = []

    def listed(items: list[str]) -> str:
        return OPENERS[opener][0] + "[" + ", ".join(items) + "]"
    budget = max_tokens or max(CALL_TOKENS, constraint.budget_tokens)
    while True:
        body = {"prompt": prompt + written, "n_predict": budget, "temperature": temperature, "seed": seed,
                "json_schema": schema, "cache_prompt": True}
        (answer,) = yield [Call("POST", "/completion", pin.pin(body) if pin else body)]
        if isinstance(answer, Exception):
            failure = _compile_failure(answer)
            if failure is not None and schema is not simpler and simpler != schema:
                schema = simpler  # validation still checks what the engine's copy leaves out
                continue
            raise failure or answer
        usage = usage + _usage(answer)
        text = str(answer.get("content", "")).strip()
        if answer.get("stop_type") == "limit" or answer.get("stopped_limit"):
            if max_tokens is None and budget < MAX_CALL_TOKENS:
                budget = min(budget * 2, MAX_CALL_TOKENS)
                continue
            raise TruncatedOutput(f"a tool call was cut off at {budget} tokens", attempts=1, last_raw=written + text,
                                  usage=usage)
        try:
            data = json.loads(text)
        except ValueError as exc:
            return calls, written + text, usage, dropped, [f"not valid JSON: {exc}"]
        name = data.get("name") if isinstance(data, dict) else None
        errors = checks[name](data) if isinstance(name, str) and name in checks else constraint.check(data)
        if errors:
            return calls, written + text, usage, dropped, errors
        if data in calls:  # the same call again: the model has no new call to make
            dropped += 1
            if written.endswith(", "):  # inside a list: closed after the calls before
                written = listed(texts) + OPENERS[opener][1]
            else:
                written = written[:-len(OPENERS[opener][0])].rstrip("\n")
            break
        calls.append(data)
        texts.append(text)
        if not parallel or len(calls) >= _max_parallel():
            written = (listed(texts) if written.endswith(", ") else written + text) + OPENERS[opener][1]
            break
        listing = OPENERS[opener][0] + "[" + ", ".join(texts)
        probe = next_token_body(prompt + listing, MORE_PROBS, seed)
        (answer,) = yield [Call("POST", "/completion", pin.pin(probe) if pin else probe)]
        if isinstance(answer, Exception):
            raise answer
        usage = usage + _usage(answer)
        if goes_on(answer) >= MORE_AT:
            written = listing + ", "  # the next call is written as the list's next element
            continue
        if written.endswith(", "):  # this call was a list's element: the list is closed here
            written = listed(texts) + OPENERS[opener][1]
            break
        written += text  # the model closes the call itself: a closer written for it reads as other tokens
        close = json.dumps(OPENERS[opener][1].strip("\n"))
        more = {"prompt": prompt + written, "n_predict": MORE_TOKENS, "temperature": 0.0, "seed": seed,
                "grammar": MORE.format(close=close), "cache_prompt": True}
        (answer,) = yield [Call("POST", "/completion", pin.pin(more) if pin else more)]
        if isinstance(answer, Exception):
            raise answer
        usage = usage + _usage(answer)
        step = str(answer.get("content", ""))
        found = next((name for name, (start, _) in OPENERS.items() if step.endswith(start)), None)
        written += step
        if found is None:
            break
        opener = found
    return calls, written, usage, dropped, []


def goes_on(answer: dict[str, Any]) -> float:
    """P(a list of calls goes on: ``,`` or another ``{``) against P(it ends: ``]``), from one token's probabilities."""
    top = (answer.get("completion_probabilities") or [{}])[0].get("top_probs", [])
    more = end = 0.0
    for item in top:
        head = str(item.get("token", "")).strip()[:1]
        if head in (",", "{"):
            more += float(item.get("prob", 0.0))
        elif head == "]":
            end += float(item.get("prob", 0.0))
    return more / (more + end) if more + end > 0 else 0.0


def _max_parallel() -> int:
    return MAX_PARALLEL


def _usage(answer: dict[str, Any]) -> Usage:
    return Usage(int(answer.get("tokens_evaluated") or 0), int(answer.get("tokens_predicted") or 0))


def template_flow(messages: list[dict[str, Any]], prompt: str, tools: list[Tool], opener: str, *,
                  parallel: bool, max_tokens: int | None, max_attempts: int, options: dict[str, Any] | None,
                  pin: SlotPin | None = None) -> Flow[tuple[list[dict[str, Any]], Structured[Any], int]]:
    """Validated calls under the model's template: an invalid call is retried once with the validator's errors
    as the next user turn (the template renders the conversation again), then refused (``RetriesExhausted``)."""
    usage, attempts, convo = Usage(), 0, list(messages)
    while True:
        attempts += 1
        calls, written, used, dropped, errors = yield from template_calls(
            prompt, tools, opener, parallel=parallel, max_tokens=max_tokens, options=options, pin=pin)
        usage = usage + used
        if not errors:
            return calls, Structured(calls, written, attempts, usage, path="template",
                                     decoded_tokens=usage.completion_tokens), dropped
        if attempts >= max_attempts:
            raise RetriesExhausted(f"no valid tool call after {attempts} attempts: {'; '.join(errors)[:300]}",
                                   attempts=attempts, last_raw=written, errors=errors, usage=usage)
        sample = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
        convo = [*convo, {"role": "assistant", "content": written}, repair_message(errors, sample)]
        again = yield from template_prompt(convo, tools)
        if again is None:
            raise InvalidSchema("the chat template could not render the repair turn")
        prompt = again
