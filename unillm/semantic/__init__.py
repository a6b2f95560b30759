"""Semantic routing: send each prompt to the model, fleet or LoRA that fits it.

    from unillm.semantic import EngineEmbedder, Route, SemanticRouter

    router = SemanticRouter([Route(name="code", utterances=["Fix my Python error"], lora="coder"),
                             Route(name="chat", utterances=["Hi there!"])],
                            embedder=EngineEmbedder(embedding_llm), llm=llm, default="chat")
    r = await router.generate("How do I reverse a list?")   # r.route says where it went and why

Needs ``unillm-sdk[routing]`` (numpy). Names are imported lazily.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "SemanticRouter": "unillm.semantic.router",
    "RoutedStream": "unillm.semantic.router",
    "Route": "unillm.semantic.routes",
    "RouteSet": "unillm.semantic.routes",
    "KeywordSignal": "unillm.semantic.routes",
    "EmbeddingSignal": "unillm.semantic.routes",
    "Condition": "unillm.semantic.routes",
    "Embedder": "unillm.semantic.embedders",
    "EngineEmbedder": "unillm.semantic.embedders",
    "OpenAIEmbedder": "unillm.semantic.embedders",
    "EmbeddingError": "unillm.semantic.embedders",
    "evaluate": "unillm.semantic.evaluation",
    "load_samples": "unillm.semantic.evaluation",
    "EvalReport": "unillm.semantic.evaluation",
    "Scoring": "unillm.semantic.scoring",
    "Calibration": "unillm.semantic.calibration",
    "from_vsr": "unillm.semantic.importers",
    "from_litellm": "unillm.semantic.importers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'unillm.semantic' has no attribute {name!r}")
    return getattr(import_module(module), name)


if TYPE_CHECKING:
    from unillm.semantic.calibration import Calibration as Calibration
    from unillm.semantic.embedders import Embedder as Embedder
    from unillm.semantic.embedders import EmbeddingError as EmbeddingError
    from unillm.semantic.embedders import EngineEmbedder as EngineEmbedder
    from unillm.semantic.embedders import OpenAIEmbedder as OpenAIEmbedder
    from unillm.semantic.evaluation import EvalReport as EvalReport
    from unillm.semantic.evaluation import evaluate as evaluate
    from unillm.semantic.evaluation import load_samples as load_samples
    from unillm.semantic.importers import from_litellm as from_litellm
    from unillm.semantic.importers import from_vsr as from_vsr
    from unillm.semantic.router import RoutedStream as RoutedStream
    from unillm.semantic.router import SemanticRouter as SemanticRouter
    from unillm.semantic.routes import Condition as Condition
    from unillm.semantic.routes import EmbeddingSignal as EmbeddingSignal
    from unillm.semantic.routes import KeywordSignal as KeywordSignal
    from unillm.semantic.routes import Route as Route
    from unillm.semantic.routes import RouteSet as RouteSet
    from unillm.semantic.scoring import Scoring as Scoring
