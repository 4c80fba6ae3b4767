"""The fused rank-1 LSTM paths against the reference: the Triton kernel and per-member draws through
PyTorch's fused kernel at variable lengths.

The kernel runs on CPU tensors in Triton's interpreter (conftest.py sets TRITON_INTERPRET=1 before triton
is imported); with ``TRITON_INTERPRET=0`` on a machine with CUDA the same tests run the compiled kernels
on the GPU."""

from __future__ import annotations

import pytest
import torch

from pipeline.bayes.layers import LSTMKernel, LSTMRank1, Rank1Config, set_lstm_kernel, set_sampling
from pipeline.bayes.layers.recurrence import run_recurrence, step_mask

pytest.importorskip("triton", reason="triton is the `gpu` extra (make setup installs it): pip install -e '.[gpu]'")
from pipeline.bayes.layers import triton_lstm as tlm  # noqa: E402 (after the skip)

if tlm.interpreted():
    DEVICE = torch.device("cpu")
elif torch.cuda.is_available():
    DEVICE = torch.device("cuda")
else:
    pytest.skip("triton is compiling (TRITON_INTERPRET unset) and there is no CUDA device", allow_module_level=True)
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def lengths_of(kind: str, n: int, t: int, device: torch.device = DEVICE) -> torch.Tensor:
    if kind == "equal":
        return torch.full((n,), t, device=device)
    lengths = torch.randint(0, t + 1, (n,))
    lengths[0], lengths[1] = t, 0  # the longest row sets T; a row of length 0
    return lengths.to(device)


def recurrence_inputs(t: int, n: int, hid: int) -> list[torch.Tensor]:
    """xp (T, N, 4H), s (N, H), r (N, 4H), w_t (H, 4H), factors around 1 as the rank-1 LSTM draws them."""
    values = [torch.randn(t, n, 4 * hid), 1 + 0.5 * torch.randn(n, hid), 1 + 0.5 * torch.randn(n, 4 * hid),
              torch.randn(hid, 4 * hid) / hid**0.5]
    return [v.to(DEVICE).requires_grad_() for v in values]


def autograd_reference(xp, lengths, s, r, w_t):
    """The same recurrence by autograd over every step (recurrence.run_recurrence), zero at padding."""
    hs, cs = run_recurrence(xp, lambda xt, h: xt + ((h * s) @ w_t) * r)  # (T, N, H) each
    keep = step_mask(lengths, xp.shape[0], xp.dtype).transpose(0, 1)  # (N, T, 1) -> (T, N, 1)
    return hs * keep, cs * keep


def assert_close(got, ref, tol=2e-5):
    for a, b in zip(got, ref, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=tol, rtol=tol), (a - b).abs().max()


KERNELS = {  # hidden units, the kernel (resident or tiled), its column tile, a wide tiled forward
    "resident-16": (16, True, 16, False), "resident-24-padded": (24, True, 16, False),
    "tiled-32": (32, False, 16, False), "tiled-24-padded": (24, False, 16, False),
    "wide-32": (32, False, 16, True), "wide-24-padded": (24, False, 16, True),
}


@pytest.mark.parametrize("lengths_kind", ["equal", "variable"])
@pytest.mark.parametrize("kernel", KERNELS.values(), ids=KERNELS.keys())
def test_kernel_outputs_and_gradients_equal_autograd_reference(kernel, lengths_kind):
    hid, resident, cols, wide = kernel
    t, n = 4, 21  # two programs of 16 rows, the second partly empty
    args = recurrence_inputs(t, n, hid)
    lengths = lengths_of(lengths_kind, n, t)
    cfg = tlm.launch_config(n, hid, DEVICE, block_rows=16, resident=resident, block_cols=cols, wide=wide)
    hs, cs = tlm.fused_rank1_lstm(args[0], lengths, *args[1:], config=cfg)
    ref_h, ref_c = autograd_reference(args[0], lengths, *args[1:])
    assert_close((hs, cs), (ref_h, ref_c))
    assert torch.all(hs[lengths.unsqueeze(0) <= torch.arange(t, device=DEVICE).unsqueeze(1)] == 0)  # zero padding
    wh, wc = torch.randn_like(hs), torch.randn_like(cs)
    grads = torch.autograd.grad((hs * wh).sum() + (cs * wc).sum(), args)
    ref_grads = torch.autograd.grad((ref_h * wh).sum() + (ref_c * wc).sum(), args)
    assert_close(grads, ref_grads)


@pytest.mark.parametrize("outputs", ["hidden", "cell"])
@pytest.mark.parametrize("resident", [True, False], ids=["resident", "tiled"])
def test_kernel_gradient_of_one_output_only(outputs, resident):
    """A missing output gradient (None in the backward) is read as zero."""
    hid, t, n = 16, 4, 6
    args = recurrence_inputs(t, n, hid)
    lengths = lengths_of("variable", n, t)
    cfg = tlm.launch_config(n, hid, DEVICE, resident=resident)
    got = tlm.fused_rank1_lstm(args[0], lengths, *args[1:], config=cfg)[outputs == "cell"]
    ref = autograd_reference(args[0], lengths, *args[1:])[outputs == "cell"]
    w = torch.randn_like(got)
    assert_close(torch.autograd.grad((got * w).sum(), args), torch.autograd.grad((ref * w).sum(), args))


