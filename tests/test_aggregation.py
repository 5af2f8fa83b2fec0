import pytest
import torch

from pubswap.algorithms.aggregation import FedIT, FedProx, make_strategy, normalized_weights
from pubswap.config import FederationConfig


def adapters():
    a = {"l.lora_A.weight": torch.tensor([[1.0, 2.0]]), "l.lora_B.weight": torch.tensor([[4.0], [0.0]])}
    b = {"l.lora_A.weight": torch.tensor([[3.0, 6.0]]), "l.lora_B.weight": torch.tensor([[0.0], [8.0]])}
    return a, b


def test_fedit_averages_a_and_b_separately_uniform():
    a, b = adapters()
    g = FedIT().aggregate([a, b])
    assert torch.equal(g["l.lora_A.weight"], torch.tensor([[2.0, 4.0]]))
    assert torch.equal(g["l.lora_B.weight"], torch.tensor([[2.0], [4.0]]))
    # the product of averages is not the average of products (FedIT's known mismatch)
    avg_product = (a["l.lora_B.weight"] @ a["l.lora_A.weight"] + b["l.lora_B.weight"] @ b["l.lora_A.weight"]) / 2
    assert not torch.allclose(g["l.lora_B.weight"] @ g["l.lora_A.weight"], avg_product)


def test_fedit_sample_count_weights():
    a, b = adapters()
    g = FedIT().aggregate([a, b], weights=[300, 100])
    assert torch.allclose(g["l.lora_A.weight"], torch.tensor([[1.5, 3.0]]))
    assert torch.allclose(g["l.lora_B.weight"], torch.tensor([[3.0], [2.0]]))


def test_fedit_keeps_dtype_and_rejects_mismatched_adapters():
    a, b = adapters()
    g = FedIT().aggregate([{k: v.bfloat16() for k, v in a.items()}, {k: v.bfloat16() for k, v in b.items()}])
    assert g["l.lora_A.weight"].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="different keys"):
        FedIT().aggregate([a, {"x": torch.zeros(1)}])
    with pytest.raises(ValueError, match="shape"):
        FedIT().aggregate([a, {**b, "l.lora_A.weight": torch.zeros(2, 2)}])
    with pytest.raises(ValueError, match="no adapters"):
        FedIT().aggregate([])


def test_normalized_weights():
    assert normalized_weights(None, 4) == [0.25] * 4
    assert normalized_weights([1, 3], 2) == [0.25, 0.75]
    with pytest.raises(ValueError):
        normalized_weights([0, 0], 2)
    with pytest.raises(ValueError):
        normalized_weights([1], 2)


def test_fedprox_penalty_is_half_mu_squared_norm():
    a, b = adapters()
    # ||a - b||^2 = (1-3)^2 + (2-6)^2 + (4-0)^2 + (0-8)^2 = 4 + 16 + 16 + 64 = 100
    prox = FedProx(mu=0.1)
    params = {k: v.clone().requires_grad_(True) for k, v in a.items()}
    pen = prox.client_penalty(params, b)
    assert pen.item() == pytest.approx(0.5 * 0.1 * 100)  # squared: 5.0 (unsquared would be 0.5)
    pen.backward()
    # gradient mu * (theta - theta_global)
    assert torch.allclose(params["l.lora_A.weight"].grad, 0.1 * (a["l.lora_A.weight"] - b["l.lora_A.weight"]))
    assert prox.client_penalty(b, b).item() == 0.0


def test_fedprox_aggregates_like_fedit_and_fedit_has_no_penalty():
    a, b = adapters()
    assert all(torch.equal(FedProx(0.5).aggregate([a, b])[k], FedIT().aggregate([a, b])[k]) for k in a)
    assert FedIT().client_penalty(a, b).item() == 0.0


def test_make_strategy_from_method():
    assert isinstance(make_strategy(FederationConfig(method="fedprox-grpo", fedprox_mu=0.3)), FedProx)
    assert make_strategy(FederationConfig(method="fedprox-grpo", fedprox_mu=0.3)).mu == 0.3
    s = make_strategy(FederationConfig(method="pubswap-balanced"))
    assert type(s) is FedIT and s.linear
