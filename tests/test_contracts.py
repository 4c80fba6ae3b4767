"""The data contracts hold the stages together: the features the extraction writes, what the
readers require, the pyfunc's signature, the risk table of `predict` and `score`, and the docs'
copies of the tables are all `pipeline.core.contracts`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.core import contracts
from pipeline.core.contracts import FEATURES, RISK, Use
from pipeline.data import features
from pipeline.tasks.mortality import risk

ROOT = Path(__file__).resolve().parents[1]


def test_extracted_files_have_the_contract_schema(demo_features):
    for split in ("train", "val", "test"):
        schema = pq.read_schema(demo_features.out_dir / f"{split}.parquet")
        assert schema.remove_metadata() == FEATURES.arrow_schema(FEATURES.names(*(u for u in Use if u != Use.VALUES)))
    assert demo_features.manifest["feature_version"] == contracts.FEATURE_VERSION


def test_readers_require_the_contract_columns():
    assert features.REQUIRED == ("key", "context", "bag_hours", "bags", "n_events")
    assert set(features.REQUIRED) == {c.name for c in FEATURES.columns if c.use is Use.REQUIRED}
    assert set(features.OPTIONAL) == {c.name for c in FEATURES.columns if c.use in (Use.LABEL, Use.WINDOW, Use.VALUES)}


def test_risk_table_columns_and_types_are_the_contract():
    logits = np.random.default_rng(0).normal(size=(3, 2, 4)).astype(np.float32)
    table = risk.risk_table(logits, [f"k{i}" for i in range(4)], 0.01, n_events=[1, 0, 2, 3])
    assert tuple(table.columns) == RISK.names()
    import pyarrow as pa

    assert pa.Table.from_pandas(table, schema=RISK.arrow_schema(), preserve_index=False).num_rows == 4
    empty = RISK.arrow_schema().empty_table().to_pandas()
    assert tuple(empty.columns) == RISK.names()


def test_pyfunc_signature_is_derived_from_the_contracts():
    from pipeline.runs.pyfunc import signature

    sig = signature(default_samples=7)
    inputs = {c.name: c for c in sig.inputs.inputs}
    ignored = [c for c in FEATURES.names() if c not in (*FEATURES.names(Use.REQUIRED), *contracts.PYFUNC_OPTIONAL)]
    assert list(inputs) == [*FEATURES.names(Use.REQUIRED), *contracts.PYFUNC_OPTIONAL, *ignored]
    assert all(inputs[n].required for n in FEATURES.names(Use.REQUIRED))
    assert not any(inputs[n].required for n in ("observed_hours", *ignored))
    assert [c.name for c in sig.outputs.inputs] == list(RISK.names())
    assert sig.params.params[0].default == 7


@pytest.mark.parametrize("table", [FEATURES, RISK], ids=lambda t: t.name)
def test_the_docs_show_the_contract_tables(table):
    assert table.markdown() in (ROOT / "docs" / "architecture.md").read_text()


@pytest.mark.parametrize("spec, ok, bad", [
    ("int32", "int64", "float32"),
    ("float32", "int16", "string"),
    ("string", "large_string", "int32"),
    ("list<int32>", "list<int64>", "list<float64>"),
    ("list<list<int32>>", "large_list<list<int8>>", "list<int32>"),
])
def test_accepts_is_by_kind_not_width(spec, ok, bad):
    import pyarrow as pa

    def typ(text):
        if text.startswith("large_list<"):
            return pa.large_list(typ(text[len("large_list<"):-1]))
        if text.startswith("list<"):
            return pa.list_(typ(text[5:-1]))
        return getattr(pa, text)()

    assert contracts.accepts(spec, typ(ok))
    assert not contracts.accepts(spec, typ(bad))
    assert contracts.accepts(spec, contracts.arrow_type(spec))


def test_a_census_condition_may_not_use_an_outcome():
    assert not set(contracts.OUTCOME_COLUMNS) & set(contracts.COHORT_COLUMNS)


def test_the_samples_default_is_written_once():
    """contracts.DEFAULT_SAMPLES is the one place the default number of samples is written: the CLI's
    help is built from it, benchmarks default to the model's score_samples or import it."""
    n = contracts.DEFAULT_SAMPLES
    pattern = re.compile(rf"(samples|draws)\D{{0,40}}(?<![\d.]){n}(?![\d.])|"
                         rf"(?<![\d.]){n}[- ](samples?|draws)\b|default={n}\b")
    own = {"benchmarks/vision_step.py", "benchmarks/laplace_fit.py"}  # their own MC settings (vision, Laplace)
    files = [ROOT / "cli.py", *sorted((ROOT / "pipeline").rglob("*.py")), *sorted((ROOT / "benchmarks").glob("*.py")),
             *sorted((ROOT / "experiments").glob("*.py"))]
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files if str(p.relative_to(ROOT)) not in own
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line) and "DEFAULT_SAMPLES =" not in line]
    assert not found, "the samples default written out:\n" + "\n".join(found)
