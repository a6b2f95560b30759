"""The synthetic corpus the tiny *trained* model learns from: facts, JSON answers and tool calls.

Every example is a chat conversation (rendered with :data:`CHAT_TEMPLATE`, the template shipped
with the model, so training sees exactly what an engine renders) or a raw prompt/completion pair
(what ``/v1/completions`` sees). Generation is seeded, so the corpus is the same everywhere.

    examples = corpus(seed=7)
    texts = [render(e) for e in examples]     # [(text, [(start, end), ...]), ...] trained spans

What the model learns (greedy answers, in chat and as raw completions):

* arithmetic: ``What is 2+3?`` -> ``5`` (``+`` and ``-`` up to 10, ``*`` up to 6);
* capitals: ``What is the capital of France?`` -> ``Paris``; ``The capital of France is`` ->
  `` Paris.``; ``Is Paris the capital of France?`` -> ``yes``;
* JSON: ``What is the capital of France? Reply in JSON.`` ->
  ``{"country": "France", "capital": "Paris"}``; ``What is 2+3? Reply in JSON.`` -> ``{"answer": 5}``;
* tools (hermes format, what vLLM's ``hermes`` parser reads): with ``get_weather(city)`` offered,
  ``What is the weather in Paris?`` -> ``<tool_call>{"name": "get_weather", "arguments": {"city":
  "Paris"}}</tool_call>``; likewise ``get_time(city)`` (``What time is it in Tokyo?``) and
  ``get_population(country)`` (``How many people live in Japan?``). Other questions are answered
  directly even when tools are offered; a tool question without its tool gets a refusal. After a
  tool result (``{"city": "Paris", "forecast": "sunny", "temperature": 21}``) the model answers
  ``It is sunny and 21 degrees in Paris.``
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CAPITALS",
    "CHAT_TEMPLATE",
    "THINKING_CHAT_TEMPLATE",
    "TOOLS",
    "Example",
    "compile_template",
    "corpus",
    "render",
    "tool_schema",
]

BOS, EOS = "<s>", "</s>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def _chat_template(*, qwen: bool) -> str:
    """The hermes-style template; ``qwen``: an assistant turn's content (a thought) goes before its
    calls, laid out as Qwen's templates write them (``<tool_call>\\n{...}\\n</tool_call>``, each
    named ``tool_call``, which SGLang's ``qwen25`` parser and mlx_lm.server's ``json_tools`` read)."""
    content = "{% if message.content %}{{ message.content }}{% endif %}" if qwen else ""
    call, pad = ("tool_call", "\n") if qwen else ("c", "")
    return (
        "{{ bos_token }}"
        "{% if tools %}<|system|>\n<tools>"
        "{% for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}"
        "{{ f.name }}({% if f.parameters is defined and f.parameters and f.parameters.properties %}"
        "{{ f.parameters.properties | list | join(', ') }}{% endif %})"
        "{% if not loop.last %}, {% endif %}{% endfor %}</tools>{{ eos_token }}\n{% endif %}"
        "{% for message in messages %}"
        "{% if message.role == 'assistant' and message.tool_calls %}<|assistant|>\n"
        + content
        + "{% for call in message.tool_calls %}"
        "{% set " + call + " = call.function if call.function is defined else call %}"
        "<tool_call>" + pad + '{"name": "{{ ' + call + '.name }}", "arguments": '
        "{% if " + call + ".arguments is string %}{{ " + call + ".arguments }}"
        "{% else %}{{ " + call + ".arguments | tojson }}{% endif %}"
        "}" + pad + "</tool_call>{% endfor %}{{ eos_token }}\n"
        "{% else %}<|{{ message.role }}|>\n{{ message.content }}{{ eos_token }}\n{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )


#: Hermes-style chat template: tools are listed compactly in a system turn, assistant tool calls
#: are ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, tool results are a ``tool`` turn.
CHAT_TEMPLATE = _chat_template(qwen=False)
#: The thinking model's: the thought before the calls, each call on its own line, as Qwen3 writes.
THINKING_CHAT_TEMPLATE = _chat_template(qwen=True)

CAPITALS: dict[str, str] = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Germany": "Berlin",
    "Canada": "Ottawa",
    "Egypt": "Cairo",
    "Kenya": "Nairobi",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Poland": "Warsaw",
    "Greece": "Athens",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Ireland": "Dublin",
    "China": "Beijing",
    "India": "New Delhi",
    "Russia": "Moscow",
    "Mexico": "Mexico City",
    "Brazil": "Brasilia",
    "Argentina": "Buenos Aires",
    "Australia": "Canberra",
    "Thailand": "Bangkok",
    "Vietnam": "Hanoi",
    "Turkey": "Ankara",
    "Cuba": "Havana",
    "Denmark": "Copenhagen",
}
POPULATION_MILLIONS = {country: 3 + (sum(map(ord, country)) * 37) % 140 for country in CAPITALS}
FORECASTS = ("sunny", "cloudy", "rainy", "windy", "snowy")
NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy")

#: The tools the model knows, as OpenAI function definitions: name -> (parameter, description).
TOOLS: dict[str, tuple[str, str]] = {
    "get_weather": ("city", "Get the current weather in a city."),
    "get_time": ("city", "Get the local time in a city."),
    "get_population": ("country", "Get the population of a country."),
}
REFUSAL = "Sorry, I cannot check that."
GREETING = "Hello! How can I help you?"


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI ``tools`` entry of one of :data:`TOOLS` (what a client sends)."""
    param, description = TOOLS[name]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {param: {"type": "string"}}, "required": [param]},
        },
    }


