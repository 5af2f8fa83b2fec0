"""Whether a GRPO round had anything to learn from, and what to tell the user when it had not.

A group whose K rewards are all equal has zero advantages: it adds nothing to the policy loss. When
every group of every step of a round is like that, the round trained nothing (only a KL or entropy
term, if configured, moved the weights), and the usual causes are the run's settings, not bad luck:
responses cut at model.max_response_len before they answer, tasks the base model never (or always)
solves, or a reward the responses never satisfy.
"""

from __future__ import annotations


def no_signal(record: dict) -> bool:
    """Every client step of the round had only zero-advantage groups (zero_adv_frac 1)."""
    fracs = [c["zero_adv_frac"] for st in record.get("steps", []) for c in st["clients"] if "zero_adv_frac" in c]
    return bool(fracs) and all(f == 1.0 for f in fracs)


def no_signal_note(record: dict, max_response_len: int, base_eval: dict, reward_mode: str) -> str:
    """One paragraph for the console: what happened, and the likely causes with this run's numbers."""
    clips = [c["response_clip_ratio"] for st in record["steps"] for c in st["clients"] if "response_clip_ratio" in c]
    clip = sum(clips) / len(clips) if clips else 0.0
    by_topic = base_eval.get("pass@1_by_topic") or {}
    tasks = ", ".join(f"{t} {p:.2f}" for t, p in by_topic.items()) or "not recorded"
    return (
        f"round {record['round']}: no learning signal: in every step every group's K "
        "rewards were equal (zero advantages), so the policy loss trained nothing. Likely causes: "
        f"responses cut at model.max_response_len={max_response_len} ({clip:.0%} of this round's responses "
        f"hit it without ending); tasks the base model never or always solves (base pass@1 by task: {tasks}); "
        f"a reward the responses never satisfy (data.reward_mode={reward_mode}"
        + (": the answer must be in \\boxed{})" if reward_mode == "strict" else ")")
    )
