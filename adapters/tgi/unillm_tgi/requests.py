"""Unified requests as TGI request bodies, on the API that honours every option.

Which API answers a request:

* chat messages -> ``/v1/chat/completions`` (TGI applies the chat template; constraints go to
  ``response_format``, LoRA to ``model``);
* a prompt -> ``/generate`` or ``/generate_stream``: it honours a superset of ``/v1/completions``
  (grammar, ``top_k``, logprobs, ``best_of`` for ``n``, ``adapter_id``, typical-p via
  ``extra_body``); ``/v1/completions`` is used only when a value is outside ``/generate``'s
  published contract but inside its own (``seed=0``, ``frequency_penalty=-2``) and nothing else
  needs ``/generate``.

Sampling is derived, not copied: ``temperature=0`` means greedy decoding (``do_sample: false``,
no temperature: TGI rejects 0, and no ``top_p``/``top_k``, which would switch TGI back to
sampling); any other request samples (``do_sample: true``), as TGI's own OpenAI routes do.
``top_p=1`` and ``top_k<=0`` mean "no filtering" and are left out (TGI rejects those values).

    call = build_call(make_request("Hi", None, unillm.Choice(["a", "b"]), {}, stream=False), info)
    # POST /generate {"inputs": "Hi", "parameters": {"details": true, "do_sample": true,
    #                  "grammar": {"type": "regex", "value": "(a|b)"}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unillm.adapter import Request, Tool, UnsupportedFeature, Version, parse_version, text_of
from unillm.adapter.base import EngineInfo, HttpCall
from unillm_tgi.constraints import grammar, inline_refs

ENGINE = "tgi"
GENERATE = "/generate"
GENERATE_STREAM = "/generate_stream"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
TOKENIZE = "/tokenize"
CHAT_TOKENIZE = "/chat_tokenize"
NO_ADAPTER = "tgi"  # the `model` value TGI's OpenAI routes read as "the base model"
DEFAULT_MAX_STOP = 4  # TGI's --max-stop-sequences default, and the published schema's maxItems
CHAT_CONSTRAINTS_SINCE = (2, 1, 0)


@dataclass(frozen=True, slots=True)
class TGIInfo(EngineInfo):
    """What ``GET /info`` says about a TGI server, beyond the common fields.

    ``max_model_len`` is TGI's ``max_total_tokens`` (prompt + generated tokens).
    """

    model_id: str | None = None
    max_input_tokens: int | None = None
    max_best_of: int | None = None
    max_stop_sequences: int | None = None
    max_client_batch_size: int | None = None


@dataclass(frozen=True, slots=True)
class _Blocker:
    option: str
    why: str
    alternative: str = ""


def _refuse(info: EngineInfo, feature: str, why: str, alternative: str = "") -> UnsupportedFeature:
    return UnsupportedFeature(ENGINE, feature, version=info.version, why=why, alternative=alternative)


def route(request: Request, info: EngineInfo) -> str:
    """The path that will answer ``request`` (raises UnsupportedFeature if none can)."""
    if request.messages is not None:
        return CHAT
    generate = _generate_blockers(request)
    if not generate:
        return GENERATE_STREAM if request.stream else GENERATE
    completions = _completions_blockers(request)
    if not completions:
        return COMPLETIONS
    g, c = generate[0], completions[0]
    raise _refuse(
        info,
        f"{g.option} together with {c.option}",
        f"{g.why}, and /v1/completions (which accepts it) cannot honour {c.option}",
        g.alternative,
    )


def _generate_blockers(request: Request) -> list[_Blocker]:
    blockers = []
    if request.seed == 0:
        blockers.append(_Blocker("seed=0", "TGI's /generate declares seed >= 1", "Use a seed >= 1"))
    if request.frequency_penalty == -2:
        blockers.append(
            _Blocker(
                "frequency_penalty=-2",
                "TGI's /generate declares frequency_penalty > -2",
                "Use a value above -2",
            )
        )
    return blockers


def _completions_blockers(request: Request) -> list[_Blocker]:
    blockers = []
    if request.output is not None:
        blockers.append(_Blocker(f"output={type(request.output).__name__}", ""))
    if request.top_k is not None and request.top_k > 0:
        blockers.append(_Blocker("top_k", ""))
    if request.logprobs:
        blockers.append(_Blocker("logprobs", ""))
    if request.n is not None and request.n > 1:
        blockers.append(_Blocker("n > 1", ""))
    return blockers


def build_call(request: Request, info: EngineInfo) -> HttpCall:
    """The HTTP call for ``request`` on the API chosen by :func:`route`."""
    path = route(request, info)
    _check_common(request, info)
    if path == CHAT:
        body = chat_body(request, info)
    elif path == COMPLETIONS:
        body = completions_body(request, info)
    else:
        body = generate_body(request, info)
    return HttpCall("POST", path, body, request.stream)


def _check_common(request: Request, info: EngineInfo) -> None:
    greedy = request.temperature == 0
    if request.top_p == 0 and not greedy:
        raise _refuse(
            info,
            "top_p=0",
            "TGI requires 0 < top_p < 1 (top_p=1 means no filtering)",
            "Use temperature=0 for greedy decoding",
        )
    if request.repetition_penalty == 0:
        raise _refuse(
            info, "repetition_penalty=0", "TGI requires repetition_penalty > 0 (1.0 means no penalty)"
        )
    limit = (
        info.max_stop_sequences if isinstance(info, TGIInfo) and info.max_stop_sequences else DEFAULT_MAX_STOP
    )
    if request.stop is not None and len(request.stop) > limit:
        raise _refuse(
            info,
            f"{len(request.stop)} stop strings",
            f"this server accepts at most {limit} (its --max-stop-sequences)",
            "Pass fewer stop strings, or relaunch TGI with a larger --max-stop-sequences",
        )


def _sampling(request: Request, *, native: bool) -> dict[str, Any]:
    greedy = request.temperature == 0
    fields: dict[str, Any] = {}
    if native:
        fields["do_sample"] = not greedy
        if not greedy and request.temperature is not None:
            fields["temperature"] = request.temperature
        if not greedy and request.top_k is not None and request.top_k > 0:
            fields["top_k"] = request.top_k
    elif request.temperature is not None:
        fields["temperature"] = request.temperature  # TGI's OpenAI routes read 0 as greedy
    if not greedy and request.top_p is not None and request.top_p < 1:
        fields["top_p"] = request.top_p
    return fields


def _common(request: Request) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if request.seed is not None:
        fields["seed"] = request.seed
    if request.stop is not None:
        fields["stop"] = list(request.stop)
    if request.frequency_penalty is not None:
        fields["frequency_penalty"] = request.frequency_penalty
    return fields


def _generation(request: Request, *, native: bool) -> dict[str, Any]:
    """What ``/generate`` (``native``) and ``/v1/completions`` both take: the length limit,
    sampling, seed, stop strings and both penalties."""
    fields: dict[str, Any] = {}
    if request.max_tokens is not None:
        fields["max_new_tokens" if native else "max_tokens"] = request.max_tokens
    fields.update(_sampling(request, native=native))
    fields.update(_common(request))
    if request.repetition_penalty is not None:
        fields["repetition_penalty"] = request.repetition_penalty
    return fields


def generate_body(request: Request, info: EngineInfo) -> dict[str, Any]:
    """``GenerateRequest`` for ``/generate`` and ``/generate_stream``; ``extra_body`` keys go
    into ``parameters`` (e.g. ``{"typical_p": 0.9, "watermark": True}``)."""
    params: dict[str, Any] = {"details": True, **_generation(request, native=True)}
    if request.top_logprobs:
        params["top_n_tokens"] = request.top_logprobs
    if request.n is not None and request.n > 1:
        _check_best_of(request, info)
        params["best_of"] = request.n
    if request.lora is not None:
        params["adapter_id"] = request.lora
    if request.output is not None:
        params["grammar"] = grammar(request.output, info.version)
    params.update(request.extra_body or {})
    return {"inputs": request.prompt, "parameters": params}


def _check_best_of(request: Request, info: EngineInfo) -> None:
    n = request.n
    why = "TGI returns n answers through best_of, which "
    if request.stream:
        raise _refuse(
            info,
            "n > 1 with streaming",
            why + "cannot stream",
            "Stream n requests concurrently, or drop stream",
        )
    if request.seed is not None:
        raise _refuse(
            info,
            "n > 1 with a seed",
            why + "refuses a seed",
            "Drop the seed, or send n requests with different seeds",
        )
    if request.temperature == 0:
        raise _refuse(info, "n > 1 with temperature=0", why + "needs sampling", "Use a temperature above 0")
    top = info.max_best_of if isinstance(info, TGIInfo) else None
    if top is not None and n is not None and n > top:
        raise _refuse(
            info,
            f"n={n}",
            f"this server allows n <= {top} (its --max-best-of)",
            "Lower n, or relaunch TGI with a larger --max-best-of",
        )


def _check_chat(request: Request, info: EngineInfo) -> None:
    """Refuse what TGI's chat API cannot do (each has a way on ``/generate``)."""
    v = _version(info)
    for refused, feature, why, alternative in (
        (
            request.top_k is not None and request.top_k > 0,
            "top_k with chat messages",
            "TGI's chat API has no top_k",
            "Send a prompt (it goes to /generate) with the chat template applied",
        ),
        (
            request.repetition_penalty is not None,
            "repetition_penalty with chat messages",
            "TGI's chat API has no repetition_penalty",
            "Use frequency_penalty, or send a prompt (it goes to /generate)",
        ),
        (
            request.n is not None and request.n > 1,
            "n > 1 with chat messages",
            "TGI's chat API ignores n",
            "Send n requests concurrently, or send a prompt (best_of on /generate)",
        ),
        (
            request.output is not None and v is not None and v < CHAT_CONSTRAINTS_SINCE,
            "output= with chat messages",
            "TGI's chat API takes response_format from 2.1.0 on",
            "Upgrade TGI, or send a prompt (grammar on /generate)",
        ),
    ):
        if refused:
            raise _refuse(info, feature, why, alternative)


