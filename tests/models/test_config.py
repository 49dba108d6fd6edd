"""Shipped configs parse, counts match the papers, bad fields are one clear error."""
import jax
import pytest

import models
from models import ModelConfigError

EXPECTED_PARAMS = {  # exact counts; nominal sizes in the comments of models/config.py
    "llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-18b": 18_091_136_000,
    "llama2-23b": 23_166_407_680, "llama2-28b": 28_241_679_360,
    "gpt3-13b": 13_121_669_120, "gpt3-18b": 18_155_898_880, "gpt3-23b": 23_190_128_640,
    "gpt3-28b": 28_224_358_400,
}


@pytest.mark.parametrize("name", list(models.CONFIGS))
def test_every_shipped_config_parses(name):
    cfg = models.get_config(name)
    assert cfg.name == name
    assert models.ModelConfig(**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__}) == cfg
    assert len(models.unit_names(cfg)) == 2 * cfg.num_layers + 2
    assert models.count_params(cfg) > 0


@pytest.mark.parametrize("name,paper", [("llama2-7b", 6_738_415_616), ("llama2-13b", 13_015_864_320)])
def test_llama_param_counts_within_half_a_percent_of_meta(name, paper):
    assert abs(models.count_params(models.get_config(name)) - paper) <= 0.005 * paper


@pytest.mark.parametrize("name", list(EXPECTED_PARAMS))
def test_param_counts_and_nominal_sizes(name):
    n = models.count_params(models.get_config(name))
    assert n == EXPECTED_PARAMS[name]
    nominal = int(name.split("-")[1][:-1]) * 1e9
    assert abs(n - nominal) / nominal < 0.04  # llama2-7b is 6.74B


def test_larger_models_are_13b_with_16_more_layers_each():
    for family in ("llama2", "gpt3"):
        base = models.get_config(f"{family}-13b")
        for size, layers in ((18, 56), (23, 72), (28, 88)):
            cfg = models.get_config(f"{family}-{size}b")
            assert cfg.num_layers == layers and layers % 8 == 0
            assert cfg.replace(name=base.name, num_layers=40) == base


def test_count_params_equals_real_init_on_tiny(tiny):
    cfg, params, _, _ = tiny
    assert sum(x.size for x in jax.tree.leaves(params)) == models.count_params(cfg)


def test_dtypes_fp32_params_bf16_compute_on_gpu_configs_fp32_tiny():
    assert models.get_config("llama2-13b").param_dtype == "float32"
    assert models.get_config("llama2-13b").compute_dtype == "bfloat16"
    for name in ("llama2-tiny", "gpt3-tiny"):
        cfg = models.get_config(name)
        assert (cfg.param_dtype, cfg.compute_dtype, cfg.vocab_size) == ("float32", "float32", 256)


def test_unknown_model_lists_valid_names():
    with pytest.raises(ModelConfigError, match="valid models: llama2-7b.*gpt3-tiny"):
        models.get_config("llama3-8b")


@pytest.mark.parametrize("override,message", [
    ({"hidden": 65}, "not divisible by num_heads"),
    ({"num_kv_heads": 3}, "not divisible by num_kv_heads"),
    ({"num_layers": 0}, "num_layers must be a positive integer"),
    ({"vocab_size": -5}, "vocab_size must be a positive integer"),
    ({"family": "t5"}, "family must be one of"),
    ({"compute_dtype": "float8"}, "compute_dtype must be one of"),
    ({"attention_impl": "flash"}, "attention_impl must be one of"),
    ({"norm_eps": 0.0}, "norm_eps must be > 0"),
    ({"tie_embeddings": "yes"}, "tie_embeddings must be a bool"),
    ({"colour": "red"}, "unknown model config field"),
])
def test_bad_fields_are_one_line_errors(override, message):
    with pytest.raises(ModelConfigError, match=message) as e:
        models.get_config("llama2-tiny", **override)
    assert "\n" not in str(e.value)


def test_gpt_needs_equal_kv_heads_and_llama_even_head_dim():
    with pytest.raises(ModelConfigError, match="fused qkv"):
        models.get_config("gpt3-tiny", num_kv_heads=2)
    with pytest.raises(ModelConfigError, match="even head dim"):
        models.get_config("llama2-tiny", hidden=60, num_heads=4, num_kv_heads=4)


def test_config_is_frozen_and_hashable():
    cfg = models.get_config("llama2-tiny")
    with pytest.raises(AttributeError):
        cfg.hidden = 3
    assert hash(cfg) == hash(models.get_config("llama2-tiny"))
