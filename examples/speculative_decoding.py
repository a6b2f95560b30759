"""The launch command each engine gets for ngram speculative decoding (nothing is started)."""

import unillm
from unillm.adapter.registry import get_adapter, installed_engines

spec = unillm.LaunchSpec(
    model="/models/tiny", port=8000, speculative=unillm.Speculative(method="ngram", num_tokens=4)
)
for name in installed_engines():
    try:
        print(f"{name}: {get_adapter(name).command(spec).render()}")
    except unillm.UnsupportedFeature as e:
        print(f"{name}: refused: {e}")
