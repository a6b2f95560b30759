"""``unillm bench``: measure engines under load with ``vllm bench serve``'s definitions.

    from unillm.bench import Url, Synthetic, Load, Slo, run_suite, write_report

    report = await run_suite([Url("vllm", "http://127.0.0.1:8000")],
                             Synthetic(num_prompts=200, input_len=128, output_len=64),
                             [Load(max_concurrency=c) for c in (1, 4, 16)], slo=Slo(ttft_ms=500))
    write_report(report, "bench-results/")     # vLLM-layout JSON, summary.md, PNG plots

Workloads: :class:`Synthetic`, :class:`JsonlPrompts`, :class:`MultiTurn` (sessions whose turns
wait for the real answers) and :class:`MooncakeTrace` (trace replay on its own schedule).
Targets: :class:`Url`, :class:`Fleet`, :class:`Config`, or :func:`matrix` of engines x launch
settings, each started, measured and stopped in turn. One running client can also be measured
directly with :func:`run_load`. Imported lazily: ``import unillm`` does not load this package.
"""

from __future__ import annotations

from unillm.bench.arrivals import Load, send_times
from unillm.bench.engine_stats import EngineStats
from unillm.bench.report import markdown_table, write_report
from unillm.bench.result import RunResult, TargetInfo
from unillm.bench.runner import Progress, run_load
from unillm.bench.sessions import MultiTurn, Session, Turn
from unillm.bench.stats import RequestRecord, Slo, Summary, summarize
from unillm.bench.suite import BenchReport, run_suite
from unillm.bench.targets import Config, Fleet, Launched, Target, Url, matrix
from unillm.bench.trace import MooncakeTrace
from unillm.bench.workload import BenchRequest, JsonlPrompts, Synthetic

__all__ = [
    "BenchReport",
    "BenchRequest",
    "Config",
    "EngineStats",
    "Fleet",
    "JsonlPrompts",
    "Launched",
    "Load",
    "MooncakeTrace",
    "MultiTurn",
    "Progress",
    "RequestRecord",
    "RunResult",
    "Session",
    "Slo",
    "Summary",
    "Synthetic",
    "Target",
    "TargetInfo",
    "Turn",
    "Url",
    "markdown_table",
    "matrix",
    "run_load",
    "run_suite",
    "send_times",
    "summarize",
    "write_report",
]
