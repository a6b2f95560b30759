"""What a benchmark sends: synthetic prompts of given token lengths, or prompts from a JSONL file.

    Synthetic(num_prompts=200, input_len=128, output_len=64)                 # random prompts
    Synthetic(num_prompts=200, input_len=128, output_len=64, prefix_len=96)  # shared prefix
    Synthetic(..., tokenizer="/models/qwen")   # exact token lengths with the model's tokenizer
    JsonlPrompts("prompts.jsonl", output_len=128)  # {"prompt": "..."} or {"messages": [...]}
    requests = workload.requests()             # a list of BenchRequest, seeded and repeatable

Synthetic prompts follow ``vllm bench serve``'s random dataset: random non-special token ids,
decoded to text and re-encoded until the length matches, lengths drawn uniformly within
``range_ratio`` of the means. Without a tokenizer, prompts are random words from a fixed list
(roughly one token each; the engine's usage report gives the real counts in the results).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from unillm.errors import InvalidOptions
from unillm.jsonl import jsonl_objects

if TYPE_CHECKING:
    from tokenizers import Tokenizer

WORDS = (
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
)


@dataclass(frozen=True)
class BenchRequest:
    """One request of a workload: a prompt or chat messages, and how many tokens to generate."""

    max_tokens: int
    prompt: str | None = None
    messages: tuple[Mapping[str, str], ...] | None = None
    input_len: int | None = None  # expected prompt tokens, when known before sending
    at: float | None = None  # fixed schedule: seconds after the start at which it is sent


class Synthetic(BaseModel):
    """Random prompts of ``input_len`` tokens asking for ``output_len`` tokens (see module doc).

    ``prefix_len`` tokens are shared by every prompt (prefix-cache workloads); ``chat=True``
    sends each prompt as one user message to the chat API instead of the completions API.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["synthetic"] = "synthetic"
    num_prompts: int = Field(100, ge=1)
    input_len: int = Field(128, ge=1)
    output_len: int = Field(64, ge=1)
    range_ratio: float = Field(0.0, ge=0, lt=1)
    prefix_len: int = Field(0, ge=0)
    tokenizer: str | None = None
    chat: bool = False
    seed: int = 0

    def requests(self) -> list[BenchRequest]:
        """The workload's requests (the same list for the same seed)."""
        rng = random.Random(self.seed)
        tok = load_tokenizer(self.tokenizer) if self.tokenizer else None
        # like vLLM, count the tokens the engine's tokenizer adds (BOS...) in the input length
        added = len(tok.encode("", add_special_tokens=True).ids) if tok else 0
        prefix = _random_tokens(tok, rng, self.prefix_len)
        out = []
        for _ in range(self.num_prompts):
            n_in = max(1, draw_length(rng, self.input_len, self.range_ratio) - added)
            n_out = draw_length(rng, self.output_len, self.range_ratio)
            text, length = random_prompt(tok, rng, prefix, n_in)
            out.append(_request(text, n_out, length + added if tok else None, self.chat))
        return out


