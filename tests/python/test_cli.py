"""The kestrel CLI and the JSON API, driven as a person would, against the real kestreld."""
import json
import os
import pathlib
import re
import subprocess
import time

import pytest

from conftest import KESTREL_CLI, KESTRELD


def submit(k, *args):
    out = k.cli("-o", "json", "submit", *args).stdout
    return json.loads(out)


def test_help_and_usage_errors(kestreld):
    assert "submit" in kestreld.cli("--help").stdout
    assert "--gpus N" in kestreld.cli("submit", "--help").stdout
    assert kestreld.cli("frobnicate", check=False).returncode == 2
    p = kestreld.cli("submit", "--gpus", "1", check=False)
    assert p.returncode == 2 and "needs a program" in p.stderr
    p = kestreld.cli("submit", "--priority", "asap", "--", "true", check=False)
    assert p.returncode != 0 and "unknown priority 'asap'" in p.stderr
    p = kestreld.cli("status", "nope", check=False)
    assert p.returncode == 2
    # numbers past their range say what they take (a hostile test: nan, inf and 9.3e18M were a cast out
    # of range, said "must not be negative"; 8e18 queued a job for good; --retries past int said "error")
    for flag, value, says in (("--min-gpu-memory", "nan", "takes a size"), ("--min-gpu-memory", "inf", "takes a size"),
                              ("--min-gpu-memory", "9.3e18M", "takes a size"), ("--min-gpu-memory", "8e18", "takes a size"),
                              ("--retries", "4294967297", "from 0 to 100"), ("--affinity", "group:", "a group name"),
                              ("--min-gpu-memory", "0x10G", "takes a size"), ("--min-gpu-memory", " 5G", "takes a size"),
                              ("--min-gpu-memory", "1e3", "takes a size"), ("--retries", " 5", "from 0 to 100")):
        p = kestreld.cli("submit", flag, value, "--", "true", check=False)
        assert p.returncode == 2 and says in p.stderr, (flag, value, p.stderr)
    assert kestreld.api("GET", "/api/v1/jobs")[1].get("jobs", []) == []


def test_every_command_has_help_and_flag_errors_are_short(kestreld, tmp_path):
    k = kestreld
    names = [l.split()[0] for l in k.cli("help").stdout.split("Commands")[1].splitlines()[1:] if l.startswith("  ")]
    assert {"submit", "jobs", "logs", "pull", "models", "metrics", "wait", "ui", "completion"} <= set(names)
    for name in names:
        for argv in ((name, "--help"), ("help", name), (name, "-h")):
            p = k.cli(*argv, check=False)
            assert p.returncode == 0 and p.stdout.startswith(f"Usage: kestrel {name}"), (argv, p.stdout, p.stderr)
    # a flag error: what was wrong, the usage line, where to look; not a page of help
    p = k.cli("submit", "--gpuz", "1", "--", "true", check=False)
    assert p.returncode == 2 and "did you mean '--gpus'?" in p.stderr and "see 'kestrel submit --help'" in p.stderr
    assert len(p.stderr.splitlines()) <= 3, p.stderr
    p = k.cli("jobs", "--stat", "running", check=False)   # a unique prefix is getopt's: it works
    assert p.returncode == 0
    p = k.cli("logs", "--gerp", "x", check=False)
    assert p.returncode == 2 and "did you mean '--grep'?" in p.stderr
    p = k.cli("sumbit", "--", "true", check=False)
    assert p.returncode == 2 and "Did you mean 'submit'?" in p.stderr
    p = k.cli("wait", check=False)
    assert p.returncode == 2 and p.stderr.splitlines() == ["usage: kestrel wait [--timeout SECS] ID",
                                                           "see 'kestrel wait --help'"]
    # a flag after -- is the job's, not ours
    jid = json.loads(k.cli("-o", "json", "submit", "--", "echo", "--gpuz").stdout)["id"]
    assert k.cli("logs", "-f", jid).stdout.strip() == "--gpuz"
    # submit's own flags end at its program: what follows is the job's, -o and -h included
    jid3 = json.loads(k.cli("-o", "json", "submit", "echo", "-o", "json", "-h", "--epochs", "3").stdout)["id"]
    assert k.cli("logs", "-f", jid3).stdout.strip() == "-o json -h --epochs 3"
    # an option's value that looks like a flag is the option's
    assert k.cli("jobs", "--name", "-otter").returncode == 0
    assert k.cli("wait", "--timeout", "abc", jid3, check=False).returncode == 2
    # --flag=value and unique prefixes work on every command, those that read their words by hand too
    jid4 = json.loads(k.cli("-o", "json", "submit", "--name=eq", "--", "echo", "--name=job").stdout)["id"]
    assert k.job(jid4)["spec"]["name"] == "eq" and k.cli("logs", "-f", jid4).stdout.strip() == "--name=job"
    assert k.api("POST", "/api/v1/tokens", {"user": "alice"})[0] == 201
    assert k.cli("user", "set", "alice", "--team=vision").returncode == 0
    assert k.cli("user", "set", "alice", "--te", "nlp").returncode == 0
    # --version needs no server
    p = subprocess.run([KESTREL_CLI, "--version"], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert p.returncode == 0 and p.stdout.startswith("kestrel ") and "libkestrel" in p.stdout


def test_completion_scripts_and_man_page_come_from_the_option_tables(kestreld, tmp_path):
    k = kestreld
    bash = k.cli("completion", "bash").stdout
    script = tmp_path / "kestrel.bash"
    script.write_text(bash)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # drive it as bash would: complete 'kestrel sub', then 'kestrel submit --gp'
    def complete(*words):
        line = " ".join(words)
        prog = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _kestrel; "
                "printf '%s\\n' \"${COMPREPLY[@]}\"")
        return subprocess.run(["bash", "-c", prog], capture_output=True, text=True).stdout.split()
    assert complete("kestrel", "sub") == ["submit"]
    assert set(complete("kestrel", "submit", "--gp")) == {"--gpus", "--gpu-type"}
    assert "--grep" in complete("kestrel", "logs", "--g")
    assert complete("kestrel", "token", "cr") == ["create"]
    assert complete("kestrel", "submit", "--", "--gp") == []   # the job's argv: left to the shell
    zsh = k.cli("completion", "zsh").stdout
    assert zsh.startswith("#compdef kestrel") and "--gpus" in zsh
    (tmp_path / "_kestrel").write_text(zsh)   # zsh and man-db: scripts/deps.sh installs them
    assert subprocess.run(["zsh", "-n", str(tmp_path / "_kestrel")]).returncode == 0
    assert k.cli("completion", "fish", check=False).returncode == 2
    # the man page the build made, from the same table
    man = pathlib.Path(KESTREL_CLI).parent / "kestrel.1"
    text = man.read_text()
    assert text.startswith(".TH KESTREL 1")
    for name in ("submit", "logs", "pull", "ui", "completion"):
        assert f".SS {name}\n" in text
    assert "\\-\\-gpus" in text
    out = subprocess.run(["man", "-l", str(man)], capture_output=True, text=True, env={**os.environ, "MANWIDTH": "100"})
    assert out.returncode == 0 and "kestrel submit [OPTIONS]" in out.stdout


