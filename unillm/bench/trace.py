"""Trace replay in Mooncake's format: requests sent at the trace's times, with its shared prefixes.

    MooncakeTrace(path="conversation_trace.jsonl").requests()   # a fixed schedule
    MooncakeTrace(path=..., time_scale=0.5)                     # replay twice as fast

Each JSONL line is ``{"timestamp": ms, "input_length": tokens, "output_length": tokens,
"hash_ids": [...]}`` (Mooncake's published traces). ``hash_ids`` name the prompt's blocks of
``block_size`` tokens (512 in Mooncake's traces); requests that share a hash id share that
block, so the generated prompts share exactly the prefixes the trace's requests shared: block
``h`` is always the same text (seeded by ``h`` and ``seed``), the last block is cut to the
input length. Text is words of about one token each (the engine's usage report gives the real
counts). A line without ``hash_ids`` gets a prompt of its own.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from unillm.bench.workload import WORDS, BenchRequest
from unillm.errors import InvalidOptions
from unillm.jsonl import jsonl_objects


class MooncakeTrace(BaseModel):
    """A Mooncake-format trace replayed on its own schedule (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["mooncake-trace"] = "mooncake-trace"
    path: str
    block_size: int = Field(512, ge=1)
    time_scale: float = Field(1.0, gt=0)
    num_prompts: int | None = Field(None, ge=1)
    chat: bool = False
    seed: int = 0

    def requests(self) -> list[BenchRequest]:
        """The trace's requests with their send times; a malformed trace is InvalidOptions."""
        lines = jsonl_objects(
            self.path,
            "trace",
            'Mooncake lines {"timestamp": ms, "input_length": N, "output_length": N, "hash_ids": [...]}',
        )[: self.num_prompts]
        if not lines:
            raise InvalidOptions(f"trace {self.path} has no requests")
        out = [self._request(where, data) for where, data in lines]
        start = min(r.at or 0.0 for r in out)
        return sorted(
            (
                BenchRequest(r.max_tokens, r.prompt, r.messages, r.input_len, ((r.at or 0.0) - start))
                for r in out
            ),
            key=lambda r: r.at or 0.0,
        )

    def _request(self, where: str, data: dict[str, Any]) -> BenchRequest:
        fields = {k: data.get(k) for k in ("timestamp", "input_length", "output_length")}
        for key, value in fields.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidOptions(f"{where}: {key!r} must be a non-negative number")
        n_in, n_out = int(fields["input_length"] or 0), int(fields["output_length"] or 0)
        if n_in < 1 or n_out < 1:
            raise InvalidOptions(f"{where}: input_length and output_length must be at least 1")
        hashes = data.get("hash_ids") or []
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise InvalidOptions(f"{where}: hash_ids must be a list of integers")
        text = self.prompt_text(hashes, n_in, unique=where)
        at = float(fields["timestamp"] or 0) / 1000.0 * self.time_scale
        if self.chat:
            return BenchRequest(n_out, messages=({"role": "user", "content": text},), input_len=n_in, at=at)
        return BenchRequest(n_out, prompt=text, input_len=n_in, at=at)

    def prompt_text(self, hash_ids: list[int], input_length: int, *, unique: str = "") -> str:
        """The prompt of ``input_length`` words whose blocks are given by ``hash_ids``.

        Args:
            hash_ids: The blocks' hash ids, in order (equal ids give equal text).
            input_length: The prompt's length in words (about one token each).
            unique: Seeds the text beyond the hashed blocks (a request's own tail).
        """
        words: list[str] = []
        for h in hash_ids:
            if len(words) >= input_length:
                break
            words += _block(self.seed, h, self.block_size)
        if len(words) < input_length:  # more tokens than blocks: a tail of the request's own
            rng = random.Random(f"tail:{self.seed}:{unique}")
            words += [rng.choice(WORDS) for _ in range(input_length - len(words))]
        return " ".join(words[:input_length])


@lru_cache(maxsize=4096)
def _block(seed: int, hash_id: int, size: int) -> list[str]:
    rng = random.Random(f"block:{seed}:{hash_id}")
    return [rng.choice(WORDS) for _ in range(size)]
