"""FlopCounterMode over real PyTorch steps: exact counts for layers whose FLOPs are known,
ResNet-50's published forward, and the model left as it was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accelpipe.engines import torch_flops
from accelpipe.models.resnet50 import ResNet, resnet50

pytestmark = pytest.mark.torch

B = 2  # samples per counted batch


def _train_step(model: nn.Module, x: torch.Tensor, *, autocast: torch.dtype | None = None):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = model(x).float().square().mean()
        loss.backward()
        optimizer.step()

    return step, optimizer


def _conv(cin: int, cout: int, k: int, hw_out: int) -> int:
    """Forward FLOPs per sample of a k x k convolution: 2 Cin Cout k^2 Hout Wout."""
    return 2 * cin * cout * k * k * hw_out * hw_out


def test_conv_forward_backward_counts_exactly_and_skips_the_first_input_gradient() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, stride=2, padding=1)
    )
    x = torch.randn(B, 3, 8, 8)
    first, second = _conv(3, 4, 3, 8), _conv(4, 6, 3, 4)
    forward = torch_flops.count_step_flops(lambda: model(x), B, state=[model])
    assert forward.flops_per_sample == first + second
    step, optimizer = _train_step(model, x)
    count = torch_flops.count_step_flops(step, B, state=[model, optimizer])
    # the first layer: forward + weight gradient (no gradient for the batch); the second:
    # forward + input gradient + weight gradient
    assert count.flops_per_sample == 2 * first + 3 * second
    assert count.total_flops == B * count.flops_per_sample
    assert dict(count.by_kind) == {"matmul": 0, "conv": count.total_flops, "attention": 0}
    assert count.counted_by == torch_flops.COUNTED_BY
    assert count.batch == B


def test_linear_counts_two_in_out_per_sample_and_ignores_the_bias() -> None:
    model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    x = torch.randn(B, 5)
    first, second = 2 * 5 * 6, 2 * 6 * 3
    step, optimizer = _train_step(model, x)
    count = torch_flops.count_step_flops(step, B, state=[model, optimizer])
    assert count.flops_per_sample == 2 * first + 3 * second
    assert count.by_kind["matmul"] == count.total_flops


def test_matmul_of_a_batch_with_a_weight() -> None:
    weight = nn.Parameter(torch.randn(5, 7))
    x = torch.randn(B, 4, 5)
    count = torch_flops.count_step_flops(lambda: torch.matmul(x, weight), B)
    assert count.flops_per_sample == 2 * 4 * 5 * 7
    count = torch_flops.count_step_flops(lambda: torch.matmul(x, weight).sum().backward(), B)
    assert count.flops_per_sample == 2 * (2 * 4 * 5 * 7)  # forward + the weight's gradient
    weight.grad = None


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_scaled_dot_product_attention_on_the_cpu_kernel(autocast: torch.dtype | None) -> None:
    heads, length, dim = 4, 16, 8
    q, k, v = (torch.randn(B, heads, length, dim, requires_grad=True) for _ in range(3))

    def step() -> None:
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            out = F.scaled_dot_product_attention(q, k, v)
        out.float().sum().backward()

    count = torch_flops.count_step_flops(step, B)
    scores = 2 * heads * length * length * dim  # QK^T per sample; PV the same
    # forward: QK^T and PV; backward: scores recomputed, dP, dV, dQ, dK (torch's CUDA formula)
    assert count.flops_per_sample == 2 * scores + 5 * scores
    assert dict(count.by_kind) == {"matmul": 0, "conv": 0, "attention": count.total_flops}


def test_attention_with_dropout_falls_back_to_bmm_and_is_still_counted() -> None:
    heads, length, dim = 2, 8, 4
    q, k, v = (torch.randn(B, heads, length, dim, requires_grad=True) for _ in range(3))
    count = torch_flops.count_step_flops(
        lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).sum().backward(), B
    )
    scores = 2 * heads * length * length * dim
    assert count.flops_per_sample == 2 * scores + 4 * scores  # no recomputation on this path
    assert count.by_kind["matmul"] == count.total_flops


def test_bf16_autocast_counts_the_same_as_fp32() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))
    x = torch.randn(B, 3, 8, 8)
    fp32 = torch_flops.count_step_flops(_train_step(model, x)[0], B, state=[model])
    step, optimizer = _train_step(model, x, autocast=torch.bfloat16)
    bf16 = torch_flops.count_step_flops(step, B, state=[model, optimizer])
    assert bf16.total_flops == fp32.total_flops > 0
    assert bf16.by_kind == fp32.by_kind


def test_counting_leaves_model_optimizer_scheduler_and_rng_as_they_were() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.Dropout(0.5),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 3),
    )
    x = torch.randn(B, 3, 4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    # one real step first, so that the optimizer has state and the parameters gradients
    model(x).sum().backward()
    optimizer.step()
    scheduler.step()
    model.eval()  # the counted step switches it to train
    model[1].train()  # a mixed state must come back as it was

    def step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()
        scheduler.step()

    before_model = {k: v.clone() for k, v in model.state_dict().items()}
    before_grads = [p.grad.clone() for p in model.parameters()]
    before_optimizer = optimizer.state_dict()
    before_optimizer_state = {
        i: {k: v.clone() for k, v in s.items()} for i, s in before_optimizer["state"].items()
    }
    before_lr = [g["lr"] for g in optimizer.param_groups]
    before_scheduler = scheduler.state_dict()
    before_modes = [m.training for m in model.modules()]
    before_rng = torch.get_rng_state()

    torch_flops.count_step_flops(step, B, state=[model, optimizer, scheduler])

    after = model.state_dict()
    assert all(torch.equal(before_model[k], after[k]) for k in before_model)
    assert all(
        torch.equal(a, p.grad) for a, p in zip(before_grads, model.parameters(), strict=True)
    )
    state = optimizer.state_dict()["state"]
    assert state.keys() == before_optimizer_state.keys()
    for i, saved in before_optimizer_state.items():
        assert all(torch.equal(v, state[i][k]) for k, v in saved.items())
    assert [g["lr"] for g in optimizer.param_groups] == before_lr
    assert scheduler.state_dict() == before_scheduler
    assert [m.training for m in model.modules()] == before_modes
    assert torch.equal(torch.get_rng_state(), before_rng)


def test_state_is_restored_when_the_step_fails() -> None:
    model = nn.Linear(3, 3)
    before = model.weight.detach().clone()

    def step() -> None:
        with torch.no_grad():
            model.weight.add_(1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        torch_flops.count_step_flops(step, 1, state=[model])
    assert torch.equal(model.weight, before)


def test_state_refuses_what_it_cannot_restore() -> None:
    with pytest.raises(TypeError, match="cannot restore a int"):
        torch_flops.count_step_flops(lambda: None, 1, state=[3])


def test_resnet50_forward_at_224_is_the_published_4_1_gmac() -> None:
    # On the meta device: the model's own code and shapes, no arithmetic (seconds, not tens)
    with torch.device("meta"):
        model = resnet50()
        x = torch.empty(1, 3, 224, 224)
    forward = torch_flops.count_step_flops(lambda: model(x), 1, state=[model])
    # ~4.1 GMAC = 8.2 GFLOP (convolutions and the classifier)
    assert forward.flops_per_sample == pytest.approx(8.2e9, rel=0.02)
    assert forward.by_kind["matmul"] == 2 * 2048 * 1000  # the classifier
    step, optimizer = _train_step(model, x)
    train = torch_flops.count_step_flops(step, 1, state=[model, optimizer])
    # forward + backward: 3x the forward less the stem's input gradient
    stem = _conv(3, 64, 7, 112)
    assert train.flops_per_sample == 3 * forward.flops_per_sample - stem


def test_meta_and_cpu_tensors_count_the_same() -> None:
    torch.manual_seed(0)
    counts = []
    for device in ("cpu", "meta"):
        with torch.device(device):
            model = ResNet((1, 1, 1, 1), num_classes=10, width=8)
            x = torch.randn(B, 3, 32, 32)
        step, optimizer = _train_step(model, x)
        counts.append(torch_flops.count_step_flops(step, B, state=[model, optimizer]))
    assert counts[0].total_flops == counts[1].total_flops > 0
