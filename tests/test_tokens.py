"""pipeline.data.mimic.extraction.tokens on a hand-made ``events`` table: quantile bins, categorical text items and
the vocabulary fitted on the training split only, out-of-vocabulary tokens collapsed per source, text
values normalised, and hourly/daily bag boundaries computed by hand."""

from __future__ import annotations

import duckdb
import pytest

from pipeline.data.mimic.extraction import tokens

EVENTS_DDL = """CREATE TABLE events (adm_idx INTEGER, split VARCHAR, subject_key BIGINT, source VARCHAR,
                                     item VARCHAR, valuenum DOUBLE, valuetext VARCHAR, t_hours DOUBLE)"""
TRAIN, VAL = [1, 2, 3, 4], [10, 11, 12, 13, 14]  # patients (one admission each: adm_idx = patient; 15 is val)
FIT = {"n_bins": 4, "min_patients": 3, "max_text_values": 3, "text_max_len": 4}


def _events() -> list[tuple]:
    """(patient, source, item, valuenum, valuetext); t_hours is the row number, so each event is known."""
    rows = []
    for p in TRAIN:  # lab 100: patients 1-3 have 1, 3, 5, 7 and patient 4 has 2, 4, 6, 8
        rows += [(p, "lab", "100", float(v + (p == 4)), None) for v in (1, 3, 5, 7)]
    rows += [(p, "lab", "100", 1000.0, None) for p in VAL]  # would move every cut if val were fitted
    rows += [(15, "lab", "100", 4.5, None)]  # a value on a cut is in the bin above it
    rows += [(1, "lab", "200", 5.0, None), (2, "lab", "200", 6.0, None)]  # 2 train patients: no bins, OOV
    rows += [(p, "lab", "200", 5.0, None) for p in VAL]  # 5 val patients do not make it frequent
    rows += [(1, "chart", "300", None, " low "), (2, "chart", "300", None, "low"), (4, "chart", "300", None, "low"),
             (3, "chart", "300", None, "a:b")]  # 2 distinct values <= 3: a text item
    rows += [(p, "chart", "400", None, v) for p, v in zip(TRAIN, "abcd")]  # 4 distinct values: free text
    rows += [(p, "chart", "500", None, "abcdefgh") for p in (1, 2, 3)]  # truncated to 4 characters
    rows += [(p, "rx", "drug", None, None) for p in (1, 2, 3)]  # item only
    rows += [(1, "proc", "900", None, None)]  # 1 patient: proc OOV
    rows += [(p, "micro", "999", None, None) for p in VAL]  # only in val: micro OOV
    return rows


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute(EVENTS_DDL)
    con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(p, "train" if p in TRAIN else "val", p, s, i, v, t, float(n))
                     for n, (p, s, i, v, t) in enumerate(_events())])
    yield con
    con.close()


def test_fit_on_train_only(con):
    vocab = tokens.fit(con, **FIT)
    # lab 100 train values (16): 1,1,1,2,3,3,3,4,5,5,5,6,7,7,7,8; quantile_cont at 1/4, 2/4, 3/4
    # = 2 + .75(3 - 2), 4 + .5(5 - 4), 6 + .25(7 - 6); the val values (1000) are not seen
    assert vocab.bins == {"lab:100": [2.75, 4.5, 6.25]}
    assert vocab.text_items == ["chart:300", "chart:500"]  # chart:400 has 4 > 3 distinct values
    oovs = [f"{s}:<oov>" for s in tokens.SOURCES]
    kept = ["chart:300:t:low", "chart:400", "chart:500:t:abcd", "lab:100:q0", "lab:100:q1", "lab:100:q2", "lab:100:q3",
            "rx:drug"]
    assert vocab.tokens == ["<pad>", *oovs, *kept]
    assert vocab.context == ["<pad>"]


def test_text_items_need_at_most_max_text_values(con):
    vocab = tokens.fit(con, **{**FIT, "max_text_values": 4})
    assert vocab.text_items == ["chart:300", "chart:400", "chart:500"]
    # chart:400's values are now text values, each in one patient: out of vocabulary
    assert [t for t in vocab.tokens if t.startswith("chart:")][1:] == ["chart:300:t:low", "chart:500:t:abcd"]


