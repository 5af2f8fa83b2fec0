"""The ServerActor scores every public response itself (the run's verifier, the public answers it
holds): a client that reports wrong responses as correct changes no other client's training batch."""

import ray

from actors.server import ServerActor
from pubswap.algorithms.swap import Response
from pubswap.config import from_dict
from pubswap.data.classification import classification_rows


def public_rows():
    records = [{"sentence": f"a {'fine' if i % 2 else 'dull'} film {i}", "label": i % 2} for i in range(2)]
    return classification_rows("sst2", records)[0]


def groups_of(cid, rows, right_per_prompt, lie=False):
    """K=4 responses per prompt: `right_per_prompt` boxed right answers, the rest boxed wrong ones;
    `lie`: every response reported correct with reward 1."""
    out = []
    for row in rows:
        wrong = "negative" if row.answer == "positive" else "positive"
        texts = [f"\\boxed{{{row.answer}}}"] * right_per_prompt + [f"\\boxed{{{wrong}}}"] * (4 - right_per_prompt)
        out.append(
            [
                Response(t, 1.0 if lie else float(t.endswith(f"{{{row.answer}}}")), lie or row.answer in t, cid)
                for t in texts
            ]
        )
    return out


def test_a_client_labelling_wrong_answers_correct_changes_no_other_batch(local_ray):
    cfg = from_dict({"data": {"source": "sst2"}, "grpo": {"K": 4, "b": 2}, "federation": {"num_clients": 2}}).to_dict()
    rows = public_rows()
    server = ServerActor.remote(cfg, rows, [])

    def swapped(lie: bool):
        answers = {"responses": {0: groups_of(0, rows, 1), 1: groups_of(1, rows, 0, lie=lie)}}
        out = ray.get(server.swap.remote(1, 2, rows, [[0, 1]], answers))
        return ray.get(out["groups"][0]), out["swapped_in"]

    honest, honest_swaps = swapped(lie=False)
    lying, lying_swaps = swapped(lie=True)
    assert lying == honest and lying_swaps == honest_swaps
    # client 1 is short of right answers and takes client 0's; client 0 finds none to take from 1
    assert honest_swaps == [0, 2]
    for group in lying[1]:  # the rewards client 1 trains on are the server's
        assert [r.reward for r in group if r.origin == 1] == [0.0] * sum(r.origin == 1 for r in group)
    ray.kill(server)
