"""Bad input to `python -m dora.trace import`: one line on stderr saying what, where and how to
fix, exit status 2, and no output file (nor its folder) left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dora.trace.__main__ import main
from tests.conftest import REPO

GOOD = "prompt_id,response_len,prompt_len\n0,5,3\n0,6,3\n1,7,3\n1,8,3\n"

# (input file name, its content, extra args, text the error line must hold)
CASES = [
    ("a.csv", GOOD, ["--map", "response_len=resp_len"], "has no column 'resp_len'"),
    ("a.csv", GOOD, ["--map", "length=response_len"], "'length' is not a trace column"),
    ("a.csv", GOOD, ["--map", "response_len"], "write TRACE_COLUMN=SOURCE_COLUMN"),
    ("a.csv", "prompt_id,response_len\n0,5\n0,6,7\n", [], "line 3"),
    ("a.jsonl", '{"prompt_id": 0, "response_len": 5}\n{"prompt_id": 0, "response_len": }\n', [],
     "a.jsonl: line 2: malformed JSON"),
    ("a.jsonl", '{"prompt_id": 0, "response_len": 5}\n[0, 5]\n', [], "line 2: a JSON list, not an object"),
    ("a.csv", "prompt_id,response_len\n0,5\n0,12.5\n", [], "line 3: column 'response_len': value 12.5 is not an integer"),
    ("a.csv", "prompt_id,resp\n0,5\n0,many\n", ["--map", "response_len=resp"],
     "line 3: column 'resp' (response_len): value 'many' is not an integer"),
    ("a.csv", "prompt_id,response_len\n0,5\n0,-4\n", [], "line 3: column 'response_len': value -4 is negative"),
    ("a.csv", "prompt_id,response_len\n0,5\n0,\n", [], "line 3: column 'response_len': is missing"),
    ("a.csv", "prompt_id,response_len,prompt_len\n0,5,0\n0,6,0\n", [], "pass --prompt-len N"),
    ("a.parquet", "not parquet", [], "not a readable parquet file"),
    ("a.csv", "", [], "the file is empty"),
    ("a.jsonl", "", [], "the file is empty"),
    ("a.parquet", "", [], "the file is empty"),
    ("a.csv", "prompt_id,response_len\n", [], "no rows"),
    ("a.csv", GOOD, ["--group-size", "3"], "no rows left: no group has --group-size 3 samples"),
    ("a.csv", "uid,response_len\n0,5\n", [], "no prompt_id column"),
    ("a.jsonl", '{"input": "q", "output": "a", "step": 1}\n', [], "pass --format verl --tokenizer PATH"),
    ("a.jsonl", '{"input": "q", "output": "a", "step": 1}\n', ["--format", "verl"], "pass --tokenizer PATH"),
    ("a.jsonl", '{"input": "q", "step": 1}\n', ["--format", "verl", "--tokenizer", "IN/none"], "no 'output' field"),
    ("a.jsonl", '{"input": "q", "output": "a", "step": 1}\n', ["--format", "verl", "--tokenizer", "IN/none"],
     "no tokenizer.json there"),
    ("a.csv", GOOD, ["--tokenizer", "IN/none"], "only --format verl holds text"),
    ("a.txt", GOOD, [], "cannot tell the format from '.txt'"),
    ("a.jsonl", '{"prompt_id": 0, "response_len": [1, 2], "reward": [1.0]}\n', [],
     "column 'reward': has 1 elements but column 'response_len' has 2"),
    ("a.csv", 'prompt_id,response_len\n0,"[1, 2"\n', [], "is not a JSON list"),
    ("a.csv", "prompt_id,sample_idx,response_len\n0,0,5\n0,0,6\n", [], "appears twice"),
    ("a.csv", GOOD, ["--max-len", "7"], "line 5: column 'response_len': value 8 is above --max-len 7"),
    ("a.csv", "prompt_id,response_len,finish_reason\n0,5,stop\n0,6,abort\n", [], "'abort' is not one of"),
    ("a.csv", GOOD, ["--prompt-len", "5", "--map", "prompt_len=prompt_len"], "choose one"),
    ("a.csv", "prompt_id,response_len,turns\n0,5,2\n0,6,7\n", [], "line 3: column 'turns': value 7 is more than"),
    ("a.csv", "prompt_id,response_len,tool_tokens\n0,5,2\n0,6,7\n", [], "given without a turns column"),
]


def refused(tmp_path, capsys, name: str, content: str, extra: list[str], out_name: str = "t.parquet") -> str:
    inp = tmp_path / "IN"
    inp.mkdir()
    src = inp / name
    src.write_text(content)
    out = tmp_path / "OUT" / out_name
    args = ["import", str(src), "-o", str(out), *(a.replace("IN/", f"{inp}/") for a in extra)]
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1 and err.startswith(("dora.trace: error: ", "python -m dora.trace: error: "))
    assert not (tmp_path / "OUT").exists()
    return err


@pytest.mark.parametrize("name,content,extra,needle", CASES, ids=[c[3][:40] for c in CASES])
def test_refused(tmp_path, capsys, name, content, extra, needle):
    err = refused(tmp_path, capsys, name, content, extra)
    assert needle in err, err


def test_output_must_be_parquet(tmp_path, capsys):
    assert "name it .parquet" in refused(tmp_path, capsys, "a.csv", GOOD, [], out_name="t.csv")


def test_verl_directory_error_names_file_and_line(tmp_path, capsys):
    d = tmp_path / "IN"
    d.mkdir()
    (d / "1.jsonl").write_text('{"input": "q", "output": "a", "step": 1}\n')
    (d / "2.jsonl").write_text('{"input": "q", "output": "a", "step": 2}\n{"input": "q", "output": 5, "step": 2}\n')
    tok = pytest.importorskip("tokenizers")
    t = tok.Tokenizer(tok.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    t.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(SystemExit):
        main(["import", str(d), "--format", "verl", "--tokenizer", str(tmp_path / "tokenizer.json"),
              "-o", str(tmp_path / "OUT" / "t.parquet")])
    err = capsys.readouterr().err
    assert "2.jsonl line 2: field 'output' is 5, not text" in err and not (tmp_path / "OUT").exists()


def test_bad_input_as_a_subprocess(tmp_path):
    """The command line itself: exit status 2, one line, nothing written."""
    src = tmp_path / "a.csv"
    src.write_text("prompt_id,response_len\n0,5\n0,x\n")
    out = subprocess.run([sys.executable, "-m", "dora.trace", "import", str(src), "-o", str(tmp_path / "t.parquet")],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "line 3" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "t.parquet").exists()
    assert out.stdout == ""
