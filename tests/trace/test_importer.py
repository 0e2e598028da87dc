"""`python -m dora.trace import`: each input form becomes a valid trace with its provenance."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dora.errors import InputError
from dora.trace import load_trace
from dora.trace.__main__ import main
from dora.trace.importer import DEFAULT_PROMPT_LEN, ImportOptions, import_trace
from tests.conftest import REPO


def run(capsys, *args) -> tuple[str, str]:
    assert main(["import", *map(str, args)]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def groups(tr) -> list[list[int]]:
    return tr.response_len.reshape(-1, tr.group_size).tolist()


def test_csv_with_map_and_provenance(tmp_path, capsys):
    src = tmp_path / "rollouts.csv"
    src.write_text("uid,response_length,prompt_length,global_step\n"
                   "7,120,30,0\n7,95,30,0\n9,4000,12,0\n9,33,12,0\n7,61,30,1\n7,88,30,1\n")
    out = tmp_path / "t.parquet"
    stdout, stderr = run(capsys, src, "-o", out, "--map",
                         "prompt_id=uid,response_len=response_length,prompt_len=prompt_length",
                         "--map", "step=global_step")
    assert stderr == ""
    tr = load_trace(out)
    assert groups(tr) == [[120, 95], [4000, 33], [61, 88]]
    assert tr.step.tolist() == [0, 0, 0, 0, 1, 1] and tr.prompt_len.tolist() == [30, 30, 12, 12, 30, 30]
    # integer ids that repeat across steps name two groups: renumbered, the originals recorded
    assert tr.prompt_id.tolist() == [0, 0, 1, 1, 2, 2]
    meta = tr.metadata
    assert meta["prompt_ids"]["values"] == [7, 9, 7]
    assert meta["generator"].startswith("dora.trace.import")
    assert meta["source"] == {"file": "rollouts.csv", "format": "csv", "rows": 6,
                              "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    assert meta["mapping"] == {"prompt_id": "uid", "response_len": "response_length", "prompt_len": "prompt_length",
                               "step": "global_step"}
    assert meta["command"].startswith("python -m dora.trace import ") and "--map" in meta["command"]
    assert "groups: 3 kept of G=2" in stdout and "p99" in stdout


def test_jsonl_identity_names_keep_integer_ids(tmp_path, capsys):
    src = tmp_path / "lens.jsonl"
    rows = [{"prompt_id": p, "response_len": 10 * p + s, "prompt_len": 5, "finish_reason": "stop"}
            for p in (3, 1) for s in (1, 2, 3)]
    rows[-1]["finish_reason"] = "length"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")  # a blank line is skipped
    run(capsys, src, "-o", tmp_path / "t.parquet")
    tr = load_trace(tmp_path / "t.parquet")
    assert tr.prompt_id.tolist() == [1, 1, 1, 3, 3, 3]  # unique integer ids are kept
    assert "prompt_ids" not in tr.metadata
    assert tr.truncated().tolist() == [False, False, True, False, False, False]


def test_parquet_with_sample_idx_orders_samples(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": [0, 0, 0, 1, 1, 1], "sample_idx": [2, 0, 1, 1, 2, 0],
                             "prompt_len": [4] * 6, "response_len": [30, 10, 20, 50, 60, 40]}), src)
    run(capsys, src, "-o", tmp_path / "t.parquet")
    tr = load_trace(tmp_path / "t.parquet")
    assert groups(tr) == [[10, 20, 30], [40, 50, 60]] and tr.sample_idx.tolist() == [0, 1, 2] * 2


@pytest.mark.parametrize("form", ["parquet", "csv", "jsonl"])
def test_list_column_one_row_per_prompt(tmp_path, capsys, form):
    df = pd.DataFrame({"prompt": ["q-a", "q-b"], "lens": [[5, 8, 13], [21, 34, 55]], "plen": [3, 4]})
    src = tmp_path / f"per_prompt.{form}"
    if form == "parquet":
        df.to_parquet(src)
    elif form == "csv":
        src.write_text('prompt,lens,plen\nq-a,"[5, 8, 13]",3\nq-b,"[21,34,55]",4\n')
    else:
        df.to_json(src, orient="records", lines=True)
    run(capsys, src, "-o", tmp_path / "t.parquet", "--map", "prompt_id=prompt,response_len=lens,prompt_len=plen")
    tr = load_trace(tmp_path / "t.parquet")
    assert groups(tr) == [[5, 8, 13], [21, 34, 55]] and tr.prompt_len.tolist() == [3] * 3 + [4] * 3
    assert tr.metadata["prompt_ids"]["values"] == ["q-a", "q-b"]


def test_list_column_without_prompt_id_is_one_prompt_per_row(tmp_path, capsys):
    src = tmp_path / "p.jsonl"
    src.write_text('{"response_len": [3, 4], "reward": [1.0, 0.0]}\n{"response_len": [5, 6], "reward": [0, 1]}\n')
    run(capsys, src, "-o", tmp_path / "t.parquet", "--prompt-len", "7")
    tr = load_trace(tmp_path / "t.parquet")
    assert groups(tr) == [[3, 4], [5, 6]] and tr.prompt_len.tolist() == [7] * 4
    assert pq.read_table(tmp_path / "t.parquet").column("reward").to_pylist() == [1.0, 0.0, 0.0, 1.0]


def test_missing_prompt_length_warns_once(tmp_path, capsys):
    src = tmp_path / "nolen.csv"
    src.write_text("prompt_id,response_len\n" + "".join(f"{p},{p + s + 1}\n" for p in range(5) for s in range(4)))
    _, stderr = run(capsys, src, "-o", tmp_path / "t.parquet")
    assert stderr.count("\n") == 1 and "warning" in stderr and str(DEFAULT_PROMPT_LEN) in stderr
    tr = load_trace(tmp_path / "t.parquet")
    assert (tr.prompt_len == DEFAULT_PROMPT_LEN).all()
    assert tr.metadata["prompt_len_default"] == DEFAULT_PROMPT_LEN


def test_unequal_groups_drop_smaller_cut_larger(tmp_path, capsys):
    # sizes 4, 4, 4, 2 (dropped), 6 (cut to 4 at random), 5 (cut to 4)
    sizes = {0: 4, 1: 4, 2: 4, 3: 2, 4: 6, 5: 5}
    rows = [(p, 100 * p + s + 1) for p, n in sizes.items() for s in range(n)]
    src = tmp_path / "ragged.csv"
    src.write_text("prompt_id,response_len,prompt_len\n" + "".join(f"{p},{r},9\n" for p, r in rows))
    stdout, _ = run(capsys, src, "-o", tmp_path / "t.parquet")
    line = next(s for s in stdout.splitlines() if s.startswith(str(tmp_path / "t.parquet")))
    assert "5 kept of G=4" in line and "2 larger cut to 4" in line and "3 samples left out" in line
    assert "1 smaller dropped (2 samples)" in line
    tr = load_trace(tmp_path / "t.parquet")
    assert tr.group_size == 4 and tr.num_groups == 5 and 3 not in tr.prompt_id
    g = dict(zip(tr.group_prompt_ids().tolist(), groups(tr)))
    for p in (4, 5):  # a subset of the group, in its file order
        assert g[p] == sorted(g[p]) and set(g[p]) <= {100 * p + s + 1 for s in range(sizes[p])}
    info = tr.metadata["groups"]
    assert (info["smaller_dropped"], info["larger_truncated"], info["samples_truncated"]) == (1, 2, 3)
    # --group-size overrides the most common size; the same seed gives the same cut
    run(capsys, src, "-o", tmp_path / "g5.parquet", "--group-size", "5")
    run(capsys, src, "-o", tmp_path / "g5b.parquet", "--group-size", "5")
    a, b = load_trace(tmp_path / "g5.parquet"), load_trace(tmp_path / "g5b.parquet")
    assert a.num_groups == 2 and np.array_equal(a.response_len, b.response_len)


def test_string_ids_become_integers_with_recorded_map(tmp_path, capsys):
    src = tmp_path / "s.jsonl"
    ids = ["f81d-ab", "0c1e-77", "f81d-ab", "0c1e-77", "zz"]
    src.write_text("".join(json.dumps({"uid": u, "response_len": i + 1, "prompt_len": 2}) + "\n"
                           for i, u in enumerate(ids)) + json.dumps({"uid": "zz", "response_len": 9,
                                                                      "prompt_len": 2}) + "\n")
    run(capsys, src, "-o", tmp_path / "t.parquet", "--map", "prompt_id=uid")
    tr = load_trace(tmp_path / "t.parquet")
    assert tr.prompt_id.tolist() == [0, 0, 1, 1, 2, 2] and groups(tr) == [[1, 3], [2, 4], [5, 9]]
    assert tr.metadata["prompt_ids"]["values"] == ["f81d-ab", "0c1e-77", "zz"]


def test_imported_trace_runs_in_the_simulator(tmp_path, capsys):
    src = tmp_path / "r.csv"
    rng = np.random.default_rng(0)
    lines = [f"p{p},{int(L)},{int(s)}" for s in range(2) for p in range(8)
             for L in rng.lognormal(5, 0.8, 4).clip(1, 4000)]
    src.write_text("prompt,resp,step\n" + "\n".join(lines) + "\n")
    out = tmp_path / "mine.parquet"
    run(capsys, src, "-o", out, "--map", "prompt_id=prompt,response_len=resp", "--prompt-len", "64")
    sim = subprocess.run([sys.executable, "-m", "dora.sim", "--trace", str(out), "--policy", "sync", "--policy",
                          "dora", "--instances", "2", "--max-seqs", "8", "--trainer-devices", "1", "--batch-size",
                          "2", "--steps", "2", "--json", str(tmp_path / "runs.json"), "--quiet"],
                         capture_output=True, text=True, cwd=REPO)
    assert sim.returncode == 0, sim.stderr
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert [r["policy"] for r in runs] == ["sync", "dora"]
    assert all(r["metrics"]["trained_samples"] == 2 * 2 * 4 and r["metrics"]["c2_lost"] == 0 for r in runs)


@settings(max_examples=30)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8), g=st.one_of(st.none(), st.integers(1, 6)),
       seed=st.integers(0, 3))
def test_group_rule_property(sizes, g, seed):
    """Whatever the group sizes: groups of >= G samples are kept, cut to G of their own samples in
    file order; smaller ones are gone; the counts in the metadata add up."""
    lens = {p: [100 * p + s + 1 for s in range(n)] for p, n in enumerate(sizes)}
    G = g if g is not None else max(set(sizes), key=lambda n: (sizes.count(n), n))
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "s.csv"
        src.write_text("prompt_id,response_len,prompt_len\n" +
                       "".join(f"{p},{x},4\n" for p, xs in lens.items() for x in xs))
        opts = ImportOptions(src=src, out=Path(d) / "t.parquet", group_size=g, seed=seed)
        if all(n < G for n in sizes):
            with pytest.raises(InputError, match="no rows left"):
                import_trace(opts)
            assert not opts.out.exists()
            return
        meta = import_trace(opts)
        tr = load_trace(opts.out)
    kept = [p for p, n in enumerate(sizes) if n >= G]
    assert tr.group_size == G and tr.group_prompt_ids().tolist() == kept
    for p, got in zip(kept, groups(tr)):
        assert got == sorted(got) and set(got) <= set(lens[p])
    info = meta["groups"]
    assert info["groups_kept"] == len(kept) and info["smaller_dropped"] == len(sizes) - len(kept)
    assert info["samples_truncated"] == sum(n - G for n in sizes if n > G)
    assert info["samples_dropped"] == sum(n for n in sizes if n < G)


def test_a_trace_reimports_as_itself(agentic_trace, tmp_path, capsys):
    """A generated multi-turn trace read as a plain parquet source: every schema column it has
    (lengths, step, finish_reason, turns, tool calls) comes back unchanged."""
    run(capsys, agentic_trace, "-o", tmp_path / "again.parquet")
    a, b = load_trace(agentic_trace), load_trace(tmp_path / "again.parquet")
    for col in ("prompt_id", "sample_idx", "prompt_len", "response_len", "step", "finish_reason", "turns",
                "tool_wait_s", "tool_tokens"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert b.metadata["groups"]["groups_as_read"] == a.num_groups and "prompt_ids" not in b.metadata