def _tokenized(con, vocab) -> dict[int, str]:
    tokens.register(con, vocab)
    tokens.tokenize(con, vocab, FIT["text_max_len"])
    rows = con.sql("SELECT t_hours, tid FROM tokenized").fetchall()
    return {int(t): vocab.tokens[tid] for t, tid in rows}


def test_tokenize_bins_values_and_collapses_rare_tokens_per_source(con):
    vocab = tokens.fit(con, **FIT)
    by_row = _tokenized(con, vocab)
    events = _events()
    assert len(by_row) == len(events)  # every event gets one token (no event lost in a join)
    got = [by_row[n] for n in range(len(events))]
    expected = []
    for p, source, item, value, text in events:
        if (source, item) == ("lab", "100"):
            bin_of = sum(c <= value for c in (2.75, 4.5, 6.25))  # a value on a cut goes up
            expected.append(f"lab:100:q{bin_of}")
        elif (source, item, text) in (("chart", "300", " low "), ("chart", "300", "low")):
            expected.append("chart:300:t:low")
        elif (source, item) == ("chart", "500"):
            expected.append("chart:500:t:abcd")
        elif (source, item) in (("chart", "400"), ("rx", "drug")):
            expected.append(f"{source}:{item}")
        else:  # lab 200, chart 300 "a;b" (1 patient), proc 900, micro 999 (val only)
            expected.append(f"{source}:<oov>")
    assert got == expected
    assert got.count("lab:100:q3") == 4 + len(VAL)  # val's 1000 falls in the top bin of the train cuts
    assert got[events.index((15, "lab", "100", 4.5, None))] == "lab:100:q2"  # 2.75 <= 4.5 and 4.5 <= 4.5


def test_vocab_round_trips_through_json(con):
    vocab = tokens.fit(con, **FIT)
    assert tokens.Vocab.from_json(vocab.to_json()) == vocab
    old = {k: v for k, v in vocab.to_json().items() if k != "text_items"}  # vocab.json before text items
    assert tokens.Vocab.from_json(old).text_items == []


def test_text_values_are_trimmed_truncated_and_colon_free():
    """sql/42_tokens: a categorical item's text value is trimmed, cut to text_max_len, ':' -> ';'."""
    con = duckdb.connect()
    con.execute("CREATE TABLE events AS SELECT 0 AS adm_idx, 'train' AS split, 'k' AS subject_key, 1.0 AS t_hours, "
                "'chart' AS source, '7' AS item, CAST(NULL AS DOUBLE) AS valuenum, s AS valuetext "
                "FROM (VALUES ('  a:b:c  '), ('abcdefgh'), ('  '), (NULL)) v(s)")
    con.execute("CREATE TABLE bin_ranges_t (key VARCHAR, bin INTEGER, lo DOUBLE, hi DOUBLE, center DOUBLE, scale "
                "DOUBLE)")
    con.execute("CREATE TABLE text_items_t AS SELECT 'chart:7' AS key")
    out = [r[0] for r in con.sql(f"SELECT token FROM ({tokens.token_sql(4)})").fetchall()]
    assert sorted(out) == sorted(["chart:7:t:a;b;", "chart:7:t:abcd", "chart:7:t:", "chart:7"])


def _bag(hours_tids: list[tuple], prediction_hours: float, hourly_hours: float, values: bool = False) -> list[dict]:
    """bags of (adm_idx, t_hours, tid[, value]) events; without values the value channel is 0 and left out."""
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE tokenized (adm_idx INTEGER, t_hours DOUBLE, tid INTEGER, value DOUBLE)")
    con.executemany("INSERT INTO tokenized VALUES (?, ?, ?, ?)", [(*e, 0.0)[:4] for e in hours_tids])
    rows = tokens.bag(con, prediction_hours, hourly_hours, values=True).to_pylist()
    if not values:
        for r in rows:
            assert all(v == 0.0 for bag in r.pop("bag_values") for v in bag)
    return rows


