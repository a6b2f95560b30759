"""The in-process engine: one worker thread runs every request, in arrival order.

Methods without a leading underscore are called on the event loop; the others run on the worker.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream

from unillm.adapter import LaunchSpec
from unillm_mlx.inprocess.channel import Cancelled, Channel
from unillm_mlx.inprocess.counters import Counters
from unillm_mlx.inprocess.events import Done, Event, Failure, Start
from unillm_mlx.inprocess.generation import Prepared, generate_choice
from unillm_mlx.inprocess.models import ModelStore
from unillm_mlx.inprocess.parsing import Job, RequestError, parse_job, tokenize_is_chat
from unillm_mlx.inprocess.prompts import model_context, prompt_ids

__all__ = ["Engine"]


class Engine:
    """Loaded models and the single worker thread that runs them; loading starts at once.

    Args:
        spec: The launch settings.
    """

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.model_id = spec.served_name or spec.model
        self._store = ModelStore(spec)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="unillm-mlx")
        self._jobs: set[Job] = set()
        self._counters = Counters()
        self.max_model_len = spec.max_model_len or model_context(spec.model)
        self._worker.submit(self._store.load_base)  # requests queue behind the loading

    # -- on the event loop -----------------------------------------------------------------
    def models(self) -> list[dict[str, Any]]:
        """``/v1/models``'s entries: the model, then each LoRA adapter by name."""
        base = {
            "id": self.model_id,
            "object": "model",
            "root": self.spec.model,
            "max_model_len": self.max_model_len,
        }
        loras = sorted(self._store.loras().items())
        return [base, *({"id": n, "object": "model", "root": p, "parent": self.model_id} for n, p in loras)]

    def metrics(self) -> str:
        """Prometheus text: request and token counters, and requests queued or running."""
        return self._counters.prometheus(running=len(self._jobs))

    def add_lora(self, name: str, path: str) -> None:
        """Serve the LoRA adapter at ``path`` as ``name`` (a RequestError if it cannot)."""
        self._store.add_lora(name, path)

    def remove_lora(self, name: str) -> None:
        """Stop serving the LoRA adapter ``name`` (a RequestError if there is none)."""
        self._store.remove_lora(name)

    def parse(self, body: dict[str, Any], *, chat: bool) -> Job:
        """The generation request in ``body``, checked (a RequestError if it is refused)."""
        return parse_job(body, chat=chat, model_id=self.model_id, model_path=self.spec.model)

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize``: ``{"prompt": ...}`` or ``{"messages": [...]}`` -> tokens and count."""
        chat = tokenize_is_chat(body)

        def work() -> list[int]:
            _model, tokenizer = self._store.model_for(None)
            return prompt_ids(tokenizer, body, chat=chat)

        ids = await anyio.to_thread.run_sync(lambda: self._worker.submit(work).result())
        return {"tokens": ids, "count": len(ids), "max_model_len": self.max_model_len}

    async def submit(self, job: Job) -> MemoryObjectReceiveStream[Event]:
        """Queue ``job`` on the worker; its events arrive on the stream returned."""
        channel = Channel(job.cancelled)
        self._jobs.add(job)
        self._worker.submit(self._run, job, channel)
        return channel.receive

    async def aclose(self) -> None:
        """Cancel every request, wait for the worker to end and drop the models."""
        for job in list(self._jobs):
            job.cancelled.set()
        await anyio.to_thread.run_sync(self._shutdown)

    def _shutdown(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._store.close()

    # -- on the worker thread --------------------------------------------------------------
    def _run(self, job: Job, channel: Channel) -> None:
        try:
            try:
                prepared = self._prepare(job)
            except RequestError as e:
                channel.emit(Failure(e.status, str(e)))
                return
            self._counters.requests += 1
            self._counters.prompt_tokens += len(prepared.prompt)
            channel.emit(Start(len(prepared.prompt)))
            for index in range(job.n):
                generate_choice(
                    job, index, prepared, draft=self._store.draft, counters=self._counters, emit=channel.emit
                )
            channel.emit(Done())
        except Cancelled:
            pass
        except Exception as e:
            with contextlib.suppress(Cancelled):
                channel.emit(Failure(500, f"in-process MLX failed: {type(e).__name__}: {e}"))
        finally:
            self._jobs.discard(job)
            channel.close()

    def _prepare(self, job: Job) -> Prepared:
        model, tokenizer = self._store.model_for(job.adapter)
        prompt = prompt_ids(tokenizer, job.body, chat=job.chat)
        limit = self.max_model_len
        if limit is not None and len(prompt) + job.max_tokens > limit:
            raise RequestError(
                400,
                f"prompt ({len(prompt)} tokens) + max_tokens ({job.max_tokens}) "
                f"exceeds max_model_len={limit}",
            )
        if job.structured is None:
            return Prepared(model, tokenizer, prompt)
        from unillm_mlx.after_thought import after_thought, special_markers, thinks
        from unillm_mlx.grammar import ConstraintError, compile_constraint

        lltokenizer = self._store.grammar_tokenizer(model, tokenizer)
        try:
            grammar = compile_constraint(job.structured, lltokenizer)
            if thinks(job.body):  # room to think first (the markers as tokens where they are ones)
                grammar = after_thought(grammar, special=special_markers(lltokenizer))
        except ConstraintError as e:
            raise RequestError(400, str(e)) from None
        return Prepared(model, tokenizer, prompt, grammar, lltokenizer)
