"""cache_aware by the engines' KV-cache events: the block index, the ZMQ subscription, the picker.

Events are encoded as vLLM encodes them (msgspec's msgpack of ``KVEventBatch``: an array
``[ts, [event, ...], dp_rank]``, each event a map tagged ``type``); a real engine's events are read
in tests/integration/test_fleets.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from unillm.errors import InvalidOptions
from unillm.fleet.kv_events import KVEvents, ReplicaEvents, receive
from unillm.fleet.kv_index import BlockIndex, InFlight, MalformedEvents
from unillm.fleet.picker import Prompt, ReplicaPicker
from unillm.fleet.prompt_tokens import PromptTokens
from unillm.options import Request, make_request
from unillm.testing.tiny_model import TinyModel


def stored(hashes: list[Any], parent: Any, tokens: list[int], size: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": size,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        **extra,
    }


def removed(hashes: list[Any], medium: str | None = "GPU") -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def batch(*events: dict[str, Any]) -> list[Any]:
    return [1.0, list(events), None]


def frames(seq: int, *events: dict[str, Any]) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big"), msgpack.packb(batch(*events))]


PROMPT = list(range(100, 114))  # 14 tokens: three whole blocks of 4, two left over


def test_a_stored_chain_matches_whole_blocks_of_the_prompts_head() -> None:
    index = BlockIndex()
    index.apply(batch(stored([b"h1", b"h2"], None, PROMPT[:8])))
    index.apply(batch(stored([7], b"h2", PROMPT[8:12])))  # hashes are bytes or ints
    assert index.match(PROMPT) == 12
    assert index.match(PROMPT[:11]) == 8  # the third block is not whole
    assert index.match([0, *PROMPT]) == 0  # the same tokens, shifted: another chain
    assert index.match([*PROMPT[:4], 0, 0, 0, 0]) == 4
    assert len(index) == 3


def test_a_removed_block_ends_the_match_there_and_clearing_empties_the_index() -> None:
    index = BlockIndex()
    index.apply(batch(stored([b"h1", b"h2", b"h3"], None, PROMPT[:12])))
    index.apply(batch(removed([b"h2"])))
    assert index.match(PROMPT) == 4  # h3 is unreachable without h2
    index.apply(batch(stored([b"h2b"], b"h1", PROMPT[4:8])))  # recomputed under a new hash
    assert index.match(PROMPT) == 8  # h1, h2b; h3's parent was the old h2
    index.apply(batch({"type": "AllBlocksCleared"}))
    assert index.match(PROMPT) == 0 and len(index) == 0


def test_a_block_is_held_while_any_tier_of_the_replica_holds_it() -> None:
    index = BlockIndex()
    index.apply(batch(stored([b"h1", b"h2"], None, PROMPT[:8])))
    index.apply(batch(stored([b"h1", b"h2"], None, PROMPT[:8], medium="CPU")))  # offloaded copies
    index.apply(batch(removed([b"h1", b"h2"])))  # evicted from the GPU: the CPU copies remain
    assert index.match(PROMPT) == 8
    index.apply(batch(removed([b"h2"], medium="CPU")))
    assert index.match(PROMPT) == 4
    index.apply(batch(removed([b"h1"], medium=None)))  # no medium: gone from every tier
    assert index.match(PROMPT) == 0 and len(index) == 0
    index.apply(batch(stored([b"r1"], None, PROMPT[:4], locality="REMOTE")))  # another machine's
    assert index.match(PROMPT) == 0 and len(index) == 0


def test_blocks_of_an_adapter_or_with_extra_keys_match_only_their_own_requests() -> None:
    index = BlockIndex()
    index.apply(batch(stored([b"a1"], None, PROMPT[:4], lora_name="sql", extra_keys=[["sql"]])))
    index.apply(batch(stored([b"m1"], None, PROMPT[4:8], extra_keys=[[["mm", "img0", 0]]])))
    assert index.match(PROMPT) == 0  # neither is the base model's plain text
    assert index.match(PROMPT, lora="sql") == 4
    assert index.match(PROMPT[4:]) == 0  # an image's block is not the text's
    index.apply(batch(stored([b"u1"], None, PROMPT[8:12])))
    index.apply(batch(stored([b"s1"], None, PROMPT[8:12], cache_salt="tenant-a")))  # SGLang's salt
    index.apply(batch(removed([b"s1"])))  # the salted block goes; the unsalted one stays
    assert index.match(PROMPT[8:]) == 4 and len(index) == 3


def test_other_kv_cache_groups_are_ignored_and_malformed_batches_raise() -> None:
    index = BlockIndex()
    index.apply(batch(stored([b"s1"], None, PROMPT[:4], group_idx=1)))  # a sliding-window group
    assert index.match(PROMPT) == 0
    for bad in (
        {"not": "a batch"},
        [1.0],
        batch({"type": "BlockStored", "block_hashes": "h", "token_ids": [], "block_size": 4}),
        batch(stored([b"x"], None, PROMPT[:4], size=0)),
        batch("an event"),  # type: ignore[arg-type]
        batch(stored([[1, 2]], None, PROMPT[:4])),  # a hash that is a list: unhashable
        batch(stored([b"e1"], None, PROMPT[:4], extra_keys={"not": "a list"})),
    ):
        with pytest.raises(MalformedEvents):
            index.apply(bad)


def test_partial_pages_are_not_indexed_and_the_largest_block_size_is_the_engines() -> None:
    index = BlockIndex()
    index.apply(batch(stored([b"p1"], None, PROMPT[:2], size=2)))  # a short sequence's partial page
    index.apply(batch(stored([b"h1", b"h2"], None, PROMPT[:8], size=4)))  # whole pages: size 4
    assert index.block_size == 4 and len(index) == 2 and index.match(PROMPT) == 8
    index.apply(batch(stored([b"t1"], b"h2", PROMPT[8:10], size=2)))  # a partial last page
    assert len(index) == 2 and index.match(PROMPT) == 8


def test_receive_counts_gaps_and_a_malformed_message_retires_the_index() -> None:
    replica = ReplicaEvents("ipc://x", BlockIndex())
    receive(replica, frames(5, stored([b"h1"], None, PROMPT[:4])))  # joined late: no gap yet
    receive(replica, frames(6, stored([b"h2"], b"h1", PROMPT[4:8])))
    receive(replica, frames(9, removed([b"h2"])))  # 7 and 8 were lost
    assert (replica.batches, replica.gaps, replica.usable) == (3, 1, True)
    assert replica.index.match(PROMPT) == 4
    replica.replay_overlap = True  # as after a replay: live messages may repeat replayed ones
    receive(replica, frames(6, {"type": "AllBlocksCleared"}))  # a duplicate: skipped
    assert replica.batches == 3 and replica.index.match(PROMPT) == 4
    receive(replica, frames(10, stored([b"h2"], b"h1", PROMPT[4:8])))  # newer: the overlap is over
    receive(replica, frames(0, stored([b"n1"], None, PROMPT[8:12])))  # the engine restarted
    assert (replica.restarts, replica.index.match(PROMPT), len(replica.index)) == (1, 0, 1)
    assert replica.next_seq == 1 and replica.batches == 5
    receive(replica, [b"", (1).to_bytes(8, "big"), b"\xc1"])  # not msgpack
    assert not replica.usable and replica.broken
    receive(replica, [b"only one frame"])
    assert replica.batches == 5


class Held:
    """A CacheState with fixed answers (None: that replica's reports are unusable)."""

    def __init__(self, held: Sequence[int | None], tokens: list[int] | None = PROMPT) -> None:
        self._held, self._tokens = held, tokens

    def tokens(self, request: Request) -> list[int] | None:
        return self._tokens

    def held(self, i: int, tokens: Sequence[int], lora: str | None) -> int | None:
        return self._held[i]

    def sent(self, i: int, tokens: Sequence[int], lora: str | None) -> int | None:
        return None

    def done(self, i: int, tokens: Sequence[int], lora: str | None, size: int) -> None:
        raise AssertionError("nothing was counted in flight")


def request(text: str = "a prompt") -> Request:
    return make_request(text, None, None, {}, stream=False)


def test_the_picker_routes_to_the_replica_whose_engine_reports_the_longest_head() -> None:
    picker = ReplicaPicker(["http://a", "http://b"], "cache_aware", cache_state=Held([4, 12]))
    prompt = picker.prompt(request())
    assert prompt is not None and prompt.tokens == PROMPT
    picker.begin(0, 0.0, prompt)  # replica 0 was *sent* it: its tree matches the whole prompt
    picker.end(0)
    assert picker.pick(None, (), 0.0, prompt) == 1  # but replica 1's engine holds more


def test_a_replica_without_usable_reports_is_judged_by_its_tree() -> None:
    picker = ReplicaPicker(["http://a", "http://b"], "cache_aware", cache_state=Held([None, 0]))
    prompt = picker.prompt(request())
    assert prompt is not None
    picker.begin(0, 0.0, prompt)
    picker.end(0)
    assert picker.pick(None, (), 0.0, prompt) == 0  # its tree: the whole prompt was sent there
    untokenized = Prompt(prompt.chunks, None)  # no token ids (e.g. a request with tools): trees
    assert picker.pick(None, (), 0.0, untokenized) == 0


def test_prompts_in_flight_count_until_their_answer() -> None:
    flight = InFlight()
    flight.add(PROMPT, None, 4)
    flight.add(PROMPT[:8], None, 4)
    assert flight.match(PROMPT, None, 4) == 12 and flight.match(PROMPT, "sql", 4) == 0
    flight.remove(PROMPT, None, 4)
    assert flight.match(PROMPT, None, 4) == 8  # the shorter one is still in flight
    flight.remove(PROMPT[:8], None, 4)
    assert flight.match(PROMPT, None, 4) == 0 and len(flight) == 0
    flight.remove(PROMPT, None, 4)  # nothing left: no harm


def test_a_prompt_in_flight_draws_the_next_one_with_its_head_before_the_engine_reports_it() -> None:
    events = KVEvents(["ipc://a", "ipc://b"], lambda r: PROMPT)  # type: ignore[arg-type]
    for replica in events.replicas:
        replica.index.block_size = 4  # known from an earlier event
    picker = ReplicaPicker(["http://a", "http://b"], "cache_aware", cache_state=events)
    first, second = picker.prompt(request()), picker.prompt(request())
    assert first is not None and second is not None
    i = picker.pick(None, (), 0.0, first)
    assert i is not None
    picker.begin(i, 0.0, first)
    assert events.held(i, PROMPT, None) == 12 and events.held(1 - i, PROMPT, None) == 0
    assert picker.pick(None, (), 0.0, second) == i  # one request more there: within the bounds
    picker.end(i, first)
    assert events.held(i, PROMPT, None) == 0 and first.sent == {}


def test_reports_only_serve_cache_aware() -> None:
    with pytest.raises(InvalidOptions, match="cache_aware"):
        ReplicaPicker(["http://a"], "least_load", cache_state=Held([0]))


def test_prompt_tokens_follow_the_engines_rules(tiny: TinyModel) -> None:
    from unillm.launching.model_facts import chat_template

    tokens = PromptTokens.from_folder(tiny.path, chat_template(tiny.path))
    plain = tokens(request("hello world"))
    assert plain is not None and len(plain) >= 2
    chat = tokens(make_request(None, [{"role": "user", "content": "hello world"}], None, {}, stream=False))
    assert chat is not None and len(chat) > len(plain)  # the template's markers around it
    parts = [{"role": "user", "content": [{"type": "text", "text": "hello world"}]}]
    assert tokens(make_request(None, parts, None, {}, stream=False)) == chat  # text parts joined
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    assert tokens(make_request(None, [{"role": "user", "content": image}], None, {}, stream=False)) is None
    tokens.max_chars = 11  # a long context: only its head is encoded
    assert tokens(request("hello world and a great deal more")) == plain
    with pytest.raises(InvalidOptions, match=r"tokenizer\.json"):
        PromptTokens.from_folder(tiny.path / "nowhere", None)


@pytest.mark.anyio
async def test_events_published_on_zmq_reach_the_index(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path / 'kv.sock'}"
    context = zmq.Context()
    publisher = context.socket(zmq.PUB)
    publisher.bind(endpoint)
    events = KVEvents([endpoint], lambda r: PROMPT)  # type: ignore[arg-type]
    try:
        await events.start()
        for seq in range(200):  # a SUB joins some milliseconds after connecting: publish until seen
            publisher.send_multipart(frames(seq, stored([b"h1", b"h2"], None, PROMPT[:8])))
            await asyncio.sleep(0.01)
            if events.replicas[0].batches:
                break
        assert events.held(0, PROMPT, None) == 8
        assert events.tokens(request()) == PROMPT
        assert events.status()[0] | {"batches": 1} == {
            "endpoint": endpoint,
            "usable": True,
            "batches": 1,
            "replayed": 0,
            "blocks": 2,
            "gaps": 0,
            "restarts": 0,
            "broken": None,
        }
    finally:
        await events.aclose()
        publisher.close(0)
        context.term()
    await events.aclose()  # twice is fine


def test_kv_events_need_one_endpoint_per_replica() -> None:
    with pytest.raises(InvalidOptions, match="endpoint"):
        KVEvents([], lambda r: None)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptions, match="endpoint"):
        KVEvents(["ipc://a", ""], lambda r: None)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_late_subscription_replays_what_was_published_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zmq.asyncio

    import unillm.fleet.kv_events as kv_events

    endpoint, replay = f"ipc://{tmp_path / 'kv.sock'}", f"ipc://{tmp_path / 'replay.sock'}"
    context = zmq.asyncio.Context()
    publisher, router = context.socket(zmq.PUB), context.socket(zmq.ROUTER)
    publisher.bind(endpoint)
    router.bind(replay)
    before = frames(0, stored([b"h1", b"h2"], None, PROMPT[:8]))  # published before anyone listened

    async def serve_replay() -> None:
        client, _, start = await router.recv_multipart()
        assert int.from_bytes(start, "big") == 0
        await router.send_multipart([client, b"", *before])
        await router.send_multipart([client, b"", b"", kv_events.END_SEQ, b""])

    served = asyncio.get_running_loop().create_task(serve_replay())
    events = KVEvents([endpoint], lambda r: PROMPT, [replay])  # type: ignore[arg-type]
    silent = KVEvents([endpoint], lambda r: PROMPT, [f"ipc://{tmp_path / 'nobody.sock'}"])  # type: ignore[arg-type]
    monkeypatch.setattr(kv_events, "REPLAY_WAIT", 0.2)
    try:
        await events.start()
        await silent.start()
        await asyncio.wait_for(served, 5)
        for _ in range(200):  # then the live ones, from sequence 1
            await publisher.send_multipart(frames(1, stored([b"h3"], b"h2", PROMPT[8:12])))
            await asyncio.sleep(0.01)
            if events.replicas[0].batches > 1 and silent.replicas[0].batches:
                break
        assert events.held(0, PROMPT, None) == 12  # the replayed chain and the live block on it
        assert events.status()[0] | {"endpoint": None} == {
            "endpoint": None,
            "usable": True,
            "batches": 2,
            "replayed": 1,
            "blocks": 3,
            "gaps": 0,
            "restarts": 0,
            "broken": None,
        }
        assert silent.held(0, PROMPT, None) == 0  # no replay: h3's parent is unknown to it
        assert silent.replicas[0].usable and silent.replicas[0].replayed == 0
    finally:
        await events.aclose()
        await silent.aclose()
        publisher.close(0)
        router.close(0)
        context.term()
    with pytest.raises(InvalidOptions, match="replay endpoints"):
        KVEvents(["ipc://a", "ipc://b"], lambda r: None, ["ipc://r"])  # type: ignore[arg-type]


def test_a_tokenizer_or_template_that_fails_is_a_typed_error_or_the_trees_turn(
    tiny: TinyModel, tmp_path: Path
) -> None:
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InvalidOptions, match="cannot read"):
        PromptTokens.from_folder(tmp_path, None)
    refusing = PromptTokens.from_folder(tiny.path, "{{ raise_exception('no system role') }}")
    chat = make_request(None, [{"role": "system", "content": "x"}], None, {}, stream=False)
    assert refusing(chat) is None  # the request goes by the prefix tree
    assert refusing(request("plain text")) is not None


def test_events_are_read_on_asyncio_only() -> None:
    events = KVEvents(["ipc://a"], lambda r: None)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptions, match="asyncio"):
        events.start().send(None)  # driven by hand, with no asyncio loop running (as under trio)
