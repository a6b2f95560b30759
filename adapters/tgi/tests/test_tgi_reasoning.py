"""TGI has no reasoning parser: a thought the model writes between its template's markers is
split off client-side, in whole chat answers and in chat streams (markers across chunks)."""

from __future__ import annotations

import json

from unillm_tgi.responses import OpenAIRouteDecoder, parse_openai

from unillm.options import make_request

CHAT = [{"role": "user", "content": "2+2?"}]


def test_a_chat_answers_thought_is_split_from_its_text() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "<think>4</think>\n\nFour."},
                "finish_reason": "stop",
            }
        ]
    }
    r = parse_openai(body, make_request(None, CHAT, None, {}, stream=False), "m", "3.3.0")
    assert (r.reasoning, r.text) == ("4", "Four.")


def test_a_chat_streams_thought_is_split_with_a_marker_across_chunks() -> None:
    decoder = OpenAIRouteDecoder(make_request(None, CHAT, None, {}, stream=True))
    pieces = [("<think>4</th", None), ("ink>Four.", "eos_token")]
    deltas = [
        d
        for text, finish in pieces
        for d in decoder.feed(
            json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})
        )
    ]
    assert ("".join(d.reasoning for d in deltas), "".join(d.text for d in deltas)) == ("4", "Four.")
