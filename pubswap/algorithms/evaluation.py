"""pass@1 on the test prompts with its standard error, and the share of answers in the asked format.

With n responses per prompt (config `eval_n`, temperature grpo.val_temperature) pass@1 is estimated as
mean@n: the mean over prompts of each prompt's mean reward. Its standard error is the standard deviation
of the per-prompt means over sqrt(prompts), which for n = 1 is the binomial sqrt(p (1 - p) / prompts).
More samples per prompt shrink the sampling part of that error, so method comparisons on one test set
(the paper's gaps are about one standard error on 1,250 prompts) need n > 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Score:
    pass_at_1: float  # mean@n
    se: float  # standard error of pass_at_1 over prompts
    prompts: int
    n: int  # responses per prompt
    format_rate: float  # share of responses that answer in the asked format (right or wrong)
    by_topic: dict = field(default_factory=dict)  # pass@1 over each topic's (task's) prompts, when given

    def line(self) -> str:
        est = "pass@1" if self.n == 1 else f"pass@1 (mean@{self.n})"
        return (
            f"{est} {self.pass_at_1:.3f} ± {self.se:.3f} (SE, {self.prompts} prompts), "
            f"answers in format {self.format_rate:.2f}"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def score(
    rewards: Sequence[Sequence[float]], in_format: Sequence[Sequence[bool]], topics: Sequence[str] | None = None
) -> Score:
    """`rewards[p]`: the rewards (0/1) of prompt p's responses; `in_format[p]` likewise; `topics[p]` its
    topic (task), for the per-topic pass@1."""
    if not rewards:
        return Score(0.0, 0.0, 0, 0, 0.0)
    means = [sum(r) / len(r) for r in rewards]
    by_topic: dict[str, list[float]] = {}
    for t, m in zip(topics or (), means, strict=False):
        by_topic.setdefault(t, []).append(m)
    p = sum(means) / len(means)
    var = sum((m - p) ** 2 for m in means) / len(means)
    flags = [f for fs in in_format for f in fs]
    return Score(
        pass_at_1=p,
        se=math.sqrt(var / len(means)),
        prompts=len(means),
        n=len(rewards[0]),
        format_rate=sum(flags) / len(flags) if flags else 0.0,
        by_topic={t: sum(ms) / len(ms) for t, ms in sorted(by_topic.items())},
    )


def difference_se(a: Score, b: Score) -> float:
    """Standard error of a.pass_at_1 - b.pass_at_1 for two independent evaluations."""
    return math.sqrt(a.se**2 + b.se**2)
