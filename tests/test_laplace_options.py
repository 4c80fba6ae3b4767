"""pipeline.bayes.laplace.options: the laplace command's --prior-precision and the subnetwork size it implies."""

from __future__ import annotations

import pytest

from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.options import (
    DEFAULT_SUBNET_SIZE,
    HessianKind,
    Selection,
    prior_precision_value,
    subnet_size_for,
)


def test_prior_precision_is_auto_or_a_number():
    assert prior_precision_value("auto") is None
    assert prior_precision_value("0.5") == 0.5 and prior_precision_value("1e3") == 1000.0
    with pytest.raises(LaplaceError, match=r"prior precision must be 'auto' or a number, got 'lots'"):
        prior_precision_value("lots")


@pytest.mark.parametrize("selection, hessian, given, expected", [
    (Selection.WASSERSTEIN, HessianKind.FULL, None, DEFAULT_SUBNET_SIZE),
    ("random", "full", None, DEFAULT_SUBNET_SIZE),
    (Selection.LAST_LAYER, HessianKind.FULL, None, None),  # the output layer's size, found by the fit
    (Selection.MAGNITUDE, HessianKind.FULL, 7, 7),
    (Selection.WASSERSTEIN, HessianKind.DIAG, 7, None),  # diagonal Laplace: every weight, S ignored
    ("last-layer", "diag", None, None),
])
def test_subnet_size_is_what_the_selection_and_hessian_need(selection, hessian, given, expected):
    assert subnet_size_for(selection, hessian, given) == expected


def test_laplace_options_give_the_config_settings_and_the_run_arguments():
    from pipeline.cli.laplace import LaplaceOptions

    o = LaplaceOptions("r1", selection=Selection.LAST_LAYER, prior_precision="2", exclude=("lstm",), threads=2)
    s = o.settings()
    assert s["subnet_size"] is None and s["prior_precision"] == 2.0 and s["exclude"] == ("lstm",)
    assert LaplaceOptions("r1").settings()["subnet_size"] == DEFAULT_SUBNET_SIZE
    assert LaplaceOptions("r1", hessian=HessianKind.DIAG, subnet_size=5).settings()["subnet_size"] is None
    assert o.run_kwargs() == {"data": None, "samples": None, "out_dir": None, "tracking": True, "experiment": None,
                              "device": None, "threads": 2}
