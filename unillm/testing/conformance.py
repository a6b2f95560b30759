"""Conformance checks every engine adapter passes: subclass :class:`AdapterConformance` in its tests.

Fill in canned engine answers (recorded from the real engine where you can) and pytest runs the
shared checks: request building, parsing and SSE decoding (handed the call ``build`` made, as the
core does, and without it), error mapping, declared features, masked secrets, every launch setting
mapped or refused (:data:`LAUNCH_PROBES`), and no I/O in the translation methods::

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
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import PurePath, PurePosixPath
from typing import Any, ClassVar, NoReturn
from unittest import mock

import pytest
from pydantic import SecretStr

from unillm.adapter.base import Adapter, EngineInfo, HttpCall, accepts_call, open_decoder, parse_answer
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec, Nodes, Parallel, PDRole, Speculative
from unillm.capabilities import Feature
from unillm.errors import (
    EngineInternalError,
    InvalidOptions,
    InvalidRequest,
    NotFound,
    Overloaded,
    Unauthorized,
    UnillmError,
    UnsupportedFeature,
)
from unillm.launching.supervisor import check_launch_features
from unillm.options import Request, make_request

__all__ = [
    "CORE_LAUNCH_SETTINGS",
    "ERROR_STATUSES",
    "EXPECTED_ERROR",
    "LAUNCH_PROBES",
    "SECRET",
    "AdapterConformance",
    "IOAttempted",
    "LaunchProbe",
    "blocked_io",
    "delta_chunk",
    "openai_error",
    "sse_payloads",
    "unclean_words",
    "usage_chunk",
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


@dataclass(frozen=True)
class LaunchProbe:
    """One launch setting set to a representative non-default value.

    ``command(spec + needs + value)`` must differ from ``command(spec + needs)`` in argv, env,
    the files it writes or the steps made once it is healthy (``files``, ``after_start``),
    or be refused (``UnsupportedFeature``/``InvalidOptions``). ``needs`` are the settings the
    value only makes sense with (``max_loras`` needs ``lora``); when the adapter refuses those
    already, the setting cannot be dropped silently either.
    """

    value: Mapping[str, Any]
    needs: Mapping[str, Any] = field(default_factory=dict)


_LORA = {"probe": "/adapters/probe"}
_NGRAM = Speculative(method="ngram", num_tokens=3)
_NODES = Nodes(count=2, rank=0, head="10.0.0.1")
# Probe name -> probe. A name is the LaunchSpec field, then ``.part`` or ``=value`` when one
# field has several probes (each part of a nested setting, each value of a switch).
LAUNCH_PROBES: Mapping[str, LaunchProbe] = {
    "model": LaunchProbe({}),  # the baseline's model, renamed (see _probe_specs)
    "served_name": LaunchProbe({"served_name": "probe-name"}),
    "task": LaunchProbe({"task": "embed"}),
    "host": LaunchProbe({"host": "0.0.0.0"}, {"api_key": None}),  # keyless: engines without auth
    "port": LaunchProbe({"port": 8123}),
    "python": LaunchProbe({"python": "/opt/probe/bin/python"}),
    "parallel.tensor": LaunchProbe({"parallel": Parallel(tensor=2)}),
    "parallel.pipeline": LaunchProbe({"parallel": Parallel(pipeline=2)}),
    "parallel.data": LaunchProbe({"parallel": Parallel(data=2)}),
    "parallel.expert": LaunchProbe(
        {"parallel": Parallel(tensor=2, expert=True)}, {"parallel": Parallel(tensor=2)}
    ),
    "dtype": LaunchProbe({"dtype": "bfloat16"}),
    "max_model_len": LaunchProbe({"max_model_len": 256}),
    "max_num_seqs": LaunchProbe({"max_num_seqs": 4}),
    "memory_fraction": LaunchProbe({"memory_fraction": 0.5}),
    "quantization": LaunchProbe({"quantization": "fp8"}),
    "prefix_caching=True": LaunchProbe({"prefix_caching": True}),
    "prefix_caching=False": LaunchProbe({"prefix_caching": False}),
    "max_queued_requests": LaunchProbe({"max_queued_requests": 4}),
    "scheduling": LaunchProbe({"scheduling": "priority"}),
    "lora": LaunchProbe({"lora": _LORA}),
    "max_lora_rank": LaunchProbe({"max_lora_rank": 16}, {"lora": _LORA}),
    "max_loras": LaunchProbe({"max_loras": 2}, {"lora": _LORA}),
    "runtime_lora": LaunchProbe({"runtime_lora": True}),
    "speculative": LaunchProbe({"speculative": _NGRAM}),
    "speculative.num_tokens": LaunchProbe(
        {"speculative": Speculative(method="ngram", num_tokens=5)}, {"speculative": _NGRAM}
    ),
    "speculative.draft_model": LaunchProbe(
        {"speculative": Speculative(method="draft", draft_model="/models/probe-draft", num_tokens=3)}
    ),
    "speculative.lookup_max": LaunchProbe(
        {"speculative": Speculative(method="ngram", num_tokens=3, lookup_max=5)}, {"speculative": _NGRAM}
    ),
    "speculative.lookup_min": LaunchProbe(
        {"speculative": Speculative(method="ngram", num_tokens=3, lookup_min=2)}, {"speculative": _NGRAM}
    ),
    # vLLM splits data x pipeline x tensor ranks evenly over the nodes: two ranks for two nodes
    "nodes": LaunchProbe({"nodes": _NODES}, {"parallel": Parallel(tensor=2)}),
    "nodes.rank": LaunchProbe(
        {"nodes": Nodes(count=2, rank=1, head="10.0.0.1")}, {"parallel": Parallel(tensor=2), "nodes": _NODES}
    ),
    "pd": LaunchProbe({"pd": PDRole(role="prefill")}),
    "pd.role": LaunchProbe({"pd": PDRole(role="decode")}, {"pd": PDRole(role="prefill")}),
    "pd.transfer": LaunchProbe(
        {"pd": PDRole(role="prefill", transfer="mooncake")}, {"pd": PDRole(role="prefill")}
    ),
    "pd.port": LaunchProbe({"pd": PDRole(role="prefill", port=5601)}, {"pd": PDRole(role="prefill")}),
    "tool_parser": LaunchProbe({"tool_parser": "hermes"}),
    "structured_backend": LaunchProbe({"structured_backend": "xgrammar"}),
    "compact_json": LaunchProbe({"compact_json": True}),
    "reasoning_parser": LaunchProbe({"reasoning_parser": "qwen3"}),
    "extra_args": LaunchProbe({"extra_args": ["--probe-flag"]}),
}
# LaunchSpec fields the adapter's command() does not see change anything, because the core
# (unillm.launching.supervisor.Launch) consumes them itself, or another check covers them.
# A new LaunchSpec field fails test_classifies_every_launch_setting until it is probed or listed.
CORE_LAUNCH_SETTINGS: Mapping[str, str] = {
    "prefix": "Launch puts it before the adapter's argv",
    "cpus": "Launch sets the started process's CPU affinity before exec",
    "env": "Launch merges it over the adapter's env",
    "secret_env": "Launch masks these env values wherever it prints the command",
    "ready_timeout": "Launch's wait for the engine to be ready",
    "cpu": "resolve_spec applies the adapter's cpu_recipe (its settings) before command()",
    "in_process": "Launch calls the adapter's in_process() hook instead of command()",
    "ray_address": "check_launch_features refuses it unless the adapter declares ray_executor "
    "(vLLM's rendering: tests/test_ray_placement.py)",
    "api_key": "test_masks_the_api_key_in_printed_commands checks it is passed and masked "
    "('auto' is generated by resolve_spec before command())",
}


#: The interpreter the kit's clean-command check sets (``LaunchSpec.python``, as the core does).
PROBE_PYTHON = "/opt/engine-env/bin/python3.11"
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def unclean_words(command: LaunchCommand) -> list[str]:
    """What a command renders that no engine means: Python's ``None``/``True``/``False`` as a word
    (``--ep False``: a setting formatted with ``str()``), ``--flag=None``, empty words, env values
    ``None`` or empty.

    Args:
        command: The adapter's launch command.

    Returns:
        One description per problem (empty: the command is clean).
    """
    problems = [
        f"argv[{i}] is {w!r}" for i, w in enumerate(command.argv) if w in ("None", "True", "False", "")
    ]
    problems += [f"argv[{i}] is {w!r}" for i, w in enumerate(command.argv) if w.endswith("=None")]
    problems += [f"env {k}={v!r}" for k, v in command.env.items() if v in ("None", "")]
    return problems


def _launched(command: LaunchCommand) -> tuple[Any, ...]:
    """What a launch setting may change: argv, env, the files written and the start steps made."""
    return (command.argv, dict(command.env), command.files, command.after_start)


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


def delta_chunk(
    chunk_id: str,
    model: str,
    delta: Mapping[str, Any],
    finish: str | None = None,
    *,
    choice: Mapping[str, Any] | None = None,
    top: Mapping[str, Any] | None = None,
) -> str:
    """A chunk of an OpenAI-layout chat stream with one choice's ``delta`` (JSON text).

        delta_chunk("c1", "m", {"content": "Hel"})   # what most engines send mid-stream

    Args:
        chunk_id: The stream's ``id``.
        model: The ``model`` it names.
        delta: The choice's delta (``{"content": "Hel"}``; ``{}`` when only ``finish`` comes).
        finish: The choice's ``finish_reason``.
        choice: More fields of the choice, as the engine sends them (SGLang's ``matched_stop``).
        top: More fields of the chunk (SGLang's ``"usage": None``).

    Returns:
        The chunk as JSON.
    """
    one = {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish, **(choice or {})}
    return json.dumps({**_chunk_head(chunk_id, model), "choices": [one], **(top or {})})


def usage_chunk(chunk_id: str, model: str, prompt_tokens: int = 9, completion_tokens: int = 2) -> str:
    """The last chunk of an OpenAI-layout chat stream: no choices, the usage (JSON text).

    Args:
        chunk_id: The stream's ``id``.
        model: The ``model`` it names.
        prompt_tokens: The prompt's tokens.
        completion_tokens: The answer's tokens.

    Returns:
        The chunk as JSON.
    """
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    return json.dumps({**_chunk_head(chunk_id, model), "choices": [], "usage": usage})


def hello_stream(
    chunk: Callable[[str | None, str | None], str], chunk_id: str, model: str
) -> tuple[str, ...]:
    """An OpenAI-layout chat stream that spells ``"Hello"`` (a kit's ``stream_text``): "Hel", "lo",
    a ``length`` finish, the usage chunk and ``[DONE]``.

        stream_events = hello_stream(_chunk, "c1", MODEL)   # _chunk: the engine's own chunk layout

    Args:
        chunk: The engine's chunk for ``(content, finish)`` (content None: the finish alone).
        chunk_id: The stream's ``id``, for the usage chunk.
        model: The ``model`` the usage chunk names.

    Returns:
        The stream's ``data`` payloads.
    """
    return (
        chunk("Hel", None),
        chunk("lo", None),
        chunk(None, "length"),
        usage_chunk(chunk_id, model),
        "[DONE]",
    )


def _chunk_head(chunk_id: str, model: str) -> dict[str, Any]:
    return {"id": chunk_id, "object": "chat.completion.chunk", "created": 1, "model": model}


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
    ``passes_api_key``, ``refused_requests``, ``unchanged_launch_settings``.
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
    # LAUNCH_PROBES names whose value leaves the command as it is, for a stated reason (the
    # engine's own default, or a setting the core fills in for every engine that this one
    # has no use for) -> why. The kit checks that they do leave it unchanged. E.g.
    # {"prefix_caching=True": "RadixAttention caches prefixes by default"} (SGLang).
    unchanged_launch_settings: ClassVar[Mapping[str, str]] = {}
    # Request kinds (REQUEST_KINDS: "prompt", "chat", "prompt-stream", "chat-stream") the
    # adapter's build() refuses with UnsupportedFeature -> why; the kit checks it does refuse
    # them instead of building a call. E.g. {"prompt": "the engine serves chat only"}.
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

    def test_renders_a_clean_default_command(self) -> None:
        """``launch_spec``'s command: no ``None``/``True``/``False`` word, no empty word, and a
        Python engine started with the engine env's interpreter (``spec.python``, which the core
        fills in with the managed env's, else ``sys.executable``), never one of its own choosing."""
        for python in (None, PROBE_PYTHON):
            spec = self.launch_spec.model_copy(update={"python": python})
            with blocked_io():
                command = self._command_or_refusal(spec)
            if isinstance(command, UnsupportedFeature):
                return  # test_masks_the_api_key_in_printed_commands checks that refusal
            problems = unclean_words(command)
            assert not problems, f"the default command renders {problems}: {command.argv}"
            pythons = [w for w in command.argv if _PYTHON.fullmatch(PurePath(w).name) or w == sys.executable]
            if python is not None and pythons:
                assert pythons[0] == python, (
                    f"the command starts {pythons[0]!r}, not spec.python={python!r} (the engine env's "
                    "interpreter): use spec.python or 'python'"
                )

    def test_classifies_every_launch_setting(self) -> None:
        probed = {name.split(".")[0].split("=")[0] for name in LAUNCH_PROBES}
        unclassified = set(LaunchSpec.model_fields) - probed - set(CORE_LAUNCH_SETTINGS)
        assert not unclassified, (
            f"LaunchSpec fields neither probed (LAUNCH_PROBES) nor consumed by the core "
            f"(CORE_LAUNCH_SETTINGS): {sorted(unclassified)}"
        )
        assert not probed & set(CORE_LAUNCH_SETTINGS), "a setting is both probed and core-consumed"
        unknown = set(self.unchanged_launch_settings) - set(LAUNCH_PROBES)
        assert not unknown, f"unchanged_launch_settings names no probe: {sorted(unknown)}"

    @pytest.mark.parametrize("probe", LAUNCH_PROBES)
    def test_maps_or_refuses_the_launch_setting(self, probe: str) -> None:
        base, spec = self._probe_specs(probe)
        with blocked_io():
            before, after = self._launch_or_refusal(base), self._launch_or_refusal(spec)
        for outcome in (before, after):
            if isinstance(outcome, UnsupportedFeature):
                assert outcome.engine == self.adapter.name and outcome.why, (
                    f"the refusal must name {self.adapter.name} and say why: {outcome}"
                )
        if not isinstance(before, LaunchCommand):
            return  # the settings the probe needs are refused already
        if isinstance(after, LaunchCommand):
            assert not unclean_words(after), (
                f"{probe}: the command renders {unclean_words(after)}: {after.argv}"
            )
        changed = not isinstance(after, LaunchCommand) or _launched(after) != _launched(before)
        why = self.unchanged_launch_settings.get(probe)
        if why is not None:
            assert why, f"unchanged_launch_settings gives no reason for {probe}"
            assert not changed, f"unchanged_launch_settings says {probe} leaves the command, but it changes"
            return
        assert changed, (
            f"{probe}: {dict(LAUNCH_PROBES[probe].value)} is silently dropped: command() neither changes "
            "argv/env/files/start steps nor refuses it. Map it to the engine's flag of the same meaning, "
            "or refuse it (UnsupportedFeature naming the engine, why and what instead: Refuse(engine)). "
            "If the engine already does this with no flag (its default), add to the class "
            f"{self._where()}: unchanged_launch_settings = {{{probe!r}: \"<why: e.g. the engine's "
            'default>"}'
        )

    def _where(self) -> str:
        """``Class.unchanged_launch_settings`` in the file of this subclass (the adapter's kit test)."""
        cls = type(self)
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None) or cls.__module__
        with suppress(ValueError):  # another drive (Windows): keep it absolute
            path = os.path.relpath(path)
        return f"{cls.__name__} ({path})"

    def _probe_specs(self, probe: str) -> tuple[LaunchSpec, LaunchSpec]:
        """The baseline (``launch_spec`` with the probe's needs) and the baseline with the probe set."""
        p = LAUNCH_PROBES[probe]
        base = LaunchSpec.model_validate({**self.launch_spec.model_dump(), **p.needs})
        value = dict(p.value)
        if probe == "model":  # renamed, so that it keeps what the engine needs (e.g. ".gguf")
            path = PurePosixPath(base.model)
            value = {"model": str(path.with_stem(path.stem + "-probe"))}
        spec = LaunchSpec.model_validate({**base.model_dump(), **value})
        set_now = {k: v for k, v in value.items() if getattr(base, k) == v}
        assert not set_now, f"{probe}: launch_spec already sets {set_now}; the probe sets nothing new"
        return base, spec

    def _launch_or_refusal(self, spec: LaunchSpec) -> LaunchCommand | UnsupportedFeature | InvalidOptions:
        """The command, or the refusal, the core gets for ``spec`` before anything starts."""
        try:
            check_launch_features(self.adapter, spec)
            return self.adapter.command(spec)
        except (UnsupportedFeature, InvalidOptions) as refusal:
            return refusal

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
