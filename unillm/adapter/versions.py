"""Small pure helpers engine adapters share: version gates, extra sampling fields, missing routes.

v = parse_version("0.5.23.post1")              # (0, 5, 23)
at_least(v, (0, 5, 6))                         # True (None, an unknown version: the newest)
since(v, (0, 6, 0), "vLLM")                    # NATIVE, or unsupported("needs vLLM >= 0.6.0", ...)
sampling_fields(request, EXTRA_SAMPLING)       # {"top_k": 5} for the options the request sets
missing_route("vllm", 404, body, Feature.LORA_RUNTIME, version, why=..., alternative=...)
answer = discovered(answers, "version", "vllm", "/version")   # {} when the call failed
text_field(answer, "version", "vllm", "/version")              # a string or None
model_cards(answers, "vllm")                                    # /v1/models' cards, each with an id
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from unillm.capabilities import NATIVE, Support, unsupported
from unillm.errors import MalformedResponse

__all__ = ["Version", "at_least", "discovered", "model_cards", "parse_version", "since", "text_field"]

Version = tuple[int, int, int]
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str | None) -> Version | None:
    """(major, minor, patch) from a version string such as "0.32.0+cpu" or "3.3.6-dev0" (None:
    no version, or not one).

    Args:
        text: The version string the engine reports; None or empty gives None.
    """
    if not text:
        return None
    m = _VERSION.match(text)
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def at_least(version: Version | None, minimum: Version) -> bool:
    """True when ``version`` (None: unknown, taken as the newest) is ``minimum`` or newer.

    Args:
        version: The engine's parsed version; None (unknown) counts as the newest.
        minimum: The first version with the feature.
    """
    return version is None or version >= minimum


def since(version: Version | None, minimum: Version, engine: str, why: str = "") -> Support:
    """A feature the engine has from ``minimum`` on: native (with ``why`` as a note) or refused.

    Args:
        version: The engine's parsed version; None (unknown) counts as the newest.
        minimum: The first version with the feature.
        engine: The engine's name, for the refusal.
        why: A note kept on the native support; empty: none.
    """
    if at_least(version, minimum):
        return Support(why=why) if why else NATIVE
    return unsupported(f"needs {engine} >= {'.'.join(map(str, minimum))}", f"Upgrade {engine}")


def discovered(answers: Mapping[str, Any], key: str, engine: str, endpoint: str) -> Mapping[str, Any]:
    """The JSON object a discovery call answered (``answers[key]``, from GET ``endpoint``).

    Args:
        answers: The decoded discovery answers, by key (None: the call failed).
        key: The discovery call's key.
        engine: The adapter's name, for the error message.
        endpoint: The path that call requested, for the error message.

    Returns:
        The object, or ``{}`` when the call failed (no answer to read).

    Raises:
        MalformedResponse: naming ``endpoint``, when it answered JSON that is not an object.
    """
    value = answers.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _malformed(engine, endpoint, f"answered {_excerpt(value)}, not a JSON object")
    return value


def text_field(answer: Mapping[str, Any], field: str, engine: str, endpoint: str) -> str | None:
    """``answer[field]`` as a non-empty string, None when absent or null.

    Args:
        answer: One decoded discovery answer.
        field: The field to read.
        engine: The adapter's name, for the error message.
        endpoint: The path that answered, for the error message.

    Raises:
        MalformedResponse: naming ``endpoint``, when the field holds anything else.
    """
    value = answer.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _malformed(engine, endpoint, f"answered {field!r}: {_excerpt(value)}, not a name")
    return value


def model_cards(
    answers: Mapping[str, Any], engine: str, key: str = "models", endpoint: str = "/v1/models"
) -> list[Mapping[str, Any]]:
    """The model cards of an OpenAI-style ``/v1/models`` answer ([] when the call failed).

    Args:
        answers: The decoded discovery answers, by key (None: the call failed).
        engine: The adapter's name, for the error message.
        key: The discovery call's key.
        endpoint: The path that call requested, for the error message.

    Raises:
        MalformedResponse: naming ``endpoint``, when ``data`` is not a list of objects each with
            a non-empty string ``id`` (a null id must never become the model ``"None"``) and an
            integer or null ``max_model_len``.
    """
    data = discovered(answers, key, engine, endpoint).get("data")
    if data is None:
        return []
    if not isinstance(data, list):
        raise _malformed(engine, endpoint, f"answered 'data': {_excerpt(data)}, not a list of models")
    for card in data:
        if not isinstance(card, Mapping) or not isinstance(card.get("id"), str) or not card["id"]:
            raise _malformed(engine, endpoint, f"listed {_excerpt(card)}, not a model with a string 'id'")
        limit = card.get("max_model_len")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise _malformed(engine, endpoint, f"gave max_model_len {_excerpt(limit)}, not a whole number")
    return data


def _malformed(engine: str, endpoint: str, what: str) -> MalformedResponse:
    return MalformedResponse(f"{engine}: GET {endpoint} {what}; is this a {engine} server?")


def _excerpt(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."
