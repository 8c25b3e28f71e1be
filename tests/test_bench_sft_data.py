"""bench/bench_sft_data.py's variant arguments: NAME then KEY=VALUE pairs, values read as YAML."""

import pytest

from bench.bench_sft_data import DATA_BLOCKS, parse_variant


def test_a_variant_is_its_name_and_typed_overrides() -> None:
    name, overrides = parse_variant(["48v-3ep", "synth.default.n_videos_train=48", "sft.epochs=3",
                                     "sft.learning_rate=0.001", "sft.modules_to_save=[]"])
    assert name == "48v-3ep"
    assert overrides == {"synth.default.n_videos_train": 48, "sft.epochs": 3, "sft.learning_rate": 0.001,
                         "sft.modules_to_save": []}


def test_a_pair_without_equals_names_the_variant_and_the_pair() -> None:
    with pytest.raises(SystemExit, match=r"--variant v1: 'sft\.epochs' is not KEY=VALUE"):
        parse_variant(["v1", "sft.epochs"])


def test_only_the_stages_before_sft_make_a_new_data_copy() -> None:
    # a data copy is shared by variants that differ only in SFT's block; synth..shard change the shards
    assert "sft" not in DATA_BLOCKS and {"synth", "cot", "shard"} <= set(DATA_BLOCKS)
