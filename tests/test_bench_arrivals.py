"""Arrival schedules: all at once, fixed rate, Poisson and gamma (vLLM's burstiness)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from pydantic import ValidationError

from unillm.bench.arrivals import Load, send_times
from unillm.bench.runner import as_load_list


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]


def test_infinite_rate_sends_everything_at_once() -> None:
    assert send_times(Load(), 5) == [0.0] * 5
    assert send_times(Load(max_concurrency=2), 3) == [0.0] * 3


def test_fixed_rate_is_regular() -> None:
    assert send_times(Load(rate=4, arrival="fixed"), 4) == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_poisson_last_request_goes_out_at_n_over_rate() -> None:
    times = send_times(Load(rate=5), 200, seed=1)
    assert times[-1] == pytest.approx(200 / 5)
    assert all(b >= a for a, b in itertools.pairwise(times))


def test_poisson_is_seeded_and_repeatable() -> None:
    assert send_times(Load(rate=3), 50, seed=9) == send_times(Load(rate=3), 50, seed=9)
    assert send_times(Load(rate=3), 50, seed=9) != send_times(Load(rate=3), 50, seed=10)


def test_poisson_gaps_are_exponential() -> None:
    g = gaps(send_times(Load(rate=10), 4000, seed=3))
    # exponential: standard deviation equals the mean (coefficient of variation 1)
    assert statistics.pstdev(g) / statistics.fmean(g) == pytest.approx(1.0, abs=0.1)


def test_lower_burstiness_is_burstier() -> None:
    def cv(b: float) -> float:
        g = gaps(send_times(Load(rate=10, burstiness=b), 4000, seed=5))
        return statistics.pstdev(g) / statistics.fmean(g)

    # gamma with shape k has coefficient of variation 1/sqrt(k)
    assert cv(0.25) == pytest.approx(2.0, rel=0.15)
    assert cv(4.0) == pytest.approx(0.5, rel=0.15)


def test_load_validation_and_labels() -> None:
    with pytest.raises(ValidationError, match="burstiness"):
        Load(rate=2, arrival="fixed", burstiness=0.5)
    with pytest.raises(ValidationError):
        Load(rate=0)
    with pytest.raises(ValidationError):
        Load(max_concurrency=0)
    assert Load(rate=4).label() == "rate=4 (poisson)"
    assert Load(rate=4, burstiness=0.5).label() == "rate=4 (gamma 0.5)"
    assert Load(max_concurrency=8).label() == "concurrency=8"
    assert Load().label() == "all at once"


def test_sweeps_over_rate_or_concurrency() -> None:
    assert [x.max_concurrency for x in as_load_list(None, [1, 4])] == [1, 4]
    assert [x.rate for x in as_load_list([1.0, 2.0], None)] == [1.0, 2.0]
    assert all(math.isinf(x.rate) for x in as_load_list(None, [1, 4]))
    assert len(as_load_list([1.0, 2.0], [1, 4])) == 4