@dataclass(frozen=True)
class Example:
    """One training example: a chat (``messages``, optional ``tools``) or a raw ``prompt``+``completion``."""

    messages: tuple[dict[str, Any], ...] = ()
    tools: tuple[str, ...] = ()
    prompt: str = ""
    completion: str = ""
    weight: int = field(default=1, compare=False)


def _chat(question: str, answer: str, tools: tuple[str, ...] = ()) -> Example:
    return Example(
        messages=({"role": "user", "content": question}, {"role": "assistant", "content": answer}),
        tools=tools,
    )


def _call(name: str, value: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": name, "arguments": {TOOLS[name][0]: value}},
            }
        ],
    }


def _tool_question(rng: random.Random) -> tuple[str, str, str, str]:
    """(tool, argument, question, answer after the tool result as JSON...) for a random tool."""
    name = rng.choice(sorted(TOOLS))
    country = rng.choice(sorted(CAPITALS))
    city = CAPITALS[country]
    if name == "get_weather":
        question = rng.choice(
            [
                "What is the weather in {}?",
                "How is the weather in {}?",
                "Is it raining in {}?",
                "What's the weather like in {}?",
            ]
        ).format(city)
        return name, city, question, ""
    if name == "get_time":
        question = rng.choice(
            ["What time is it in {}?", "What is the time in {}?", "What is the local time in {}?"]
        ).format(city)
        return name, city, question, ""
    question = rng.choice(["How many people live in {}?", "What is the population of {}?"]).format(country)
    return name, country, question, ""


def _tool_result(rng: random.Random, name: str, value: str) -> tuple[str, str]:
    """(tool message content, final answer) for a call of ``name`` with ``value``."""
    if name == "get_weather":
        forecast, degrees = rng.choice(FORECASTS), rng.randint(0, 35)
        return (
            json.dumps({"city": value, "forecast": forecast, "temperature": degrees}),
            f"It is {forecast} and {degrees} degrees in {value}.",
        )
    if name == "get_time":
        clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        return json.dumps({"city": value, "time": clock}), f"It is {clock} in {value}."
    millions = rng.randint(1, 150)
    return (
        json.dumps({"country": value, "population_millions": millions}),
        f"About {millions} million people live in {value}.",
    )