class JsonlPrompts(BaseModel):
    """Prompts from a JSONL file, one object a line: ``{"prompt": ...}`` or ``{"messages": [...]}``.

    A line may set its own ``max_tokens`` (or ``output_len``); otherwise ``output_len`` applies.
    ``num_prompts`` takes the first N lines (cycling through the file when it has fewer).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["jsonl"] = "jsonl"
    path: str
    output_len: int = Field(128, ge=1)
    num_prompts: int | None = Field(None, ge=1)

    def requests(self) -> list[BenchRequest]:
        """Read and validate the file; an empty or malformed file is an InvalidOptions error."""
        lines = jsonl_objects(self.path, "dataset", '{"prompt": "..."} or {"messages": [...]} lines')
        rows = [self._row(where, data) for where, data in lines]
        if not rows:
            raise InvalidOptions(
                f'dataset {self.path} has no prompts; add JSONL lines such as {{"prompt": "Hello"}}'
            )
        count = self.num_prompts or len(rows)
        return [rows[i % len(rows)] for i in range(count)]

    def _row(self, where: str, data: dict[str, Any]) -> BenchRequest:
        max_tokens = data.get("max_tokens", data.get("output_len", self.output_len))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidOptions(f"{where}: max_tokens must be a positive integer")
        if isinstance(data.get("prompt"), str) and data["prompt"]:
            return BenchRequest(max_tokens=max_tokens, prompt=data["prompt"])
        messages = data.get("messages")
        if (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages
            )
        ):
            return BenchRequest(
                max_tokens=max_tokens,
                messages=tuple({"role": m["role"], "content": m["content"]} for m in messages),
            )
        raise InvalidOptions(
            f'{where}: needs a non-empty "prompt" string or a "messages" list of '
            '{"role": ..., "content": ...} objects'
        )


Workload = Synthetic | JsonlPrompts


def load_tokenizer(name: str) -> Tokenizer:
    """A Hugging Face ``tokenizers`` tokenizer from a model folder or a ``tokenizer.json`` path."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InvalidOptions(
            "exact synthetic lengths need the tokenizers package: pip install 'unillm-sdk[bench]'"
        ) from None
    path = Path(name)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise InvalidOptions(
            f"no tokenizer at {name} (expected a model folder with tokenizer.json or the file itself)"
        )
    return Tokenizer.from_file(str(file))


def draw_length(rng: random.Random, mean: int, ratio: float) -> int:
    """A length drawn uniformly within ``ratio`` of ``mean`` (at least 1).

    Args:
        rng: The workload's seeded generator.
        mean: The mean length.
        ratio: The relative spread (0: exactly ``mean``).
    """
    low, high = max(1, int(mean * (1 - ratio))), int(mean * (1 + ratio))
    return rng.randint(low, max(low, high))


def _allowed_ids(tok: Tokenizer) -> list[int]:
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    vocab = tok.get_vocab(with_added_tokens=True)
    return sorted(i for t, i in vocab.items() if t not in special)


def _random_tokens(tok: Tokenizer | None, rng: random.Random, n: int) -> list[int] | list[str]:
    if n <= 0:
        return []
    if tok is None:
        return [rng.choice(WORDS) for _ in range(n)]
    allowed = _allowed_ids(tok)
    return [rng.choice(allowed) for _ in range(n)]


def random_prompt(
    tok: Tokenizer | None, rng: random.Random, prefix: Sequence[Any], n: int
) -> tuple[str, int]:
    """A prompt of ``n`` tokens (prefix included when shorter than ``n``) and its real length.

    Args:
        tok: The model's tokenizer (exact lengths); None: words of about one token each.
        rng: The workload's seeded generator.
        prefix: Tokens (or words) every prompt starts with.
        n: The prompt's length in tokens.
    """
    body = list(prefix[:n]) + list(_random_tokens(tok, rng, max(0, n - len(prefix))))
    if tok is None:
        return " ".join(body), n
    ids: list[int] = body
    for _ in range(10):  # decode/re-encode until stable: text round-trips change token counts
        text = tok.decode(ids)
        again = tok.encode(text, add_special_tokens=False).ids
        if len(again) == n:
            return text, n
        ids = (
            again[:n]
            if len(again) > n
            else again + [rng.choice(_allowed_ids(tok)) for _ in range(n - len(again))]
        )
    text = tok.decode(ids)
    return text, len(tok.encode(text, add_special_tokens=False).ids)


def _request(text: str, max_tokens: int, input_len: int | None, chat: bool) -> BenchRequest:
    if chat:
        return BenchRequest(
            max_tokens=max_tokens, messages=({"role": "user", "content": text},), input_len=input_len
        )
    return BenchRequest(max_tokens=max_tokens, prompt=text, input_len=input_len)