def chat_body(request: Request, info: EngineInfo) -> dict[str, Any]:
    """``ChatRequest`` for ``/v1/chat/completions``; ``extra_body`` keys go to the top level."""
    _check_chat(request, info)
    body: dict[str, Any] = {
        "model": request.lora or NO_ADAPTER,
        "messages": [chat_message(m) for m in request.messages or ()],
        **_generation(request, native=False),  # no repetition_penalty: refused above
    }
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs is not None:
            body["top_logprobs"] = request.top_logprobs
    if request.output is not None:
        body["response_format"] = grammar(request.output, info.version)
    if request.tools and request.tool_choice is not None and request.tool_choice.mode != "none":
        body["tools"] = [tool_definition(t, info.version) for t in request.tools]
        body["tool_choice"] = request.tool_choice.to_openai()
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(request.extra_body or {})
    return body


def tool_definition(tool: Tool, version: str | None) -> dict[str, Any]:
    """TGI's ``Tool``: the argument schema goes in ``arguments`` (TGI's published field; it reads
    ``parameters`` only as an alias), with local ``$ref`` inlined as for ``response_format``."""
    function: dict[str, Any] = {"name": tool.name, "arguments": inline_refs(tool.parameters, version)}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as TGI's ``Message``: either ``content`` or ``tool_calls`` (its schema allows one),
    with a call's arguments as the JSON object they encode."""
    out = dict(message)
    calls = out.get("tool_calls")
    if calls:
        out.pop("content", None)
        out["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": _object(c["function"]["arguments"])}}
            for c in calls
        ]
    return out


