"""unillm: one async SDK for open-model engines (vLLM, SGLang, TGI, MLX, llama.cpp, Ollama, TensorRT-LLM).

    import unillm

    llm = unillm.connect("vllm", "http://127.0.0.1:8000")
    r = await llm.generate("What is 1+1?", max_tokens=16)

    fleet = unillm.connect("vllm", ["http://a:8000", "http://b:8000"], policy="prefix")

    async with unillm.launch("vllm", model="/models/tiny") as llm:
        r = await llm.generate("Date?", output=unillm.Regex(r"\\d{4}-\\d{2}-\\d{2}"))

Names are imported lazily, so ``import unillm`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_NAMES: dict[str, str] | None = None  # public name -> the module it comes from, read on first use


def _names() -> dict[str, str]:
    """Each public name and its module, read from the imports under ``if TYPE_CHECKING:`` below:
    the one list of names (type checkers and IDEs read it as written; nothing runs it)."""
    global _NAMES
    if _NAMES is None:
        import ast
        from pathlib import Path

        tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
        block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
        _NAMES = {
            alias.asname or alias.name: node.module or ""
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
    return _NAMES


def __getattr__(name: str) -> Any:
    if name == "__all__":
        value: Any = [*sorted(_names()), "__version__"]
    elif (module := _names().get(name)) is None:
        raise AttributeError(f"module 'unillm' has no attribute {name!r}")
    elif module == __name__:  # a submodule: ``unillm.observe.add(...)`` without importing it first
        value = import_module(f"{__name__}.{name}")
    else:
        value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__getattr__("__all__"))


if TYPE_CHECKING:
    from unillm import metrics as metrics
    from unillm import observe as observe
    from unillm.adapter.launch_spec import Disaggregation as Disaggregation
    from unillm.adapter.launch_spec import LaunchSpec as LaunchSpec
    from unillm.adapter.launch_spec import Nodes as Nodes
    from unillm.adapter.launch_spec import Parallel as Parallel
    from unillm.adapter.launch_spec import Speculative as Speculative
    from unillm.api import connect as connect
    from unillm.api import launch as launch
    from unillm.capabilities import Capabilities as Capabilities
    from unillm.capabilities import Feature as Feature
    from unillm.client.blocking import BlockingLLM as BlockingLLM
    from unillm.client.llm import LLM as LLM
    from unillm.client.mcp_servers import MCPServer as MCPServer
    from unillm.client.priority_gate import Reserve as Reserve
    from unillm.client.protocol import Client as Client
    from unillm.client.stream import Stream as Stream
    from unillm.client.transport import Pool as Pool
    from unillm.client.transport import RetryPolicy as RetryPolicy
    from unillm.client.transport import Timeouts as Timeouts
    from unillm.config.check import ConfigCheck as ConfigCheck
    from unillm.config.check import check_config as check_config
    from unillm.config.load import from_config as from_config
    from unillm.config.load import load_config as load_config
    from unillm.content import Image as Image
    from unillm.errors import ConfigError as ConfigError
    from unillm.errors import DeadlineExceeded as DeadlineExceeded
    from unillm.errors import EngineError as EngineError
    from unillm.errors import EngineInternalError as EngineInternalError
    from unillm.errors import EngineTimeout as EngineTimeout
    from unillm.errors import EngineUnavailable as EngineUnavailable
    from unillm.errors import FanOutFailed as FanOutFailed
    from unillm.errors import InvalidOptions as InvalidOptions
    from unillm.errors import InvalidRequest as InvalidRequest
    from unillm.errors import LaunchError as LaunchError
    from unillm.errors import MalformedResponse as MalformedResponse
    from unillm.errors import NotFound as NotFound
    from unillm.errors import OutputParseError as OutputParseError
    from unillm.errors import Overloaded as Overloaded
    from unillm.errors import PoolTimeout as PoolTimeout
    from unillm.errors import ReplicaMismatch as ReplicaMismatch
    from unillm.errors import StreamInterrupted as StreamInterrupted
    from unillm.errors import ToolServerError as ToolServerError
    from unillm.errors import ToolServerTimeout as ToolServerTimeout
    from unillm.errors import Unauthorized as Unauthorized
    from unillm.errors import UnillmError as UnillmError
    from unillm.errors import UnknownEngine as UnknownEngine
    from unillm.errors import UnknownLora as UnknownLora
    from unillm.errors import UnknownModel as UnknownModel
    from unillm.errors import UnsupportedFeature as UnsupportedFeature
    from unillm.fleet.fleet import Fleet as Fleet
    from unillm.fleet.fleet import FleetStats as FleetStats
    from unillm.fleet.fleet import ReplicaStats as ReplicaStats
    from unillm.fleet.picker import Backoff as Backoff
    from unillm.fleet.picker import CacheAware as CacheAware
    from unillm.launching.cpu import cpu_settings as cpu_settings
    from unillm.launching.fleet_launch import FleetLaunch as FleetLaunch
    from unillm.launching.ray_plan import Ray as Ray
    from unillm.launching.supervisor import Launch as Launch
    from unillm.launching.supervisor import LaunchProgress as LaunchProgress
    from unillm.metrics import EngineMetrics as EngineMetrics
    from unillm.metrics import MetricNames as MetricNames
    from unillm.metrics import NormalizedMetrics as NormalizedMetrics
    from unillm.observe.otel import instrument as instrument
    from unillm.observe.otel import uninstrument as uninstrument
    from unillm.options import Choice as Choice
    from unillm.options import Grammar as Grammar
    from unillm.options import JsonSchema as JsonSchema
    from unillm.options import Message as Message
    from unillm.options import Options as Options
    from unillm.options import Regex as Regex
    from unillm.probing import ProbeReport as ProbeReport
    from unillm.probing import probe as probe
    from unillm.results import Completion as Completion
    from unillm.results import Delta as Delta
    from unillm.results import Embeddings as Embeddings
    from unillm.results import LoraInfo as LoraInfo
    from unillm.results import Timings as Timings
    from unillm.results import Tokens as Tokens
    from unillm.results import ToolCall as ToolCall
    from unillm.results import ToolCallDelta as ToolCallDelta
    from unillm.results import Usage as Usage
    from unillm.semantic.router import SemanticRouter as SemanticRouter
    from unillm.semantic.routes import Route as Route
    from unillm.tools import Tool as Tool
    from unillm.tools import ToolCallAccumulator as ToolCallAccumulator
