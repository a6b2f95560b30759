"""Routing policies and replica health as pure logic: a fake clock, no sockets."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from unillm.errors import InvalidOptions
from unillm.fleet.picker import Backoff, ReplicaPicker
from unillm.options import make_request

URLS = ["http://a:8000", "http://b:8000", "http://c:8000"]


def prompt(text: str, **options: str) -> int | None:
    return ReplicaPicker(URLS, "prefix", prefix_chars=16).key_for(
        make_request(text, None, None, options, stream=False)
    )


def test_round_robin_spreads_evenly_and_skips_unavailable_replicas() -> None:
    picker = ReplicaPicker(URLS, "round_robin")
    picks = [picker.pick(None, (), now=0.0) for _ in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]
    picker.failed(1, "refused", now=0.0)
    assert [picker.pick(None, (), now=0.5) for _ in range(4)] == [0, 2, 0, 2]


def test_least_load_prefers_fewest_in_flight_plus_waiting_queue() -> None:
    picker = ReplicaPicker(URLS, "least_load")
    picker.begin(0, 0.0)
    picker.begin(0, 0.0)
    picker.begin(1, 0.0)
    assert picker.pick(None, (), now=0.0) == 2
    picker.replicas[2].waiting = 5
    assert picker.pick(None, (), now=0.0) == 1


def test_prefix_key_uses_only_the_leading_characters() -> None:
    assert prompt("You are a helpful assistant. Q1") == prompt("You are a helpful assistant. Q2")
    assert prompt("You are a helpful assistant.") != prompt("Something else entirely, yes")


def test_prefix_key_of_messages_covers_roles_and_contents() -> None:
    picker = ReplicaPicker(URLS, "prefix", prefix_chars=40)

    def key(*contents: str) -> int | None:
        messages = [
            {"role": "system", "content": contents[0]},
            *({"role": "user", "content": c} for c in contents[1:]),
        ]
        return picker.key_for(make_request(None, messages, None, {}, stream=False))

    assert key("Be terse and exact, always.", "first question") == key(
        "Be terse and exact, always.", "first question, longer"
    )
    assert key("Be terse and exact, always.", "q") != key("Be chatty.", "q")


def test_same_key_same_replica_and_bounded_load_spills_over() -> None:
    picker = ReplicaPicker(URLS, "prefix")
    key = prompt("shared system prompt")
    first = picker.pick(key, (), now=0.0)
    assert all(picker.pick(key, (), now=0.0) == first for _ in range(5))
    placed = []
    for _ in range(9):  # requests held open: the favourite fills up to its cap, then others take some
        i = picker.pick(key, (), now=0.0)
        assert i is not None
        picker.begin(i, 0.0)
        placed.append(i)
    counts = Counter(placed)
    assert first is not None and counts[first] == max(counts.values())
    assert len(counts) > 1
    assert max(counts.values()) <= 1.25 * 9 / 3 + 1


def test_keys_spread_over_replicas() -> None:
    picker = ReplicaPicker(URLS, "prefix")
    counts = Counter(picker.pick(prompt(f"user {n} says"), (), now=0.0) for n in range(300))
    assert set(counts) == {0, 1, 2}
    assert min(counts.values()) > 50


def test_session_key_pins_under_every_policy() -> None:
    for policy in ("round_robin", "least_load", "session", "prefix"):
        picker = ReplicaPicker(URLS, policy)
        key = picker.key_for(make_request("hi", None, None, {"session": "user-42"}, stream=False))
        assert key is not None
        assert len({picker.pick(key, (), now=0.0) for _ in range(10)}) == 1


def test_session_policy_without_a_key_is_least_load() -> None:
    picker = ReplicaPicker(URLS, "session")
    assert picker.key_for(make_request("hi", None, None, {}, stream=False)) is None
    picker.begin(0, 0.0)
    picker.begin(1, 0.0)
    assert picker.pick(None, (), now=0.0) == 2


def test_overloaded_replica_cools_for_max_of_retry_after_and_backoff() -> None:
    picker = ReplicaPicker(URLS[:2], "round_robin", cooldown=Backoff(0.5, 30.0))
    picker.overloaded(0, retry_after=2.0, now=10.0)
    assert picker.replicas[0].state(11.9) == "cooling"
    assert [picker.pick(None, (), now=11.9) for _ in range(3)] == [1, 1, 1]
    assert picker.replicas[0].state(12.0) == "healthy"
    picker.overloaded(1, retry_after=None, now=20.0)  # no Retry-After: own backoff, doubling
    assert picker.replicas[1].cooling_until == 20.5
    picker.overloaded(1, retry_after=0.1, now=20.5)
    assert picker.replicas[1].cooling_until == 21.5
    picker.answered(1)
    picker.overloaded(1, retry_after=None, now=30.0)
    assert picker.replicas[1].cooling_until == 30.5


def test_all_cooling_reports_the_earliest_end() -> None:
    picker = ReplicaPicker(URLS[:2], "round_robin")
    picker.overloaded(0, retry_after=5.0, now=0.0)
    picker.overloaded(1, retry_after=2.0, now=0.0)
    assert picker.pick(None, (), now=1.0) is None
    assert picker.earliest_cooldown_end(1.0) == pytest.approx(1.0)


def test_ejected_replica_gets_one_trial_after_backoff() -> None:
    picker = ReplicaPicker(URLS[:2], "round_robin", ejection=Backoff(1.0, 30.0))
    picker.failed(0, "refused", now=0.0)
    assert picker.replicas[0].state(0.5) == "ejected"
    assert picker.pick(None, (1,), now=0.5) is None
    assert picker.earliest_probe(0.5) == pytest.approx(0.5)
    assert picker.replicas[0].state(1.0) == "half_open"
    assert picker.pick(None, (1,), now=1.0) == 0
    picker.begin(0, 1.0)  # the trial is in flight: nobody else goes there meanwhile
    assert picker.pick(None, (1,), now=1.0) is None
    picker.failed(0, "refused again", now=1.0)
    picker.end(0)
    assert picker.replicas[0].ejected_until == 3.0  # backoff doubled
    assert picker.pick(None, (1,), now=3.0) == 0
    picker.begin(0, 3.0)
    picker.answered(0)
    picker.end(0)
    assert picker.replicas[0].state(3.0) == "healthy"
    assert picker.replicas[0].errors == 2


def test_mismatched_replica_never_gets_requests() -> None:
    picker = ReplicaPicker(URLS[:2], "round_robin")
    picker.mismatched(0, "serves another model")
    assert {picker.pick(None, (), now=t) for t in (0.0, 100.0)} == {1}
    assert picker.replicas[0].state(0.0) == "mismatched"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"policy": "random"}, "unknown routing policy"),
        ({"prefix_chars": 0}, "prefix_chars"),
        ({"load_factor": 0.5}, "load_factor"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidOptions, match=match):
        ReplicaPicker(URLS, **kwargs)  # type: ignore[arg-type]


def test_prefix_key_of_content_parts_reads_text_and_image_url_ends() -> None:
    import unillm

    picker = ReplicaPicker(URLS, "prefix", prefix_chars=200)

    def key(*parts: object) -> int | None:
        messages = [{"role": "user", "content": list(parts)}]
        return picker.key_for(make_request(None, messages, None, {}, stream=False))

    big = b"\x89PNG\r\n\x1a\n" + b"0" * 2_000_000
    image, other = unillm.Image(big + b"x"), unillm.Image(big + b"y")
    assert key("What is in this picture?", image) == key("What is in this picture?", image)
    assert key("What is in this picture?", image) != key("What is in this picture?", other)
    assert key("What is in this picture?", image) != key("Describe it.", image)
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    with_call: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        call,
        {"role": "tool", "tool_call_id": "1", "content": "ok"},
    ]
    assert picker.key_for(make_request(None, with_call, None, {}, stream=False)) is not None