def test_bags_hourly_before_the_prediction_time_daily_before_that():
    """T = 24 h, last 6 h hourly: hourly bags from 18 h, daily bags ending at 18 h (hours after ADMITTIME).

    By hand: 23.99 -> [23, 24); 18.5 and 18.0 -> [18, 19); 17.99, -5.5 and -6.0 -> the day [-6, 18);
    -6.01 -> the day [-30, -6); -30.5 -> the day [-54, -30). Another admission's 0.0 h -> the day [-6, 18)."""
    events = [(0, 23.99, 4), (0, 18.5, 7), (0, 18.0, 3), (0, 18.0, 3), (0, 17.99, 9), (0, -5.5, 2), (0, -6.0, 9),
              (0, -6.01, 5), (0, -30.5, 6), (2, 0.0, 1)]
    rows = _bag(events, prediction_hours=24.0, hourly_hours=6.0)
    assert rows == [
        {"adm_idx": 0, "bag_hours": [-54.0, -30.0, -6.0, 18.0, 23.0], "bags": [[6], [5], [2, 9], [3, 7], [4]],
         "n_events": 9},  # events, not distinct tokens: the two 18.0 h events of token 3 count twice
        {"adm_idx": 2, "bag_hours": [-6.0], "bags": [[1]], "n_events": 1},
    ]


def test_bags_default_window_is_hourly_from_admission():
    """hourly_hours = prediction_hours (the default): hourly from 0 h, daily before admission."""
    rows = _bag([(1, 0.0, 1), (1, 0.99, 2), (1, 1.0, 1), (1, -0.01, 3), (1, -24.0, 3), (1, -24.5, 4)], 24.0, 24.0)
    assert rows == [{"adm_idx": 1, "bag_hours": [-48.0, -24.0, 0.0, 1.0], "bags": [[4], [3], [1, 2], [1]],
                     "n_events": 6}]


def test_value_channel_by_hand(con):
    """sql/42_tokens + 44: lab 100's cuts [2.75, 4.5, 6.25] give center 4.5 (their median) and scale
    (6.25 - 2.75) / 2 = 1.75; an event's value channel is (value - 4.5) / 1.75 clipped to +-5, 0 for
    every token without a binned value (text, item only) and every out-of-vocabulary token."""
    vocab = tokens.fit(con, **FIT)
    assert tokens.value_scale(vocab.bins["lab:100"]) == (4.5, 1.75)
    tokens.register(con, vocab)
    tokens.tokenize(con, vocab, FIT["text_max_len"])
    got = {int(t): v for t, v in con.sql("SELECT t_hours, value FROM tokenized").fetchall()}
    for n, (p, source, item, value, text) in enumerate(_events()):
        want = max(-5.0, min(5.0, (value - 4.5) / 1.75)) if (source, item) == ("lab", "100") else 0.0
        assert got[n] == pytest.approx(want), (n, source, item, value)
    assert got[_events().index((10, "lab", "100", 1000.0, None))] == 5.0  # clipped


@pytest.mark.parametrize("cuts, want", [([1.0, 2.0, 4.0], (2.0, 1.5)), ([3.0], (3.0, 3.0)), ([-0.5], (-0.5, 1.0)),
                                        ([], (0.0, 1.0)), ([2.0, 2.5], (2.25, 0.25))])
def test_value_scale(cuts, want):
    assert tokens.value_scale(cuts) == want


def test_bags_carry_the_mean_value_of_each_token_beside_it():
    """45_bags: per bag, the values line up with the sorted distinct ids; two events of one token in one
    bag average (1.0 and 3.0 -> 2.0)."""
    rows = _bag([(0, 23.5, 7, 1.0), (0, 23.9, 7, 3.0), (0, 23.1, 2, -0.5), (0, 22.0, 4, 0.25)], 24.0, 24.0,
                values=True)
    assert rows == [{"adm_idx": 0, "bag_hours": [22.0, 23.0], "bags": [[4], [2, 7]],
                     "bag_values": [[0.25], [-0.5, 2.0]], "n_events": 4}]
