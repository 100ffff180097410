"""Interruption: a real SIGINT / SIGTERM sent to a real ``costmodel sweep`` process while it writes
its output leaves the previous file as it was (no partial file, no temporary file left behind) and
ends with one line on stderr. Ctrl-C while the package is imported prints one line, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")

# 1000 × 200 = 200,000 rows × 40 columns: about 100 MB of CSV, a write of about a second
GRID = ["model=llama-2-7b", "hardware=a100-80gb", "prompt_len=512", "batch_size=1:1000", "gen_len=1:200",
        "--workers", "1", "--no-progress"]


def _interrupt_while_writing(tmp_path, name: str, sig: int):
    out = tmp_path / name
    out.write_text("previous result\n")
    proc = subprocess.Popen([sys.executable, "-m", "costmodel", "sweep", *GRID, "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            # the writer's temporary file (.NAME.XXXX.tmp) exists and has bytes: the write is under way
            if any(f.startswith(f".{name}.") and f.endswith(".tmp") and os.path.getsize(tmp_path / f) > 0
                   for f in os.listdir(tmp_path)):
                proc.send_signal(sig)
                break
            time.sleep(0.002)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == "costmodel: interrupted\n", err
    assert out.read_text() == "previous result\n", "the previous file is intact"
    assert sorted(os.listdir(tmp_path)) == [name], "no temporary file is left behind"


def test_sigint_while_writing_csv_keeps_the_previous_file(tmp_path):
    _interrupt_while_writing(tmp_path, "grid.csv", signal.SIGINT)


def test_sigterm_while_writing_parquet_keeps_the_previous_file(tmp_path):
    pytest.importorskip("pyarrow")
    _interrupt_while_writing(tmp_path, "grid.parquet", signal.SIGTERM)


def test_ctrl_c_during_import_prints_one_line(tmp_path):
    # a finder that raises KeyboardInterrupt when the package imports its engine: exactly what Ctrl-C
    # during the (slow, numpy-loading) start of the command line does
    code = ("import sys\n"
            "class Stop:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'costmodel.engine.evaluate':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Stop())\n"
            "sys.argv = ['costmodel', 'hardware', 'list']\n"
            "from costmodel.cli.main import main\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 130
    assert r.stderr == "costmodel: interrupted\n", r.stderr
