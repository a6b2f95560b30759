"""vLLM's engine in its own interpreter, fed line-delimited JSON (run by the vLLM env's python).

    python worker.py --model /models/tiny --dtype bfloat16 ...     # vLLM's engine flags

This file runs under vLLM's interpreter, where unillm is not installed: it imports only the
standard library and vLLM. The parent (:mod:`unillm_vllm.inprocess.transport`) writes one job
per line on stdin and reads one line per finished request on stdout, keyed by the job's
``id``; the translation both ways is the parent's (:mod:`unillm_vllm.inprocess.translate`).

* first line out: ``{"ready": {"version", "max_model_len", "max_num_seqs"}}`` once the model is loaded, or
  ``{"fatal": message}`` if the engine could not start;
* a job: ``{"id", "prompt" | "messages", "chat_template_kwargs"?, "params": {SamplingParams
  fields}, "structured_outputs"?: {...}}``;
* a result: ``{"id", "prompt_tokens", "outputs": [{"index", "text", "tokens",
  "finish_reason"}]}``, or ``{"id", "status", "error"}`` for a request the engine refused.

vLLM's own logs go to stderr (fd 1 is pointed there before vLLM is imported), so stdout
carries nothing but protocol lines. The engine is driven with ``LLMEngine.add_request`` and
``step()``: every job is handed to the scheduler as soon as it arrives, every request is
answered as soon as it finishes; the engine core runs in its own process (as under ``vllm
serve`` and ``vllm run-batch``), so scheduling and the model overlap this loop. End of stdin
stops the worker.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from typing import Any, BinaryIO


def _protocol_stdout() -> BinaryIO:
    """A private handle on the real stdout; fd 1 then points at stderr (vLLM prints logs to it)."""
    out = os.fdopen(os.dup(1), "wb", buffering=1 << 16)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _reader(jobs: queue.Queue[dict[str, Any] | None]) -> None:
    """Queue each job line from stdin; None at end of input."""
    for line in sys.stdin.buffer:
        if line.strip():
            jobs.put(json.loads(line))
    jobs.put(None)


class Worker:
    """The engine, its tokenizer and the requests in it."""

    def __init__(self, argv: list[str], out: BinaryIO) -> None:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        from vllm.v1.engine.llm_engine import LLMEngine

        parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="unillm-vllm-worker"))
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            raise ValueError(f"flags vLLM's engine does not take: {' '.join(unknown)}")
        # the engine core in its own process, as vllm serve and vllm run-batch run it: it schedules
        # and runs the model while this process feeds and reads it (unless the environment sets
        # VLLM_ENABLE_V1_MULTIPROCESSING=0, as unillm's tests do: one fewer spawn importing vLLM)
        multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        self.engine = LLMEngine.from_engine_args(
            EngineArgs.from_cli_args(args), enable_multiprocessing=multiprocessing
        )
        self.tokenizer = self.engine.get_tokenizer()
        self.max_model_len = int(self.engine.model_config.max_model_len)
        self.max_num_seqs = int(self.engine.vllm_config.scheduler_config.max_num_seqs)
        self.defaults = dict(self.engine.model_config.get_diff_sampling_param())
        self.out = out
        self.ids: dict[str, str] = {}  # vLLM's request id -> the job's id

    def add(self, job: dict[str, Any]) -> None:
        """Tokenize the job's prompt and hand it to the scheduler (or answer its refusal)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        try:
            if "messages" in job:
                text = self.tokenizer.apply_chat_template(
                    job["messages"],
                    tokenize=False,
                    add_generation_prompt=True,
                    **job.get("chat_template_kwargs", {}),
                )  # as vLLM's server: the template writes the special tokens itself
                tokens = self.tokenizer.encode(text, add_special_tokens=False)
            else:
                tokens = self.tokenizer.encode(job["prompt"])
            params = {**self.defaults, **job["params"]}
            if params.get("max_tokens") is None:
                params["max_tokens"] = self.max_model_len - len(tokens)
            params["output_kind"] = RequestOutputKind.FINAL_ONLY  # no partial outputs each step
            if job.get("structured_outputs"):
                params["structured_outputs"] = StructuredOutputsParams(**job["structured_outputs"])
            internal = self.engine.add_request(
                job["id"], {"prompt_token_ids": tokens}, SamplingParams(**params)
            )
        except Exception as e:  # this request only: the engine refused it
            self._write({"id": job["id"], "status": 400, "error": f"{type(e).__name__}: {e}"})
            return
        self.ids[internal] = job["id"]

    def step(self) -> None:
        """One engine step; write each request that finished in it."""
        for output in self.engine.step():
            if not output.finished:
                continue
            job_id = self.ids.pop(output.request_id, output.request_id)
            outputs = [
                {
                    "index": o.index,
                    "text": o.text,
                    "tokens": len(o.token_ids),
                    "finish_reason": o.finish_reason,
                }
                for o in output.outputs
            ]
            prompt = output.prompt_token_ids or []
            self._write({"id": job_id, "prompt_tokens": len(prompt), "outputs": outputs})
        self.out.flush()

    def busy(self) -> bool:
        """Whether requests are still in the engine."""
        return bool(self.engine.has_unfinished_requests())

    def _write(self, line: dict[str, Any]) -> None:
        self.out.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")


def main(argv: list[str]) -> int:
    """Load the engine from vLLM flags, then answer jobs until stdin ends."""
    out = _protocol_stdout()
    try:
        import vllm

        worker = Worker(argv, out)
    except BaseException as e:  # reported to the parent, which raises it typed
        out.write(json.dumps({"fatal": f"{type(e).__name__}: {e}"}).encode() + b"\n")
        out.flush()
        return 1
    ready = {
        "version": vllm.__version__,
        "max_model_len": worker.max_model_len,
        "max_num_seqs": worker.max_num_seqs,
    }
    out.write(json.dumps({"ready": ready}).encode() + b"\n")
    out.flush()
    jobs: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_reader, args=(jobs,), daemon=True).start()
    open_input = True
    while open_input or worker.busy():
        block = open_input and not worker.busy()
        try:
            job: dict[str, Any] | None = jobs.get(block=block)
            while True:
                if job is None:
                    open_input = False
                else:
                    worker.add(job)
                job = jobs.get_nowait()
        except queue.Empty:
            pass
        if worker.busy():
            worker.step()
        else:
            worker.out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
