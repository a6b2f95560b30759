"""TensorRT-LLM's ``/metrics``: a JSON list of iteration stats, as samples unillm's schema maps.

``trtllm-serve`` answers ``GET /metrics`` with the iteration stats queued since the last read
(``IterationStats`` as JSON: ``numActiveRequests``, ``numQueuedRequests``, ``iterLatencyMS``,
``gpuMemUsage``, ``kvCacheStats``, ``inflightBatchingStats``, ``specDecodingStats``, ...); a read
empties the queue. The newest iteration's numbers become samples named ``trtllm_<field>`` and
``trtllm_<section>_<field>``; ``trtllm_kvCacheStats_usage`` (used / max blocks) is derived.
"""

from __future__ import annotations

import json
from typing import Any

from unillm.adapter import MalformedResponse, MetricNames, Sample

PREFIX = "trtllm"
NAMES = MetricNames(
    running=f"{PREFIX}_numActiveRequests",
    waiting=f"{PREFIX}_numQueuedRequests",
    kv_cache_usage=f"{PREFIX}_kvCacheStats_usage",
    prefix_cache_hit_ratio=f"{PREFIX}_kvCacheStats_cacheHitRate",
    spec_draft_tokens=f"{PREFIX}_specDecodingStats_numDraftTokens",
    spec_accepted_tokens=f"{PREFIX}_specDecodingStats_numAcceptedTokens",
    spec_acceptance_length=f"{PREFIX}_specDecodingStats_acceptanceLength",
)


def samples(text: str) -> list[Sample]:
    """The newest iteration's numbers as samples (none when no iteration ran since the last read)."""
    try:
        stats = json.loads(text)
    except ValueError:
        raise MalformedResponse(f"tensorrt_llm: /metrics did not answer JSON: {text[:200]!r}") from None
    if not isinstance(stats, list):
        raise MalformedResponse(
            f"tensorrt_llm: /metrics answered {type(stats).__name__}, not a list of iteration stats"
        )
    if not stats:
        return []
    out = list(_numbers(stats[-1], PREFIX))
    kv = stats[-1].get("kvCacheStats") or {}
    used, total = kv.get("usedNumBlocks"), kv.get("maxNumBlocks")
    if isinstance(used, int | float) and isinstance(total, int | float) and total > 0:
        out.append(Sample(name=f"{PREFIX}_kvCacheStats_usage", labels={}, value=used / total))
    return out


def _numbers(stats: Any, prefix: str) -> list[Sample]:
    out = []
    for key, value in stats.items() if isinstance(stats, dict) else ():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out.append(Sample(name=f"{prefix}_{key}", labels={}, value=float(value)))
        elif isinstance(value, dict) and prefix == PREFIX:  # one level of sections
            out += _numbers(value, f"{prefix}_{key}")
    return out
