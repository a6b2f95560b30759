"""Check one app's config against every installed engine before swapping (starts nothing)."""

import unillm
from unillm.adapter.registry import installed_engines

app = {
    "engine": "vllm",
    "uses": ["json_schema", "chat", "stream", "lora_runtime"],
    "defaults": {"max_tokens": 128, "top_k": 20},
    "launch": {"model": "/models/tiny", "max_model_len": 4096},
}
for engine in installed_engines():
    report = unillm.check_config(app, engine=engine)
    print(f"{engine}: {'ok' if report.ok else f'{len(report.problems)} problem(s)'}")
    for problem in report.problems:
        print(f"  {problem.setting}: {problem.message[:100]}")
