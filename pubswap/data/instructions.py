"""Instruction-tuning data (the FedSRD board's setting): one domain per client, trained with
objective sft on the reference response in the Alpaca template (model.prompt_format alpaca).

The reference code (FedSRD_2025) gives each of its 4 clients one training set, mapped to
(instruction, response) pairs:
  code      sahil2801/CodeAlpaca-20k        instruction, input, output
  medical   medalpaca/medical_meadow_medqa  instruction, input, output
  finance   gbharti/finance-alpaca          instruction, input, output (and text)
  math      openai/gsm8k (main) + DigitalLearningGmbH/MATH-lighteval
                                            question, answer / problem, solution
Alpaca-schema records become instruction + " " + input (input empty: the instruction alone) and
output; GSM8K's question/answer and MATH's problem/solution are taken as they are. A row's prompt is
the instruction, its answer the whole reference response (what sft trains), its topic the record's
`domain` field if it has one, else the name of the file (or hub dataset) it came from.

With data.client_paths, client i reads the i-th set on its own actor (one domain per client, as the
reference splits them: client_paths [code, medical, finance, math]); data.paths holds the rows the
public and test sets are drawn from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from pubswap.data.rows import Row, RowReport, map_rows, nonblank

# the reference's four training sets, one per client, in its order (hub ids; the math set is two)
BOARD_SETS = {
    "code": ("sahil2801/CodeAlpaca-20k",),
    "medical": ("medalpaca/medical_meadow_medqa",),
    "finance": ("gbharti/finance-alpaca",),
    "math": ("openai/gsm8k", "DigitalLearningGmbH/MATH-lighteval"),
}
HUB_CONFIGS = {"openai/gsm8k": "main"}

ALPACA_HEAD = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
)


def alpaca_prompt(instruction: str, shots: Iterable[tuple[str, str]] = ()) -> str:
    """The reference's Alpaca template up to where the response starts ("### Response: "); earlier
    (instruction, response) pairs, if any, come first as whole blocks."""
    done = "".join(f"{alpaca_prompt(q)}{a}\n\n" for q, a in shots)
    return f"{done}{ALPACA_HEAD}\n\n### Instruction:\n{instruction} \n\n### Response: "


def instruction_fields(r: Mapping, topic: str) -> dict:
    """(instruction, response) of an Alpaca, GSM8K or MATH record, as a row's fields."""
    if "instruction" in r:
        extra = nonblank(r.get("input"))
        instruction = nonblank(r.get("instruction"))
        prompt = f"{instruction} {extra}" if instruction and extra else instruction
        response = r.get("output", r.get("response"))
    elif "question" in r:
        prompt, response = r.get("question"), r.get("answer")
    else:
        prompt, response = r.get("problem"), r.get("solution")
    return {"prompt": nonblank(prompt), "answer": nonblank(response), "topic": nonblank(r.get("domain")) or topic}


def instruction_rows(records: Iterable[Mapping], topic: str) -> tuple[list[Row], RowReport]:
    return map_rows(records, lambda r: instruction_fields(r, topic))


def load_instructions(path: str = "") -> tuple[list[Row], RowReport]:
    """Rows of a local file/folder or hub dataset; a domain's name (code, medical, finance, math: no
    such local path) is the reference's set(s) for it from the hub (math: GSM8K and MATH-lighteval);
    no path is the four domains together (train splits)."""
    from pubswap.data.records import load_records

    if path in BOARD_SETS and not Path(path).exists():  # a domain's name: the reference's set(s) for it
        return _board_rows([path])
    if path:
        topic = Path(path.rstrip("/")).stem if Path(path).exists() else path.rstrip("/").split("/")[-1]
        return instruction_rows(load_records(path), topic)
    return _board_rows(list(BOARD_SETS))


def _board_rows(domains: list[str]) -> tuple[list[Row], RowReport]:
    from pubswap.data.records import load_records

    records = [
        {**r, "domain": r.get("domain") or domain}
        for domain in domains
        for hub_id in BOARD_SETS[domain]
        for r in load_records(hub_id, "train", config=HUB_CONFIGS.get(hub_id))
    ]
    return instruction_rows(records, "")
