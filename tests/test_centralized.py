"""The centralized reference: one learner on the union of the clients' private rows, b x N prompts a step."""

import json

from ray_helpers import ft_config, metrics

from jobs.train import build_split, train


def test_centralize_merges_the_split_and_scales_the_batch(digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.method=centralized", "federation.num_clients=3")
    split = build_split(cfg, str(digit_model_dir))
    run, merged = cfg.federation.family.prepare(cfg, split)
    assert merged.clients == [[r for part in split.clients for r in part]]  # row for row, in client order
    assert merged.public == split.public and merged.test == split.test
    assert run.federation.num_clients == 1 and run.federation.method == "fedavg-grpo"
    assert run.grpo.b == 3 * cfg.grpo.b and run.resources.num_actors == 1
    assert cfg.federation.method == "centralized"  # the user's config is not changed


def test_a_centralized_run_trains_one_learner_and_records_the_users_config(local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.method=centralized")
    summary = train(cfg)
    records = metrics(cfg.run_dir)
    assert [r["participants"] for r in records] == [[0], [0]]
    assert all(len(st["clients"]) == 1 and not st["public"] for r in records for st in r["steps"])
    assert json.loads((tmp_path / "run" / "config.json").read_text())["federation"]["method"] == "centralized"
    assert "final_pass@1" in summary
    again = train(cfg)  # a finished run resumes to nothing: the checkpoint holds the user's config
    assert again["final_pass@1"] == summary["final_pass@1"]


def test_the_full_parameter_reference_is_one_client_training_every_weight(local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(
        digit_model_dir,
        tmp_path / "run",
        "federation.method=centralized-full",
        "federation.num_clients=3",
        "federation.rounds=1",
    )
    run, _ = cfg.federation.family.prepare(cfg, build_split(cfg, str(digit_model_dir)))
    assert run.federation.method == "dsgd" and run.federation.num_clients == 1 and run.grpo.b == 3 * cfg.grpo.b
    train(cfg)
    (rec,) = metrics(cfg.run_dir)
    assert rec["participants"] == [0] and rec["bytes"]["upload"] == [0]  # a graph of one: nothing sent
    from pubswap.run.checkpoint import latest_checkpoint

    ck = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert ck.state.get("weights_file") == "model.safetensors"  # every weight, a model folder
