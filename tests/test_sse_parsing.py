"""unillm.client.transport.event_stream (httpx-sse underneath): SSE parsing, however the bytes are split."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from unillm.client.answer import Answer
from unillm.client.transport import event_stream
from unillm.errors import MalformedResponse

pytestmark = pytest.mark.anyio


async def _body(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def events(pieces: list[bytes], content_type: str = "text/event-stream") -> list[str]:
    answer = Answer(200, {"content-type": content_type}, chunks=_body(pieces))
    return [data async for data in event_stream(answer, "vllm")]


def split_every(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


BODY = (
    b'data: {"a": 1}\n\n'
    b": a comment\n"
    b"event: message\nid: 7\nretry: 100\n"
    b'data: {"b":\ndata: 2}\n\n'
    b"data:no-space\r\n\r\n"
    b"data: cr only\r\r"
    b"event: no data here\n\n"
    b"data: \xc3\xa9t\xc3\xa9\n\n"
    b"data\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = ['{"a": 1}', '{"b":\n2}', "no-space", "cr only", "été", "[DONE]"]  # no-data events skipped


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 16, 1000])
async def test_events_are_the_same_however_the_body_is_split(size: int) -> None:
    assert await events(split_every(BODY, size)) == EXPECTED


async def test_crlf_split_between_chunks_is_one_line_ending() -> None:
    # A CR at the end of a chunk and the LF starting the next are one line break, not two:
    # otherwise the blank line would end the event early and "second" would be lost.
    assert await events([b"data: first\r", b"\ndata: second\r", b"\n\r", b"\n"]) == ["first\nsecond"]


async def test_an_event_cut_off_by_the_end_of_the_body_is_not_dispatched() -> None:
    assert await events([b"data: whole\n\n", b"data: cut"]) == ["whole"]
    assert await events([b"data: whole\n\n", b"data: line but no blank line\n"]) == ["whole"]


async def test_a_last_blank_line_ended_by_cr_still_ends_the_event() -> None:
    assert await events([b"data: x\r\r"]) == ["x"]


async def test_a_body_that_is_not_an_event_stream_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match="vllm: malformed event stream"):
        await events([b'{"error": "x"}'], content_type="application/json")


async def test_field_names_are_matched_whole() -> None:
    assert await events([b"database: no\ndata: yes\n\n"]) == ["yes"]
