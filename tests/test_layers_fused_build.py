"""The fused LSTM kernels build for an H100/H200 (sm_90) on a machine without a GPU: Triton's compiler and its
bundled ptxas run in a child process with the interpreter off (the test session runs kernels interpreted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_MEMORY = 227 * 1024  # bytes a block may have on sm_90

pytest.importorskip("triton", reason="triton is the `gpu` extra (make setup installs it): pip install -e '.[gpu]'")


@pytest.mark.slow
def test_default_kernels_build_for_sm90_within_shared_memory():
    code = ("import json; from pipeline.bayes.layers import triton_lstm; print(json.dumps({f'{h} {p}': "
            "triton_lstm.build(h, precision=p) for h in (64, 256) for p in ('ieee', 'tf32')}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "0"},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(built) == sorted(f"{h} {p}" for h in (64, 256) for p in ("ieee", "tf32"))
    for case, kernels in built.items():
        kind = "tiled" if case.startswith("256") else "resident"
        assert sorted(kernels) == [f"backward_{kind}", f"forward_{kind}"], case
        assert all(0 < b <= SHARED_MEMORY for b in kernels.values()), (case, kernels)
