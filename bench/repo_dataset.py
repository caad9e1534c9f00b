"""bench/repo_dataset.py - the repository with datasets of many small files (part of make bench-repo).

Directories pushed and pulled, each beside tar on the same disk in the same run (goal: push and pull
each <= 1.5x tar); the 20,000-file one in KESTREL_BENCH_ROUNDS rounds (default 3), each against a
fresh kestreld and alternating with tar, medians printed (the disk is noisy); the others once, to the
kestreld of bench/repo.py:
  KESTREL_BENCH_FILES files of 8-56 KB (default 20,000, about 620 MiB)
        push  vs  tar -cf to a file, then sync            (what writing the bytes once durably costs)
        pull  vs  tar -c | tar -x into a new directory, then sync
  KESTREL_BENCH_TINY_FILES files of 4 KB (default 50,000; the issue's case is 200,000), and a tenth
        as many: the time a file at each count (10x the files must not cost more than 10x the time)
The client's peak RSS is printed with each (it must stay bounded, whatever the count), and
what kestreld's grew by during each (its peak reset through /proc/PID/clear_refs before it), beside
the size of the manifest it took in and served (its versions/N.pb).
"""
import json
import os
import random
import shutil
import statistics
import subprocess

from repo import MIB, drop_page_cache, run


def make_tree(root, count, sizes, seed):
    """count files of random bytes (sizes: a (lo, hi) range in bytes) under root, 1,000 a directory."""
    rnd = random.Random(seed)
    total = 0
    for i in range(count):
        d = os.path.join(root, f"d{i // 1000:03d}")
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        n = rnd.randint(*sizes)
        with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
            f.write(os.urandom(n))
        total += n
    return total


def tar_baselines(src, work, tag=""):
    """(seconds to tar src to a file and sync it, seconds to copy it through tar | tar and sync)."""
    out = os.path.join(work, "baseline.tar")
    drop_page_cache()
    t_pack = run(["sh", "-c", f"tar -cf '{out}' -C '{src}' . && sync '{out}'"])[0]
    os.unlink(out)
    dest = src + tag + ".tar-copy"   # kept until the bench ends (see one_round)
    os.makedirs(dest)
    drop_page_cache()
    t_copy = run(["sh", "-c", f"tar -cf - -C '{src}' . | tar -xf - -C '{dest}' && sync"])[0]
    return t_pack, t_copy