def test_kernel_edge_shapes_and_checks():
    hid = 16
    xp, s, r, w_t = recurrence_inputs(0, 3, hid)
    hs, cs = tlm.fused_rank1_lstm(xp, torch.zeros(3, dtype=torch.long, device=DEVICE), s, r, w_t)  # T = 0
    assert hs.shape == cs.shape == (0, 3, hid)
    xp, s, r, w_t = recurrence_inputs(3, 4, hid)
    none = torch.zeros(4, dtype=torch.long, device=DEVICE)
    hs, cs = tlm.fused_rank1_lstm(xp, none, s, r, w_t)  # every row of length 0
    assert not hs.any() and not cs.any()
    longer = tlm.fused_rank1_lstm(xp, torch.full((4,), 7, device=DEVICE), s, r, w_t)[0]  # lengths > T: clamped
    assert torch.equal(longer, tlm.fused_rank1_lstm(xp, torch.full((4,), 3, device=DEVICE), s, r, w_t)[0])
    with pytest.raises(ValueError, match="do not fit"):
        tlm.fused_rank1_lstm(xp, none, s[:, :-1], r, w_t)
    with pytest.raises(ValueError, match="lengths"):
        tlm.fused_rank1_lstm(xp, none[:3], s, r, w_t)
    with pytest.raises(ValueError, match="power of 2"):
        tlm.LaunchConfig(block_rows=24, block_hidden=16, block_cols=16, resident=True, num_warps=4, precision="ieee")
    with pytest.raises(ValueError, match="resident"):
        tlm.launch_config(4, 100, DEVICE, resident=True)
    with pytest.raises(ValueError, match="wide"):
        tlm.launch_config(4, 16, DEVICE, resident=True, wide=True)


def rank1_lstm(hidden: int, layers: int, k: int, device: torch.device = DEVICE) -> LSTMRank1:
    return LSTMRank1(3, hidden, layers, components=k, config=Rank1Config(init_stddev=0.3)).to(device)


def run_both(lstm: LSTMRank1, x, lengths, samples: int, kernels=(LSTMKernel.REFERENCE, LSTMKernel.FUSED)):
    """Outputs and gradients (input, every parameter) of each kernel choice on the same factor draws."""
    results = []
    weights = None
    for kernel in kernels:
        set_lstm_kernel(lstm, kernel)
        draws = lstm.draw(x.shape[0], samples, generator=torch.Generator(x.device).manual_seed(1))
        inp = x.clone().requires_grad_()
        out, (h, c) = lstm.forward_with(inp, lengths, draws, samples)
        if weights is None:
            weights = [torch.randn_like(v) for v in (out, h, c)]
        loss = sum((v * w).sum() for v, w in zip((out, h, c), weights))
        params = [p for p in lstm.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, [inp, *params], allow_unused=True)
        results.append([out, h, c, *[torch.zeros_like(p) if g is None else g for g, p in zip(grads, [inp, *params])]])
    return results


LAYERS = {  # hidden units, LSTM layers: the resident kernel stacked, the tiled one by default (H > 64)
    "resident-16x2": (16, 2), "tiled-72": (72, 1),
}


@pytest.mark.parametrize("lengths_kind", ["equal", "variable"])
@pytest.mark.parametrize("shape", LAYERS.values(), ids=LAYERS.keys())
def test_layer_per_example_fused_equals_reference(shape, lengths_kind):
    """K = 4 components, two samples: outputs, final states and the gradients of the input, the kernels,
    the biases and the factors' posterior parameters agree with the hand-fused reference recurrence."""
    hidden, layers = shape
    k, samples, b, t = 4, 2, 2, 4  # 16 rows: one program
    lstm = rank1_lstm(hidden, layers, k)
    x = torch.randn(samples * k * b, t, 3).to(DEVICE)
    lengths = lengths_of(lengths_kind, samples * k * b, t)
    ref, fused = run_both(lstm, x, lengths, samples)
    assert_close(fused, ref)


@pytest.mark.parametrize("lengths_kind", ["equal", "variable"])
def test_layer_per_member_fused_equals_reference(lengths_kind):
    """Per-member draws through PyTorch's fused kernel at any lengths (packed at variable lengths) agree
    with the reference (the step loop on the block draws at variable lengths); no triton needed."""
    k, b, t = 3, 4, 6
    lstm = rank1_lstm(8, 2, k, CPU)
    set_sampling(lstm, "per_member")
    x = torch.randn(k * b, t, 3)
    lengths = lengths_of(lengths_kind, k * b, t, CPU)
    ref, fused = run_both(lstm, x, lengths, 1)
    assert_close(fused, ref)


def test_auto_on_cpu_is_the_reference_path_bit_for_bit():
    lstm = rank1_lstm(8, 1, 2, CPU)
    x, lengths = torch.randn(6, 4, 3), lengths_of("variable", 6, 4, CPU)
    assert lstm.kernel == LSTMKernel.AUTO and not lstm.fused_for(x)
    auto, ref = run_both(lstm, x, lengths, 1, (LSTMKernel.AUTO, LSTMKernel.REFERENCE))
    assert all(torch.equal(a, r) for a, r in zip(auto, ref))
    set_lstm_kernel(lstm, "fused")
    assert lstm.fused_for(x)
    with pytest.raises(ValueError):
        set_lstm_kernel(lstm, "cudnn")


@pytest.mark.skipif(DEVICE.type != "cpu", reason="the GPU runs it at full size (python -m benchmarks.fused_check)")
def test_fused_check_script_passes_in_the_interpreter(tmp_path, monkeypatch):
    """benchmarks/fused_check.py, what a GPU run starts with, at its small shapes on the CPU."""
    import json
    import runpy
    import sys

    out = tmp_path / "check.json"
    monkeypatch.setattr(sys, "argv", ["fused_check", "--device", "cpu", "--small", "--json", str(out)])
    runpy.run_module("benchmarks.fused_check", run_name="__main__", alter_sys=True)
    r = json.loads(out.read_text())
    assert r["ok"] and len(r["kernel"]) == 4 and {x["sampling"] for x in r["layer"]} == {"per_example", "per_member"}
