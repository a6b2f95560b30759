"""In-process MLX's parts without mlx-lm: request parsing, typed events to OpenAI bodies and
chunks, stop strings, counters. (test_mlx_inprocess.py runs the whole engine.)"""

from __future__ import annotations

from typing import Any

import pytest
from unillm_mlx.inprocess.answer import Answer
from unillm_mlx.inprocess.counters import Counters
from unillm_mlx.inprocess.detokenize import StopText
from unillm_mlx.inprocess.events import Done, Finish, Text
from unillm_mlx.inprocess.parsing import Job, RequestError, parse_job
from unillm_mlx.inprocess.sampling import logit_bias


def job(chat: bool = True, **body: Any) -> Job:
    base = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}
    return parse_job({**base, **body}, chat=chat, model_id="tiny", model_path="/m/tiny")


def test_a_request_becomes_a_job_with_its_defaults() -> None:
    j = job(chat=False, stop="\n", top_logprobs=2, stream_options={"include_usage": True})
    assert (j.n, j.max_tokens, j.stop) == (1, 512, ("\n",))
    assert (j.logprobs, j.top_logprobs, j.include_usage) == (True, 2, True)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"foo": 1}, 400, "unsupported field(s) ['foo']"),
        ({"model": "other"}, 404, "model 'other' is not served here"),
        ({"stop": [""]}, 400, "stop must be a string or a list of non-empty strings"),
        ({"stop": 5}, 400, "stop must be a string or a list of non-empty strings"),
        ({"logit_bias": {"a": 1}}, 400, "logit_bias must map token ids"),
        ({"logit_bias": [1]}, 400, "logit_bias must map token ids"),
        ({"temperature": "hot"}, 400, "temperature must be a number"),
        ({"n": 65}, 400, "n must be a number in [1, 64]"),
        ({"tools": [{}], "tool_choice": "auto"}, 400, "reads no calls from free text"),
        ({"structured_outputs": {}, "response_format": {"type": "json_schema"}}, 400, "not both"),
    ],
)
def test_a_bad_request_is_refused_with_its_status(body: dict[str, Any], status: int, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        job(**body)
    assert caught.value.status == status and message in str(caught.value)


def test_typed_events_make_the_whole_chat_body() -> None:
    answer = Answer(job(n=2, logprobs=True), prompt_tokens=3, model="tiny")
    entry = {"token": "a", "logprob": -0.5, "top_logprobs": []}
    for event in (Text(0, "a", [entry]), Finish(0, "length", 1), Text(1, "b"), Finish(1, "stop", 1), Done()):
        answer.feed(event)
    body = answer.body()
    assert [c["message"]["content"] for c in body["choices"]] == ["a", "b"]
    assert [c["finish_reason"] for c in body["choices"]] == ["length", "stop"]
    assert body["choices"][0]["logprobs"] == {"content": [entry]}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_typed_events_make_completion_chunks_and_the_usage_chunk() -> None:
    answer = Answer(job(chat=False, stream_options={"include_usage": True}), prompt_tokens=1, model="tiny")
    chunks = [c for e in (Text(0, "x"), Finish(0, "stop", 1), Done()) for c in answer.chunks(e)]
    assert [c["choices"] for c in chunks] == [
        [{"index": 0, "finish_reason": None, "text": "x"}],
        [{"index": 0, "finish_reason": "stop", "text": ""}],
        [],
    ]
    assert chunks[-1]["usage"]["total_tokens"] == 2 and chunks[0]["object"] == "text_completion"


def test_stop_text_holds_back_a_possible_stop_and_cuts_at_it() -> None:
    stops = StopText(("END",))
    assert stops.feed("abcE") == ("abc", False)
    assert stops.feed("N") == ("", False)
    assert stops.feed("Dzz") == ("", True)
    assert StopText(("END",)).feed("abEx") == ("abEx", False)


def test_counters_read_as_prometheus_text() -> None:
    counters = Counters(requests=2, generation_tokens=7)
    text = counters.prometheus(running=1)
    assert (
        "# HELP mlx:requests Requests started.\n# TYPE mlx:requests counter\nmlx:requests_total 2\n" in text
    )
    assert "mlx:generation_tokens_total 7\n" in text and text.endswith("mlx:num_requests_running 1\n")


def test_logit_bias_reaches_mlx_lm_as_token_ids() -> None:
    # it was accepted and dropped before: mlx-lm was always given logit_bias=None
    assert logit_bias({"logit_bias": {"7": -100, "12": 2.5}}) == {7: -100.0, 12: 2.5}
    assert logit_bias({}) is None
