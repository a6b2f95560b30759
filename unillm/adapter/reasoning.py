"""A model's thinking, split from its answer by the markers chat templates write around it.

Engines with a reasoning parser (vLLM, SGLang, llama.cpp) send the thought in a field of its own;
where none ran (TGI, MLX, an engine started without a parser) the thought arrives inside the text,
between markers such as ``<think>`` and ``</think>``. These helpers split it off, whole or streamed::

    split_reasoning("<think>2+2 is 4</think>\\n\\nFour.")   # ("2+2 is 4", "Four.")

    splitter = ReasoningSplitter()
    splitter.feed("<thi")     # ("", ""): could be a marker, held back
    splitter.feed("nk>Hm")    # ("Hm", "")

Only a thought at the very start of the answer counts (what the templates produce); a marker
elsewhere in the text is left as text. A marker split across chunks is held back until it is
decided, as a stop string is (:func:`held_suffix`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from unillm.content import content_text
from unillm.errors import UnsupportedFeature
from unillm.options import REASONING_OPTIONS, REPLAY_MODES, Request

__all__ = [
    "THINKING_MARKERS",
    "ReasoningSplitter",
    "TrimmedStream",
    "answer_parts",
    "check_constraint_after_thinking",
    "held_suffix",
    "reasoning_field",
    "replay_messages",
    "replayed",
    "thinking_fields",
    "split_reasoning",
]

#: The (start, end) markers chat templates write around a thought: Qwen3, QwQ and the DeepSeek-R1
#: family (``<think>``), Claude-style prompts (``<thinking>``), Mistral's Magistral (``[THINK]``),
#: ByteDance Seed-OSS (``<seed:think>``), Kimi (``◁think▷``), Cohere Command A Reasoning.
THINKING_MARKERS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("[THINK]", "[/THINK]"),
    ("<seed:think>", "</seed:think>"),
    ("◁think▷", "◁/think▷"),  # Kimi
    ("<|START_THINKING|>", "<|END_THINKING|>"),
)

#: Where engines put a parsed thought in a chat message or delta: vLLM >= 0.10.2 ``reasoning``,
#: older vLLM, SGLang and llama.cpp ``reasoning_content``.
REASONING_FIELDS = ("reasoning", "reasoning_content")


def held_suffix(text: str, markers: Iterable[str]) -> int:
    """How many characters at the end of ``text`` could be the start of one of ``markers``
    (0: none), i.e. what a stream must hold back until the next chunk decides.

    Args:
        text: The text received so far (not yet sent on).
        markers: The strings that may be starting (stop strings, thinking markers).
    """
    candidates = tuple(m for m in markers if m)
    longest = min(len(text), max((len(m) for m in candidates), default=0))
    return max(
        (n for n in range(1, longest + 1) if any(m.startswith(text[-n:]) for m in candidates)),
        default=0,
    )


def reasoning_field(message: Mapping[str, Any] | None) -> str | None:
    """The parsed thought in an engine's message or delta (None: the engine sent none).

    Args:
        message: A chat ``message`` or stream ``delta`` object.
    """
    for key in REASONING_FIELDS:
        value = (message or {}).get(key)
        if isinstance(value, str):
            return value
    return None


def split_reasoning(
    text: str, markers: tuple[tuple[str, str], ...] = THINKING_MARKERS
) -> tuple[str | None, str]:
    """The thought and the answer of a whole text that may start with thinking markers.

    Args:
        text: The model's whole text.
        markers: The (start, end) marker pairs to look for.

    Returns:
        ``(reasoning, answer)``: reasoning None when the text does not start with a thought; a
        thought never closed (cut by ``max_tokens``) is all reasoning and an empty answer.
    """
    stripped = text.lstrip()
    for start, end in markers:
        if stripped.startswith(start):
            thought, closed, answer = stripped[len(start) :].partition(end)
            return thought.strip(), answer.lstrip() if closed else ""
    return None, text


def answer_parts(text: str, parsed: str | None) -> tuple[str | None, str]:
    """The thought and answer of a whole message: the engine's parsed thought when it sent one
    (``parsed``), else the thought split off the text by its markers.

    Args:
        text: The message's content.
        parsed: The engine's reasoning field (:func:`reasoning_field`); None or empty: it sent
            none (an engine without a reasoning parser may send an empty field, e.g.
            trtllm-serve's ``reasoning_content: ""``), as a stream reads it.

    Returns:
        ``(reasoning, answer)``; reasoning None when there was no thought.
    """
    if not parsed:
        return split_reasoning(text)
    return parsed.strip() or None, text.lstrip()


#: Where each thinking option goes in an OpenAI-layout chat body, on the engines that read it.
THINKING_BODY = {
    "thinking": "chat_template_kwargs.enable_thinking",
    "thinking_budget": "thinking_token_budget",
    "reasoning_effort": "reasoning_effort",
}


def thinking_fields(request: Request, engine: str, taken: Iterable[str]) -> dict[str, Any]:
    """Body fields for the thinking options ``request`` sets (``thinking``, ``thinking_budget``,
    ``reasoning_effort``), for an engine that reads the ``taken`` ones (see ``THINKING_BODY``).

    Args:
        request: The validated request.
        engine: The adapter's name, for the refusal.
        taken: The thinking options the engine reads.

    Raises:
        UnsupportedFeature: An option set that the engine has no field for (before sending).
    """
    accepted = frozenset(taken)
    body: dict[str, Any] = {}
    for option in REASONING_OPTIONS:
        value = getattr(request, option)
        if value is None:
            continue
        if option not in accepted:
            raise UnsupportedFeature(
                engine,
                option,
                why=f"{engine} has no request field for it",
                alternative="Drop it; "
                + ("vLLM takes all three thinking options" if accepted else "ask for brevity in the prompt"),
            )
        key, _, sub = THINKING_BODY[option].partition(".")
        if sub:
            body.setdefault(key, {})[sub] = value
        else:
            body[key] = value
    return body


def check_constraint_after_thinking(
    request: Request, engine: str, after_thought: bool | None, *, version: str | None = None
) -> None:
    """Refuse ``thinking=True`` with a constraint (``output=``, a forced tool call) on a server
    whose constraint starts at the first token, which leaves the model no room to think.

    Args:
        request: The validated request.
        engine: The adapter's name, for the refusal.
        after_thought: True: the engine constrains only the answer, after the thought (vLLM and
            SGLang launched with a reasoning parser); False: from the first token; None: unknown
            (a connected server), nothing refused.
        version: The engine's version, for the refusal.

    Raises:
        UnsupportedFeature: Both asked for where the constraint cannot wait for the thought.
    """
    forced = request.tool_choice is not None and request.tool_choice.forces_call and bool(request.tools)
    if request.thinking is not True or after_thought is not False:
        return
    if request.output is None and not forced:
        return
    raise UnsupportedFeature(
        engine,
        "thinking=True with " + ("output=" if request.output is not None else "a forced tool call"),
        version=version,
        why="its constraint starts at the first token (no reasoning parser tells it where the "
        "thought ends), so the model could not think",
        alternative="Launch vLLM or SGLang with reasoning_parser= (the constraint then binds the "
        "answer after the thought), or drop thinking=True",
    )


def replay_messages(
    messages: Iterable[Mapping[str, Any]],
    mode: str | None,
    field: str | None,
    *,
    engine: str,
    version: str | None = None,
    markers: tuple[str, str] = THINKING_MARKERS[0],
) -> list[dict[str, Any]]:
    """Chat messages as the engine reads them, each assistant thought (unillm's ``reasoning``
    key) sent back once, as ``mode`` says:

    * ``"field"``: in the engine's own field (``field``, e.g. ``reasoning_content``), which the
      server hands to the chat template: the template keeps or drops it as the model family
      documents (Qwen3 keeps the thoughts after the last user message, DeepSeek-R1 drops them);
    * ``"inline"``: written into the content, between ``markers``, before the answer (templates
      that read no field, engines that have none);
    * ``"drop"``: not sent.

    Args:
        messages: Normalized chat messages (``Request.messages``).
        mode: ``replay_reasoning=``; None: ``"field"`` where the engine reads one, else ``"drop"``.
        field: The engine's field (:meth:`Adapter.replay_field`); None: it reads none.
        engine: The adapter's name, for the refusal.
        version: The engine's version, for the refusal.
        markers: The (start, end) markers of ``"inline"``.

    Returns:
        New message dicts (the input is not changed).

    Raises:
        UnsupportedFeature: ``"field"`` asked on an engine that reads no such field, when a
            message carries a thought (before sending).
    """
    chosen = mode if mode in REPLAY_MODES else ("field" if field else "drop")
    out = []
    for message in messages:
        m = {k: v for k, v in message.items() if k != "reasoning"}
        thought = message.get("reasoning")
        if thought and chosen == "field":
            if field is None:
                raise UnsupportedFeature(
                    engine,
                    "replay_reasoning='field'",
                    version=version,
                    why="its server reads no reasoning field in an assistant message (it would "
                    "drop the thought silently)",
                    alternative="Pass replay_reasoning='inline' (the thought in the content, "
                    "between <think> markers) or 'drop'",
                )
            m[field] = thought
        elif thought and chosen == "inline":
            m["content"] = f"{markers[0]}{thought}{markers[1]}{content_text(m.get('content'))}"
        out.append(m)
    return out


def replayed(request: Request, field: str | None, engine: str, version: str | None = None) -> Request:
    """``request`` with its messages' thoughts as the engine reads them (:func:`replay_messages`),
    for adapters that lay out their own messages (TGI, Ollama).

    Args:
        request: The validated request.
        field: The engine's reasoning field in a message; None: it reads none.
        engine: The adapter's name, for the refusal.
        version: The engine's version, for the refusal.

    Raises:
        UnsupportedFeature: ``replay_reasoning="field"`` where the engine reads no field.
    """
    if request.messages is None:
        return request
    messages = replay_messages(
        request.messages, request.replay_reasoning, field, engine=engine, version=version
    )
    return dataclasses.replace(request, messages=tuple(messages))


class TrimmedStream:
    """Pieces of one streamed text, passed on without the whitespace at either end of the whole,
    as ``str.strip`` gives it whole: leading whitespace is dropped, trailing whitespace held
    back until more text follows it (or dropped at the end)::

        trim = TrimmedStream()
        trim.feed("\nLet me")    # "Let me"
        trim.feed(" think.\n")   # " think."  ("\n" held back)
    """

    __slots__ = ("_space", "_started")

    def __init__(self) -> None:
        self._started = False
        self._space = ""

    def feed(self, piece: str) -> str:
        """The part of ``piece`` that can be passed on now.

        Args:
            piece: The next piece of the text.
        """
        if not self._started:
            piece = piece.lstrip()
            if not piece:
                return ""
            self._started = True
        body = piece.rstrip()
        if not body:
            self._space += piece
            return ""
        out, self._space = self._space + body, piece[len(body) :]
        return out


class ReasoningSplitter:
    """Splits one streamed answer into thought and answer pieces, holding back what may be a marker.

    Args:
        markers: The (start, end) marker pairs to look for.
    """

    __slots__ = ("_buf", "_end", "_markers", "_state", "_thought")

    def __init__(self, markers: tuple[tuple[str, str], ...] = THINKING_MARKERS) -> None:
        self._markers = markers
        self._buf = ""
        self._end = ""
        self._state = "start"  # start: deciding; thinking; after: answer, leading space dropped; answer
        self._thought = TrimmedStream()  # the thought without whitespace around it, as split whole

    def feed(self, text: str) -> tuple[str, str]:
        """The thought and answer text that can be sent on now.

        Args:
            text: The next piece of the model's text.

        Returns:
            ``(reasoning, answer)`` pieces, either or both empty.
        """
        if self._state == "answer":
            return "", text
        buf = self._buf + text
        self._buf = ""
        if self._state == "start":
            head = buf.lstrip()
            opened = next((pair for pair in self._markers if head.startswith(pair[0])), None)
            if opened is None:
                if not head or any(start.startswith(head) for start, _ in self._markers):
                    self._buf = buf  # could still become a start marker
                    return "", ""
                self._state = "answer"
                return "", buf
            self._state, self._end = "thinking", opened[1]
            buf = head[len(opened[0]) :].lstrip()
        if self._state == "thinking":
            thought, closed, rest = buf.partition(self._end)
            if not closed:
                keep = held_suffix(thought, (self._end,))
                self._buf = thought[len(thought) - keep :] if keep else ""
                return self._thought.feed(thought[: len(thought) - keep]), ""
            self._state, buf = "after", rest
            return self._thought.feed(thought), self._after(buf)
        return "", self._after(buf)

    def parsed_by_engine(self) -> None:
        """The engine sends the thought in a field of its own: the text is all answer (only the
        whitespace that follows the thought is dropped)."""
        if self._state in ("start", "thinking"):
            self._state, self._buf = "after", ""

    def parsed(self, piece: str) -> str:
        """A piece of the thought the engine sent in a field of its own (the text is then all
        answer), without the whitespace around the whole thought, as :func:`answer_parts` gives it.

        Args:
            piece: The next piece of the engine's reasoning field.
        """
        self.parsed_by_engine()
        return self._thought.feed(piece)

    def _after(self, text: str) -> str:
        """Answer text after the end marker, without the whitespace that follows the marker."""
        answer = text.lstrip()
        if answer:
            self._state = "answer"
        return answer

    def finish(self) -> tuple[str, str]:
        """What was held back, at the end of the stream: a start never completed is answer
        text, a partial end marker inside a thought is thought.

        Returns:
            ``(reasoning, answer)`` pieces, either or both empty.
        """
        held, self._buf = self._buf, ""
        if self._state == "thinking":
            return self._thought.feed(held), ""
        return "", held
