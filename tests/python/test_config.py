"""kestreld --config FILE and --check-config, and the systemd unit under contrib/."""
import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import Daemon

ROOT = pathlib.Path(__file__).resolve().parents[2]
KESTRELD = os.environ["KESTRELD"]


def run(*args, timeout=30):
    return subprocess.run([KESTRELD, *args], capture_output=True, text=True, timeout=timeout)


def test_the_config_file_sets_what_flags_set_and_flags_win(tmp_path):
    conf = tmp_path / "kestreld.conf"
    conf.write_text("# a comment\n"
                    "grace-period = 3\n"
                    "node = a:gpus=2,pool=p\n"
                    "node = b:gpus=1,pool=q\n"
                    "max-jobs = 7\n")
    d = Daemon(tmp_path / "one", "--config", str(conf))
    try:
        nodes = {n["name"]: len(n["devices"]) for n in d.api("GET", "/api/v1/nodes")[1]["nodes"]}
        assert nodes == {"a": 2, "b": 1}
    finally:
        assert d.stop() == 0
    # a repeatable flag on the command line replaces the file's entries; a scalar overrides
    d = Daemon(tmp_path / "two", "--config", str(conf), "--node", "c:gpus=4")
    try:
        nodes = {n["name"]: len(n["devices"]) for n in d.api("GET", "/api/v1/nodes")[1]["nodes"]}
        assert nodes == {"c": 4}
    finally:
        assert d.stop() == 0
    r = run("--config", str(conf), "--check-config", "-d", str(tmp_path / "never"))
    assert r.returncode == 0 and "config: ok" in r.stdout and "node       a: pool p, 2 GPUs" in r.stdout
    assert not (tmp_path / "never").exists()   # checking starts nothing and writes nothing
    # the command line's replacement is said, once a key; an abbreviated flag (as getopt takes it)
    # replaces the file's entries too, where it used to add to them (a hostile test: a permission cap
    # of the file then held beside the command line's)
    conf.write_text("max-priority = normal\nmax-priority = team:ops=high\nnode = a:gpus=1\n")
    for flag in ("--max-priority", "--max-prio"):
        r = run("--config", str(conf), flag, "user:carol=urgent", "--check-config", "-d", str(tmp_path / "never"))
        assert r.returncode == 0 and "priority   up to urgent for everyone, urgent for user carol" in r.stdout, r.stdout
        assert r.stderr.count("is given on the command line too") == 1, r.stderr
        assert "kestreld.conf:1: 'max-priority' is given on the command line too, which replaces every " \
               "'max-priority' of this file" in r.stderr, r.stderr
    for flag in (["--conf", str(conf)], [f"--co={conf}"]):   # --config abbreviated, as getopt takes it, is read
        r = run(*flag, "--check-config", "-d", str(tmp_path / "never"))
        assert r.returncode == 0 and "up to normal for everyone, high for team ops" in r.stdout, (flag, r.stdout)


@pytest.mark.parametrize("text,why", [
    ("bogus = 1\n", "kestreld.conf:1: unknown setting 'bogus'"),
    ("\nport\n", "kestreld.conf:2: 'port' needs '= VALUE'"),
    ("port = nine\n", "--port: expected an integer"),
    ("tls-cert = /nonexistent.pem\ntls-key = /nonexistent.key\n", "--tls-cert /nonexistent.pem"),
])
def test_a_bad_config_is_refused_with_its_line(tmp_path, text, why):
    conf = tmp_path / "kestreld.conf"
    conf.write_text(text)
    r = run("--config", str(conf), "--check-config", "-d", str(tmp_path / "d"))
    assert r.returncode == 2 and why in r.stderr + r.stdout, r.stderr + r.stdout
    assert run("--config", str(tmp_path / "missing.conf")).returncode == 2


def test_the_systemd_unit_verifies(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = (ROOT / "contrib" / "kestreld.service").read_text().replace("/usr/local/bin/kestreld", KESTRELD)
    path = tmp_path / "kestreld.service"
    path.write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    assert "--check-config" in unit and "--config /etc/kestrel/kestreld.conf" in unit
    # the example config it names is one kestreld accepts
    conf = (ROOT / "contrib" / "kestreld.conf").read_text()
    for line in conf.splitlines():
        if line.startswith("tls-"):
            conf = conf.replace(line + "\n", "")
    (tmp_path / "k.conf").write_text(conf.replace("/var/lib/kestrel", str(tmp_path / "d")))
    r = run("--config", str(tmp_path / "k.conf"), "--check-config")
    assert r.returncode == 0, r.stderr


def test_a_data_dir_sbatch_would_read_as_a_pattern_is_refused_with_slurm_pools(tmp_path):
    """sbatch reads '%' and '\\' in --output as patterns: with a data dir "d%u" a Slurm job's output went
    to another path and was lost (a hostile test). Refused by --check-config and at start; without
    Slurm pools such a path is fine."""
    odd = tmp_path / "d%u"
    r = run("--slurm-pool", "poola", "--check-config", "-d", str(odd))
    assert r.returncode == 2 and "reads in a job's output path as a pattern" in r.stderr, r.stderr
    r = run("--slurm-pool", "poola", "--port", "0", "-d", str(odd))
    assert r.returncode == 2 and "pattern" in r.stderr and not odd.exists(), r.stderr
    assert run("--check-config", "-d", str(odd)).returncode == 0


def test_a_data_dir_reached_through_a_link_is_judged_by_its_real_path(tmp_path):
    real = tmp_path / "a%u"
    real.mkdir()
    (tmp_path / "k").symlink_to(real)
    r = run("--slurm-pool", "poola", "--check-config", "-d", str(tmp_path / "k"))
    assert r.returncode == 2 and "pattern" in r.stderr, r.stderr
    r = run("--slurm-pool", "poola", "--port", "0", "-d", str(tmp_path / "k"))
    assert r.returncode == 2 and "pattern" in r.stderr, r.stderr
