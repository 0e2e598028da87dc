"""The trace loader refuses bad traces with one line naming file, column and first bad row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dora.errors import InputError
from dora.trace import load_trace
from tests.conftest import write_lengths


def _table(**cols) -> pa.Table:
    base = {"prompt_id": pa.array([0, 0, 1, 1], pa.int64()), "sample_idx": pa.array([0, 1, 0, 1], pa.int32()),
            "prompt_len": pa.array([5, 5, 7, 7], pa.int32()), "response_len": pa.array([3, 9, 4, 2], pa.int32())}
    base.update(cols)
    return pa.table({k: v for k, v in base.items() if v is not None})


def _refused(tmp_path, table: pa.Table) -> str:
    p = tmp_path / "bad.parquet"
    pq.write_table(table, p)
    with pytest.raises(InputError) as e:
        load_trace(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg
    return msg


def test_good_trace_loads_sorted(tmp_path):
    p = write_lengths(tmp_path / "t.parquet", [[3, 9], [4, 2]])
    tr = load_trace(p)
    assert tr.group_size == 2 and tr.num_groups == 2 and len(tr) == 4
    assert tr.response_len.tolist() == [3, 9, 4, 2]


def test_missing_column(tmp_path):
    assert "column 'response_len'" in _refused(tmp_path, _table(response_len=None))


def test_wrong_type(tmp_path):
    msg = _refused(tmp_path, _table(prompt_len=pa.array([5.0, 5, 7, 7])))
    assert "column 'prompt_len'" in msg and "integer" in msg


def test_negative_length_names_first_bad_row(tmp_path):
    msg = _refused(tmp_path, _table(response_len=pa.array([3, 9, -4, 0], pa.int32())))
    assert "column 'response_len', row 2" in msg and "-4" in msg


def test_null(tmp_path):
    msg = _refused(tmp_path, _table(response_len=pa.array([3, None, 4, 2], pa.int32())))
    assert "row 1" in msg and "null" in msg


def test_nan_reward(tmp_path):
    msg = _refused(tmp_path, _table(reward=pa.array([0.5, float("nan"), 1.0, 0.0])))
    assert "column 'reward', row 1" in msg and "NaN" in msg


def test_ragged_groups(tmp_path):
    t = _table(prompt_id=pa.array([0, 0, 1, 2], pa.int64()), sample_idx=pa.array([0, 1, 0, 0], pa.int32()))
    assert "ragged" in _refused(tmp_path, t)


def test_duplicate_sample(tmp_path):
    t = _table(sample_idx=pa.array([0, 0, 0, 1], pa.int32()))
    assert "column 'sample_idx'" in _refused(tmp_path, t)


def test_bad_finish_reason(tmp_path):
    assert "finish_reason" in _refused(tmp_path, _table(finish_reason=pa.array(["stop", "eos", "stop", "length"])))


def test_empty_file(tmp_path):
    t = _table().slice(0, 0)
    assert "no rows" in _refused(tmp_path, t)


def test_not_parquet(tmp_path):
    p = tmp_path / "x.parquet"
    p.write_text("not parquet")
    with pytest.raises(InputError, match="not a readable parquet"):
        load_trace(p)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_trace(tmp_path / "none.parquet")


def test_metadata_round_trip(tmp_path):
    from dora.trace import write_trace

    cols = {"prompt_id": np.array([0, 0]), "sample_idx": np.array([0, 1]), "prompt_len": np.array([1, 1]),
            "response_len": np.array([2, 3])}
    write_trace(tmp_path / "m.parquet", cols, {"generator": "x", "params": {"max_len": 3}})
    tr = load_trace(tmp_path / "m.parquet")
    assert tr.metadata["generator"] == "x" and tr.max_len == 3
    assert tr.truncated().tolist() == [False, True]


# ---- multi-turn columns ----------------------------------------------------------------------------

def _turns(**cols) -> dict:
    return {"turns": pa.array([1, 2, 3, 1], pa.int32()), "tool_wait_s": pa.array([0.0, 1.5, 2.0, 0.0]),
            "tool_tokens": pa.array([0, 10, 5, 0], pa.int32()), **cols}


def test_multi_turn_columns_load(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(_table(**_turns()), p)
    tr = load_trace(p)
    assert tr.turns.tolist() == [1, 2, 3, 1] and tr.tool_wait_s.tolist() == [0.0, 1.5, 2.0, 0.0]
    assert tr.tool_tokens.tolist() == [0, 10, 5, 0] and tr.tool_tokens_total().tolist() == [0, 10, 10, 0]
    plain = load_trace(write_lengths(tmp_path / "plain.parquet", [[3, 9]]))
    assert plain.turns is None and plain.tool_wait_s is None and plain.tool_tokens is None


def test_multi_turn_columns_round_trip(tmp_path):
    p = write_lengths(tmp_path / "t.parquet", [[3, 9], [4, 2]], turns=[[1, 2], [3, 1]], tool_wait_s=[[0, 1.5], [2, 0]],
                      tool_tokens=7)
    tr = load_trace(p)
    assert tr.turns.tolist() == [1, 2, 3, 1] and tr.tool_wait_s.tolist() == [0.0, 1.5, 2.0, 0.0]
    assert tr.tool_tokens.tolist() == [7] * 4


@pytest.mark.parametrize("cols, words", [
    ({"turns": pa.array([1, 0, 1, 1], pa.int32())}, ["column 'turns', row 1", "not >= 1"]),
    ({"turns": pa.array([1, 2, 5, 1], pa.int32())}, ["column 'turns', row 2", "more than response_len 4"]),
    ({"turns": pa.array([1.0, 2, 3, 1])}, ["column 'turns'", "integer"]),
    ({"tool_wait_s": pa.array([0.0, -1.0, 2.0, 0.0])}, ["column 'tool_wait_s', row 1", "negative"]),
    ({"tool_wait_s": pa.array([0.0, float("nan"), 2.0, 0.0])}, ["column 'tool_wait_s', row 1", "NaN"]),
    ({"tool_tokens": pa.array([0, 1, -5, 0], pa.int32())}, ["column 'tool_tokens', row 2", "negative"]),
    ({"tool_tokens": pa.array([0, None, 5, 0], pa.int32())}, ["column 'tool_tokens', row 1", "null"]),
    ({"turns": None}, ["column 'tool_wait_s'", "without a 'turns' column"]),
])
def test_bad_multi_turn_columns(tmp_path, cols, words):
    msg = _refused(tmp_path, _table(**_turns(**cols)))
    for w in words:
        assert w in msg, msg


def test_bad_multi_turn_column_at_the_cli(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    p = tmp_path / "bad.parquet"
    pq.write_table(_table(**_turns(turns=pa.array([1, 0, 1, 1], pa.int32()))), p)
    out = subprocess.run([sys.executable, "-m", "dora.trace", "stats", str(p)], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "column 'turns', row 1" in out.stderr
    out = subprocess.run([sys.executable, "-m", "dora.sim", "--trace", str(p), "--policy", "sync", "--quiet"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "column 'turns', row 1" in out.stderr
