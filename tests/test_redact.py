"""pipeline.core.redact: DSN passwords (URI and key=value forms), secret-looking keys, calendar dates, and
the flattened MLflow params / redacted manifest built from them."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.bayes.layers.priors import PriorKind
from pipeline.core import redact
from pipeline.core.redact import REDACTED, redact_dsn

# ---------------------------------------------------------------------------- DSN passwords


@pytest.mark.parametrize(
    "dsn,expected",
    [
        ("postgresql://u:s3cret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u:s3cret@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),
        ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p@ss/w:rd@h/db", "postgresql://u:***@h/db"),  # unencoded @ / :
        ("postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"),
        ("postgresql://u@h/db?password=s3cret", "postgresql://u@h/db?password=***"),
        ("postgresql://h/db?user=u&password=s3cret&sslmode=verify-full",
         "postgresql://h/db?user=u&password=***&sslmode=verify-full"),
        ("postgresql://h/db?sslpassword=k3y", "postgresql://h/db?sslpassword=***"),
        ("host=h port=5432 password=s3cret dbname=db", "host=h port=5432 password=*** dbname=db"),
        ("host=h password = s3cret dbname=db", "host=h password = *** dbname=db"),
        ("password='s3 cr\\'et' host=h", "password=*** host=h"),
        ("host=h sslpassword=k3y", "host=h sslpassword=***"),
        ("host=h PASSWORD=s3cret", "host=h PASSWORD=***"),
        ("host=h user=u dbname=db", "host=h user=u dbname=db"),
    ],
)
def test_redact_dsn(dsn: str, expected: str) -> None:
    assert redact_dsn(dsn) == expected


_PW = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#'\\"), min_size=1, max_size=30
)


@settings(max_examples=150, deadline=None)
@given(pw=_PW, encode=st.booleans())
@pytest.mark.slow
def test_redact_dsn_uri_property(pw: str, encode: bool) -> None:
    secret = quote(pw, safe="") if encode else pw
    assert redact_dsn(f"postgresql://mimic:{secret}@127.0.0.1:5432/mimic") == "postgresql://mimic:***@127.0.0.1:5432/mimic"
    assert redact_dsn(f"postgresql://127.0.0.1/mimic?password={quote(pw, safe='')}&x=1") == (
        "postgresql://127.0.0.1/mimic?password=***&x=1"
    )


@settings(max_examples=150, deadline=None)
@given(pw=st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=0, max_size=30))
def test_redact_dsn_keyvalue_property(pw: str) -> None:
    quoted = "'" + pw.replace("\\", "\\\\").replace("'", "\\'") + "'"
    assert redact_dsn(f"host=h password={quoted} dbname=d") == "host=h password=*** dbname=d"


# ---------------------------------------------------------------------------- keys, values, params


@pytest.mark.parametrize("key, secret", [
    ("password", True), ("db_password", True), ("PGPASSWORD", False), ("pg.password", True), ("api-key", True),
    ("apiKey", True), ("API_KEY", True), ("MIMIC_DEID_KEY", True), ("deid.key_file", True), ("auth", True),
    ("dsn", True), ("source dsn", True), ("client_secret", True), ("token", True),
    ("tokens", False), ("monkey", False), ("keys", False), ("key_count", True), ("max_tokens", False),
    ("author", False), ("description", False), ("lstm_hidden", False),
    # a vocabulary token is not a credential (train.token_oov_rate was logged as *** and split compare's rows)
    ("train.token_oov_rate", False), ("model.token_vocab", False), ("access_token", True), ("token_value", True),
])
def test_secret_keys_are_recognised_by_fragment(key, secret):
    assert redact.is_secret_key(key) is secret


@pytest.mark.parametrize("value, expected", [
    ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
    ("connect with password=s3cret now", "connect with password=*** now"),
    ("PASSWORD: s3cret", "PASSWORD: ***"),
    ("sslpassword = k3y", "sslpassword = ***"),
    ("admitted 2150-03-04 10:00", "admitted <date> 10:00"),
    ("2101/12/31 and 1899-01-01", "<date> and <date>"),
    ("item 2150 count 03-04", "item 2150 count 03-04"),  # not a date
    ("2150-13-01 2150-02-32 2400-01-01", "2150-13-01 2150-02-32 2400-01-01"),  # not calendar dates
    ("/runs/2150-03-04T10:00/features", "/runs/<date>T10:00/features"),  # ISO 8601
    ("run_2150-03-04_b", "run_<date>_b"),
    ("121500-03-04 2150-03-045", "121500-03-04 2150-03-045"),  # longer numbers are not dates
    ("", ""),
])
def test_redact_value(value, expected):
    assert redact.redact_value(value) == expected


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"dsn": "postgresql://u:pw@h/db"}, {"dsn": "***"}),
        ({"source": "postgresql://u:s3cret@h:5432/db"}, {"source": "postgresql://u:***@h:5432/db"}),
        ({"conn": "host=h password=s3cret user=u"}, {"conn": "host=h password=*** user=u"}),
        ({"deid_key": "abc", "MIMIC_DEID_KEY": "abc", "api-token": "t"},
         {"deid_key": "***", "MIMIC_DEID_KEY": "***", "api-token": "***"}),
        ({"data": "/data/2101-03-04/features"}, {"data": "/data/<date>/features"}),
        ({"model": {"lstm_hidden": 64, "prior": PriorKind.GAUSSIAN}, "max_tokens": None},
         {"model.lstm_hidden": "64", "model.prior": "gaussian", "max_tokens": "None"}),
    ],
)
def test_redact_params(params, expected):
    assert redact.redact_params(params) == expected


def test_redact_json_keeps_structure():
    manifest = {"source": {"kind": "postgres", "location": "postgresql://u:pw@h/db", "password": "pw"},
                "splits": [{"admissions": 3, "note": "run 2101-02-03"}], "vocab": {"tokens": 5}}
    assert redact.redact_json(manifest) == {
        "source": {"kind": "postgres", "location": "postgresql://u:***@h/db", "password": "***"},
        "splits": [{"admissions": 3, "note": "run <date>"}], "vocab": {"tokens": 5}}


def test_long_param_values_are_cut_to_mlflow_limit():
    assert redact.redact_params({"x": "a" * 7000}) == {"x": "a" * 6000}
    assert redact.redact_params({"dsn": {"host": "h"}}) == {"dsn.host": "h"}  # a mapping is flattened, not hidden
    assert redact.redact_json({"token": 5, "key": ["a"], "n": None}) == {"token": 5, "key": ["a"], "n": None}
    assert REDACTED == "***"