def _object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def completions_body(request: Request, info: EngineInfo) -> dict[str, Any]:
    """``CompletionRequest`` for ``/v1/completions`` (usage arrives in its last chunk)."""
    body: dict[str, Any] = {
        "model": request.lora or NO_ADAPTER,
        "prompt": [request.prompt],
        **_generation(request, native=False),
    }
    if request.stream:
        body["stream"] = True
    body.update(request.extra_body or {})
    return body


def _version(info: EngineInfo) -> Version | None:
    return parse_version(info.version)


# -- prompt-length preflight -------------------------------------------------------------------
PROMPT_SLACK = 8  # special tokens a tokenizer may add (BOS, ...)
CHAT_SLACK = 256  # a chat template's own text (system preamble, ...)
PER_MESSAGE_SLACK = 32  # role headers per message
CHUNK = 1024  # TGI >= 3 checks prompt + min(max_new_tokens, 1024) against max_total_tokens


def preflight_call(request: Request, info: EngineInfo) -> HttpCall | None:
    """A ``/tokenize`` (or ``/chat_tokenize``) call when the prompt may exceed the limits.

    Each token covers at least one byte of text, so a prompt whose UTF-8 length (plus slack
    for special tokens and templates) fits the limits is never tokenized: most requests pay
    nothing. Skipped when the limits are unknown or ``extra_body`` asks TGI to truncate.
    """
    if not isinstance(info, TGIInfo) or info.max_input_tokens is None:
        return None
    if request.extra_body and "truncate" in request.extra_body:
        return None
    if request.messages is not None:
        size = sum(len(text_of(m).encode()) for m in request.messages)
        bound = size + CHAT_SLACK + PER_MESSAGE_SLACK * len(request.messages)
    else:
        bound = len((request.prompt or "").encode()) + PROMPT_SLACK
    return tokenize_call(request.prompt, request.messages) if _exceeds(bound, request, info) else None


def tokenize_call(prompt: str | None, messages: Sequence[Mapping[str, Any]] | None) -> HttpCall:
    """``/chat_tokenize`` for messages (rendered with the chat template), else ``/tokenize``."""
    if messages is not None:
        return HttpCall("POST", CHAT_TOKENIZE, {"model": NO_ADAPTER, "messages": [dict(m) for m in messages]})
    return HttpCall("POST", TOKENIZE, {"inputs": prompt})


def token_ids(answer: Any) -> list[int] | None:
    """Token ids from a ``/tokenize`` or ``/chat_tokenize`` answer (None if unreadable)."""
    if isinstance(answer, Mapping):
        answer = answer.get("tokenize_response")
    if not isinstance(answer, list) or not all(isinstance(t, Mapping) for t in answer):
        return None
    ids = [t.get("id") for t in answer]
    return [int(i) for i in ids if isinstance(i, int)] if all(isinstance(i, int) for i in ids) else None


def _exceeds(tokens: int, request: Request, info: TGIInfo) -> bool:
    if info.max_input_tokens is not None and tokens > info.max_input_tokens:
        return True
    total = info.max_model_len
    return bool(request.max_tokens and total and tokens + min(request.max_tokens, CHUNK) > total)


def prompt_tokens(answer: Any) -> int | None:
    """Token count from a ``/tokenize`` or ``/chat_tokenize`` answer (None if unreadable)."""
    if isinstance(answer, Mapping):
        answer = answer.get("tokenize_response")
    return len(answer) if isinstance(answer, list) else None
