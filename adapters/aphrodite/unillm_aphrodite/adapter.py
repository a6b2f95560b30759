"""The Aphrodite Engine adapter: capabilities, discovery and constraints (the wire is OpenAI's).

Aphrodite Engine is a vLLM fork: its OpenAI-compatible server takes vLLM's sampling extras
(``top_k``, ``min_p``, ``repetition_penalty``) and vLLM's older guided-decoding fields
(``guided_json``, ``guided_regex``, ``guided_choice``) in the request body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    EXTRA_SAMPLING,
    NATIVE,
    Capabilities,
    Choice,
    Constraint,
    EngineInfo,
    EngineInstall,
    Feature,
    HttpCall,
    JsonSchema,
    LaunchCommand,
    LaunchSpec,
    OpenAICompatAdapter,
    Regex,
    Support,
    unsupported,
)

from . import launch

#: The features Aphrodite Engine honours through this adapter; every other one is refused before
#: sending, with the reason (REFUSED, else "not mapped").
SUPPORTED = (
    Feature.COMPLETION,
    Feature.CHAT,
    Feature.STREAM,
    Feature.STOP,
    Feature.JSON_SCHEMA,
    Feature.REGEX,
    Feature.CHOICE,
    Feature.N,
    Feature.LOGPROBS,
    Feature.TOP_K,
    Feature.MIN_P,
    Feature.REPETITION_PENALTY,
    Feature.PRESENCE_PENALTY,
    Feature.FREQUENCY_PENALTY,
    Feature.SEED,
    Feature.LORA,
    Feature.SPEC_NGRAM,
    Feature.SPEC_DRAFT,
    Feature.TENSOR_PARALLEL,
    Feature.PIPELINE_PARALLEL,
)

_GRAMMAR_WHY = (
    "guided_grammar's syntax depends on the server's guided-decoding backend "
    "(outlines reads Lark, lm-format-enforcer none), which a connected client cannot know"
)
#: Features refused for a reason of the engine's own (not merely unmapped).
REFUSED: Mapping[Feature, Support] = {
    Feature.GRAMMAR: unsupported(_GRAMMAR_WHY, "Use Regex or JsonSchema, or vLLM for grammars"),
    Feature.GRAMMAR_LARK: unsupported(_GRAMMAR_WHY, "Use Regex or JsonSchema, or vLLM for grammars"),
    Feature.DATA_PARALLEL: unsupported("Aphrodite Engine splits a model by tensor or pipeline only"),
    Feature.EXPERT_PARALLEL: unsupported("Aphrodite Engine splits a model by tensor or pipeline only"),
}


class AphroditeAdapter(OpenAICompatAdapter):
    """Aphrodite Engine: an OpenAI-compatible vLLM fork; JSON schema, regex and choice constraints."""

    name = "aphrodite"
    display_name = "Aphrodite Engine"
    engine_module = launch.ENGINE_MODULE
    extra_sampling_fields = EXTRA_SAMPLING

    def capabilities(self, version: str | None = None) -> Capabilities:
        """Every feature: NATIVE when in SUPPORTED, else refused with why and what instead.

        Args:
            version: The engine's version (None: unknown).

        Returns:
            The capability table.
        """
        unmapped = unsupported("the Aphrodite Engine adapter does not map it (yet)", "Use vLLM, which has it")
        features = {f: NATIVE if f in SUPPORTED else REFUSED.get(f, unmapped) for f in Feature}
        return Capabilities(engine=self.name, version=version, features=features)

    def discovery(self) -> dict[str, HttpCall]:
        """The call that learns the served model.

        Returns:
            Name -> call.
        """
        return {"models": HttpCall("GET", "/v1/models")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        """The served model (the first listed) unless the caller named one.

        Args:
            answers: The discovery answers by name.
            model: The model the caller named, if any.

        Returns:
            The engine's facts.
        """
        listed = answers.get("models") or {}
        served = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
        return EngineInfo(engine=self.name, model=model or next((s for s in served if s), ""))

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        """``output=`` as Aphrodite's guided-decoding fields (the core refused the other kinds).

        Args:
            output: A JsonSchema, Regex or Choice.
            info: The engine's facts.

        Returns:
            The body fields: ``guided_json``, ``guided_regex`` or ``guided_choice``.
        """
        if isinstance(output, JsonSchema):
            return {"guided_json": dict(output.schema)}
        if isinstance(output, Regex):
            return {"guided_regex": output.pattern}
        assert isinstance(output, Choice)
        return {"guided_choice": list(output.options)}

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        """The server's command line (see launch.py).

        Args:
            spec: The launch settings.

        Returns:
            The command.
        """
        return launch.command(spec, self.health_path())

    def install(self, gpu: bool = True) -> EngineInstall:
        """What ``unillm setup aphrodite`` installs (see launch.py).

        Args:
            gpu: Whether the machine has a GPU.

        Returns:
            The pip requirements.
        """
        return launch.install(gpu)
