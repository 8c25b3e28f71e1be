"""research/issue47/bench_sft_data.py's variant arguments: NAME then KEY=VALUE pairs, values read as YAML."""

import pytest
from bench_sft_data import data_overrides, parse_variant


def test_a_variant_is_its_name_and_typed_overrides() -> None:
    name, overrides = parse_variant(["48v-3ep", "synth.default.n_videos_train=48", "sft.epochs=3",
                                     "sft.learning_rate=0.001", "sft.modules_to_save=[]"])
    assert name == "48v-3ep"
    assert overrides == {"synth.default.n_videos_train": 48, "sft.epochs": 3, "sft.learning_rate": 0.001,
                         "sft.modules_to_save": []}


def test_a_pair_without_equals_names_the_variant_and_the_pair() -> None:
    with pytest.raises(SystemExit, match=r"--variant v1: 'sft\.epochs' is not KEY=VALUE"):
        parse_variant(["v1", "sft.epochs"])


def test_variants_differing_only_in_sft_share_a_data_copy() -> None:
    # the data copy is keyed by every override outside SFT's block: those may change the shards it trains on
    assert data_overrides({"sft.epochs": 3, "sft.seed": 1, "synth.default.n_videos_train": 48,
                           "cot.traces_per_sample": 2}) == {"synth.default.n_videos_train": 48,
                                                           "cot.traces_per_sample": 2}
    assert data_overrides({"sft.epochs": 16}) == {}
    assert data_overrides({"sft_extra.x": 1}) == {"sft_extra.x": 1}  # a block whose name only starts with sft