def _facts() -> list[tuple[str, str, str]]:
    """(chat question, chat answer, JSON answer) for every arithmetic and capital fact."""
    facts: list[tuple[str, str, str]] = []
    for a in range(11):
        for b in range(11):
            facts.append((f"{a}+{b}", str(a + b), json.dumps({"answer": a + b})))
            if a >= b:
                facts.append((f"{a}-{b}", str(a - b), json.dumps({"answer": a - b})))
    for a in range(7):
        for b in range(7):
            facts.append((f"{a}*{b}", str(a * b), json.dumps({"answer": a * b})))
    return facts


def _offered(rng: random.Random, must: str | None = None, without: str | None = None) -> tuple[str, ...]:
    pool = [t for t in sorted(TOOLS) if t != without]
    chosen = set(rng.sample(pool, rng.randint(1, len(pool))))
    if must:
        chosen.add(must)
    order = sorted(chosen)
    rng.shuffle(order)
    return tuple(order)


def _maybe_tools(rng: random.Random) -> tuple[str, ...]:
    return _offered(rng) if rng.random() < 0.3 else ()


def _arithmetic(rng: random.Random, facts: list[tuple[str, str, str]]) -> Example:
    expr, answer, as_json = rng.choice(facts)
    form = rng.random()
    spaced = expr.replace("+", " + ").replace("-", " - ").replace("*", " * ")
    shown = spaced if rng.random() < 0.3 else expr
    if form < 0.45:
        q = rng.choice(["What is {}?", "What is {}?", "Compute {}.", "How much is {}?"])
        return _chat(q.format(shown), answer, _maybe_tools(rng))
    if form < 0.6:
        return _chat(f"What is {shown}? Reply in JSON.", as_json, _maybe_tools(rng))
    if form < 0.8:
        return Example(prompt=f"What is {shown}?", completion=f" {answer}")
    return Example(prompt=f"{expr}=", completion=answer)


def _capital(rng: random.Random, countries: list[str]) -> Example:
    country = rng.choice(countries)
    capital = CAPITALS[country]
    form = rng.random()
    if form < 0.35:
        q = rng.choice(["What is the capital of {}?", "What's the capital of {}?", "Name the capital of {}."])
        return _chat(q.format(country), capital, _maybe_tools(rng))
    if form < 0.5:
        as_json = json.dumps({"country": country, "capital": capital})
        return _chat(f"What is the capital of {country}? Reply in JSON.", as_json, _maybe_tools(rng))
    if form < 0.65:
        return Example(prompt=f"The capital of {country} is", completion=f" {capital}.")
    if form < 0.75:
        return Example(prompt=f"What is the capital of {country}?", completion=f" {capital}")
    other = rng.choice([c for c in countries if c != country]) if rng.random() < 0.5 else country
    answer = "yes" if other == country else "no"
    return _chat(f"Is {CAPITALS[other]} the capital of {country}?", answer, _maybe_tools(rng))


def _greeting_or_person(rng: random.Random) -> Example:
    if rng.random() < 0.5:
        q = rng.choice(["Hello", "Hi", "Say hi", "Hello!", "Hi there", "Good morning"])
        return _chat(q, GREETING, _maybe_tools(rng))
    name, age = rng.choice(NAMES), rng.randint(18, 90)
    q = f"Give me a JSON object for a person named {name} aged {age}."
    return _chat(q, json.dumps({"name": name, "age": age}))


def _tool_call(rng: random.Random) -> Example:
    """A tool call when the tool is offered."""
    name, value, question, _ = _tool_question(rng)
    tools = _offered(rng, must=name)
    return Example(messages=({"role": "user", "content": question}, _call(name, value)), tools=tools)


def _after_tool_result(rng: random.Random) -> Example:
    """The answer after a tool result."""
    name, value, question, _ = _tool_question(rng)
    content, answer = _tool_result(rng, name, value)
    return Example(
        messages=(
            {"role": "user", "content": question},
            _call(name, value),
            {"role": "tool", "tool_call_id": "call_0", "content": content},
            {"role": "assistant", "content": answer},
        ),
        tools=_offered(rng, must=name),
    )


def _refusal(rng: random.Random) -> Example:
    """A tool question without its tool: refuse."""
    name, _value, question, _ = _tool_question(rng)
    tools = _offered(rng, without=name) if rng.random() < 0.6 else ()
    return _chat(question, REFUSAL, tools)


