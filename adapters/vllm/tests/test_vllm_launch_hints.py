"""vLLM's known causes of failed launches map to advice (log lines as vLLM 0.32 prints them)."""

from __future__ import annotations

import pytest
from unillm_vllm import VLLMAdapter

from unillm.launching.logs import LaunchLog

LINES = {
    "startup memory": "ValueError: Available memory on node 0 (3.10/23.41 GiB) on startup is less than "
    "desired CPU memory utilization (0.92, 21.54 GiB). On the CPU backend, ...",
    "kv allocation": "ValueError: Available memory on node 0 (3.10/23.41 GiB) on kv cache allocation is "
    "less than requested memory for kv (19.20/21.54 GiB). Reduce CPU memory used by ...",
    "no kv memory": "ValueError: No available memory for the cache blocks. Try increasing ...",
    "kv too small": "ValueError: To serve at least one request with the model's max seq len (32768), "
    "(3.00 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(1.00 GiB). Based on the available memory, ...",
    "auto-fit": "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve ...",
    "context": "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
    "  Value error, User-specified max_model_len (4096) is greater than the derived "
    "max_model_len (max_position_embeddings=1024 or model_max_length=None in config.json).",
}
ADVICE = {
    "startup memory": "VLLM_CPU_KVCACHE_SPACE",
    "kv allocation": "cpu=True",
    "no kv memory": "cpu=True",
    "kv too small": "lower max_model_len",
    "auto-fit": "lower max_model_len",
    "context": "model's own context length",
}


@pytest.mark.parametrize("case", sorted(LINES))
def test_a_known_vllm_failure_gets_one_piece_of_advice(case: str) -> None:
    log = LaunchLog(VLLMAdapter().launch_hints())
    for line in ["INFO starting", *LINES[case].splitlines(), "RuntimeError: Engine core failed."]:
        log.add(line)
    [advice] = log.causes
    assert ADVICE[case] in advice


def test_an_unknown_failure_gets_no_advice() -> None:
    log = LaunchLog(VLLMAdapter().launch_hints())
    log.add("OSError: /nonexistent/model does not appear to have a file named config.json")
    assert log.causes == []
