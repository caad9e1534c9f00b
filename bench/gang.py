"""bench/gang.py - how long a gang takes from submit to every rank running, beside a one-process job.

    python bench/gang.py KESTRELD          (make bench-gang; KESTREL_BENCH_ROUNDS=30 by default)

One kestreld (8 virtual GPUs, local executor). Rounds alternate a one-process job, a gang of 2 ranks
and a gang of 8 ranks (1 GPU each). Each process prints a line first thing; kestreld stamps every
line as it reads it, so a rank is running at its first line's time. Latency = the last rank's first
line minus the job's submit time, the same clock for all three. Medians and 90th percentiles, and
each gang's ratio to the one-process job measured in the same run. make bench-gang then runs
bench-sched, whose trace with 10 % gangs sets the gangs' utilisation beside strict FIFO.
"""
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kestreld_proc  # noqa: E402


def latency(url, token, replicas):
    spec = {"argv": ["sh", "-c", "echo up"], "gpus": 1}
    if replicas > 1:
        spec["replicas"] = replicas
    job = kestreld_proc.call(f"{url}/api/v1/jobs", token, "POST", spec)
    jid = job["id"]
    deadline = time.time() + 60
    while True:
        j = kestreld_proc.call(f"{url}/api/v1/jobs/{jid}", token)
        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") or time.time() > deadline:
            break
        time.sleep(0.01)
    if j["state"] != "SUCCEEDED":
        raise SystemExit(f"bench-gang: job {jid} ended {j['state']}: {j['reason']}")
    lines = kestreld_proc.call(f"{url}/api/v1/jobs/{jid}/logs?offset=0", token)["lines"]
    firsts = {}
    for line in lines:
        if line["text"].endswith("up"):
            rank = line["text"].split("]", 1)[0] if line["text"].startswith("[rank") else "0"
            firsts.setdefault(rank, int(line["time_ms"]))
    if len(firsts) != replicas:
        raise SystemExit(f"bench-gang: job {jid}: {len(firsts)} of {replicas} ranks printed")
    return (max(firsts.values()) - int(j["submit_time_ms"])) / 1000.0


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rounds = int(os.environ.get("KESTREL_BENCH_ROUNDS", "30"))
    root = pathlib.Path(tempfile.mkdtemp(prefix="kestrel-bench-gang-"))
    root.chmod(0o711)   # jobs run as other accounts: they pass through to their work dirs
    proc, url, token = kestreld_proc.start(sys.argv[1], root, "--gpus", "8")
    try:
        kinds = (1, 2, 8)
        got = {k: [] for k in kinds}
        for _ in range(rounds):
            for k in kinds:
                got[k].append(latency(url, token, k))
        print(f"bench-gang: submit -> every rank running, {rounds} rounds each, local executor, 8 virtual GPUs")
        base = statistics.median(got[1])
        for k in kinds:
            xs = sorted(got[k])
            med, p90 = statistics.median(xs), xs[int(0.9 * (len(xs) - 1))]
            label = "one process" if k == 1 else f"gang of {k} ranks"
            ratio = "" if k == 1 else f"   {med / base:.2f}x the one-process job"
            print(f"  {label:18s} median {1000 * med:7.1f} ms   p90 {1000 * p90:7.1f} ms{ratio}")
    finally:
        kestreld_proc.stop(proc)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
