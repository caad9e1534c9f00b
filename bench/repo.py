"""bench/repo.py - the model repository against its limits and its peer, all measured in this run.

    python bench/repo.py KESTRELD KESTREL_CLI        (make bench-repo; KESTREL_BENCH_MIB=1024 sets the size)

Figures (each beside the limit or peer measured here, on the same disk and loopback):
  push of a new file to a local kestreld      vs dd conv=fdatasync of the same bytes (goal >= 80 %)
                                               and vs a monolithic blob upload with curl to Debian's
                                               docker-registry (the OCI registry a user would pick)
  verified pull                               vs a durable write of the same bytes (dd conv=fdatasync)
                                               and OpenSSL SHA-256 of them (goal >= 70 % of the lower
                                               of the two)
  (these two alternate Kestrel and its peers over KESTREL_BENCH_ROUNDS rounds, default 3: medians)
  the store alone                             kestreld's store writing the same bytes as chunk files of the
                                               push's mean size, then its sync (bench_store_floor: no hashing,
                                               chunking or network), beside dd: the floor its format sets
  CPU of the client and of kestreld           for the push, the pull and the 4 concurrent pushes: how busy
                                               they kept the cores, and the floor that CPU sets on these
                                               cores beside the peer
  identical re-push                           chunk bytes sent (goal 0) and time vs hashing the file
                                               (goal <= 1.5x)
  re-push after changing 5 % in 8 regions     bytes sent (goal <= 7 %)
  Keras: save, fine-tune with the base frozen, save again; and with every layer trained
  client peak RSS of the push                 vs the bound 64 MiB + 2 max chunks
  4 clients pushing different files at once   aggregate vs dd of the same bytes and sync (goal >= 80 %); it
                                               alternates with dd over the same rounds, each push to a
                                               fresh kestreld: medians (one round swung 46-65 %)
  datasets of many small files                bench/repo_dataset.py: push and pull vs tar (goal <= 1.5x)
"""
import collections
import json
import os
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MIB = 1 << 20
MAX_CHUNK = 1 * MIB


Ran = collections.namedtuple("Ran", "seconds out rss cpu")


def run(argv, env=None, stdout=subprocess.PIPE):
    """Run argv; return Ran(seconds, stdout text, its peak RSS in KiB, its CPU seconds, user + system, of
    it and what it waited for). The RSS is GNU time's figure for the program itself (wait4's would count
    the pages of this Python process, shared until the exec)."""
    rss_file, name = None, argv[0]
    if os.path.exists("/usr/bin/time"):
        fd, rss_file = tempfile.mkstemp(prefix="kestrel-bench-rss-")
        os.close(fd)
        argv = ["/usr/bin/time", "-q", "-f", "%M", "-o", rss_file] + list(argv)
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.PIPE)
    out = p.stdout.read() if stdout == subprocess.PIPE else b""
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    rss = ru.ru_maxrss
    if rss_file:
        with open(rss_file) as f:
            text = f.read().split()
        os.unlink(rss_file)
        rss = int(text[-1]) if text and text[-1].isdigit() else rss
    if p.returncode != 0:
        raise RuntimeError(f"{name} failed ({p.returncode}): {err.decode()[-2000:]}")
    return Ran(dt, out.decode(), rss, ru.ru_utime + ru.ru_stime)


def cpu_seconds(pid):
    """CPU seconds, user + system, that process pid has used so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_beside(server, argv, env):
    """run() argv against kestreld server: (Ran, the CPU seconds kestreld spent meanwhile)."""
    before = cpu_seconds(server.proc.pid)
    ran = run(argv, env=env)
    return ran, cpu_seconds(server.proc.pid) - before


def drop_page_cache():
    """Best effort (root only): so that reads come from the disk the same way for every contender."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_file(path, mib):
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MIB))


