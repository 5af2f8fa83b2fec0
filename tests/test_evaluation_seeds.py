"""An evaluation's sampling is seeded by the test prompt's position in the test set, so a score does not
depend on how many actors share the test set or which clients an actor hosts (normalized performance
divides one run's pass@1 by another's, laid out differently)."""

from ray_helpers import ft_config

from actors.client import ClientCore
from jobs.train import build_split


def test_a_test_prompt_gets_the_same_responses_on_any_actor(digit_model_dir, tmp_path):
    cfg = ft_config(
        digit_model_dir, tmp_path / "run", "federation.num_clients=4", "eval_n=4", "grpo.val_temperature=1.0"
    )
    split = build_split(cfg, str(digit_model_dir))
    test = split.test[:6]
    whole = ClientCore(cfg.to_dict(), {0: split.clients[0]}, str(digit_model_dir))
    other = ClientCore(cfg.to_dict(), {3: split.clients[3], 1: split.clients[1]}, str(digit_model_dir))
    everything = whole.evaluate(test, 0, index=list(range(6)))["rewards"]
    # actor 1 of 2 (rows 1, 3, 5), hosting other clients: the same responses' rewards for those rows
    assert other.evaluate(test[1::2], 0, index=[1, 3, 5])["rewards"] == everything[1::2]
    assert len({str(r) for r in everything}) > 1  # sampled at temperature 1: the rows differ
