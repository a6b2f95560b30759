"""When each benchmark request is sent: fixed rate, Poisson/gamma arrivals, or as fast as allowed.

    Load(rate=4.0)                                   # Poisson arrivals, 4 requests/s on average
    Load(rate=4.0, burstiness=0.5)                   # burstier (gamma shape 0.5), same mean rate
    Load(rate=4.0, arrival="fixed")                  # exactly every 0.25 s
    Load(max_concurrency=8)                          # all at once, at most 8 in flight
    send_times(Load(rate=4.0), 100, seed=0)          # seconds after the start, one per request

Pure: the schedule is computed up front from a seeded generator, as ``vllm bench serve`` does
(gamma intervals with shape ``burstiness`` and mean ``1/rate``, rescaled so the last request is
sent at ``n / rate``). ``max_concurrency`` is applied by the runner on top of the schedule.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Load(BaseModel):
    """How requests arrive. ``rate`` in requests/s (``inf``: all at once); see the module doc."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float = Field(math.inf, gt=0)
    arrival: Literal["poisson", "fixed"] = "poisson"
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _fixed_is_not_bursty(self) -> Load:
        if self.arrival == "fixed" and self.burstiness != 1.0:
            raise ValueError("burstiness applies to poisson arrivals only; fixed arrivals are regular")
        return self

    def label(self) -> str:
        """A short name for tables and plots: ``rate=4 (poisson)``, ``concurrency=8``."""
        parts = []
        if math.isfinite(self.rate):
            kind = self.arrival if self.burstiness == 1.0 else f"gamma {self.burstiness:g}"
            parts.append(f"rate={self.rate:g} ({kind})")
        if self.max_concurrency is not None:
            parts.append(f"concurrency={self.max_concurrency}")
        return ", ".join(parts) or "all at once"


def send_times(load: Load, n: int, *, seed: int = 0) -> list[float]:
    """Seconds after the start at which each of ``n`` requests is sent (non-decreasing).

    Args:
        load: The arrival process (rate in requests/s, poisson or fixed, burstiness).
        n: How many requests.
        seed: Seeds the random gaps, so runs are repeatable.
    """
    if n <= 0:
        return []
    if math.isinf(load.rate):
        return [0.0] * n
    if load.arrival == "fixed":
        gaps = [1.0 / load.rate] * n
    else:
        rng = random.Random(seed)
        theta = 1.0 / (load.rate * load.burstiness)
        gaps = [rng.gammavariate(load.burstiness, theta) for _ in range(n)]
    times, total = [], 0.0
    for gap in gaps:
        total += gap
        times.append(total)
    if load.arrival == "poisson" and times[-1] > 0:
        scale = (n / load.rate) / times[-1]  # vLLM: the last request goes out at n / rate
        times = [t * scale for t in times]
    return times
