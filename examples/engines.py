"""What every installed engine adapter declares it can do (what `unillm engines` prints)."""

from unillm.adapter.registry import get_adapter, installed_engines
from unillm.capabilities import Feature

for name in installed_engines():
    caps = get_adapter(name).capabilities()
    refused = [f.value for f in Feature if caps.support(f).level == "no"]
    print(f"{name}: {len(Feature) - len(refused)} of {len(Feature)} features")
    print(f"  refuses: {', '.join(refused) or 'nothing'}")
