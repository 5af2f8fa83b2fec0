import math

import pytest

from pubswap.algorithms.evaluation import difference_se, score


def test_pass_at_1_with_one_sample_has_the_binomial_standard_error():
    rewards = [[1.0]] * 30 + [[0.0]] * 70
    sc = score(rewards, [[True]] * 50 + [[False]] * 50)
    assert sc.pass_at_1 == pytest.approx(0.3)
    assert sc.se == pytest.approx(math.sqrt(0.3 * 0.7 / 100))  # 0.0458
    assert (sc.prompts, sc.n, sc.format_rate) == (100, 1, 0.5)
    assert "pass@1 0.300 ± 0.046 (SE, 100 prompts)" in sc.line()


def test_mean_at_n_averages_per_prompt_and_its_error_is_over_prompts():
    # 4 prompts x 4 samples: per-prompt means 1, 0.5, 0.25, 0
    rewards = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    sc = score(rewards, [[True] * 4] * 4)
    assert sc.pass_at_1 == pytest.approx(0.4375) and sc.n == 4
    means = [1, 0.5, 0.25, 0]
    var = sum((m - 0.4375) ** 2 for m in means) / 4
    assert sc.se == pytest.approx(math.sqrt(var / 4))
    assert "mean@4" in sc.line()
    # the same prompts with one sample each would have a larger error
    assert score([[r[0]] for r in rewards], [[True]] * 4).se > sc.se


def test_difference_se():
    a, b = score([[1.0]] * 50 + [[0.0]] * 50, [[True]] * 100), score([[1.0]] * 20 + [[0.0]] * 80, [[True]] * 100)
    assert difference_se(a, b) == pytest.approx(math.sqrt(0.25 / 100 + 0.16 / 100))
