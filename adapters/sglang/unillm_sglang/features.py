"""Which SGLang API honours which option, from which release.

    api_support(Feature.GRAMMAR, "openai", parse_version("0.4.1"))   # unsupported(...)

Read from each release's own request models (``protocol.py`` of the OpenAI server, the
``SamplingParams`` and ``GenerateReqInput`` of ``/generate``) for 0.3.6, 0.4.1, 0.4.5, 0.4.9,
0.5.2, 0.5.6, 0.5.12, 0.5.18 and 0.5.23: a feature dates from the first of those releases
that has it. Versions older than 0.3.6 are assumed to behave like 0.3.6.
"""

from __future__ import annotations

from typing import Literal

from unillm.adapter import (
    LAYOUT_FEATURES,
    NATIVE,
    Feature,
    Support,
    Version,
    at_least,
    parse_version,
    unsupported,
)

__all__ = [
    "Api",
    "Version",
    "api_support",
    "at_least",
    "is_server_feature",
    "parse_version",
    "server_support",
]

Api = Literal["openai", "native"]

OLDEST_KNOWN: Version = (0, 3, 6)
#: ``model="<served>:<adapter>"`` on the OpenAI API (older releases read ``lora_path``).
LORA_IN_MODEL_SINCE: Version = (0, 5, 6)
#: ``response_format`` on ``/v1/completions`` (older releases read a ``json_schema`` string).
COMPLETIONS_RESPONSE_FORMAT_SINCE: Version = (0, 5, 2)
LORA_RUNTIME_SINCE: Version = (0, 4, 9)
#: ``/tokenize`` (vLLM's layout) arrived after 0.5.2 (sgl-project/sglang#9545); 0.5.23 also takes messages.
TOKENIZE_SINCE: Version = (0, 5, 3)

#: ``priority`` on both APIs: checked in 0.5.23 only (older releases are refused, not guessed).
PRIORITY_SINCE: Version = (0, 5, 23)
# First release whose API honours the feature; absent means "since OLDEST_KNOWN".
_SINCE: dict[Api, dict[Feature, Version]] = {
    "openai": {
        Feature.TOP_K: (0, 4, 1),
        Feature.MIN_P: (0, 4, 1),
        Feature.LORA: (0, 4, 1),
        Feature.GRAMMAR: (0, 4, 5),
        Feature.SEED: (0, 5, 6),
        Feature.PRIORITY: PRIORITY_SINCE,
    },
    # ``sampling_seed`` arrived in 0.5.6; before, the OpenAI ``seed`` was accepted and ignored.
    "native": {Feature.GRAMMAR: (0, 4, 5), Feature.SEED: (0, 5, 6), Feature.PRIORITY: PRIORITY_SINCE},
}
_NEVER: dict[Api, dict[Feature, Support]] = {
    "openai": {},
    "native": {
        Feature.CHAT: unsupported(
            "/generate takes a rendered prompt, not chat messages",
            "Send messages through the OpenAI chat API (the default), or pass a prompt",
        )
    },
}
_LARK = unsupported(
    "SGLang's grammar backends read EBNF (xgrammar), not Lark",
    'Write the grammar in EBNF: unillm.Grammar(text, syntax="ebnf")',
)
_SERVER_FEATURES = (
    Feature.LORA_RUNTIME,
    Feature.SPEC_NGRAM,
    Feature.SPEC_DRAFT,
    Feature.SPEC_EAGLE,
    Feature.SPEC_MTP,
    *LAYOUT_FEATURES,
    Feature.EMBEDDINGS,
    Feature.TOKENIZE,
)


def _fmt(v: Version) -> str:
    return ".".join(map(str, v))


def api_support(feature: Feature, api: Api, version: Version | None) -> Support:
    """How ``api`` of SGLang ``version`` (None: the newest) supports a per-request feature."""
    if feature is Feature.GRAMMAR_LARK:
        return _LARK
    never = _NEVER[api].get(feature)
    if never is not None:
        return never
    since = _SINCE[api].get(feature, OLDEST_KNOWN)
    if at_least(version, since):
        return NATIVE
    where = "the OpenAI-compatible API" if api == "openai" else "/generate"
    return unsupported(f"{where} has it since SGLang {_fmt(since)}", "Upgrade SGLang")


def server_support(feature: Feature, version: Version | None) -> Support:
    """Support of a server-wide feature (runtime LoRA, launch settings)."""
    if feature is Feature.LORA_RUNTIME and not at_least(version, LORA_RUNTIME_SINCE):
        return unsupported(
            f"/load_lora_adapter exists since SGLang {_fmt(LORA_RUNTIME_SINCE)}",
            "Upgrade SGLang, or pass lora={name: path} at launch",
        )
    if feature is Feature.TOKENIZE and not at_least(version, TOKENIZE_SINCE):
        return unsupported(f"/tokenize exists since SGLang {_fmt(TOKENIZE_SINCE)}", "Upgrade SGLang")
    return NATIVE


def is_server_feature(feature: Feature) -> bool:
    """True for features decided at launch or by server endpoints, not per request."""
    return feature in _SERVER_FEATURES
