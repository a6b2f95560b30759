"""Conformance checks every engine adapter passes: subclass :class:`AdapterConformance` in its tests.

Fill in canned engine answers (recorded from the real engine where you can) and pytest runs the
shared checks: request building, parsing and SSE decoding (handed the call ``build`` made, as the
core does, and without it), error mapping, declared features, masked secrets, and no I/O in the
translation methods::

    from unillm.testing.conformance import AdapterConformance, openai_error

    class TestMyEngineConformance(AdapterConformance):
        adapter = MyEngineAdapter()
        info = EngineInfo(engine="myengine", model="tiny", version="1.2.0")
        answer_body = {"model": "tiny", "choices": [{"index": 0, "text": " world",
                                                     "finish_reason": "length"}]}
        answer_text = " world"
        stream_events = ['{"choices": [{"index": 0, "text": " wor"}]}', ..., "[DONE]"]
        stream_text = " world"
        error_bodies = {status: openai_error("bad") for status in ERROR_STATUSES}

A check that an engine cannot pass for a real reason is marked in the subclass, with the reason
(``pytestmark`` or overriding the test with ``@pytest.mark.xfail(reason=..., strict=True)``).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar, NoReturn
from unittest import mock

import pytest
from pydantic import SecretStr

from unillm.adapter.base import Adapter, EngineInfo, HttpCall, accepts_call, open_decoder, parse_answer
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec
from unillm.capabilities import Feature
from unillm.errors import (
    EngineInternalError,
    InvalidRequest,
    NotFound,
    Overloaded,
    Unauthorized,
    UnillmError,
    UnsupportedFeature,
)
from unillm.options import Request, make_request

__all__ = [
    "ERROR_STATUSES",
    "EXPECTED_ERROR",
    "SECRET",
    "AdapterConformance",
    "IOAttempted",
    "blocked_io",
    "openai_error",
    "sse_payloads",
]

SECRET = "sk-conformance-secret-8f3a"
# The typed error each HTTP status must map to (subclasses count: UnknownModel is a NotFound).
EXPECTED_ERROR: dict[int, type[UnillmError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    422: InvalidRequest,
    429: Overloaded,
    500: EngineInternalError,
    502: EngineInternalError,
    503: Overloaded,
}
ERROR_STATUSES = tuple(EXPECTED_ERROR)
REQUEST_KINDS = ("prompt", "chat", "prompt-stream", "chat-stream")


class IOAttempted(AssertionError):
    """A translation method tried to open a socket, a file or a process."""


@contextmanager
def blocked_io() -> Iterator[None]:
    """Make sockets, file opens and subprocesses raise :class:`IOAttempted` inside the block.

    with blocked_io():
        adapter.build(request, info)   # an adapter that opens a file fails here
    """

    def refuse(what: str) -> Any:
        def raiser(*args: Any, **kwargs: Any) -> NoReturn:
            raise IOAttempted(f"adapter translation methods must do no I/O, but called {what}{args[:2]!r}")

        return raiser

    targets = [
        (socket, "socket"),
        (socket, "create_connection"),
        (builtins, "open"),
        (io, "open"),
        (os, "open"),
        (subprocess, "Popen"),
    ]
    with ExitStack() as stack:
        for module, name in targets:
            stack.enter_context(mock.patch.object(module, name, refuse(f"{module.__name__}.{name}")))
        yield


def openai_error(message: str, status: int = 400) -> bytes:
    """An error body in the OpenAI layout most engines use: ``{"error": {"message": ...}}``."""
    return json.dumps({"error": {"message": message, "type": "error", "code": status}}).encode()


def sse_payloads(text: str) -> list[str]:
    """The ``data`` payloads of a recorded SSE stream (comments and other fields dropped).

    sse_payloads(Path("data/stream.sse").read_text())   # ['{"choices": ...}', ..., '[DONE]']
    """
    payloads = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        lines = [line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")]
        if lines:
            payloads.append("\n".join(lines))
    return payloads


class AdapterConformance:
    """The checks every adapter passes; subclass it as ``Test<Engine>Conformance`` and fill in answers.

    Required class attributes: ``adapter``, ``info``, ``answer_body`` and ``answer_text`` (the
    engine's non-streamed answer to ``answer_request``), ``stream_events`` and ``stream_text``
    (the SSE ``data`` payloads answering ``stream_request``), ``error_bodies`` (the body the
    engine sends with each status of :data:`ERROR_STATUSES`). Optional: ``launch_spec`` (it must
    carry an API key), ``capability_versions`` (versions whose capability tables are checked),
    ``passes_api_key``, ``refused_requests``.
    """

    adapter: ClassVar[Adapter]
    info: ClassVar[EngineInfo]
    answer_request: ClassVar[Request] = make_request("Hi", None, None, {"max_tokens": 8}, stream=False)
    answer_body: ClassVar[Any]
    answer_text: ClassVar[str]
    stream_request: ClassVar[Request] = make_request(
        None, [{"role": "user", "content": "Hi"}], None, {"max_tokens": 8}, stream=True
    )
    stream_events: ClassVar[Sequence[str]]
    stream_text: ClassVar[str]
    error_bodies: ClassVar[Mapping[int, bytes]]
    launch_spec: ClassVar[LaunchSpec] = LaunchSpec(model="/models/tiny", port=8000, api_key=SecretStr(SECRET))
    capability_versions: ClassVar[Sequence[str | None]] = (None,)
    # Request kinds (REQUEST_KINDS) the adapter refuses with UnsupportedFeature -> why.
    refused_requests: ClassVar[Mapping[str, str]] = {}
    # False for an engine without authentication that ignores a key on a loopback address.
    passes_api_key: ClassVar[bool] = True

    # -- requests ------------------------------------------------------------------------------
    @pytest.mark.parametrize("kind", REQUEST_KINDS)
    def test_builds_a_json_call(self, kind: str) -> None:
        request = self._request(kind)
        with blocked_io():
            call = self._build_or_refusal(request)
        if kind in self.refused_requests:
            assert isinstance(call, UnsupportedFeature), (
                f"refused_requests says the adapter refuses a {kind} ({self.refused_requests[kind]}), "
                f"but build() returned {call!r}"
            )
            assert call.engine == self.adapter.name and call.why, f"the refusal names no reason: {call}"
            return
        assert isinstance(call, HttpCall), f"build() returned {call!r}, not an HttpCall"
        assert call.method in ("GET", "POST") and call.path.startswith("/"), f"not a call to send: {call}"
        assert call.stream is request.stream, f"call.stream={call.stream} for stream={request.stream}"
        assert call.json is not None, "a generation call carries a JSON body"
        text = json.dumps(call.json, allow_nan=False)  # what the transport sends
        assert "Hi" in text, f"the {kind} is not in the body: {text}"

    @staticmethod
    def _request(kind: str) -> Request:
        chat = kind.startswith("chat")
        return make_request(
            None if chat else "Hi",
            [{"role": "user", "content": "Hi"}] if chat else None,
            None,
            {"max_tokens": 4, "temperature": 0.0},
            stream=kind.endswith("stream"),
        )

    def _build_or_refusal(self, request: Request) -> HttpCall | UnsupportedFeature:
        try:
            return self.adapter.build(request, self.info)
        except UnsupportedFeature as refusal:
            return refusal

    # -- answers -------------------------------------------------------------------------------
    # The core hands ``parse`` and ``decoder`` the call ``build`` made (``call=``), as here.
    def test_parses_the_canned_answer(self) -> None:
        body = json.loads(json.dumps(self.answer_body))  # as it comes off the wire
        with blocked_io():
            call = self.adapter.build(self.answer_request, self.info)
            completion = parse_answer(self.adapter, body, self.answer_request, self.info, call)
        assert completion.engine == self.adapter.name, f"engine={completion.engine!r}"
        assert completion.text == self.answer_text, f"parsed {completion.text!r}, not {self.answer_text!r}"
        assert completion.choices[0].finish_reason is not None, "the finish reason is lost"

    def test_decodes_the_canned_stream(self) -> None:
        with blocked_io():
            call = self.adapter.build(self.stream_request, self.info)
            decoder = open_decoder(self.adapter, self.stream_request, self.info, call)
            deltas = [d for data in self.stream_events for d in decoder.feed(data)]
        text = "".join(d.text for d in deltas if d.index == 0)
        assert text == self.stream_text, f"the deltas spell {text!r}, not {self.stream_text!r}"
        assert decoder.done, "the decoder did not see the end of the stream"
        assert any(d.finish_reason for d in deltas), "no delta carries the finish reason"

    def test_reads_the_route_from_the_call(self) -> None:
        """``parse``/``decoder`` take ``call=`` (the route ``build`` chose) and, called without
        it (by a caller parsing on its own), decide the same route from the request."""
        for method in ("parse", "decoder"):
            assert accepts_call(type(self.adapter), method), (
                f"{type(self.adapter).__name__}.{method} takes no call= argument: the core then "
                "cannot tell it the route build() chose"
            )
        body = json.loads(json.dumps(self.answer_body))
        with blocked_io():
            call = self.adapter.build(self.answer_request, self.info)
            given = self.adapter.parse(body, self.answer_request, self.info, call=call)
            alone = self.adapter.parse(body, self.answer_request, self.info)
            stream_call = self.adapter.build(self.stream_request, self.info)
            texts = []
            for decoder in (
                self.adapter.decoder(self.stream_request, self.info, call=stream_call),
                self.adapter.decoder(self.stream_request, self.info),
            ):
                texts.append(
                    "".join(d.text for data in self.stream_events for d in decoder.feed(data) if d.index == 0)
                )
        assert given.text == alone.text, f"with the call: {given.text!r}, without: {alone.text!r}"
        assert texts[0] == texts[1], f"with the call: {texts[0]!r}, without: {texts[1]!r}"

    # -- errors --------------------------------------------------------------------------------
    @pytest.mark.parametrize("status", ERROR_STATUSES)
    def test_maps_error_answers_to_typed_errors(self, status: int) -> None:
        body = self.error_bodies[status]
        with blocked_io():
            error = self.adapter.parse_error(status, body, self.answer_request, self.info)
        expected = EXPECTED_ERROR[status]
        assert isinstance(error, expected), f"{status} -> {type(error).__name__}, not {expected.__name__}"
        assert getattr(error, "engine", None) == self.adapter.name, "the error does not name the engine"
        if body.strip():  # some engines answer 401/404 with an empty body
            assert getattr(error, "engine_message", ""), "the engine's own message is lost"
        assert str(status) in str(error), "the message should name the status"

    # -- capabilities --------------------------------------------------------------------------
    def test_declares_every_feature(self) -> None:
        for version in self.capability_versions:
            caps = self.adapter.capabilities(version)
            missing = [f.name for f in Feature if f not in caps.features]
            assert not missing, f"capabilities({version!r}) leaves undeclared: {missing}"
            silent = [f.name for f, s in caps.features.items() if s.level == "no" and not s.why]
            assert not silent, f"capabilities({version!r}) refuses without saying why: {silent}"

    # -- launch --------------------------------------------------------------------------------
    def test_masks_the_api_key_in_printed_commands(self) -> None:
        assert self.launch_spec.key(), "launch_spec must carry an API key"
        secret = str(self.launch_spec.key())
        with blocked_io():
            command = self._command_or_refusal(self.launch_spec)
        if isinstance(command, UnsupportedFeature):  # an engine without auth may refuse the key
            assert (command.feature, command.engine) == ("api_key", self.adapter.name), (
                f"command() refused {command.feature!r}, not the API key"
            )
            return
        passed = [arg for arg in (*command.argv, *command.env.values()) if secret in arg]
        if self.passes_api_key:
            assert passed, "the API key is not passed to the engine (argv or env)"
        else:
            assert not passed, "passes_api_key = False, yet the key is in the command"
        for printed in (command.render(), repr(command), str(command)):
            assert secret not in printed, f"the API key is printed: {printed}"

    def _command_or_refusal(self, spec: LaunchSpec) -> LaunchCommand | UnsupportedFeature:
        try:
            return self.adapter.command(spec)
        except UnsupportedFeature as refusal:
            return refusal

    # -- purity --------------------------------------------------------------------------------
    def test_blocked_io_blocks(self) -> None:
        with blocked_io(), pytest.raises(IOAttempted):
            socket.socket()
        with blocked_io(), pytest.raises(IOAttempted):
            open(os.devnull)  # noqa: SIM115

    def test_translation_does_no_io(self) -> None:
        with blocked_io():
            for kind in REQUEST_KINDS:
                self._build_or_refusal(self._request(kind))
            call = self.adapter.build(self.answer_request, self.info)
            parse_answer(self.adapter, self.answer_body, self.answer_request, self.info, call)
            call = self.adapter.build(self.stream_request, self.info)
            decoder = open_decoder(self.adapter, self.stream_request, self.info, call)
            for data in self.stream_events:
                decoder.feed(data)
            for status, body in self.error_bodies.items():
                self.adapter.parse_error(status, body, None, None)
            self._command_or_refusal(self.launch_spec)
            self.adapter.command(self.launch_spec.model_copy(update={"api_key": None}))
