"""Classification by label words (objective `label-words`): the decentralized leaderboard's setting.

A row is a prompt, its label word (`answer`) and the task's label words (`choices`, e.g. negative /
positive for SST-2). As in MeZO (Malladi et al. 2023), which the board's methods build on:

    loss       = -(1/N) sum over the label words' tokens of log p(token | prompt, previous tokens)
                 (token mean over the batch's N label tokens; prompt tokens are not scored:
                 pubswap/algorithms/cross_entropy.py, which the objective sft shares)
    prediction = argmax over the choices c of log p(c | prompt)   (the sum over c's tokens)
    accuracy   = mean over test rows of [prediction == label]

First-order methods (DSGD, CHOCO-SGD, the federated ones) take its gradient; SeedFlood estimates it
from two forward passes (pubswap/methods/seedflood.py: zo_step). After a plain prompt (a base model,
model.prompt_format plain) the label word follows a space, as a word does in running text; after a
chat template it starts the assistant's turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def label_text(word: str, plain: bool) -> str:
    """The text the model is scored on after the prompt: ' word' after a plain prompt, 'word' after a
    chat template's assistant prompt."""
    return f" {word}" if plain else word


def predict(scores: Sequence[float]) -> int:
    """The index of the choice with the highest log-likelihood (the first of equals)."""
    if not scores:
        raise ValueError("no choices to predict from")
    return int(torch.tensor(scores, dtype=torch.float64).argmax())


def accuracy_rewards(scores: Sequence[Sequence[float]], choices: Sequence[Sequence[str]], labels: Sequence[str]):
    """Per row a one-element reward list, 1.0 when the predicted choice is the label: the evaluation's
    shape (pubswap/algorithms/evaluation.py), whose mean is the accuracy and its standard error."""
    return [[float(c[predict(s)] == y)] for s, c, y in zip(scores, choices, labels, strict=True)]
