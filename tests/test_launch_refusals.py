"""The adapters' one launch-refusal helper: ``unillm.adapter.Refuse``."""

from __future__ import annotations

import pytest

from unillm.adapter import LaunchSpec, Refuse, UnsupportedFeature


def test_a_refusal_names_the_engine_the_setting_why_and_what_instead() -> None:
    error = Refuse("mlx")("parallel", "one device", "Drop parallel=")
    assert isinstance(error, UnsupportedFeature)
    assert (error.engine, error.feature, error.why, error.alternative) == (
        "mlx",
        "parallel",
        "one device",
        "Drop parallel=",
    )


def test_a_set_setting_of_the_table_is_refused_with_drop_it() -> None:
    with pytest.raises(UnsupportedFeature, match="dtype") as caught:
        Refuse("mlx").set_settings(LaunchSpec(model="/m", dtype="float16"), {"dtype": "stored in the model"})
    assert caught.value.alternative == "Drop dtype="


def test_a_flag_left_false_is_not_a_set_setting() -> None:
    # runtime_lora defaults to False: refusing it must not refuse every launch
    Refuse("mlx").set_settings(LaunchSpec(model="/m"), {"runtime_lora": "no runtime LoRA"})
    with pytest.raises(UnsupportedFeature, match="runtime_lora"):
        Refuse("mlx").set_settings(LaunchSpec(model="/m", runtime_lora=True), {"runtime_lora": "no"})


def test_unset_settings_of_the_table_pass() -> None:
    Refuse("mlx").set_settings(LaunchSpec(model="/m"), {"dtype": "stored in the model", "quantization": "no"})
