"""Multi-turn chat sessions: each turn waits for the previous answer, and the history grows.

    workload = MultiTurn(sessions=20, turns=5, input_len=64, output_len=32,
                         system_prompt_len=256, system_prompts=2, think_time_s=1.0)
    sessions = workload.requests()     # seeded: the same sessions for every target

The generator fixes everything that does not depend on the engine: system prompts (``system_prompts``
distinct ones, shared by the sessions), every user turn's text and length, each turn's
``max_tokens`` and the think time before it. The engine's real answers are appended to the
history as the session is replayed (:func:`unillm.bench.runner.run_load`), so a turn's prompt
is the system prompt, every earlier turn and answer, and its own user message. ``reasoning``
decides what an answer's thinking becomes in the history: ``"strip"`` (the answer only, as
chat templates usually do) or ``"echo"`` (``<think>...</think>`` before the answer, as generated).

The same sessions can be replayed against any unillm client (an LLM, a Fleet); with
``session_key=True`` each request carries ``session=<id>``, the fleets' affinity key.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from unillm.bench.workload import draw_length, load_tokenizer, random_prompt


@dataclass(frozen=True)
class Turn:
    """One user turn: its message, how many tokens to generate, and the think time before it."""

    user: str
    max_tokens: int
    think_s: float = 0.0
    input_len: int | None = None  # tokens of the user message alone, when known


@dataclass(frozen=True)
class Session:
    """A conversation replayed turn by turn; ``system`` is None without a system prompt."""

    id: str
    turns: tuple[Turn, ...]
    system: str | None = None
    session_key: bool = False
    reasoning: Literal["strip", "echo"] = "strip"

    def history_message(self, text: str, reasoning: str) -> Mapping[str, str]:
        """The assistant message an answer adds to the history (see ``reasoning``).

        Args:
            text: The answer's text.
            reasoning: The answer's thinking (echoed or dropped by the session's policy).
        """
        if self.reasoning == "echo" and reasoning:
            text = f"<think>{reasoning}</think>{text}"
        return {"role": "assistant", "content": text}


class MultiTurn(BaseModel):
    """Seeded multi-turn sessions (see the module doc); ``think_time_s`` is a mean (uniform 0..2x)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["multi-turn"] = "multi-turn"
    sessions: int = Field(10, ge=1)
    turns: int = Field(3, ge=1)
    input_len: int = Field(64, ge=1)
    output_len: int = Field(32, ge=1)
    range_ratio: float = Field(0.0, ge=0, lt=1)
    system_prompt_len: int = Field(0, ge=0)
    system_prompts: int = Field(1, ge=1)
    think_time_s: float = Field(0.0, ge=0)
    reasoning: Literal["strip", "echo"] = "strip"
    session_key: bool = False
    tokenizer: str | None = None
    seed: int = 0

    def requests(self) -> list[Session]:
        """The sessions, in start order (the same list for the same settings and seed)."""
        rng = random.Random(f"multi-turn:{self.seed}")
        tok = load_tokenizer(self.tokenizer) if self.tokenizer else None
        systems = [
            random_prompt(tok, rng, [], self.system_prompt_len)[0] if self.system_prompt_len else None
            for _ in range(self.system_prompts)
        ]
        out = []
        for s in range(self.sessions):
            system = systems[rng.randrange(len(systems))]
            turns = []
            for t in range(self.turns):
                text, length = random_prompt(tok, rng, [], draw_length(rng, self.input_len, self.range_ratio))
                think = rng.uniform(0, 2 * self.think_time_s) if t and self.think_time_s else 0.0
                max_tokens = draw_length(rng, self.output_len, self.range_ratio)
                turns.append(Turn(text, max_tokens, think, length if tok else None))
            out.append(Session(f"s{s:04d}", tuple(turns), system, self.session_key, self.reasoning))
        return out

    def count(self) -> int:
        """How many requests the workload sends (sessions x turns)."""
        return self.sessions * self.turns