def test_jobs_table_says_who_where_how_long_and_why_a_job_waits(kestreld):
    k = kestreld
    hold = submit(k, "--name", "hold", "--gpus", "2", "--label", "team=v", "--", "sleep", "30")["id"]
    k.wait_state(hold, "RUNNING")
    waiter = submit(k, "--name", "waiter", "--gpus", "1", "--param", "lr=0.1", "--", "true")["id"]
    lines = k.cli("jobs").stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "USER", "STATE", "CLASS", "GPUS", "NODE", "AGE", "REASON"]
    row = {l.split()[0]: l for l in lines[1:]}
    assert row[waiter].split()[1:5] == ["waiter", "admin", "queued", "normal"]
    assert "waiting" in row[waiter] and "needs 1 x GPU" in row[waiter]   # why, not "submitted"
    assert "running" in row[hold] and " local " in row[hold]
    wide = k.cli("-o", "wide", "jobs").stdout
    assert "COMMAND | LABELS | PARAMS" in wide and "sleep 30 | team=v | -" in wide and "true | - | lr=0.1" in wide
    assert k.cli("-o", "xml", "jobs", check=False).returncode == 2
    k.cli("cancel", waiter)
    k.cli("cancel", hold)


def _on_a_terminal(k, columns, *args):
    """Run the CLI with stdout on a pseudo-terminal of the given width; its output lines."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    p = subprocess.Popen([KESTREL_CLI, *args], stdout=slave, stderr=subprocess.PIPE, env=k.env())
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:   # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(30) == 0, p.stderr.read()
    return out.decode().replace("\r\n", "\n").splitlines()


def test_tables_fit_a_terminal_and_are_whole_when_piped(kestreld):
    k = kestreld
    long = "a-very-long-job-name-" + "é" * 30
    hold = submit(k, "--gpus", "2", "--", "sleep", "30")["id"]
    k.wait_state(hold, "RUNNING")
    jid = submit(k, "--name", long, "--gpus", "1", "--", "true")["id"]   # waits for a GPU
    k.cli("token", "create", "--name", "n" * 80)
    for argv in (("jobs",), ("queue",), ("token", "list"), ("-o", "wide", "jobs")):
        lines = _on_a_terminal(k, 60, *argv)
        assert lines and all(len(l) <= 60 for l in lines), (argv, lines)
        piped = k.cli(*argv).stdout.splitlines()
        assert max(len(l) for l in piped) > 60, (argv, piped)   # piped: nothing cut
    row = [l for l in _on_a_terminal(k, 60, "jobs") if l.startswith(jid)][0]
    assert "~" in row and "\ufffd" not in row   # cut at a whole character
    assert long in k.cli("jobs").stdout
    k.cli("cancel", jid)
    k.cli("cancel", hold)
    # a line longer than any buffer stays whole when piped
    (k.root / "m.bin").write_bytes(b"x")
    k.cli("push", "admin/bigmeta", str(k.root / "m.bin"), "--meta", "k=" + "v" * 12000, "--meta", "z=tail-end")
    listing = k.cli("models", "admin/bigmeta").stdout
    assert "v" * 12000 in listing and "tail-end" in listing


def test_logs_json_tail_then_follow_is_live(kestreld, tmp_path):
    k = kestreld
    flag = tmp_path / "end-now"   # the job prints until the test has followed it live (no race with a clock)
    jid = submit(k, "--", "sh", "-c", f"i=1; until [ -e '{flag}' ]; do echo line$i; i=$((i+1)); sleep 0.2; done; "
                                      "echo line-end")["id"]
    k.wait_for_line(jid, "line3")
    p = subprocess.Popen([KESTREL_CLI, "-o", "json", "logs", "--tail", "2", "-f", jid], stdout=subprocess.PIPE,
                         env=k.env(), text=True)
    first = json.loads(p.stdout.readline())   # the last lines come before the job ends, not after
    assert k.job(jid)["state"] == "RUNNING" and first["text"].startswith("line")
    flag.touch()
    rest = [json.loads(l)["text"] for l in p.stdout]
    assert p.wait(30) == 0 and rest[-1] == "line-end"
    texts = [first["text"]] + rest[:-1]
    n = int(texts[0][4:])
    assert texts == [f"line{i}" for i in range(n, n + len(texts))]   # nothing dropped after the tail


def test_what_a_job_prints_is_shown_to_a_terminal_not_obeyed(kestreld):
    """Another user's job output, argv and names reach an admin's terminal: a hostile test's escape
    sequences (clear screen, OSC 52 clipboard write, a carriage return, C1 CSI, a bidi override) and
    a newline in argv that made a false row. Shown as ^[ ^M <U+202E>; --raw and -o json as they are."""
    k = kestreld
    prog = r'printf "\033]52;c;cm0K\007\033[2J ok\rX \342\200\256rtl \302\233x\tTab\n"; printf "e\033[31mred\n" >&2'
    jid = submit(k, "--name", "evil", "--", "sh", "-c", prog)["id"]
    status, body = k.api("POST", "/api/v1/jobs", {"name": "forge", "argv": ["true", "x\n1  nightly  admin  running"]})
    assert status == 201, body
    k.wait(jid)
    k.wait(body["id"])
    hostile = [b"\033", b"\r", b"\x07", "\u202e".encode(), "\u009b".encode()]
    shown = subprocess.run([KESTREL_CLI, "logs", jid], capture_output=True, env=k.env())
    out = shown.stdout + shown.stderr
    assert not [h for h in hostile if h in out], out
    assert b"^[]52;c;cm0K^G^[[2J ok^MX <U+202E>rtl <U+009B>x\tTab" in out and b"e^[[31mred" in out, out
    raw = subprocess.run([KESTREL_CLI, "logs", "--raw", jid], capture_output=True, env=k.env()).stdout
    assert b"\033]52;c;cm0K\007\033[2J ok\rX " in raw and "\u202e".encode() in raw
    lines = json.loads(k.cli("-o", "json", "logs", jid).stdout.splitlines()[0])
    assert lines["text"].startswith("\x1b]52;c;cm0K\x07")   # the JSON holds the bytes, escaped by JSON
    for args in (("jobs", "-o", "wide"), ("logs", "--grep", "red"), ("status", jid), ("logs", jid)):
        term = "\n".join(_on_a_terminal(k, 200, *args)).encode()
        assert not [h for h in hostile if h in term.replace(b"\r\n", b"\n")], (args, term)
    wide = k.cli("jobs", "-o", "wide").stdout.splitlines()
    assert len(wide) == 3 and any("true x^J1  nightly  admin  running" in l for l in wide), wide
    for name in ("csi\u009b2J", "rlo\u202etxt"):   # names, labels: refused where they are given
        status, body = k.api("POST", "/api/v1/jobs", {"name": name, "argv": ["true"]})
        assert status == 400 and "name" in body["message"], body
        status, body = k.api("POST", "/api/v1/jobs", {"argv": ["true"], "labels": [{"key": "k", "value": name}]})
        assert status == 400, body


def test_metrics_pivot_plot_and_compare(kestreld):
    k = kestreld
    a = submit(k, "--param", "lr=0.1", "--param", "bs=32", "--", "true")["id"]
    b = submit(k, "--param", "lr=0.01", "--param", "bs=32", "--", "true")["id"]
    for jid, scale in ((a, 1.0), (b, 2.0)):
        k.wait(jid)
        pts = [{"name": "loss", "step": e, "value": scale / e} for e in (1, 2, 3)]
        pts += [{"name": "accuracy", "step": e, "value": 1 - 1 / (e + 1)} for e in (1, 2, 3)]
        pts += [{"name": "batch/loss", "step": s, "value": scale * 0.99 ** s} for s in range(4, 200, 4)]
        assert k.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": pts})[0] == 200
    out = k.cli("metrics", a).stdout.splitlines()
    # epochs and batches apart, a column a metric
    assert out[0] == "per epoch" and out[1].split() == ["STEP", "accuracy", "loss"]
    assert out[2].split() == ["1", "0.5", "1"] and out[4].split() == ["3", "0.75", "0.333333"]
    i = out.index("batch (per batch step)")
    assert out[i + 1].split() == ["STEP", "loss"] and out[i + 2].split()[0] == "4"
    assert len(out) == i + 2 + 49
    plot = k.cli("metrics", "--plot", "--name", "batch/loss", a).stdout
    assert plot.startswith("batch/loss (49 points, steps 4..196)")
    dots = [l for l in plot.splitlines() if "┤" in l or "│" in l]
    assert len(dots) == 10 and any(0x2801 <= ord(c) <= 0x28FF for c in dots[0])   # braille, not blank
    assert "NAME" in k.cli("metrics", "--flat", a).stdout.splitlines()[0]
    assert k.cli("metrics", "--plot", "--flat", a, check=False).returncode == 2
    cmp = k.cli("compare", a, b).stdout.splitlines()
    assert cmp[0].split() == [a, b]
    assert [l for l in cmp if "param lr" in l][0].split() == ["*", "param", "lr", "0.1", "0.01"]
    assert [l for l in cmp if "param bs" in l][0].split() == ["param", "bs", "32", "32"]
    assert [l for l in cmp if "last loss" in l][0].split() == ["last", "loss", "0.333333", "0.666667"]
    js = json.loads(k.cli("-o", "json", "compare", a, b).stdout)
    assert [j["job"]["id"] for j in js] == [a, b] and js[1]["final_metrics"]["loss"] == 2.0 / 3
    assert k.cli("compare", a, check=False).returncode == 2


def test_output_format_anywhere_and_yaml(kestreld):
    k = kestreld
    jid = submit(k, "--name", "fmt", "--", "sh", "-c", "echo one; echo two >&2")["id"]
    k.wait(jid)
    before = json.loads(k.cli("-o", "json", "status", jid).stdout)
    after = json.loads(k.cli("status", jid, "-o", "json").stdout)
    assert before == after and after["spec"]["name"] == "fmt"
    assert json.loads(k.cli("status", "--output=json", jid).stdout) == after
    # yaml: the same document (libyaml's emitter over the JSON); JSON lines become documents
    y = k.cli("status", jid, "-o", "yaml").stdout
    assert y.startswith("---") and "name: fmt" in y and 'id: "%s"' % jid in y
    lines = k.cli("logs", jid, "-o", "yaml").stdout
    assert lines.count("---") == 2 and "text: one" in lines and "stream: STDERR" in lines
    assert k.cli("status", jid, "-o", "xml", check=False).returncode == 2
    # every read command's -o json is the server's own reply to the same GET (as curl shows it)
    k.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": [{"name": "loss", "step": 1, "value": 0.5}]})
    for argv, path in ((("status", jid), f"/api/v1/jobs/{jid}"), (("metrics", jid), f"/api/v1/jobs/{jid}/metrics"),
                       (("metrics", "--name", "loss", jid), f"/api/v1/jobs/{jid}/metrics?name=loss"),
                       (("explain", jid), f"/api/v1/jobs/{jid}/explain"), (("queue",), "/api/v1/queue"),
                       (("nodes",), "/api/v1/nodes"), (("models",), "/api/v1/models"),
                       (("jobs", "--state", "succeeded"), "/api/v1/jobs?state=SUCCEEDED&page_size=50"),
                       (("alerts", "--limit", "5"), "/api/v1/alerts?limit=5"), (("token", "list"), "/api/v1/tokens"),
                       (("logs", "--grep", "one", "--job", jid), f"/api/v1/logs/search?q=one&job={jid}&limit=100")):
        mine = json.loads(k.cli(*argv, "-o", "json").stdout)
        status, api = k.api("GET", path)
        if argv[0] == "status":   # a job's GET carries its GPU totals; the same fields otherwise
            api.pop("gpu_usage", None), mine.pop("gpu_usage", None)
        assert status == 200 and mine == api, (argv, mine, api)
    # a -o after -- is the job's
    jid2 = submit(k, "--", "echo", "-o", "json")["id"]
    assert k.cli("logs", "-f", jid2).stdout.strip() == "-o json"


def test_cancel_of_an_ended_job_is_an_error(kestreld):
    jid = submit(kestreld, "--", "true")["id"]
    kestreld.wait(jid)
    p = kestreld.cli("cancel", jid, check=False)
    assert p.returncode == 1 and f"job {jid} already ended SUCCEEDED: nothing to cancel" in p.stderr
    assert p.stdout == ""
    status, body = kestreld.api("POST", f"/api/v1/jobs/{jid}/cancel", {})
    assert status == 409 and body["code"] == "conflict"
    assert kestreld.job(jid)["state"] == "SUCCEEDED"


def test_kestreld_help_documents_flags():
    out = subprocess.run([KESTRELD, "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--listen", "--port", "--data-dir", "--gpus", "--grace-period", "--max-body"):
        assert flag in out
    assert subprocess.run([KESTRELD, "--gpus", "lots"], capture_output=True).returncode == 2


def test_submit_follow_wait_status(kestreld):
    job = submit(kestreld, "--name", "cli-job", "--label", "team=vision", "--env", "GREETING=hi", "--priority", "high",
                 "--", "sh", "-c", "echo $GREETING; echo warn >&2; sleep 0.3; echo done")
    assert job["state"] == "QUEUED" and job["spec"]["priority"] == "HIGH"
    jid = job["id"]
    logs = kestreld.cli("logs", "-f", jid)   # piped: the job's stderr too, in order, on stdout
    assert logs.stdout.splitlines() == ["hi", "warn", "done"] and logs.stderr == ""
    assert kestreld.cli("logs", "--stream", "stdout", jid).stdout.splitlines() == ["hi", "done"]
    assert kestreld.cli("logs", "--stream", "stderr", jid).stdout.splitlines() == ["warn"]
    assert kestreld.cli("logs", "--tail", "2", jid).stdout.splitlines() == ["warn", "done"]
    assert kestreld.cli("logs", "--tail", "1", "--stream", "stdout", jid).stdout.splitlines() == ["done"]
    stamped = kestreld.cli("logs", "--timestamps", jid).stdout.splitlines()
    assert len(stamped) == 3 and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", l) for l in stamped)
    assert stamped[0].endswith(" hi")
    assert kestreld.cli("logs", "--since", "1h", jid).stdout.splitlines() == ["hi", "warn", "done"]
    for bad in (("--tail", "0"), ("--stream", "both"), ("--since", "soon")):
        assert kestreld.cli("logs", *bad, jid, check=False).returncode == 2
    assert kestreld.cli("wait", jid).stdout.startswith(f"job {jid} SUCCEEDED")
    status = json.loads(kestreld.cli("-o", "json", "status", jid).stdout)
    assert status["state"] == "SUCCEEDED" and status["exit_code"] == 0
    assert [e["to_state"] for e in status["events"]] == ["QUEUED", "RUNNING", "SUCCEEDED"]
    text = kestreld.cli("status", jid).stdout
    assert "SUCCEEDED" in text and "cli-job" in text
    lines = [json.loads(l) for l in kestreld.cli("-o", "json", "logs", jid).stdout.splitlines()]
    assert [l["stream"] for l in lines] == ["STDOUT", "STDERR", "STDOUT"]
    assert lines == kestreld.api("GET", f"/api/v1/jobs/{jid}/logs")[1]["lines"]   # the API's LogLine objects
    jobs = json.loads(kestreld.cli("-o", "json", "jobs", "--label", "team=vision").stdout)   # the API's JobList
    assert [j["id"] for j in jobs["jobs"]] == [jid]
    status, api = kestreld.api("GET", "/api/v1/jobs?label=team%3Dvision&page_size=50")
    assert jobs == api   # kestrel -o json X is curl's JSON
    assert "cli-job" in kestreld.cli("jobs").stdout


def test_wait_exit_codes_and_cancel(kestreld):
    failing = submit(kestreld, "--", "sh", "-c", "exit 4")["id"]
    p = kestreld.cli("wait", failing, check=False)
    assert p.returncode == 1 and "FAILED: exit code 4" in p.stdout
    slow = submit(kestreld, "--gpus", "2", "--", "sleep", "30")["id"]
    assert kestreld.cli("wait", "--timeout", "0.3", slow, check=False).returncode == 124
    queued = submit(kestreld, "--gpus", "1", "--", "true")["id"]
    assert "cancelled" in kestreld.cli("cancel", queued).stdout
    kestreld.cli("cancel", slow)
    p = kestreld.cli("wait", slow, check=False)
    assert p.returncode == 1 and "CANCELLED" in p.stdout
    assert json.loads(kestreld.cli("-o", "json", "status", queued).stdout)["state"] == "CANCELLED"


def test_submit_follow_flag_exits_like_the_job(kestreld):
    p = kestreld.cli("submit", "--follow", "--", "sh", "-c", "echo bye; exit 3", check=False)
    assert p.returncode == 1
    assert "bye" in p.stdout and "FAILED: exit code 3" in p.stdout


def test_config_file_and_flags(kestreld, tmp_path):
    cfg = tmp_path / "xdg" / "kestrel"
    cfg.mkdir(parents=True)
    (cfg / "config").write_text(f"# kestrel\nurl = {kestreld.url}\ntoken = {kestreld.token}\n")
    env = kestreld.env(XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    del env["KESTREL_URL"], env["KESTREL_TOKEN"]
    assert "ID" in kestreld.cli("jobs", env=env).stdout
    # flags win over the file
    p = kestreld.cli("--token", "wrong", "jobs", env=env, check=False)
    assert p.returncode == 1 and "invalid or revoked token" in p.stderr
    env.pop("XDG_CONFIG_HOME")
    p = kestreld.cli("jobs", env=env, check=False)
    assert p.returncode == 1 and "no server" in p.stderr


def test_raw_curl_json_submit_and_read_back(kestreld):
    auth = f"Authorization: Bearer {kestreld.token}"
    out = subprocess.run(["curl", "-sS", "-H", auth, "-H", "Content-Type: application/json",
                          "-d", '{"argv":["echo","via curl"],"name":"curl-job","priority":"urgent"}',
                          kestreld.url + "/api/v1/jobs"], capture_output=True, text=True, check=True).stdout
    job = json.loads(out)
    assert job["spec"]["name"] == "curl-job" and job["state"] == "QUEUED"
    out = subprocess.run(["curl", "-sS", "-H", auth, f"{kestreld.url}/api/v1/jobs/{job['id']}?wait_ms=20000"],
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert got["state"] == "SUCCEEDED" and got["spec"]["priority"] == "URGENT"
    out = subprocess.run(["curl", "-sS", "-H", auth, f"{kestreld.url}/api/v1/jobs/{job['id']}/logs"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["lines"][0]["text"] == "via curl"
    # and a bad one comes back as a structured error
    out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", "-H", auth, "-d", '{"argv":[]}',
                          kestreld.url + "/api/v1/jobs"], capture_output=True, text=True, check=True).stdout
    body, code = out.rsplit("\n", 1)
    assert code == "400" and json.loads(body)["code"] == "invalid_argument"


def test_other_users_job_is_not_found(kestreld):
    jid = submit(kestreld, "--", "true")["id"]
    status, body = kestreld.api("POST", "/api/v1/tokens", {"user": "carol"})
    assert status == 201
    env = kestreld.env(KESTREL_TOKEN=body["token"])
    p = kestreld.cli("status", jid, env=env, check=False)
    assert p.returncode == 1 and "not found" in p.stderr
    assert json.loads(kestreld.cli("-o", "json", "jobs", env=env).stdout) == {"jobs": [], "next_page_token": ""}
    status, _ = kestreld.api("POST", "/api/v1/tokens", {"user": "dave"}, token=body["token"])
    assert status == 403


def test_repository_commands_on_a_file_url(tmp_path):
    store = f"file://{tmp_path}/store"
    (tmp_path / "src").mkdir()
    src = tmp_path / "src" / "weights.keras"
    src.write_bytes(os.urandom(3 << 20))

    def k(*args, check=True):
        p = subprocess.run([KESTREL_CLI, "--url", store, *args], capture_output=True, text=True, cwd=tmp_path)
        if check and p.returncode:
            raise AssertionError(p.stderr)
        return p

    assert k("push", "team/m", str(src), "--meta", "job=7").stdout.strip() == "pushed team/m@1 (3.0 MiB, 3.0 MiB new)"
    assert k("push", "team/m", str(src), "--alias", "production").stdout.strip() == "pushed team/m@2 (3.0 MiB, 0 bytes new)"
    assert k("models").stdout == "team/m\n"
    assert json.loads(k("-o", "json", "models").stdout) == {"names": ["team/m"]}   # the API's ModelList
    versions = json.loads(k("-o", "json", "models", "team/m").stdout)["versions"]   # and ManifestList
    assert [v["version"] for v in versions] == ["1", "2"] and versions[1]["aliases"] == ["latest", "production"]
    assert json.loads(versions[0]["metadata_json"]) == {"job": "7", "filename": "weights.keras"}
    # pull keeps the pushed file's name (a .keras stays one); DEST or --dest (or the old -o) choose another
    assert k("pull", "team/m@production").stdout.strip() == "weights.keras"
    assert (tmp_path / "weights.keras").read_bytes() == src.read_bytes()
    assert k("pull", "team/m@1", "a.keras").stdout.strip() == "a.keras"
    # a folder pushed as "src/." (or "." from inside it) keeps its own name
    k("push", "team/dir", f"{tmp_path / 'src'}/.")
    assert json.loads(json.loads(k("-o", "json", "models", "team/dir").stdout)["versions"][0]["metadata_json"]) == \
        {"filename": "src"}
    assert k("pull", "team/m", "--dest", "b.keras").stdout.strip() == "b.keras"
    p = k("pull", "team/m", "-o", "c.keras")   # the old spelling still works, and says the new one
    assert p.stdout.strip() == "c.keras" and "kestrel pull REF PATH" in p.stderr
    p = k("pull", "team/nope", check=False)
    assert p.returncode == 1 and "no model team/nope" in p.stderr
    assert "-> 1" in k("alias", "team/m", "1", "staging").stdout
    k("rm", "team/m@2")
    assert [v["version"] for v in json.loads(k("-o", "json", "models", "team/m").stdout)["versions"]] == ["1"]
    p = k("-o", "json", "models", "team/gone", check=False)
    assert p.returncode == 1 and "no model team/gone" in p.stderr
    p = k("push", "Team/M", str(src), check=False)
    assert p.returncode == 1 and "bad model name" in p.stderr
    p = k("pull", "team/m@9", check=False)
    assert p.returncode == 1 and "no version 9" in p.stderr
    for size, said in ((1, "1 byte"), (1023, "1023 bytes"), (1024, "1.0 KiB"), ((1 << 20) - 1, "1.0 MiB")):
        small = tmp_path / f"s{size}.bin"   # a unit past rounding said "1024.0 KiB" (a review)
        small.write_bytes(os.urandom(size))
        assert f"({said}, {said} new)" in k("push", f"team/s{size}", str(small)).stdout


def test_a_name_picked_for_a_pull_is_plain_and_replaces_nothing(kestreld, tmp_path):
    """The name a version was pushed from is the pusher's to choose (--meta filename=...). Pulled by
    someone else into a folder (or the current one), a hidden name (.ssh, .bashrc), or one with a
    separator or control character, is not taken (the model's last name segment is), and a picked
    name replaces nothing already there unless --replace is given (before, bob's .ssh replaced the
    puller's and its id_rsa was deleted; bob's run.sh replaced the puller's). A path given, or the
    model's segment (typed in REF), is the puller's own choice: what is there is replaced, as before."""
    bob = kestreld.env(KESTREL_TOKEN=kestreld.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"])
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "authorized_keys").write_text("bob's key\n")
    payload = tmp_path / "payload"
    payload.write_text("echo pwned\n")
    kestreld.cli("push", "bob/keys", str(evil), "--meta", "filename=.ssh", env=bob)
    kestreld.cli("push", "bob/tool", str(payload), "--meta", "filename=run.sh", env=bob)
    kestreld.cli("push", "bob/esc", str(payload), "--meta", "filename=x\x1b]0;PWNED\x07\x1b[2J", env=bob)
    kestreld.cli("push", "bob/c1", str(payload), "--meta", "filename=y\u009b2J", env=bob)
    victim = tmp_path / "victim"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh" / "id_rsa").write_text("SECRET")
    (victim / "run.sh").write_text("mine")

    def pull(*args):
        return subprocess.run([KESTREL_CLI, "pull", *args], env=kestreld.env(), cwd=victim, capture_output=True,
                              text=True, timeout=60)

    p = pull("bob/keys", str(victim))
    assert p.returncode == 0 and "not a plain file name" in p.stderr and p.stdout.strip() == f"{victim}/keys", p.stderr
    assert (victim / ".ssh" / "id_rsa").read_text() == "SECRET" and not (victim / ".ssh" / "authorized_keys").exists()
    assert (victim / "keys" / "authorized_keys").read_text() == "bob's key\n"
    p = pull("bob/tool")                                   # into the current folder
    assert p.returncode == 1 and "run.sh exists" in p.stderr and "--replace" in p.stderr, p.stderr
    assert (victim / "run.sh").read_text() == "mine"
    p = pull("bob/keys", str(victim))                      # the model's own segment is the puller's: replaced
    assert p.returncode == 0 and (victim / "keys" / "authorized_keys").exists(), p.stderr
    for bad in ("-rf", "a\u202egnp.exe", "b\u2066x"):   # an option later; a name shown reversed, or isolated
        kestreld.cli("push", "bob/odd", str(payload), "--meta", f"filename={bad}", env=bob)
        p = pull("bob/odd")
        assert p.returncode == 0 and p.stdout.strip() == "odd" and "not a plain file name" in p.stderr, (bad, p.stderr)
        assert bad not in p.stdout + p.stderr
    for ref in ("bob/esc", "bob/c1"):
        p = pull(ref)
        assert p.returncode == 0 and p.stdout.strip() == ref.split("/")[1], p.stderr
        assert "\x1b" not in p.stdout + p.stderr and "\u009b" not in p.stdout + p.stderr
    assert sorted(os.listdir(victim)) == [".ssh", "c1", "esc", "keys", "odd", "run.sh"]
    p = pull("bob/tool", str(victim), "--replace")
    assert p.returncode == 0 and (victim / "run.sh").read_text() == "echo pwned\n"
    (victim / "run.sh").write_text("mine")
    p = pull("bob/tool", "run.sh")                         # a path given: replaced
    assert p.returncode == 0 and (victim / "run.sh").read_text() == "echo pwned\n"
    # a folder of the pushed name: the advice is --replace or a new path (a path that is a folder is
    # gone into too: "give the path" made data/data, found by a hostile test), and going into a folder
    # of the version's own name says so
    data = tmp_path / "src" / "data"
    data.mkdir(parents=True)
    (data / "f").write_text("v1")
    kestreld.cli("push", "bob/data", str(data), env=bob)
    assert pull("bob/data").returncode == 0 and (victim / "data" / "f").read_text() == "v1"
    p = pull("bob/data")
    assert p.returncode == 1 and "add --replace to replace it, or give a path that does not exist" in p.stderr, p.stderr
    p = pull("bob/data", "data")
    assert p.returncode == 0 and "data is a folder, so the version goes inside it, as data/data" in p.stderr, p.stderr
    assert (victim / "data" / "data" / "f").exists()
    assert "directory version went inside" not in p.stderr   # said once, above
    # pulled again to a folder of another name an earlier pull made: the tree goes inside it, said (a
    # hostile test: a re-pull meant to refresh made a second copy in silence)
    assert pull("bob/data", "mine").returncode == 0 and (victim / "mine" / "f").exists()
    p = pull("bob/data", "mine")
    assert p.returncode == 0 and (victim / "mine" / "data" / "f").exists()
    assert "mine is a folder, so the directory version went inside it, as mine/data (if mine itself was to be " \
           "the version, pull to a new path, or move mine away first)" in p.stderr, p.stderr
    p = pull("bob/tool", "mine")                          # a file into a folder: as cp, nothing to say
    assert p.returncode == 0 and "directory version went inside" not in p.stderr, p.stderr


def test_gc_collects_a_file_store_and_asks_kestreld_as_an_admin(kestreld, tmp_path):
    """kestrel gc: a file:// store had no way to give back the chunks of deleted versions (found by a
    hostile test: a store left full after a failed push stayed full); it is collected in process,
    with the grace asked. On a kestreld, gc is the admin route: another user gets 403 and nothing
    goes. The same from Python (Client.gc), where the binding is built (not under ASan)."""
    try:
        import kestrel
    except ImportError:
        kestrel = None
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(os.urandom(3 << 20))
    b.write_bytes(os.urandom(2 << 20))
    bob = kestreld.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
    for url in (f"file://{tmp_path / 'store'}", kestreld.url):
        env = kestreld.env(KESTREL_URL=url)
        kestreld.cli("push", "team/g", str(a), env=env)
        kestreld.cli("push", "team/g", str(b), env=env)
        kestreld.cli("rm", "team/g@1", env=env)
        young = json.loads(kestreld.cli("-o", "json", "gc", env=env).stdout)       # the default grace: 1 h
        assert young["chunks_removed"] == 0 and young["chunks_live"] > 0, young
        if url == kestreld.url:
            p = kestreld.cli("gc", "--grace", "0", env=kestreld.env(KESTREL_TOKEN=bob), check=False)
            assert p.returncode != 0 and "only an admin" in p.stderr, p.stderr
            if kestrel is not None:
                with pytest.raises(kestrel.AuthError):
                    kestrel.Client(kestreld.url, bob).gc(0)
        p = kestreld.cli("gc", "--grace", "0", env=env)
        assert re.match(r"removed [1-9]\d* chunks and 0 temp files, 3\.0 MiB freed; \d+ chunk references live",
                        p.stdout), p.stdout
        kestreld.cli("pull", "team/g", str(tmp_path / "back.bin"), env=env)
        assert (tmp_path / "back.bin").read_bytes() == b.read_bytes()
        (tmp_path / "back.bin").unlink()
    assert kestreld.cli("gc", "--grace", "soon", check=False).returncode == 2
    if kestrel is None:
        return
    c = kestrel.Client(f"file://{tmp_path / 'store'}")
    c.delete_version("team/g", 2)
    got = c.gc(0)
    assert got.chunks_removed > 0 and got.bytes_freed == 2 << 20 and got.chunks_live == 0, got
