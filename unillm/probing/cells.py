"""The probe's cells: for each option, the requests that show its effect and the judgement.

Every cell is a coroutine ``(client, samples) -> (verdict, evidence)``; the runner turns a
refusal, an engine error or an inexpressible option into the matching verdict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from unillm.capabilities import Feature
from unillm.options import Choice as ChoiceOutput
from unillm.options import Grammar, JsonSchema, Regex
from unillm.probing import judge
from unillm.probing.asking import Answer, Ask, ProbeClient
from unillm.probing.judge import Judged

CellFn = Callable[[ProbeClient, int], Awaitable[Judged]]

PROMPT = ({"role": "user", "content": "Tell me a long story about a cat, a dog and a bird."},)
LONG_PROMPT = (
    {"role": "user", "content": " ".join(f"Fact {i}: the cat sat on mat number {i}." for i in range(24))},
)
TOOL = "get_weather"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL,
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
REGEX = r"[a-z]{2,6} [0-9]{1,3}"
REGEX_START = r"[a-z]{0,6}( [0-9]{0,3})?"
CHOICES = ("alpha", "beta", "gamma")
GRAMMAR = 'root ::= ("yes" | "no") " " [0-9]'
GRAMMAR_LANGUAGE = r"(yes|no) [0-9]"
GRAMMAR_START = r"(y(e(s( [0-9]?)?)?)?|n(o( [0-9]?)?)?)?"
#: A constraint cell draws at most this many times ``samples`` answers (see :func:`constrained`).
DRAW_LIMIT = 4


def _json_start(text: str) -> bool:
    return not text.strip() or text.lstrip().startswith("{")


def _choice_start(text: str) -> bool:
    return any(c.startswith(text) for c in CHOICES)


async def _greedy(client: ProbeClient, max_tokens: int = 24, **options: Any) -> Answer:
    return await client.ask(Ask(PROMPT, {"temperature": 0, "max_tokens": max_tokens, **options}))


async def temperature_zero(client: ProbeClient, samples: int) -> Judged:
    """temperature=0 gives the same text every time."""
    answers = [await _greedy(client, 16) for _ in range(max(2, samples))]
    return judge.identical(answers, "temperature=0")


async def seed(client: ProbeClient, samples: int) -> Judged:
    """seed= at temperature 1 repeats the text; another seed changes it."""
    ask = {"temperature": 1.0, "max_tokens": 16}
    same = [await client.ask(Ask(PROMPT, {**ask, "seed": 1234})) for _ in range(max(2, samples))]
    other = await client.ask(Ask(PROMPT, {**ask, "seed": 4321}))
    return judge.reproducible(same, other)


async def max_tokens(client: ProbeClient, samples: int) -> Judged:
    """max_tokens=5 gives exactly 5 tokens (a long greedy answer is asked for: no seed, so an
    engine that refuses seed still has max_tokens measured)."""
    return judge.exact_length(await _greedy(client, 5), 5)


async def stop(client: ProbeClient, samples: int) -> Judged:
    """A stop string from the middle of the greedy answer cuts it there."""
    baseline = (await _greedy(client)).text
    word = judge.stop_word(baseline)
    if word is None:
        return "unmeasurable", f"the greedy answer {baseline!r} is too short to cut"
    return judge.stopped(baseline, word, await _greedy(client, stop=[word]))


async def logprobs(client: ProbeClient, samples: int) -> Judged:
    """logprobs=True, top_logprobs=3: a logprob and 3 alternatives per token."""
    return judge.logprob_counts(await _greedy(client, 8, logprobs=True, top_logprobs=3), 3)


async def n_choices(client: ProbeClient, samples: int) -> Judged:
    """n=3 gives 3 choices."""
    answer = await client.ask(Ask(PROMPT, {"temperature": 1.0, "max_tokens": 8, "n": 3}))
    return judge.choices(answer, 3)


def penalty(name: str, value: float) -> CellFn:
    """A cell for one penalty: the greedy answer changes with ``name=value``."""

    async def cell(client: ProbeClient, samples: int) -> Judged:
        baseline = await _greedy(client, 32)
        return judge.changed(baseline, await _greedy(client, 32, **{name: value}), f"{name}={value}")

    return cell


def constrained(output: Any, check: Callable[[str], bool], start: Callable[[str], bool], what: str) -> CellFn:
    """A cell for one output constraint: every sampled answer is valid (``start``: whether a cut
    answer is the beginning of a valid one).

    An answer cut by ``max_tokens`` while still valid proves nothing (sampling may run long, e.g.
    an integer's digits), so the cell samples on, up to ``DRAW_LIMIT`` times ``samples`` answers,
    until ``samples`` of them can be judged.
    """

    async def cell(client: ProbeClient, samples: int) -> Judged:
        ask = Ask(PROMPT, {"temperature": 1.0, "max_tokens": 48}, output=output)
        answers: list[Answer] = []
        while len(answers) < DRAW_LIMIT * samples:
            answers.append(await client.ask(ask))
            if sum(judge.judgeable(a, start) for a in answers) >= samples:
                break
        return judge.valid_share(answers, check, start, what)

    return cell


async def lora(client: ProbeClient, samples: int) -> Judged:
    """lora=<the first adapter served> changes the greedy answer."""
    names = await client.loras()
    if not names:
        return "unmeasurable", "the engine serves no LoRA adapter"
    return judge.changed(await _greedy(client), await _greedy(client, lora=names[0]), f"lora={names[0]!r}")


async def thinking(client: ProbeClient, samples: int) -> Judged:
    """thinking=False leaves no reasoning where thinking=True gives some."""
    return judge.thinking_switch(await _greedy(client, thinking=True), await _greedy(client, thinking=False))


async def reasoning(client: ProbeClient, samples: int) -> Judged:
    """The reasoning comes apart from the text."""
    return judge.reasoning_split(await _greedy(client, thinking=True))


def tool_choice(mode: str) -> CellFn:
    """A cell for one tool_choice mode."""
    value: Any = {"type": "function", "function": {"name": TOOL}} if mode == "named" else mode

    async def cell(client: ProbeClient, samples: int) -> Judged:
        answer = await _greedy(client, 48, tools=TOOLS, tool_choice=value)
        return judge.tool_called(answer, mode, TOOL)

    return cell


async def stream_usage(client: ProbeClient, samples: int) -> Judged:
    """A stream ends with its usage."""
    ask = Ask(PROMPT, {"temperature": 0, "max_tokens": 8}, stream=True, measures=(Feature.STREAM_USAGE,))
    return judge.stream_usage(await client.ask(ask))


async def cached_tokens(client: ProbeClient, samples: int) -> Judged:
    """The repeat of a long prompt reports cached prompt tokens."""
    ask = Ask(LONG_PROMPT, {"temperature": 0, "max_tokens": 2})
    await client.ask(ask)
    return judge.cache_hit(await client.ask(ask))


#: Every cell, by the option it probes, in the order reported.
CELLS: Mapping[str, CellFn] = {
    "temperature=0": temperature_zero,
    "seed": seed,
    "max_tokens": max_tokens,
    "stop": stop,
    "logprobs/top_logprobs": logprobs,
    "n": n_choices,
    "presence_penalty": penalty("presence_penalty", 2.0),
    "frequency_penalty": penalty("frequency_penalty", 2.0),
    "repetition_penalty": penalty("repetition_penalty", 2.0),
    "output=JSON schema": constrained(
        JsonSchema(SCHEMA), judge.matches_schema(SCHEMA), _json_start, "JSON schema"
    ),
    "output=Regex": constrained(
        Regex(REGEX), judge.matches_regex(REGEX), judge.matches_regex(REGEX_START), "regex"
    ),
    "output=Choice": constrained(
        ChoiceOutput(CHOICES), judge.matches_regex("|".join(CHOICES)), _choice_start, "choice"
    ),
    "output=Grammar": constrained(
        Grammar(GRAMMAR), judge.matches_regex(GRAMMAR_LANGUAGE), judge.matches_regex(GRAMMAR_START), "grammar"
    ),
    "lora": lora,
    "thinking on/off": thinking,
    "reasoning split": reasoning,
    "tool_choice=none": tool_choice("none"),
    "tool_choice=auto": tool_choice("auto"),
    "tool_choice=required": tool_choice("required"),
    "tool_choice=named": tool_choice("named"),
    "stream usage": stream_usage,
    "cached tokens": cached_tokens,
}


#: The capability-table feature each cell measures (cells without one probe options every engine takes).
FEATURES: Mapping[str, Feature] = {
    "seed": Feature.SEED,
    "stop": Feature.STOP,
    "logprobs/top_logprobs": Feature.LOGPROBS,
    "n": Feature.N,
    "presence_penalty": Feature.PRESENCE_PENALTY,
    "frequency_penalty": Feature.FREQUENCY_PENALTY,
    "repetition_penalty": Feature.REPETITION_PENALTY,
    "output=JSON schema": Feature.JSON_SCHEMA,
    "output=Regex": Feature.REGEX,
    "output=Choice": Feature.CHOICE,
    "output=Grammar": Feature.GRAMMAR,
    "lora": Feature.LORA,
    "tool_choice=auto": Feature.TOOL_CHOICE_AUTO,
    "tool_choice=required": Feature.TOOL_CHOICE_REQUIRED,
    "tool_choice=named": Feature.TOOL_CHOICE_NAMED,
    "stream usage": Feature.STREAM_USAGE,
}
