"""The cache_aware policy: a bounded prefix tree per replica, longest match balanced against load."""

from __future__ import annotations

import random
from typing import Any

import pytest

from unillm.errors import InvalidOptions
from unillm.fleet.picker import CacheAware, ReplicaPicker
from unillm.fleet.prefix_tree import PrefixTree, chunks
from unillm.options import make_request

URLS = ["http://a:8000", "http://b:8000", "http://c:8000"]
SYSTEM = "You are a careful assistant who answers in one short sentence. "


def chat(*turns: str, **options: Any) -> Any:
    messages = [{"role": "system", "content": SYSTEM}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return make_request(None, messages, None, options, stream=False)


def send(picker: ReplicaPicker, request: Any, now: float = 0.0) -> int:
    """Route ``request`` as the fleet does (pick, then begin; the request stays in flight)."""
    key, prompt = picker.key_for(request), picker.prompt(request)
    i = picker.pick(key, (), now, prompt)
    assert i is not None
    picker.begin(i, now, prompt)
    return i


def test_chunks_are_token_ish_and_join_back_to_the_text() -> None:
    text = "Hello,  world!\n\tx" + "y" * 40 + " end "
    parts = chunks(text)
    assert "".join(parts) == text
    assert parts[:2] == ["Hello,", "  world!"]
    assert max(len(p.strip()) for p in parts) == 16  # a long word is cut


def test_match_counts_the_characters_of_the_longest_stored_prefix() -> None:
    tree = PrefixTree(1000)
    tree.insert(chunks("the cat sat on the mat"))
    assert tree.match(chunks("the cat sat on the mat")) == len("the cat sat on the mat")
    assert tree.match(chunks("the cat ran")) == len("the cat")
    assert tree.match(chunks("a cat")) == 0
    assert tree.match([]) == 0


def test_a_shared_history_is_stored_once() -> None:
    tree = PrefixTree(1000)
    tree.insert(chunks("one two three"))
    tree.insert(chunks("one two three four five"))
    assert len(tree) == 5


def test_the_tree_never_holds_more_than_its_bound_and_evicts_least_recently_used_first() -> None:
    tree = PrefixTree(6)
    tree.insert(chunks("a b c"))
    tree.insert(chunks("x y z"))
    tree.insert(chunks("a b c"))  # touched again: now the most recent
    tree.insert(chunks("p q"))  # two over the bound: the oldest leaves go ("z", then "y")
    assert len(tree) == 6
    assert tree.match(chunks("a b c")) == len("a b c")
    assert tree.match(chunks("x y z")) == len("x")
    assert tree.match(chunks("p q")) == len("p q")


def test_a_prompt_longer_than_the_bound_keeps_its_head() -> None:
    tree = PrefixTree(3)
    tree.insert(chunks("a b c d e f"))
    assert len(tree) == 3 and tree.match(chunks("a b c d e f")) == len("a b c")


def test_eviction_stays_bounded_under_random_prompts() -> None:
    rng = random.Random(7)
    tree = PrefixTree(50)
    for _ in range(300):
        tree.insert([rng.choice("abcd") for _ in range(rng.randint(1, 12))])
        assert len(tree) <= 50
    tree.clear()
    assert len(tree) == 0 and tree.match(["a"]) == 0


def test_a_conversation_follows_the_replica_that_has_its_history() -> None:
    picker = ReplicaPicker(URLS, "cache_aware")
    first = send(picker, chat("What is the capital of France and why?"))
    picker.end(first)
    for _ in range(3):  # other conversations land elsewhere (least loaded while they run)
        send(picker, make_request("Something else entirely, with other words", None, None, {}, stream=False))
    grown = chat("What is the capital of France and why?", "Paris.", "And of Spain?")
    assert send(picker, grown) == first


def test_a_prompt_no_replica_has_seen_goes_to_the_least_loaded() -> None:
    picker = ReplicaPicker(URLS, "cache_aware")
    picker.begin(0, 0.0)
    picker.begin(1, 0.0)
    assert send(picker, make_request("fresh words nobody sent before", None, None, {}, stream=False)) == 2


def test_a_match_below_the_threshold_does_not_pin() -> None:
    picker = ReplicaPicker(URLS, "cache_aware", cache_aware=CacheAware(match_threshold=0.9))
    send(picker, chat("short"))  # replica 0 holds the system prompt, in flight
    long_turn = chat("a much longer question " * 20)
    assert send(picker, long_turn) == 1  # the system prompt is under 90% of it: least loaded


def test_the_matched_replica_is_skipped_when_its_load_passes_both_thresholds() -> None:
    settings = CacheAware(balance_abs=2, balance_rel=1.5)
    picker = ReplicaPicker(URLS[:2], "cache_aware", cache_aware=settings)
    history = chat("Tell me about prefix caches in inference engines")
    owner = send(picker, history)
    other = 1 - owner
    picker.begin(owner, 0.0)  # owner: 2 in flight, other: 0 -> 2 above, not more than 2
    assert send(picker, history) == owner  # now 3 in flight: 3 > 0 + 2 and 3 > 1.5 * 0
    assert send(picker, history) == other
    for _ in range(3):
        picker.begin(other, 0.0)  # other: 4, owner: 3 -> the match wins again
    assert send(picker, history) == owner


def test_a_too_loaded_owner_passes_its_request_to_the_longest_match_within_bounds() -> None:
    picker = ReplicaPicker(URLS, "cache_aware", cache_aware=CacheAware(balance_abs=1, balance_rel=1.0))
    history = chat("Tell me about prefix caches in inference engines", "They reuse KV.", "More?")
    first_turn = picker.prompt(chat("Tell me about prefix caches in inference engines"))
    for _ in range(3):
        picker.begin(0, 0.0, picker.prompt(history))  # the owner: 3 in flight
    picker.begin(1, 0.0, first_turn)  # the conversation's head, 1 in flight; replica 2: nothing
    assert send(picker, history) == 1  # the owner is 3 above; replica 1 is within 1 and matches more
    assert send(picker, chat("brand new words, nothing shared")) == 2


def test_the_engines_waiting_queue_counts_as_load() -> None:
    picker = ReplicaPicker(URLS[:2], "cache_aware", cache_aware=CacheAware(balance_abs=4))
    owner = send(picker, chat("the same question"))
    picker.end(owner)
    picker.replicas[owner].waiting = 10
    assert send(picker, chat("the same question")) == 1 - owner


def test_routing_is_deterministic_for_the_same_requests() -> None:
    def run() -> list[int]:
        rng = random.Random(3)
        picker = ReplicaPicker(URLS, "cache_aware")
        picks = []
        for n in range(60):
            i = send(picker, chat(*(f"turn {rng.randrange(5)} of session {s}" for s in range(n % 4 + 1))))
            picks.append(i)
            if n % 3:
                picker.end(i)
        return picks

    assert run() == run()


def test_a_session_key_pins_under_cache_aware_too() -> None:
    picker = ReplicaPicker(URLS, "cache_aware")
    picks = set()
    for n in range(6):  # each a different prompt; one answered before the next, as a chat goes
        picks.add(i := send(picker, chat(f"question {n}", session="user-42")))
        picker.end(i)
    assert len(picks) == 1


def test_other_policies_keep_no_tree() -> None:
    picker = ReplicaPicker(URLS, "least_load")
    assert picker.prompt(chat("hi")) is None and picker.trees == []


@pytest.mark.parametrize(
    "settings",
    [
        CacheAware(match_threshold=1.5),
        CacheAware(balance_abs=-1),
        CacheAware(balance_rel=0.5),
        CacheAware(balance_rel=float("inf")),
        CacheAware(max_chunks=0),
    ],
)
def test_settings_out_of_range_are_refused(settings: CacheAware) -> None:
    with pytest.raises(InvalidOptions):
        ReplicaPicker(URLS, "cache_aware", cache_aware=settings)