def _status_mib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def server_peak_reset(pid):
    """Start kestreld's peak RSS (VmHWM) again from its RSS now, which is returned (MiB); None where
    that is not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return _status_mib(pid, "VmRSS")
    except OSError:
        return None


def server_peak(pid, base, manifest):
    """What kestreld's peak RSS grew by since server_peak_reset, and that over the manifest's size
    (MiB), as text ("?" when it could not reset)."""
    if base is None:
        return "?"
    grew = _status_mib(pid, "VmHWM") - base
    return f"+{grew:.1f} MiB over its {base:.1f} = {grew / manifest:.1f}x the {manifest:.1f} MiB manifest"


def one_round(cli, env, work, name, src, server, tag=""):
    """tar beside a push of src (cold caches), an unchanged push again, a pull (cold cache) beside
    tar | tar: their seconds, the client's peak RSS, kestreld's growth, whether the pull matched."""
    r = {}
    r["tar"], r["tar_copy"] = tar_baselines(src, work, tag)
    drop_page_cache()
    reset = server_peak_reset(server.proc.pid)
    r["push"], out, r["rss_push"], _ = run([cli, "-o", "json", "push", f"bench/{name}", src], env=env)
    r["version"] = json.loads(out).get("version")
    manifest = os.path.getsize(os.path.join(server.data, "repo", "models", "bench", name, "versions",
                                            f"{r['version']}.pb")) / MIB
    r["server_push"] = server_peak(server.proc.pid, reset, manifest)
    # the same files again: every one vouched for by the stat cache (a stat a file, its entry read
    # beside the listing, one record at a time)
    r["again"], out, r["rss_again"], _ = run([cli, "-o", "json", "push", f"bench/{name}", src], env=env)
    r["again_new"] = json.loads(out).get("bytes_new", "?")
    dest = os.path.join(work, name + tag + ".pulled")
    shutil.rmtree(env["KESTREL_CACHE_DIR"], ignore_errors=True)
    drop_page_cache()
    reset = server_peak_reset(server.proc.pid)
    r["pull"], _, r["rss_pull"], _ = run(["sh", "-c", f"'{cli}' pull bench/{name} --dest '{dest}' && sync"], env=env)
    r["server_pull"] = server_peak(server.proc.pid, reset, manifest)
    r["same"] = subprocess.run(["diff", "-rq", src, dest], stdout=subprocess.DEVNULL).returncode == 0
    # src and dest stay until the bench ends: thousands of files removed just before the next case
    # would make ext4 without a journal (this VM's) skip each freed inode for a minute, one lookup
    # each, while kestreld and the pull create theirs (tar -cf creates one file)
    return r


def one_case(cli, work, label, name, count, sizes, seed, servers, goal="goal <= 1.5x"):
    """The case's tree, then a round against each of servers ((kestreld, env) pairs: each round's
    files are new to its kestreld): their medians, each beside tar's from the same rounds."""
    src = os.path.join(work, name)
    total = make_tree(src, count, sizes, seed)
    mib = total / MIB
    rounds = [one_round(cli, env, work, name, src, server, f".r{k}" if len(servers) > 1 else "")
              for k, (server, env) in enumerate(servers)]
    med = {k: statistics.median(r[k] for r in rounds) for k in ("tar", "tar_copy", "push", "again", "pull")}
    mid = min(rounds, key=lambda r: abs(r["push"] - med["push"]))   # the median push's round, for RSS
    each = (lambda k: f"   (rounds: {', '.join(f'{r[k]:.2f}' for r in rounds)} s)") if len(rounds) > 1 else (lambda k: "")
    print(f"{label}: {count} files, {mib:.0f} MiB (version {mid['version']})"
          + (f", medians of {len(rounds)} rounds, each against a fresh kestreld" if len(rounds) > 1 else ""))
    print(f"  kestrel push          {med['push']:6.2f} s   {1000 * med['push'] / count:6.3f} ms a file   peak RSS "
          f"{mid['rss_push'] / 1024:.1f} MiB (kestreld {mid['server_push']}){each('push')}")
    print(f"  tar -cf + sync        {med['tar']:6.2f} s   -> push at {med['push'] / med['tar']:.2f}x tar ({goal}){each('tar')}")
    print(f"  push again, unchanged {med['again']:6.2f} s   {1000 * med['again'] / count:6.3f} ms a file   peak RSS "
          f"{mid['rss_again'] / 1024:.1f} MiB   -> {med['again'] / med['push']:.2f}x the first push ({mid['again_new']} "
          f"bytes new; the stat cache vouches for every file)")
    print(f"  kestrel pull + sync   {med['pull']:6.2f} s   {1000 * med['pull'] / count:6.3f} ms a file   peak RSS "
          f"{mid['rss_pull'] / 1024:.1f} MiB (kestreld {mid['server_pull']})   "
          f"(tree {'identical' if all(r['same'] for r in rounds) else 'DIFFERS'}){each('pull')}")
    print(f"  tar | tar + sync      {med['tar_copy']:6.2f} s   -> pull at {med['pull'] / med['tar_copy']:.2f}x tar "
          f"({goal}){each('tar_copy')}")
    return med["push"] / count, med["pull"] / count, (mid["rss_push"], mid["rss_again"], mid["rss_pull"])


def dataset_cases(cli, env, work, server, new_server, rounds):
    """server: the bench's kestreld (env: its client environment), for the tiny files; the dataset
    goes to `rounds` fresh ones from new_server(dir), stopped after (the disk is noisy: medians)."""
    files = int(os.environ.get("KESTREL_BENCH_FILES", "20000"))
    tiny = int(os.environ.get("KESTREL_BENCH_TINY_FILES", "50000"))
    fresh = []
    try:
        for k in range(rounds):
            os.makedirs(os.path.join(work, f"dataset-kd{k}"))
            fresh.append(new_server(os.path.join(work, f"dataset-kd{k}")))
            fresh[-1] = (fresh[-1], fresh[-1].env(os.path.join(work, f"dataset-kd{k}", "cache")))
        one_case(cli, work, "dataset", "dataset", files, (8 << 10, 56 << 10), 1, fresh)
    finally:
        for kd in fresh:
            kd[0].stop()
    ref = "for reference: the goal for 4 KB files is growth linear in their count"
    push_s, pull_s, rss_s = one_case(cli, work, "tiny files, a tenth", "tiny-tenth", tiny // 10, (4 << 10, 4 << 10), 2,
                                     [(server, env)], ref)
    push_l, pull_l, rss_l = one_case(cli, work, "tiny files", "tiny", tiny, (4 << 10, 4 << 10), 3, [(server, env)], ref)
    print(f"  linear in the count: a file of {tiny} costs {push_l / push_s:.2f}x (push) and {pull_l / pull_s:.2f}x "
          f"(pull) a file of {tiny // 10} (goal <= 1.2x)")
    more = tiny - tiny // 10
    print("  client memory for the files added: " + ", ".join(
        f"{what} +{(big - small) / 1024:.1f} MiB ({1024 * (big - small) / more:.0f} bytes a file)"
        for what, small, big in zip(("push", "push again", "pull"), rss_s, rss_l)) + " (goal: bounded)")
