"""Run SGLang's frontend language (``@sgl.function``, gen, select, fork, run_batch) on any engine.

    import sglang as sgl
    import unillm
    from unillm_sglang.dsl import UnillmBackend

    sgl.set_default_backend(UnillmBackend(unillm.connect("sglang", "http://127.0.0.1:30000")))

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=32))

    print(qa.run(question="What is 1+1?")["answer"])

Install with ``pip install "unillm-sglang[dsl]"`` (``sglang==0.5.2`` + ``pybase64``: the frontend only,
no torch, no GPU kernels; nothing touches the network at import or construction time).

How each DSL feature maps onto unillm, for every engine unillm talks to:

* ``gen``: max_tokens, stop, temperature, top_p, top_k, min_p, penalties, ``n`` -> the same unified
  options; ``regex`` -> :class:`unillm.Regex`; ``json_schema`` (a JSON string) -> a JSON-schema
  constraint; ``dtype`` (int/float/str/bool) -> SGLang's own regex for that type. The engine enforces
  every constraint; options it cannot honour raise :class:`unillm.UnsupportedFeature` before sending.
  ``min_tokens``, ``stop_token_ids``, ``ignore_eos``, prompt logprobs and images have no unified
  option and raise as well.
* ``select`` / ``gen(choices=...)``: **constrained choice**, always — the engine decodes exactly one
  of the options (:class:`unillm.Choice`), greedily at SGLang's default temperature 0, sampled at a
  higher one. Logprob scoring would need prompt logprobs, which engines expose differently and unillm
  does not unify, so SGLang's default ``token_length_normalized`` and ``greedy_token_selection`` are
  served by constrained choice (``meta_info["method"] == "constrained_choice"``);
  ``unconditional_likelihood_normalized`` raises.
* Truncated constrained answers (``max_tokens`` too small for the regex/schema) raise
  :class:`unillm.OutputParseError` instead of returning broken JSON.
* Roles: a program that uses ``sgl.system/user/assistant`` is sent as ``messages`` to the engine's chat
  API, so the **model's own chat template** renders the roles, once. SGLang's template only decorates
  ``state.text()``; its default system prompt and stop strings are dropped so nothing of it reaches the
  engine. A program without roles goes to the completions API with the plain text. Pass
  ``api="completion"`` to render roles with SGLang's template instead (base models).
* ``fork`` / ``join``: branches are independent requests run concurrently; ``concate_and_append``
  joins by text (``support_concate_and_append`` is False: there is no KV-cache splicing).
* ``run_batch``: SGLang's worker threads all share one event loop and one connection pool.
* ``run(stream=True)``: ``gen`` streams through ``llm.stream``.

Errors raised here happen in SGLang's worker thread: SGLang stores them in ``state.error()`` (or
raises them directly with ``run(..., use_thread=False)``). Reading a variable the failed step never
set (``state["city"]``) raises that same error (e.g. :class:`unillm.OutputParseError`) instead of
SGLang's bare ``KeyError``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from unillm.adapter import (
    AsyncClient,
    BlockingClient,
    Choice,
    Closing,
    Completion,
    InvalidOptions,
    JsonSchema,
    Options,
    Regex,
    TokenLogprob,
    UnsupportedFeature,
)

try:
    from sglang.lang.backend.base_backend import (  # type: ignore[import-untyped]
        BaseBackend,
    )
    from sglang.lang.chat_template import (  # type: ignore[import-untyped]
        ChatTemplate,
        get_chat_template,
        get_chat_template_by_model_path,
    )
    from sglang.lang.choices import (  # type: ignore[import-untyped]
        ChoicesDecision,
        ChoicesSamplingMethod,
        greedy_token_selection,
        token_length_normalized,
    )
    from sglang.lang.ir import (  # type: ignore[import-untyped]
        REGEX_BOOL,
        REGEX_FLOAT,
        REGEX_INT,
        REGEX_STR,
    )
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        'unillm_sglang.dsl needs SGLang\'s frontend: pip install "unillm-sglang[dsl]" '
        '(or: pip install "sglang==0.5.2" pybase64)'
    ) from e

if TYPE_CHECKING:
    from sglang.lang.interpreter import StreamExecutor  # type: ignore[import-untyped]
    from sglang.lang.ir import SglSamplingParams

__all__ = ["Api", "GenArgs", "UnillmBackend", "gen_args"]

Api = Literal["auto", "completion"]
_DTYPE_REGEX: dict[object, tuple[str, tuple[str, ...]]] = {
    int: (REGEX_INT, (" ", "\n")),
    "int": (REGEX_INT, (" ", "\n")),
    float: (REGEX_FLOAT, (" ", "\n")),
    "float": (REGEX_FLOAT, (" ", "\n")),
    str: (REGEX_STR, ()),
    "str": (REGEX_STR, ()),
    bool: (REGEX_BOOL, ()),
    "bool": (REGEX_BOOL, ()),
}


@dataclasses.dataclass(frozen=True)
class GenArgs:
    """What one ``sgl.gen`` becomes in unillm: options for ``llm.generate`` and an output constraint."""

    options: Options
    output: JsonSchema | Regex | None = None


def _unset(value: Any) -> bool:
    # SglSamplingParams defaults some fields to the tuple ``(None,)``; treat it as "not set".
    return value is None or value == (None,)


def gen_args(params: SglSamplingParams, engine: str) -> GenArgs:
    """Map SGLang's sampling params to unillm options, refusing what has no unified option.

    gen_args(SglSamplingParams(max_new_tokens=8, regex=r"[0-9]+"), "vllm")
    # GenArgs(options={"max_tokens": 8, ...}, output=Regex("[0-9]+"))
    """
    _refuse_unmapped(params, engine)
    options: Options = {"max_tokens": params.max_new_tokens}
    if params.temperature is not None:
        options["temperature"] = params.temperature
    if params.top_p is not None:
        options["top_p"] = params.top_p
    if params.top_k is not None and params.top_k > 0:
        options["top_k"] = params.top_k
    if params.min_p:  # SGLang's defaults (0.0) mean "off": not sent, so any engine accepts them
        options["min_p"] = params.min_p
    if params.frequency_penalty:
        options["frequency_penalty"] = params.frequency_penalty
    if params.presence_penalty:
        options["presence_penalty"] = params.presence_penalty
    if params.n is not None and params.n != 1:
        options["n"] = params.n
    stop = [params.stop] if isinstance(params.stop, str) else list(params.stop or ())
    regex: str | None = params.regex
    if params.dtype is not None:
        if params.dtype not in _DTYPE_REGEX:
            raise InvalidOptions(f"sgl.gen(dtype={params.dtype!r}): use int, float, str or bool")
        if regex is not None:
            raise InvalidOptions("sgl.gen: pass dtype= or regex=, not both")
        regex, extra_stop = _DTYPE_REGEX[params.dtype]
        stop += [s for s in extra_stop if s not in stop]
    if stop:
        options["stop"] = stop
    if params.return_logprob:
        options["logprobs"] = True
        if not _unset(params.top_logprobs_num) and params.top_logprobs_num:
            options["top_logprobs"] = params.top_logprobs_num
    return GenArgs(options, _output(params.json_schema, regex))


def _refuse_unmapped(params: SglSamplingParams, engine: str) -> None:
    """Refuse the sampling params unillm has no unified option for.

    Raises:
        UnsupportedFeature: One is set (dropping it would change the answer).
    """

    def refuse(feature: str, alternative: str = "") -> UnsupportedFeature:
        return UnsupportedFeature(
            engine,
            f"sgl.gen({feature}) through unillm",
            why=("unillm has no unified option for it, and dropping it would change the answer"),
            alternative=alternative,
        )

    if params.min_new_tokens:
        raise refuse("min_tokens=...", "Leave min_tokens unset")
    if params.stop_token_ids:
        raise refuse("stop_token_ids=...", "Use stop=[...] strings instead")
    if params.ignore_eos:
        raise refuse("ignore_eos=True")
    if not _unset(params.logprob_start_len):
        raise refuse(
            "logprob_start_len=... (prompt logprobs)", "Ask for output logprobs only: return_logprob=True"
        )


def _output(json_schema: str | None, regex: str | None) -> JsonSchema | Regex | None:
    """The constraint: a JSON schema (given as a JSON string) or a regex, not both.

    Raises:
        InvalidOptions: Both are given, or the schema is no JSON object.
    """
    if json_schema is not None:
        if regex is not None:
            raise InvalidOptions("sgl.gen: pass regex= (or dtype=) or json_schema=, not both")
        try:
            schema = json.loads(json_schema)
        except (TypeError, json.JSONDecodeError) as e:
            raise InvalidOptions(f"sgl.gen(json_schema=...) must be a JSON string: {e}") from None
        if not isinstance(schema, Mapping):
            raise InvalidOptions("sgl.gen(json_schema=...) must encode a JSON object")
        return JsonSchema(schema)
    if regex is not None:
        return Regex(regex)
    return None


class UnillmBackend(BaseBackend, Closing):  # type: ignore[misc]
    """An SGLang frontend backend that runs ``@sgl.function`` programs on any unillm engine.

        backend = UnillmBackend(unillm.connect("vllm", "http://127.0.0.1:8000"))
        state = my_program.run(question="Hi", backend=backend)
        backend.close()

    ``llm`` is an async :class:`unillm.LLM` or :class:`unillm.Fleet` (any :class:`unillm.Client`: the
    backend makes its own blocking twin, with one private event-loop thread, and closes it in
    :meth:`close`) or a :class:`unillm.BlockingLLM` you own.
    ``api="auto"`` sends role-based programs to the chat API (model's own chat template) and plain
    text to the completions API; ``api="completion"`` always sends text rendered with
    ``chat_template`` (an SGLang template name or object; default: matched from the model name).
    """

    def __init__(
        self,
        llm: AsyncClient | BlockingClient,
        *,
        api: Api = "auto",
        chat_template: str | ChatTemplate | None = None,
    ) -> None:
        super().__init__()
        if api not in ("auto", "completion"):
            raise InvalidOptions(f"api={api!r}: use 'auto' or 'completion'")
        self._owns = isinstance(llm, AsyncClient)
        self.llm: BlockingClient = llm.blocking() if isinstance(llm, AsyncClient) else llm
        self.engine: str = self.llm.llm.engine
        self.api: Api = api
        self.is_chat_model = api == "auto"
        self.support_concate_and_append = False
        self._template_choice = chat_template
        self._template: ChatTemplate | None = None
        self._lock = threading.Lock()

    # -- lifecycle (``with`` closes: Closing) ---------------------------------------------
    def close(self) -> None:
        """Close the connections (and the loop thread) if this backend created them."""
        if self._owns:
            self._owns = False
            self.llm.close()

    def shutdown(self) -> None:
        """SGLang's name for :meth:`close`."""
        self.close()

    # -- what SGLang asks -----------------------------------------------------------------
    def get_model_name(self) -> str:
        """The model the engine serves."""
        return self.llm.info().model

    def get_server_info(self) -> dict[str, Any]:
        """Engine, version, model and context limit, as unillm discovered them."""
        info = self.llm.info()
        return {
            "engine": info.engine,
            "version": info.version,
            "model": info.model,
            "max_model_len": info.max_model_len,
        }

    def get_chat_template(self) -> ChatTemplate:
        """SGLang's template for ``state.text()`` (in ``api="completion"``: for the prompt too)."""
        with self._lock:
            if self._template is None:
                choice = self._template_choice
                if isinstance(choice, ChatTemplate):
                    template = choice
                elif choice is not None:
                    template = get_chat_template(choice)
                else:
                    template = get_chat_template_by_model_path(self.get_model_name())
                if self.api == "auto":
                    # The engine's chat template renders the roles; SGLang's must add nothing.
                    template = dataclasses.replace(template, default_system_prompt=None, stop_str=())
                self._template = template
            self.chat_template = self._template
            return self._template

    # -- generation ------------------------------------------------------------------------
    def generate(
        self,
        s: StreamExecutor,
        sampling_params: SglSamplingParams,
        spec_var_name: str | None = None,
    ) -> tuple[str | list[str], dict[str, Any]]:
        """Run one ``sgl.gen``: returns the text (a list when n > 1) and its meta info."""
        with _surfaced_in_variables(s):
            return self._generate(s, sampling_params)

    def _generate(
        self,
        s: StreamExecutor,
        sampling_params: SglSamplingParams,
    ) -> tuple[str | list[str], dict[str, Any]]:
        self._check_program(s)
        args = gen_args(sampling_params, self.engine)
        prompt, messages, api = self._prompt(s, "sgl.gen")
        r = self.llm.generate(prompt, messages=messages, output=args.output, **args.options)
        meta = _meta(r, api)
        if r.logprobs is not None:
            meta["output_token_logprobs"] = [(t.logprob, None, t.token) for t in r.logprobs]
            meta["output_top_logprobs"] = [_tops(t) for t in r.logprobs]
        if len(r.choices) > 1:
            return [c.text for c in r.choices], meta
        return r.text, meta

    def generate_stream(
        self,
        s: StreamExecutor,
        sampling_params: SglSamplingParams,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream one ``sgl.gen`` as ``(text delta, meta info)`` pairs (``run(stream=True)``)."""
        with _surfaced_in_variables(s):
            yield from self._generate_stream(s, sampling_params)

    def _generate_stream(
        self,
        s: StreamExecutor,
        sampling_params: SglSamplingParams,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        self._check_program(s)
        args = gen_args(sampling_params, self.engine)
        if "n" in args.options:
            raise UnsupportedFeature(
                self.engine, "sgl.gen(n>1) in a streamed program", alternative="Run it without stream=True"
            )
        prompt, messages, api = self._prompt(s, "sgl.gen")
        meta: dict[str, Any] = {"engine": self.engine, "api": api}
        for d in self.llm.stream(prompt, messages=messages, output=args.output, **args.options):
            if d.finish_reason is not None:
                meta["finish_reason"] = d.finish_reason
            if d.usage is not None:
                meta["prompt_tokens"] = d.usage.prompt_tokens
                meta["completion_tokens"] = d.usage.completion_tokens
            if d.timings is not None:
                meta["e2e_latency"] = d.timings.total_s
            if d.reasoning:  # the thinking so far, under SGLang's name; the text stays the answer
                meta["reasoning_content"] = meta.get("reasoning_content", "") + d.reasoning
            if d.text or d.usage is not None or d.finish_reason is not None:
                yield d.text, dict(meta)

    def select(
        self,
        s: StreamExecutor,
        choices: Sequence[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod | None = None,
    ) -> ChoicesDecision:
        """Pick one of ``choices`` by constrained decoding on the engine (see the module notes)."""
        with _surfaced_in_variables(s):
            return self._select(s, choices, temperature, choices_method)

    def _select(
        self,
        s: StreamExecutor,
        choices: Sequence[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod | None,
    ) -> ChoicesDecision:
        self._check_program(s)
        if choices_method not in (None, token_length_normalized, greedy_token_selection):
            raise UnsupportedFeature(
                self.engine,
                f"sgl.select(choices_method={type(choices_method).__name__})",
                why="scoring choices needs prompt logprobs, which unillm does not expose; unillm "
                "picks a choice by constrained decoding instead",
                alternative="Leave choices_method unset (constrained choice)",
            )
        options = [str(c) for c in choices]
        prompt, messages, api = self._prompt(s, "sgl.select")
        # Enough tokens for the longest option even at one token per byte, plus the end token.
        budget = max(len(c.encode("utf-8")) for c in options) + 8
        # unillm checks the answer is one of the options (OutputParseError otherwise).
        r = self.llm.generate(
            prompt, messages=messages, output=Choice(options), temperature=temperature, max_tokens=budget
        )
        meta = _meta(r, api)
        meta["method"] = "constrained_choice"
        return ChoicesDecision(decision=r.text, meta_info=meta)

    # -- what SGLang may call but unillm cannot do -------------------------------------------
    def spec_fill(self, value: str) -> None:
        """API speculative execution (``num_api_spec_tokens``) is not supported."""
        raise _no_spec(self.engine)

    def role_end_generate(self, s: StreamExecutor) -> None:
        """API speculative execution (``num_api_spec_tokens``) is not supported."""
        raise _no_spec(self.engine)

    # -- internals -------------------------------------------------------------------------
    def _check_program(self, s: StreamExecutor) -> None:
        if s.num_api_spec_tokens is not None:
            raise _no_spec(self.engine)
        if s.images_:
            raise UnsupportedFeature(
                self.engine,
                "sgl.image/sgl.video through unillm",
                why="unillm sends text and chat messages only",
            )

    def _prompt(self, s: StreamExecutor, what: str) -> tuple[str | None, list[dict[str, str]] | None, str]:
        """The prompt (completions API) or the messages (chat API) for the current position."""
        if self.api == "completion" or (not s.messages_ and s.cur_role is None):
            return str(s.text_), None, "completion"
        if s.cur_role != "assistant":
            raise UnsupportedFeature(
                self.engine,
                f"{what} outside sgl.assistant(...) in a program with roles",
                why="the chat API answers as the assistant; text outside the assistant turn would be lost",
                alternative=f"Put {what} inside sgl.assistant(...), or use "
                "UnillmBackend(llm, api='completion')",
            )
        template = self.get_chat_template()
        begin = s.cur_role_begin_pos
        if s.text_[begin:].strip():
            raise UnsupportedFeature(
                self.engine,
                f"text before {what} inside sgl.assistant(...)",
                why="the chat API cannot continue a partly written assistant turn on every engine",
                alternative="Start the assistant turn with the gen/select (move fixed text to the user "
                "turn), or use UnillmBackend(llm, api='completion')",
            )
        expected = "".join(
            p + str(m["content"]) + q
            for i, m in enumerate(s.messages_)
            for p, q in [template.get_prefix_and_suffix(m["role"], s.messages_[:i])]
        )
        expected += template.get_prefix_and_suffix("assistant", s.messages_)[0]
        if _squash(expected) != _squash(s.text_[:begin]):
            raise UnsupportedFeature(
                self.engine,
                f"text outside sgl.system/user/assistant before {what}",
                why="a program with roles is sent as chat messages, which have no place for it",
                alternative="Put all text inside a role, or use UnillmBackend(llm, api='completion')",
            )
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in s.messages_]
        return None, messages, "chat"


class _FailedVariables(dict[str, Any]):
    """A program's variables after a step failed: reading one it never set raises that failure."""

    def __init__(self, variables: Mapping[str, Any], error: Exception) -> None:
        super().__init__(variables)
        self.error = error

    def __missing__(self, name: str) -> Any:
        raise self.error


@contextmanager
def _surfaced_in_variables(s: StreamExecutor) -> Iterator[None]:
    """Let the user's program see why a step failed when it reads the variable the step never set.

    SGLang's worker thread only warns and keeps the error in ``state.error()``, so ``state["city"]``
    used to raise a bare ``KeyError: 'city'``; now it raises the error itself (e.g. OutputParseError).
    A ``var_scope`` the failed step was inside never ended: SGLang still holds the scope's start
    offset (an int) under its name, so that name is dropped too and reading it raises the error.
    """
    try:
        yield
    except Exception as e:
        if not isinstance(s.variables, _FailedVariables):
            ended = {k: v for k, v in s.variables.items() if type(v) is not int}  # open scopes: int
            s.variables = _FailedVariables(ended, e)
        raise


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _meta(r: Completion[Any], api: str) -> dict[str, Any]:
    return {
        "engine": r.engine,
        "model": r.model,
        "api": api,
        "finish_reason": r.finish_reason,
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
        "e2e_latency": r.timings.total_s,
        **({"reasoning_content": r.reasoning} if r.reasoning is not None else {}),
    }


def _tops(t: TokenLogprob) -> list[tuple[float, None, str]]:
    return [(a.logprob, None, a.token) for a in t.top]


def _no_spec(engine: str) -> UnsupportedFeature:
    return UnsupportedFeature(
        engine,
        "@sgl.function(num_api_spec_tokens=...) through unillm",
        why="API speculative execution is an OpenAI-backend trick unillm does not emulate",
        alternative="Drop num_api_spec_tokens",
    )
