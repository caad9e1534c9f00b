"""The README's runnable shell blocks (```sh runnable) run against a real kestreld, each on a fresh
one in an empty directory with `set -e`: a command the README shows that fails, fails this test."""
import os
import pathlib
import re
import subprocess

import pytest

from conftest import KESTREL_CLI, Daemon

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"^```sh runnable\n(.*?)^```", README.read_text(), re.S | re.M)


def test_the_readme_has_runnable_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_a_readme_block_runs(block, tmp_path):
    d = Daemon(tmp_path / "kestreld", "--gpus", "1")
    try:
        work = tmp_path / "work"
        work.mkdir()
        env = d.env(PATH=f"{pathlib.Path(KESTREL_CLI).parent}:{os.environ['PATH']}")
        p = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=work, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, f"README block failed ({p.returncode}):\n{block}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    finally:
        assert d.stop() == 0
