import pytest
import yaml

from pubswap.config import ConfigError, RunConfig, load_config


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    return d


def write(tmp_path, data):
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_defaults_are_the_papers_table_9():
    c = RunConfig()
    g, lo, f = c.grpo, c.lora, c.federation
    assert (g.K, g.b, g.grad_epochs, g.lr, g.weight_decay, g.grad_clip) == (8, 8, 2, 1e-5, 0.01, 1.0)
    assert (g.clip_low, g.clip_high, g.kl_coef, g.entropy_coef) == (0.2, 0.25, 1e-4, 0.0)
    assert (g.temperature, g.val_temperature) == (0.7, 0.7)
    assert (lo.r, lo.alpha, lo.target_modules) == (32, 64, ["all-linear"])
    assert (f.num_clients, f.aggregation, f.swap_period) == (4, "fedit", 2)
    assert (c.model.max_prompt_len, c.model.max_response_len) == (1024, 2048)


def test_yaml_and_dotted_overrides(tmp_path, model_dir):
    p = write(tmp_path, {"model": {"path": str(model_dir)}, "federation": {"tau": 12, "method": "pubswap-random"}})
    c = load_config(p, ["grpo.lr=3e-5", "federation.swap_period=4", "lora.target_modules=[q_proj,v_proj]", "seed=5"])
    assert c.federation.tau == 12 and c.federation.swap_period == 4
    assert c.grpo.lr == 3e-5 and isinstance(c.grpo.lr, float)
    assert c.lora.target_modules == ["q_proj", "v_proj"] and c.seed == 5
    assert c.federation.swap_rule == "random"


def test_yaml_string_floats_are_accepted(tmp_path, model_dir):
    # PyYAML reads 1e-5 (no dot) as a string; a user writing it must still get a float
    p = tmp_path / "c.yaml"
    p.write_text(f"model:\n  path: {model_dir}\ngrpo:\n  lr: 1e-5\n")
    assert load_config(p).grpo.lr == 1e-5


@pytest.mark.parametrize(
    "override, key",
    [
        ("grpo.learning_rate=1", "grpo.learning_rate"),
        ("federation.tua=3", "federation.tua"),
        ("nosuch.x=1", "nosuch"),
    ],
)
def test_unknown_override_keys_are_named(model_dir, override, key):
    with pytest.raises(ConfigError, match=f"unknown config key: {key}"):
        load_config(None, [f"model.path={model_dir}", override])


def test_unknown_yaml_key_is_named(tmp_path, model_dir):
    p = write(tmp_path, {"model": {"path": str(model_dir)}, "grpo": {"k": 8}})
    with pytest.raises(ConfigError, match="unknown config key: grpo.k"):
        load_config(p)


@pytest.mark.parametrize(
    "override, key",
    [
        ("federation.tau=-1", "federation.tau"),
        ("federation.swap_period=10", "federation.swap_period"),  # == tau (10) for a PubSwap method
        ("grpo.K=1", "grpo.K"),
        ("federation.method=fedsgd", "federation.method"),
        ("grpo.lr=abc", "grpo.lr"),
        ("grpo.K=2.5", "grpo.K"),
        ("grpo.K=true", "grpo.K"),
        ("data.dirichlet_alpha=0", "data.dirichlet_alpha"),
        ("federation.aggregation=fedavg", "federation.aggregation"),
        ("lora.r=[8, 4, 4]", "lora.r"),  # 4 clients by default: one rank each
        ("lora.r=[8, 4, 4, 0]", "lora.r"),
        ("federation.aggregation_kwargs={p: 0.5}", "federation.aggregation_kwargs.p"),  # fedit takes none
    ],
)
def test_invalid_values_are_rejected_naming_the_key(model_dir, override, key):
    with pytest.raises(ConfigError, match=f"^{key}"):
        load_config(None, [f"model.path={model_dir}", override])


def test_swap_period_constraint_only_applies_to_pubswap(model_dir):
    c = load_config(
        None,
        [f"model.path={model_dir}", "federation.method=fedavg-grpo", "federation.tau=2", "federation.swap_period=2"],
    )
    assert c.federation.swap_rule is None and not c.federation.is_public_step(2)