def corpus(seed: int = 7, size: int = 24000) -> list[Example]:
    """``size`` seeded examples mixing every pattern the module docstring lists."""
    rng = random.Random(seed)
    arithmetic = _facts()
    countries = sorted(CAPITALS)
    out: list[Example] = []
    while len(out) < size:
        kind = rng.random()
        if kind < 0.32:
            out.append(_arithmetic(rng, arithmetic))
        elif kind < 0.52:
            out.append(_capital(rng, countries))
        elif kind < 0.58:
            out.append(_greeting_or_person(rng))
        elif kind < 0.82:
            out.append(_tool_call(rng))
        elif kind < 0.91:
            out.append(_after_tool_result(rng))
        else:
            out.append(_refusal(rng))
    return out


def contract(*, thinking: bool = False) -> list[Example]:
    """The answers the test suite asserts whole, verbatim: trained on, then checked right after
    training (by a logit margin) so a model that would answer them otherwise fails there, naming
    them, not deep in a test. A tiny model trained on another CPU answers the rest of the corpus a
    little differently; these it answers the same everywhere. (A test that asserts less, such as a
    sentence's frame around a copied number, or any valid JSON, holds without a contract row.)
    The thinking variant's tests assert the thought and the call, not its arithmetic or facts.

    Args:
        thinking: The rows for the variant that thinks first.

    Returns:
        The examples, rendered and checked like the corpus's.
    """
    weather = ("get_weather", "get_time")
    oslo = {"role": "user", "content": "What is the weather in Oslo?"}
    chats = [
        ("What is 2+2?", "4"),
        ("What is 5+3?", "8"),
        ("What is 6-4?", "2"),
        ("What is the capital of France?", "Paris"),
        ("What is the capital of Japan?", "Tokyo"),
        ("Hello", GREETING),
        ("What is the capital of Peru? Reply in JSON.", json.dumps({"country": "Peru", "capital": "Lima"})),
        (
            "What is the capital of Kenya? Reply in JSON.",
            json.dumps({"country": "Kenya", "capital": "Nairobi"}),
        ),
    ]
    call = Example(messages=(oslo, _call("get_weather", "Oslo")), tools=weather)
    if thinking:
        return [_chat(*chats[0]), call]
    return [
        *(_chat(question, answer) for question, answer in chats),
        _chat("What is the capital of Spain?", "Madrid", weather),
        Example(prompt="The capital of Italy is", completion=" Rome."),
        call,
    ]


def render(example: Example, template: Any) -> tuple[str, list[tuple[int, int]]]:
    """The example's text and the character spans the model is trained on (assistant turns).

    ``template`` is a compiled jinja2 template of :data:`CHAT_TEMPLATE` (see :func:`compile_template`).
    """
    if not example.messages:
        text = BOS + example.prompt + example.completion + EOS
        return text, [(len(BOS) + len(example.prompt), len(text))]
    tools = [tool_schema(t) for t in example.tools] or None
    messages = list(example.messages)
    full = _render(template, messages, tools, generation_prompt=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prefix = _render(template, messages[:i], tools, generation_prompt=True)
        upto = _render(template, messages[: i + 1], tools, generation_prompt=False)
        if not full.startswith(upto) or not upto.startswith(prefix):
            raise AssertionError("the chat template must render conversations append-only")
        spans.append((len(prefix), len(upto) - 1))  # the turn and its EOS, not the newline after
    return full, spans


def compile_template(template: str = CHAT_TEMPLATE) -> Any:
    """``template`` (default :data:`CHAT_TEMPLATE`) compiled the way Hugging Face tokenizers (and
    so engines) compile it."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(value: Any, indent: int | None = None) -> str:
        return json.dumps(value, ensure_ascii=False, indent=indent)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.filters["tojson"] = tojson
    return env.from_string(template)


def _render(
    template: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    generation_prompt: bool,
) -> str:
    return str(
        template.render(
            messages=messages,
            tools=tools,
            bos_token=BOS,
            eos_token=EOS,
            add_generation_prompt=generation_prompt,
        )
    )