def mutate(src, dst, fraction, regions):
    """Copy src to dst, then overwrite fraction of its bytes in `regions` evenly spread regions."""
    shutil.copyfile(src, dst)
    size = os.path.getsize(dst)
    per = int(size * fraction / regions)
    with open(dst, "r+b") as f:
        for i in range(regions):
            f.seek(int((i + 0.5) * size / regions) - per // 2)
            f.write(os.urandom(per))
    return per * regions


class Kestreld:
    def __init__(self, binary, root):
        self.data = os.path.join(root, "kestreld")
        port_file = os.path.join(root, "port")
        self.log = open(os.path.join(root, "kestreld.log"), "w")
        self.proc = subprocess.Popen([binary, "--port", "0", "--data-dir", self.data, "--port-file", port_file],
                                     stderr=self.log)
        token = os.path.join(self.data, "admin.token")
        deadline = time.time() + 20
        while not (os.path.exists(port_file) and os.path.exists(token)):
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit("bench-repo: kestreld did not start")
            time.sleep(0.02)
        self.url = "http://127.0.0.1:" + open(port_file).read().strip()
        self.token = open(token).read().strip()

    def env(self, cache):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=self.url, KESTREL_TOKEN=self.token, KESTREL_CACHE_DIR=cache)
        return env

    def manifest(self, name, version):
        req = urllib.request.Request(f"{self.url}/api/v1/models/{name}/versions/{version}",
                                     headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req) as r:
            return json.load(r)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Registry:
    """Debian's docker-registry (distribution 2.8) on a loopback port, storing into root."""
    BINARY = "/usr/bin/docker-registry"

    def __init__(self, root):
        self.port = free_port()
        conf = os.path.join(root, "registry.yml")
        with open(conf, "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root}/registry\n"
                    f"http:\n  addr: 127.0.0.1:{self.port}\n")
        self.proc = subprocess.Popen([self.BINARY, "serve", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/").close()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("docker-registry did not start")
                time.sleep(0.05)

    def push_blob(self, path, digest):
        """The upload a plain OCI client does: POST a session, PUT the whole file with its digest."""
        t0 = time.perf_counter()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v2/bench/big/blobs/uploads/", method="POST")
        with urllib.request.urlopen(req) as r:
            loc = r.headers["Location"]
        if loc.startswith("/"):
            loc = f"http://127.0.0.1:{self.port}{loc}"
        sep = "&" if "?" in loc else "?"
        run(["curl", "-sf", "-o", "/dev/null", "-X", "PUT", "-H", "Content-Type: application/octet-stream",
             "-T", path, f"{loc}{sep}digest=sha256:{digest}"])
        return time.perf_counter() - t0

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def pct(a, b):
    return 100.0 * a / b if b else 0.0


def rate(mib, s):
    return f"{mib / s:7.0f} MiB/s"


def keras_case(cli, env, work):
    """Save a model, fine-tune with the base frozen, save again; then train every layer and save."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    try:
        import numpy as np
        import keras
    except ImportError as e:
        print(f"  keras case skipped: {e}")
        return
    keras.utils.set_random_seed(7)
    x = np.random.rand(2048, 256).astype("float32")
    y = np.random.randint(0, 10, 2048)
    base = [keras.layers.Dense(1024, activation="relu", name=f"base{i}") for i in range(3)]
    model = keras.Sequential([keras.Input((256,)), *base, keras.layers.Dense(10, name="head")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=1, batch_size=256, verbose=0)
    path = os.path.join(work, "model.keras")

    def save_push():
        model.save(path)
        out = run([cli, "-o", "json", "push", "bench/keras", path], env=env).out
        return json.loads(out)

    first = save_push()
    for layer in base:
        layer.trainable = False
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=1, batch_size=256, verbose=0)
    frozen = save_push()
    for layer in base:
        layer.trainable = True
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=1, batch_size=256, verbose=0)
    full = save_push()
    print(f"  keras .keras file of {first['bytes'] / MIB:.1f} MiB ({model.count_params():,} parameters), "
          f"first push sent {pct(first['bytes_new'], first['bytes']):.0f} %")
    for what, v in (("fine-tune, base frozen:", frozen), ("fine-tune, every layer:", full)):
        print(f"  {what:25} sent {v['bytes_new'] / MIB:7.2f} MiB = {pct(v['bytes_new'], v['bytes']):5.1f} % of "
              f"its {v['bytes'] / MIB:.1f} MiB file (the optimizer state saved covers only trainable weights)")


def where_cpu(t, client, server, peer, what="push"):
    """Where a transfer's time went: the CPU it took, client and kestreld, against what these cores give
    in its time; busy near 100 % means it waits on the processors, not on the disk, and the floor is the
    time it would take with every core on it and nothing else to do, beside the peer's time."""
    cores = len(os.sched_getaffinity(0))
    busy = (client + server) / (t * cores)
    floor = (client + server) / cores
    print(f"  CPU of the {what:<10} client {client:.2f} s + kestreld {server:.2f} s = {client + server:.2f} s on "
          f"{cores} cores in {t:.2f} s: {100 * busy:.0f} % busy; at best {floor:.2f} s on these cores, so at most "
          f"{pct(peer, floor):.0f} % of the peer's speed ({peer:.2f} s)")


QUIET_S = 1.0   # kestreld --settle-after's default (server/repo_settle.h)


def settle_round(server, times, cpus):
    """Wait until kestreld settled bench/big@1's whole-file digest after the push's answer
    (server/repo_settle.h), read on disk (a request would settle it itself), so that no peer runs
    beside it; append when (seconds after the answer) and kestreld's CPU meanwhile. Nothing for a
    kestreld that settled it at the commit."""
    listing = os.path.join(server.data, "repo", "models", "bench", "big", "versions", "1.listing")
    t0, cpu0 = time.monotonic(), cpu_seconds(server.proc.pid)
    if json.load(open(listing))["sha256"]:
        return
    while json.load(open(listing))["sha256"] == "":
        if time.monotonic() - t0 > 300:
            sys.exit("bench-repo: kestreld did not settle the pushed file's digest in 300 s")
        time.sleep(0.02)
    times.append(time.monotonic() - t0)
    cpus.append(cpu_seconds(server.proc.pid) - cpu0)


def median_round(times, cpus):
    """The round whose time is the median (the lower middle one for an even count): its time and CPU."""
    i = sorted(range(len(times)), key=times.__getitem__)[(len(times) - 1) // 2]
    return times[i], cpus[i][0], cpus[i][1]


def concurrent_case(cli, kestreld_bin, work, mib, rounds):
    """4 clients, each pushing its own new file of mib/4 MiB at once, beside dd of the same bytes; rounds
    alternate the two, each push to a fresh kestreld (every byte new to it), and medians are printed."""
    each = max(1, mib // 4)
    files = [os.path.join(work, f"c{i}.bin") for i in range(4)]
    for f in files:
        make_file(f, each)
    t_kestrel, t_dd, cpus, ok = [], [], [], True
    for r in range(rounds):
        drop_page_cache()
        t_dd.append(run(["sh", "-c", " && ".join(f"dd if={f} of={f}.dd bs=4M status=none" for f in files) +
                         f" && sync {' '.join(f + '.dd' for f in files)}"])[0])
        for f in files:
            os.unlink(f + ".dd")
        root = os.path.join(work, f"concurrent{r}")
        os.mkdir(root)
        server = Kestreld(kestreld_bin, root)
        try:
            env = server.env(os.path.join(root, "cache"))
            drop_page_cache()
            before = cpu_seconds(server.proc.pid)
            t0 = time.perf_counter()
            procs = [subprocess.Popen([cli, "-o", "json", "push", f"bench/c{i}", f], env=env, stdout=subprocess.PIPE)
                     for i, f in enumerate(files)]
            outs = []
            for p in procs:
                with p.stdout:
                    outs.append(p.stdout.read())
            client = 0.0
            for p in procs:
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                client += ru.ru_utime + ru.ru_stime
            t_kestrel.append(time.perf_counter() - t0)
            cpus.append((client, cpu_seconds(server.proc.pid) - before))
            ok = ok and all(p.returncode == 0 for p in procs) and \
                all(json.loads(o)["bytes_new"] == each * MIB for o in outs)
        finally:
            server.stop()
    for f in files:
        os.unlink(f)
    med = statistics.median
    print(f"4 clients pushing different {each} MiB files at once ({'all stored' if ok else 'FAILED'}; "
          f"medians of {rounds} rounds, each against a fresh kestreld)")
    print(f"  kestrel, aggregate    {med(t_kestrel):6.2f} s {rate(4 * each, med(t_kestrel))}   "
          f"(rounds: {', '.join(f'{t:.2f}' for t in t_kestrel)} s)")
    print(f"  dd + sync, same bytes {med(t_dd):6.2f} s {rate(4 * each, med(t_dd))}   -> {pct(med(t_dd), med(t_kestrel)):.0f} % "
          f"of the disk's durable write (goal >= 80 %)   (rounds: {', '.join(f'{t:.2f}' for t in t_dd)} s)")
    where_cpu(*median_round(t_kestrel, cpus), med(t_dd), "pushes")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kestreld_bin, cli = sys.argv[1], sys.argv[2]
    mib = int(os.environ.get("KESTREL_BENCH_MIB", "1024"))
    work = tempfile.mkdtemp(prefix="kestrel-bench-repo-", dir=os.environ.get("KESTREL_BENCH_DIR", "/var/tmp"))
    top = work
    server = registry = None
    try:
        src = os.path.join(work, "big.bin")
        print(f"bench-repo: {mib} MiB of random bytes in {work}")
        make_file(src, mib)

        # Rounds alternate Kestrel and its peers on the same bytes (the disk is noisy from one second
        # to the next); each push goes to a fresh kestreld and registry with cold caches, so every
        # byte is new to them; medians are printed. Each round has its own directory, all removed at
        # the end: removing the last round's store just before the next push made ext4 (this VM's has
        # no journal) skip every inode freed in the last minutes, one buffer lookup each, while the push
        # created its chunk files (perf: recently_deleted under ext4_create), a cost no user's
        # kestreld pays for a push and dd, writing one file, never did.
        rounds = int(os.environ.get("KESTREL_BENCH_ROUNDS", "3"))
        digest = run(["openssl", "dgst", "-sha256", "-r", src])[1].split()[0]
        t_push, t_dd, t_reg, t_pull, t_sync, t_sha, t_floor = [], [], [], [], [], [], []
        floor_bin = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(kestreld_bin))), "bench",
                                 "bench_store_floor")
        cpu_push, cpu_pull = [], []   # (client, kestreld) CPU seconds of each round's push and pull
        t_settle, cpu_settle = [], []   # when kestreld settled the file's digest after the answer, its CPU then
        push = rss = rss_pull = None
        for r in range(rounds):
            work = os.path.join(top, f"round{r}")
            os.mkdir(work)
            drop_page_cache()
            t_dd.append(run(["dd", f"if={src}", f"of={work}/dd.out", "bs=4M", "conv=fdatasync", "status=none"])[0])
            os.unlink(f"{work}/dd.out")
            server = Kestreld(kestreld_bin, work)
            env = server.env(os.path.join(work, "cache"))
            drop_page_cache()
            (t, out, rss, cpu), kd_cpu = run_beside(server, [cli, "-o", "json", "push", "bench/big", src], env)
            t_push.append(t)
            cpu_push.append((cpu, kd_cpu))
            push = json.loads(out)
            settle_round(server, t_settle, cpu_settle)
            if os.path.exists(Registry.BINARY):
                registry = Registry(work)
                drop_page_cache()
                t_reg.append(registry.push_blob(src, digest))
                registry.stop()
                registry = None
            if os.path.exists(floor_bin):   # in a store of its own, kept to the end as the rounds are
                drop_page_cache()
                t_floor.append(float(run([floor_bin, src, os.path.join(work, "floor"),
                                          str(max(1, push["bytes"] // max(1, push["chunks"])))])[1]))
            # verified pull with a cold cache, beside a durable write of the same bytes (the file read
            # from a cold page cache, written, fdatasync'd) and SHA-256 of them (OpenSSL, cold cache)
            dest = os.path.join(work, "pulled.bin")
            drop_page_cache()
            (t, _, rss_pull, cpu), kd_cpu = run_beside(server, [cli, "pull", "bench/big", dest], env)
            t_pull.append(t)
            cpu_pull.append((cpu, kd_cpu))
            same = subprocess.run(["cmp", "-s", src, dest]).returncode == 0
            os.unlink(dest)
            drop_page_cache()
            t_sync.append(run(["dd", f"if={src}", f"of={work}/dd.out", "bs=4M", "conv=fdatasync", "status=none"])[0])
            os.unlink(f"{work}/dd.out")
            drop_page_cache()
            t_sha.append(run(["openssl", "dgst", "-sha256", "-r", src])[0])
            if r < rounds - 1:
                server.stop()
                server = None
        med = statistics.median
        print(f"push of a new file (medians of {rounds} rounds, each against fresh servers and cold caches)")
        print(f"  kestrel push          {med(t_push):6.2f} s {rate(mib, med(t_push))}   "
              f"{pct(push['bytes_new'], push['bytes']):.0f} % of bytes sent, {push['chunks']} chunks   "
              f"(rounds: {', '.join(f'{t:.2f}' for t in t_push)} s)")
        print(f"  dd conv=fdatasync     {med(t_dd):6.2f} s {rate(mib, med(t_dd))}   "
              f"-> push at {pct(med(t_dd), med(t_push)):.0f} % of the disk's durable write (goal >= 80 %)   "
              f"(rounds: {', '.join(f'{t:.2f}' for t in t_dd)} s)")
        if t_floor:
            print(f"  the store alone       {med(t_floor):6.2f} s {rate(mib, med(t_floor))}   "
                  f"({push['chunks']} chunk files of the push's mean size, then its sync: no hashing, chunking or "
                  f"network) -> at {pct(med(t_dd), med(t_floor)):.0f} % of dd's speed; the push takes "
                  f"{med(t_push) / med(t_floor):.1f}x it   (rounds: {', '.join(f'{t:.2f}' for t in t_floor)} s)")
        where_cpu(*median_round(t_push, cpu_push), med(t_dd))
        if t_settle:
            print(f"  settled after it      {med(t_settle):6.2f} s after the answer, {med(cpu_settle):.2f} s of kestreld's CPU "
                  f"(the file's whole SHA-256, from its store, at idle priority once the repository was quiet "
                  f"{QUIET_S:.0f} s; each round waits for it before its next peer)   "
                  f"(rounds: {', '.join(f'{t:.2f}' for t in t_settle)} s)")
        if t_reg:
            print(f"  docker-registry blob  {med(t_reg):6.2f} s {rate(mib, med(t_reg))}   "
                  f"-> push is {med(t_reg) / med(t_push):.2f}x the OCI registry's speed (goal >= 2x)")
        else:
            print("  docker-registry       not installed (apt-get install docker-registry)")
        print(f"  client peak RSS       {rss / 1024:6.1f} MiB   (bound 64 MiB + 2 max chunks = "
              f"{64 + 2 * MAX_CHUNK // MIB} MiB)")
        limit = max(med(t_sync), med(t_sha))
        print(f"verified pull, cold cache (medians of {rounds} rounds)")
        print(f"  kestrel pull          {med(t_pull):6.2f} s {rate(mib, med(t_pull))}   peak RSS {rss_pull / 1024:.1f} MiB   "
              f"(bytes {'match' if same else 'DIFFER'}; rounds: {', '.join(f'{t:.2f}' for t in t_pull)} s)")
        print(f"  durable write         {med(t_sync):6.2f} s {rate(mib, med(t_sync))}   (dd conv=fdatasync of the same bytes)")
        print(f"  openssl sha256        {med(t_sha):6.2f} s {rate(mib, med(t_sha))}")
        print(f"  -> pull at {pct(limit, med(t_pull)):.0f} % of the lower of the two (goal >= 70 %)")
        where_cpu(*median_round(t_pull, cpu_pull), limit, "pull")

        # identical re-push, beside hashing the file under the same conditions: both read it from the
        # page cache (a cold read times this VM's disk, not the hashing)
        run(["cat", src], stdout=subprocess.DEVNULL)
        t_sha2 = run(["openssl", "dgst", "-sha256", "-r", src])[0]
        t_re, out, _, _ = run([cli, "-o", "json", "push", "bench/big", src], env=env)
        re = json.loads(out)
        print("identical re-push (file in the page cache, as for the hashing beside it)")
        print(f"  chunk bytes sent {re['bytes_new']} (goal 0); {t_re:.2f} s = {t_re / t_sha2:.2f}x hashing the file "
              f"with openssl, {t_sha2:.2f} s (goal <= 1.5x; unchanged since the last push: the stat cache)")
        past = time.time() - 120      # new timestamps: the stat cache no longer vouches, every byte is hashed
        os.utime(src, (past, past))
        t_re2, out, _, _ = run([cli, "-o", "json", "push", "bench/big", src], env=env)
        print(f"  after touching it (hashed again): chunk bytes sent {json.loads(out)['bytes_new']}; {t_re2:.2f} s = "
              f"{t_re2 / t_sha2:.2f}x hashing the file")

        # 5 % changed in 8 regions
        mod = os.path.join(work, "mod.bin")
        changed = mutate(src, mod, 0.05, 8)
        out = run([cli, "-o", "json", "push", "bench/big", mod], env=env).out
        mp = json.loads(out)
        os.unlink(mod)
        print("re-push after changing 5 % of the bytes in 8 regions")
        print(f"  changed {changed / MIB:.1f} MiB; sent {mp['bytes_new'] / MIB:.1f} MiB = "
              f"{pct(mp['bytes_new'], mp['bytes']):.1f} % of the file (goal <= 7 %)")

        concurrent_case(cli, kestreld_bin, work, mib, rounds)

        print("keras")
        keras_case(cli, env, work)

        from repo_dataset import dataset_cases   # datasets of many small files, beside tar
        dataset_cases(cli, env, work, server, lambda d: Kestreld(kestreld_bin, d), rounds)
    finally:
        for p in (server, registry):
            if p:
                p.stop()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