def test_missing_model_path_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="^model.path: is required"):
        load_config(None, [])
    with pytest.raises(ConfigError, match="^model.path: .* does not exist"):
        load_config(None, [f"model.path={tmp_path / 'nope'}"])
    # a hub id is allowed (clusters with hub access)
    assert load_config(None, ["model.path=Qwen/Qwen3-1.7B"]).model.path == "Qwen/Qwen3-1.7B"


def test_public_steps_follow_swap_period(model_dir):
    c = load_config(None, [f"model.path={model_dir}", "federation.tau=8", "federation.swap_period=4"])
    assert [s for s in range(1, 9) if c.federation.is_public_step(s)] == [4, 8]


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_builtin_model_names_are_checked():
    assert load_config(None, ["model.path=builtin:smollm2-135m-instruct"]).model.path.startswith("builtin:")
    with pytest.raises(ConfigError, match="^model.path: unknown builtin model 'gpt9'"):
        load_config(None, ["model.path=builtin:gpt9"])


def test_rollout_and_resources_are_validated(model_dir):
    with pytest.raises(ConfigError, match="^rollout.backend"):
        load_config(None, [f"model.path={model_dir}", "rollout.backend=sglang"])
    with pytest.raises(ConfigError, match="^resources.placement_strategy"):
        load_config(None, [f"model.path={model_dir}", "resources.placement_strategy=RANDOM"])
    c = load_config(None, [f"model.path={model_dir}", "resources.gpus_per_client=0.5"])
    assert c.resources.gpus_per_client == 0.5


def test_per_client_ranks_need_flexlora_and_strategy_kwargs_are_checked(model_dir):
    with pytest.raises(ConfigError, match="^lora.r: per-client ranks need federation.aggregation=flexlora"):
        load_config(None, [f"model.path={model_dir}", "lora.r=[8, 4, 4, 8]"])
    c = load_config(None, [f"model.path={model_dir}", "lora.r=[8, 4, 4, 8]", "federation.aggregation=flexlora"])
    assert c.lora.max_r == 8 and [c.lora.client_rank(i) for i in range(4)] == [8, 4, 4, 8]
    c = load_config(
        None,
        [
            f"model.path={model_dir}",
            "federation.aggregation=fedsrd",
            "federation.aggregation_kwargs={download_p: 0.9, prune_base: 0.8}",
        ],
    )
    assert c.federation.aggregation_kwargs == {"download_p": 0.9, "prune_base": 0.8}
    with pytest.raises(ConfigError, match="^federation.aggregation_kwargs: download_p must be in"):
        load_config(
            None,
            [
                f"model.path={model_dir}",
                "federation.aggregation=fedsrd",
                "federation.aggregation_kwargs={download_p: 1}",
            ],
        )


def test_a_config_extends_others_section_by_section(tmp_path, model_dir):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "model.yaml").write_text(f"model: {{path: {model_dir}}}\ngrpo: {{K: 4, lr: 3.0e-5}}\n")
    (tmp_path / "base" / "more.yaml").write_text("grpo: {K: 6}\nfederation: {tau: 12}\n")
    (tmp_path / "run.yaml").write_text("extends: [base/model.yaml, base/more.yaml]\ngrpo: {b: 2}\n")
    c = load_config(tmp_path / "run.yaml", ["federation.tau=14"])
    assert (c.grpo.K, c.grpo.lr, c.grpo.b, c.federation.tau) == (6, 3e-5, 2, 14)  # later files and keys win
    (tmp_path / "loop.yaml").write_text("extends: run2.yaml\n")
    (tmp_path / "run2.yaml").write_text("extends: [loop.yaml]\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_config(tmp_path / "loop.yaml")
    (tmp_path / "broken.yaml").write_text("extends: base/nope.yaml\n")
    with pytest.raises(ConfigError, match=r"config file not found: .*nope.yaml \(extended by .*broken.yaml\)"):
        load_config(tmp_path / "broken.yaml")


def test_rounds_are_evaluated_every_eval_every_and_always_the_last():
    cfg = RunConfig.model_validate({"eval_every": 2, "federation": {"rounds": 5}})
    assert [r for r in range(1, 6) if cfg.evaluation_due(r)] == [2, 4, 5]
    assert all(RunConfig().evaluation_due(r) for r in range(1, 11))
