"""unillm: one async SDK for open-model inference engines (vLLM, SGLang, TGI, MLX).

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

_EXPORTS = {
    "LLM": "unillm.llm",
    "Stream": "unillm.llm",
    "Client": "unillm.client",
    "Fleet": "unillm.fleet",
    "FleetStats": "unillm.fleet",
    "ReplicaStats": "unillm.fleet",
    "Backoff": "unillm.routing",
    "connect": "unillm.entrypoints",
    "launch": "unillm.entrypoints",
    "from_config": "unillm.config",
    "load_config": "unillm.config",
    "cpu_settings": "unillm.cpu",
    "check_config": "unillm.config_check",
    "ConfigCheck": "unillm.config_check",
    "Launch": "unillm.supervisor",
    "LaunchProgress": "unillm.supervisor",
    "LaunchSpec": "unillm.launch_spec",
    "Parallel": "unillm.launch_spec",
    "Speculative": "unillm.launch_spec",
    "Nodes": "unillm.launch_spec",
    "Disaggregation": "unillm.launch_spec",
    "FleetLaunch": "unillm.fleet_launch",
    "JsonSchema": "unillm.options",
    "Regex": "unillm.options",
    "Choice": "unillm.options",
    "Grammar": "unillm.options",
    "Options": "unillm.options",
    "Message": "unillm.options",
    "Completion": "unillm.results",
    "Delta": "unillm.results",
    "Usage": "unillm.results",
    "Timings": "unillm.results",
    "LoraInfo": "unillm.results",
    "ToolCall": "unillm.results",
    "ToolCallDelta": "unillm.results",
    "Tool": "unillm.tools",
    "ToolCallAccumulator": "unillm.tools",
    "Image": "unillm.content",
    "Embeddings": "unillm.results",
    "Tokens": "unillm.results",
    "Capabilities": "unillm.capabilities",
    "Feature": "unillm.capabilities",
    "RetryPolicy": "unillm.transport",
    "Timeouts": "unillm.transport",
    "Pool": "unillm.transport",
    "EngineMetrics": "unillm.metrics",
    "NormalizedMetrics": "unillm.metrics",
    "MetricNames": "unillm.metrics",
    "BlockingLLM": "unillm.blocking",
    "instrument": "unillm.otel",
    "uninstrument": "unillm.otel",
    "UnillmError": "unillm.errors",
    "InvalidOptions": "unillm.errors",
    "ConfigError": "unillm.errors",
    "UnknownEngine": "unillm.errors",
    "UnsupportedFeature": "unillm.errors",
    "EngineError": "unillm.errors",
    "InvalidRequest": "unillm.errors",
    "NotFound": "unillm.errors",
    "UnknownModel": "unillm.errors",
    "UnknownLora": "unillm.errors",
    # deprecated aliases of UnknownLora and LoraInfo ("adapter" names engine adapters)
    "UnknownAdapter": "unillm.errors",
    "AdapterInfo": "unillm.results",
    "Unauthorized": "unillm.errors",
    "Overloaded": "unillm.errors",
    "EngineInternalError": "unillm.errors",
    "EngineUnavailable": "unillm.errors",
    "EngineTimeout": "unillm.errors",
    "MalformedResponse": "unillm.errors",
    "ReplicaMismatch": "unillm.errors",
    "FanOutFailed": "unillm.errors",
    "StreamInterrupted": "unillm.errors",
    "OutputParseError": "unillm.errors",
    "LaunchError": "unillm.errors",
    "PoolTimeout": "unillm.errors",
    "DeadlineExceeded": "unillm.errors",
}

_SUBMODULES = ("metrics", "observe")  # ``unillm.observe.add(...)`` without importing them first

__all__ = [*sorted(_EXPORTS), *_SUBMODULES, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f"unillm.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'unillm' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from unillm import metrics as metrics
    from unillm import observe as observe
    from unillm.blocking import BlockingLLM as BlockingLLM
    from unillm.capabilities import Capabilities as Capabilities
    from unillm.capabilities import Feature as Feature
    from unillm.client import Client as Client
    from unillm.config import from_config as from_config
    from unillm.config import load_config as load_config
    from unillm.config_check import ConfigCheck as ConfigCheck
    from unillm.config_check import check_config as check_config
    from unillm.content import Image as Image
    from unillm.cpu import cpu_settings as cpu_settings
    from unillm.entrypoints import connect as connect
    from unillm.entrypoints import launch as launch
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
    from unillm.errors import Unauthorized as Unauthorized
    from unillm.errors import UnillmError as UnillmError
    from unillm.errors import UnknownAdapter as UnknownAdapter
    from unillm.errors import UnknownEngine as UnknownEngine
    from unillm.errors import UnknownLora as UnknownLora
    from unillm.errors import UnknownModel as UnknownModel
    from unillm.errors import UnsupportedFeature as UnsupportedFeature
    from unillm.fleet import Fleet as Fleet
    from unillm.fleet import FleetStats as FleetStats
    from unillm.fleet import ReplicaStats as ReplicaStats
    from unillm.fleet_launch import FleetLaunch as FleetLaunch
    from unillm.launch_spec import Disaggregation as Disaggregation
    from unillm.launch_spec import LaunchSpec as LaunchSpec
    from unillm.launch_spec import Nodes as Nodes
    from unillm.launch_spec import Parallel as Parallel
    from unillm.launch_spec import Speculative as Speculative
    from unillm.llm import LLM as LLM
    from unillm.llm import Stream as Stream
    from unillm.metrics import EngineMetrics as EngineMetrics
    from unillm.metrics import MetricNames as MetricNames
    from unillm.metrics import NormalizedMetrics as NormalizedMetrics
    from unillm.options import Choice as Choice
    from unillm.options import Grammar as Grammar
    from unillm.options import JsonSchema as JsonSchema
    from unillm.options import Message as Message
    from unillm.options import Options as Options
    from unillm.options import Regex as Regex
    from unillm.otel import instrument as instrument
    from unillm.otel import uninstrument as uninstrument
    from unillm.results import AdapterInfo as AdapterInfo
    from unillm.results import Completion as Completion
    from unillm.results import Delta as Delta
    from unillm.results import Embeddings as Embeddings
    from unillm.results import LoraInfo as LoraInfo
    from unillm.results import Timings as Timings
    from unillm.results import Tokens as Tokens
    from unillm.results import ToolCall as ToolCall
    from unillm.results import ToolCallDelta as ToolCallDelta
    from unillm.results import Usage as Usage
    from unillm.routing import Backoff as Backoff
    from unillm.supervisor import Launch as Launch
    from unillm.supervisor import LaunchProgress as LaunchProgress
    from unillm.tools import Tool as Tool
    from unillm.tools import ToolCallAccumulator as ToolCallAccumulator
    from unillm.transport import Pool as Pool
    from unillm.transport import RetryPolicy as RetryPolicy
    from unillm.transport import Timeouts as Timeouts
