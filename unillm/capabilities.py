"""What each engine can honour, declared by its adapter and checked before anything is sent.

caps = llm.capabilities            # after the first request, for the detected version
caps.supports(Feature.REGEX)       # True / False
"""

from __future__ import annotations

from difflib import get_close_matches
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from unillm.content import has_images
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request


class Feature(str, Enum):
    """A unified option or launch setting whose support differs between engines."""

    COMPLETION = "prompt completion"
    CHAT = "chat messages"
    STREAM = "streaming"
    STREAM_USAGE = "usage in streams"
    JSON_SCHEMA = "output=JSON schema"
    REGEX = "output=Regex"
    CHOICE = "output=Choice"
    GRAMMAR = "output=Grammar (EBNF)"
    GRAMMAR_LARK = "output=Grammar (Lark)"
    LORA = "lora= per request"
    LORA_RUNTIME = "loras.load/unload at runtime"
    N = "n > 1"
    LOGPROBS = "logprobs"
    TOP_K = "top_k"
    MIN_P = "min_p"
    REPETITION_PENALTY = "repetition_penalty"
    PRESENCE_PENALTY = "presence_penalty"
    FREQUENCY_PENALTY = "frequency_penalty"
    SEED = "seed"
    STOP = "stop"
    PRIORITY = "priority="
    SPEC_NGRAM = "speculative ngram"
    SPEC_DRAFT = "speculative draft model"
    SPEC_EAGLE = "speculative eagle/eagle3"
    SPEC_MTP = "speculative mtp"
    TENSOR_PARALLEL = "tensor parallel"
    PIPELINE_PARALLEL = "pipeline parallel"
    DATA_PARALLEL = "data parallel"
    EXPERT_PARALLEL = "expert parallel"
    MULTI_NODE = "multi-node (nodes=)"
    PD_DISAGGREGATION = "prefill/decode disaggregation"
    TOOLS = "tools="
    TOOL_CHOICE_AUTO = "tool_choice='auto'"
    TOOL_CHOICE_REQUIRED = "tool_choice='required'"
    TOOL_CHOICE_NAMED = "tool_choice=<tool name>"
    IMAGES = "image content parts"
    EMBEDDINGS = "embed()"
    TOKENIZE = "tokenize()"


#: How a model is spread over devices and nodes: one refusal covers them all on a one-device engine.
LAYOUT_FEATURES = (
    Feature.TENSOR_PARALLEL,
    Feature.PIPELINE_PARALLEL,
    Feature.DATA_PARALLEL,
    Feature.EXPERT_PARALLEL,
    Feature.MULTI_NODE,
    Feature.PD_DISAGGREGATION,
)

Level = Literal["native", "emulated", "no"]


class Support(BaseModel):
    """How an engine supports one feature: natively, emulated by unillm, or not at all."""

    model_config = ConfigDict(frozen=True)

    level: Level = "native"
    why: str = ""
    alternative: str = ""


NATIVE = Support()
#: What to do instead of ``priority=`` on an engine without request priorities.
PRIORITY_ALTERNATIVE = (
    "Drop priority=, or serve the model with vLLM or SGLang launched with scheduling='priority'"
)


def unsupported(why: str, alternative: str = "") -> Support:
    """Shorthand for a feature the engine cannot honour.

    Args:
        why: What the engine lacks.
        alternative: What the caller can do instead; empty: nothing suggested.
    """
    return Support(level="no", why=why, alternative=alternative)


class Capabilities(BaseModel):
    """The features of one engine (at one version); anything not listed is unsupported."""

    model_config = ConfigDict(frozen=True)

    engine: str
    version: str | None = None
    features: dict[Feature, Support]

    def support(self, feature: Feature) -> Support:
        """How ``feature`` is supported (``level="no"`` when undeclared).

        Args:
            feature: The feature to look up.
        """
        return self.features.get(feature) or unsupported("not declared by the adapter")

    def supports(self, feature: Feature) -> bool:
        """True when the feature is honoured natively or emulated.

        Args:
            feature: The feature to look up.
        """
        return self.support(feature).level != "no"

    def require(self, feature: Feature) -> None:
        """Raise :class:`UnsupportedFeature` unless the feature is honoured.

        Args:
            feature: The feature to look up.

        Raises:
            UnsupportedFeature: The feature is not honoured (with the adapter's reason).
        """
        s = self.support(feature)
        if s.level == "no":
            raise UnsupportedFeature(
                self.engine,
                feature.value,
                version=self.version,
                why=s.why,
                alternative=s.alternative,
            )


_OUTPUT_FEATURE = {JsonSchema: Feature.JSON_SCHEMA, Regex: Feature.REGEX, Choice: Feature.CHOICE}
_TOOL_CHOICE_FEATURE = {
    "auto": Feature.TOOL_CHOICE_AUTO,
    "required": Feature.TOOL_CHOICE_REQUIRED,
    "named": Feature.TOOL_CHOICE_NAMED,
}
_OPTION_FEATURE = {
    "top_k": Feature.TOP_K,
    "min_p": Feature.MIN_P,
    "seed": Feature.SEED,
    "stop": Feature.STOP,
    "repetition_penalty": Feature.REPETITION_PENALTY,
    "logprobs": Feature.LOGPROBS,
    "presence_penalty": Feature.PRESENCE_PENALTY,
    "frequency_penalty": Feature.FREQUENCY_PENALTY,
    "priority": Feature.PRIORITY,
}


def features_of(request: Request) -> list[Feature]:
    """Every feature a request relies on.

    Args:
        request: The validated request.
    """
    used = [Feature.CHAT if request.messages is not None else Feature.COMPLETION]
    if request.stream:
        used.append(Feature.STREAM)
    out = request.output
    if isinstance(out, Grammar):
        used.append(Feature.GRAMMAR_LARK if out.syntax == "lark" else Feature.GRAMMAR)
    elif out is not None:
        used.append(_OUTPUT_FEATURE[type(out)])
    choice = request.tool_choice
    if request.tools and choice is not None and choice.mode != "none":
        used += [Feature.TOOLS, _TOOL_CHOICE_FEATURE[choice.mode]]
    if has_images(request.messages):
        used.append(Feature.IMAGES)
    if request.lora is not None:
        used.append(Feature.LORA)
    if request.n is not None and request.n > 1:
        used.append(Feature.N)
    used += [
        f
        for name, f in _OPTION_FEATURE.items()
        if (v := getattr(request, name)) is not None and v is not False
    ]
    return used


def check(capabilities: Capabilities, request: Request) -> None:
    """Refuse, before sending, any request the engine cannot honour."""
    for feature in features_of(request):
        capabilities.require(feature)


def check_text_only(engine: str, info: Any, request: Request) -> None:
    """Refuse image parts for a model known to be text-only (``info``: the EngineInfo)."""
    if has_images(request.messages):
        raise UnsupportedFeature(
            engine,
            Feature.IMAGES.value,
            version=getattr(info, "version", None),
            why=f"the model {getattr(info, 'model', '?')!r} is text-only (its config has no vision part)",
            alternative="Launch a vision-language model, or send text only",
        )


def feature_by_name(name: str) -> Feature:
    """The feature named in ``uses`` (``"json_schema"``, ``"lora_runtime"``...; case-insensitive)."""
    by_name = {f.name.lower(): f for f in Feature}
    found = by_name.get(str(name).lower())
    if found is None:
        close = get_close_matches(str(name).lower(), by_name, 1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidOptions(f"unknown feature {name!r} in uses{hint}; known: {sorted(by_name)}")
    return found
