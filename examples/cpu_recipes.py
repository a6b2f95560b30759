"""The settings each engine's CPU recipe would launch a model with (nothing is started)."""

import unillm
from unillm.adapter.registry import installed_engines

for engine in installed_engines():
    try:
        settings = unillm.cpu_settings(engine, "/models/qwen2.5-0.5b", max_model_len=2048)
    except unillm.UnsupportedFeature as e:
        print(f"{engine}: no CPU recipe: {e}")
        continue
    print(f"{engine}: {sorted(settings)} env={sorted(settings.get('env', {}))}")
