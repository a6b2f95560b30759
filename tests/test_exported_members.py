"""The public names, exactly: what ``import unillm`` (and ``unillm.adapter``, the adapter SDK) offers.

A name added or removed here is an API change: update the set on purpose (and the CHANGELOG).
Every listed name resolves, and the lazy ``unillm`` module lists nothing else in ``dir()``.
"""

from __future__ import annotations

import importlib

import pytest

UNILLM = {
    "Backoff",
    "BlockingLLM",
    "Capabilities",
    "Choice",
    "Client",
    "Completion",
    "ConfigCheck",
    "ConfigError",
    "DeadlineExceeded",
    "Delta",
    "Disaggregation",
    "Embeddings",
    "EngineError",
    "EngineInternalError",
    "EngineMetrics",
    "EngineTimeout",
    "EngineUnavailable",
    "FanOutFailed",
    "Feature",
    "Fleet",
    "FleetLaunch",
    "FleetStats",
    "Grammar",
    "Image",
    "InvalidOptions",
    "InvalidRequest",
    "JsonSchema",
    "LLM",
    "Launch",
    "LaunchError",
    "LaunchProgress",
    "LaunchSpec",
    "LoraInfo",
    "MalformedResponse",
    "Message",
    "MetricNames",
    "Nodes",
    "NormalizedMetrics",
    "NotFound",
    "Options",
    "OutputParseError",
    "Overloaded",
    "Parallel",
    "Pool",
    "PoolTimeout",
    "Regex",
    "ReplicaMismatch",
    "ReplicaStats",
    "RetryPolicy",
    "Speculative",
    "Stream",
    "StreamInterrupted",
    "Timeouts",
    "Timings",
    "Tokens",
    "Tool",
    "ToolCall",
    "ToolCallAccumulator",
    "ToolCallDelta",
    "Unauthorized",
    "UnillmError",
    "UnknownEngine",
    "UnknownLora",
    "UnknownModel",
    "UnsupportedFeature",
    "Usage",
    "__version__",
    "check_config",
    "connect",
    "cpu_settings",
    "from_config",
    "instrument",
    "launch",
    "load_config",
    "metrics",
    "observe",
    "uninstrument",
}

ADAPTER_SDK = {
    "Adapter",
    "COMPLETIONS_PATH",
    "Capabilities",
    "Choice",
    "Completion",
    "CompletionChoice",
    "Constraint",
    "CpuRecipe",
    "Delta",
    "Disaggregation",
    "ENTRY_POINT_GROUP",
    "EXTRA_SAMPLING",
    "EmbedBatch",
    "EmbedRequest",
    "EngineError",
    "EngineInfo",
    "EngineInstall",
    "EngineInternalError",
    "Feature",
    "Flags",
    "Grammar",
    "HttpCall",
    "InvalidOptions",
    "InvalidRequest",
    "JsonSchema",
    "LAYOUT_FEATURES",
    "LaunchCommand",
    "LaunchError",
    "LaunchSpec",
    "LoraInfo",
    "MalformedResponse",
    "MetricNames",
    "NATIVE",
    "Nodes",
    "NotFound",
    "OpenAICompatAdapter",
    "OpenAIEmbeddings",
    "OpenAIStreamDecoder",
    "Options",
    "Overloaded",
    "PDRole",
    "Parallel",
    "Refuse",
    "Regex",
    "Request",
    "RuntimeLoraEndpoints",
    "SHAPE_ERRORS",
    "Speculative",
    "StreamDecoder",
    "StreamedReasoning",
    "Support",
    "Timings",
    "TokenLogprob",
    "TokenizeEndpoint",
    "TokenizeRequest",
    "Tokens",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolDeltas",
    "TopLogprob",
    "Unauthorized",
    "UnillmError",
    "UnknownLora",
    "UnknownModel",
    "UnsupportedFeature",
    "Usage",
    "Version",
    "at_least",
    "choices_of",
    "clip_message",
    "decode_event",
    "discovered",
    "error_for_status",
    "error_message",
    "features_of",
    "float_vectors",
    "get_adapter",
    "held_suffix",
    "installed_engines",
    "malformed",
    "missing_route",
    "model_cards",
    "parse_logprobs",
    "parse_usage",
    "parse_version",
    "raise_stream_error",
    "reasoning_field",
    "sampling_fields",
    "since",
    "structured_output",
    "text_field",
    "text_of",
    "thinking_fields",
    "unsupported",
    "with_reasoning",
    "with_tool_calls",
}

SEMANTIC = {
    "Condition",
    "Embedder",
    "EmbeddingError",
    "EmbeddingSignal",
    "EngineEmbedder",
    "EvalReport",
    "KeywordSignal",
    "OpenAIEmbedder",
    "Route",
    "RouteSet",
    "RoutedStream",
    "SemanticRouter",
    "evaluate",
    "from_litellm",
    "from_vsr",
    "load_samples",
}

OBSERVE = {"Call", "OBSERVERS", "Observation", "Observer", "Outcome", "Target", "add", "attributes", "remove"}

PUBLIC = {
    "unillm": UNILLM,
    "unillm.adapter": ADAPTER_SDK,
    "unillm.semantic": SEMANTIC,
    "unillm.observe": OBSERVE,
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_public_names_are_exactly_these(module: str) -> None:
    assert set(importlib.import_module(module).__all__) == PUBLIC[module]


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_resolves(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if getattr(imported, name, None) is None]
    assert not missing


def test_dir_of_unillm_lists_the_public_names() -> None:
    import unillm

    assert set(dir(unillm)) == UNILLM


def test_an_unknown_name_is_an_attribute_error() -> None:
    import unillm

    with pytest.raises(AttributeError, match="no attribute 'UnknownAdapter'"):
        unillm.UnknownAdapter  # noqa: B018  (the deprecated alias is gone)
