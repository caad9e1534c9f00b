"""kestrel.Client: a session with one kestreld."""
import os
import pathlib
import shlex
import sys
import datetime
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ._handle import Handle
from ._html import HtmlList
from .errors import check
from .ffi import C, ffi
from .ffi import cstr as _b
from .job import Job, _job_from_ptr
from .tokens import NewToken

if TYPE_CHECKING:
    from .logsearch import LogHit
    from .repo import GcResult, Progress, Version
    from .tokens import TokenInfo

PRIORITIES = {"normal": 1, "high": 2, "urgent": 3}


class JobList(HtmlList):
    """A list of Job that Jupyter shows as a table."""
    HEADERS = ("id", "name", "owner", "state", "priority", "gpus", "node", "reason")

    @staticmethod
    def row(j: Job) -> Sequence[Any]:
        """One table row of a job."""
        return (j.id, j.name or "-", j.owner, j.state, j.priority, j.gpus, j.node or "-", j.reason)


class QueueList(HtmlList):
    """The queue, (job, position, reason) tuples, that Jupyter shows as a table."""
    HEADERS = ("position", "id", "name", "owner", "priority", "gpus", "why it waits")

    @staticmethod
    def row(e: Tuple[Job, int, str]) -> Sequence[Any]:
        """One table row of a queue entry."""
        j, pos, reason = e
        return (pos, j.id, j.name or "-", j.owner, j.priority, j.gpus, reason)


class ModelList(HtmlList):
    """Model names that Jupyter shows as a table."""
    HEADERS = ("model",)

    @staticmethod
    def row(name: str) -> Sequence[Any]:
        """One table row of a model name."""
        return (name,)


class NodeList(HtmlList):
    """The server's nodes (dicts) that Jupyter shows as a table."""
    HEADERS = ("node", "pool", "devices", "held", "free memory (MiB)")

    @staticmethod
    def row(n: Dict[str, Any]) -> Sequence[Any]:
        """One table row of a node."""
        devs = n["devices"]
        return (n["name"], n["pool"] or "default", len(devs), sum(1 for d in devs if d["job_id"]),
                sum(max(0, d["memory_free_mb"]) for d in devs))


STATES = {"QUEUED": 1, "RUNNING": 2, "SUCCEEDED": 3, "FAILED": 4, "CANCELLED": 5, "PREEMPTED": 6}


def _config_value(key: str) -> Optional[str]:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    path = pathlib.Path(base) / "kestrel" / "config"
    try:
        for line in path.read_text().splitlines():
            k, sep, v = line.partition("=")
            if sep and not k.strip().startswith("#") and k.strip() == key:
                return v.strip()
    except OSError:
        pass
    return None


def _mb(size: Union[int, float, str]) -> int:
    """40 (MB), "40G", "8192M" -> megabytes."""
    if isinstance(size, (int, float)):
        return int(size)
    s = str(size).strip().upper().rstrip("B").rstrip("I")
    mult = {"T": 1 << 20, "G": 1 << 10, "M": 1}.get(s[-1:], None)
    return int(float(s[:-1]) * mult) if mult else int(s)


class Client(Handle):
    """A session with a kestreld. url and token default to KESTREL_URL / KESTREL_TOKEN, then
    ~/.config/kestrel/config (`url = ...`, `token = ...`)."""

    _free = C.kestrel_client_free

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 timeout: Optional[float] = None, retries: Optional[int] = None) -> None:
        url = url or os.environ.get("KESTREL_URL") or _config_value("url")
        token = token or os.environ.get("KESTREL_TOKEN") or _config_value("token")
        if not url:
            raise ValueError("no server URL: pass url=, set KESTREL_URL or write ~/.config/kestrel/config")
        opts = ffi.new("kestrel_client_options *")
        check(C.kestrel_client_options_init(opts, C.KESTREL_CLIENT_OPTIONS_VERSION))
        tok = ffi.new("char[]", _b(token)) if token else ffi.NULL
        opts.token = tok
        if timeout is not None:
            opts.timeout_ms = int(timeout * 1000)
        if retries is not None:
            opts.max_retries = retries if retries > 0 else -1
        out = ffi.new("kestrel_client **")
        check(C.kestrel_client_new(out, _b(url), opts))
        super().__init__(out[0])
        self.url: str = url
        self._token = token

    def _clone(self) -> "Client":
        """A second session to the same server (for long follows that must not hold this one)."""
        return Client(self.url, self._token)

    def ping(self) -> str:
        """The server's version (GET /healthz)."""
        buf = ffi.new("kestrel_buf *")
        try:
            with self._lock:
                check(C.kestrel_client_ping(buf, self._p()))
            return str(ffi.string(buf.ptr).decode())
        finally:
            C.kestrel_buf_dispose(buf)

    def console_url(self) -> str:
        """The web console's address with a one-time login code: opening it within 2 minutes logs a
        browser in as this client's token (once), without the token ever being in the address.
        Print it, or open it: ``webbrowser.open(client.console_url())``."""
        buf = ffi.new("kestrel_buf *")
        try:
            with self._lock:
                check(C.kestrel_client_console_url(buf, self._p()))
            return str(ffi.string(buf.ptr).decode())
        finally:
            C.kestrel_buf_dispose(buf)

    def submit(self, argv: Optional[Sequence[str]] = None, script: Optional[str] = None, *, gpus: int = 0,
               priority: str = "normal", git: Optional[str] = None, ref: Optional[str] = None,
               env: Optional[Dict[str, str]] = None, name: Optional[str] = None,
               labels: Optional[Dict[str, str]] = None, workdir: Optional[str] = None,
               gpu_type: Optional[str] = None,
               min_gpu_memory: Union[None, int, float, str] = None, pool: Optional[str] = None,
               after_ok: Iterable[int] = (), after_any: Iterable[int] = (), preemptible: bool = True,
               grace_period: Optional[int] = None, retry: bool = True,
               secret_env: Optional[Dict[str, str]] = None, params: Optional[Dict[str, object]] = None,
               code: Optional[str] = None, max_code_size: Optional[int] = None,
               data: Optional[Dict[str, str]] = None, environment: Optional[str] = None,
               requirements: Optional[str] = None, retries: int = 0,
               log_policies: Optional[Dict[str, Tuple[str, str]]] = None,
               exclude_nodes: Iterable[str] = (), replicas: int = 1) -> Job:
        """Queue a job: argv (a list of strings, run without a shell; a str is a TypeError, as
        shlex.split would make the list) or script (a path, run with this interpreter,
        sys.executable, or with the environment's python when environment= or requirements= is
        given; without code= it is taken by its absolute path, so the server must see this
        filesystem: a local kestreld, or code= to upload it).

        code: a local directory to run in: uploaded (what git would keep there; only changed chunks
        travel again) as the next version of USER/code/DIRNAME, and the job runs in a fresh copy of
        it (job.code names the version). max_code_size: refuse bigger uploads (default 1 GiB).
        environment: a standard environment of the server (environments()); requirements: or a
        requirements file (its path) the server builds a venv of, once per distinct file, while
        the job is QUEUED. Either way `python` in argv (and script=) is that venv's, with
        `import kestrel` there; job.environment and job.packages say what it ran with.
        data: {path in the work dir: repository ref}, e.g. {"data/mnist": "team/mnist@3"}: each
        version is there, read-only, before the job starts (job.data: the exact versions).
        params: the run's parameters (hyperparameters), recorded with the job and filterable
        (jobs(param="lr=0.001")); the job reads them with kestrel.params(). Values are kept as
        strings (str(value)).

        secret_env: variables the job sees like env, whose values the API shows as "***" and
        kestreld masks in the job's log lines (API keys, passwords).

        retries: a failed run is queued again up to this many times. log_policies: {name: (regex,
        "action,action")}, actions label, alert, no-retry, exclude-node, retry-larger (besides the
        server's and the built-in cuda-oom, ecc, nan-loss). exclude_nodes: nodes never to run on.

        replicas: a gang of this many processes (ranks), each with gpus devices, placed all at once
        on as few nodes as hold them; each rank gets KESTREL_RANK, KESTREL_WORLD_SIZE, torchrun's
        RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and KERAS_DISTRIBUTION_* (kestrel.keras.distribute()
        reads them); one failing stops the others, preemption stops and requeues all."""
        if (argv is None) == (script is None):
            raise ValueError("give exactly one of argv= or script=")
        if isinstance(argv, (str, bytes)):
            text = argv.decode("utf-8", "replace") if isinstance(argv, bytes) else argv
            raise TypeError(f"argv is a list of strings, run without a shell: {shlex.split(text)!r} "
                            f"(shlex.split({text!r}) makes one)")
        if argv is None:
            # this interpreter, unless the job runs in a server-built environment (then its python);
            # without code= the job runs elsewhere (its own work dir): the script by its absolute path
            script = str(script) if code else os.path.abspath(str(script))
            argv = ["python" if (environment or requirements) else sys.executable, script]
        priority = str(priority).lower()
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
        out = ffi.new("kestrel_job_spec **")
        check(C.kestrel_job_spec_new(out))
        spec = ffi.gc(out[0], C.kestrel_job_spec_free)
        keep = [ffi.new("char[]", _b(a)) for a in argv]
        check(C.kestrel_job_spec_set_argv(spec, ffi.new("const char *[]", keep), len(keep)))
        for k, v in (env or {}).items():
            check(C.kestrel_job_spec_set_env(spec, _b(k), _b(v)))
        for k, v in (secret_env or {}).items():
            check(C.kestrel_job_spec_set_secret_env(spec, _b(k), _b(v)))
        for k, v in (labels or {}).items():
            check(C.kestrel_job_spec_set_label(spec, _b(k), _b(v)))
        for k, value in (params or {}).items():
            check(C.kestrel_job_spec_set_param(spec, _b(k), _b(str(value))))
        if name:
            check(C.kestrel_job_spec_set_name(spec, _b(name)))
        check(C.kestrel_job_spec_set_priority(spec, PRIORITIES[priority]))
        check(C.kestrel_job_spec_set_gpus(spec, gpus))
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise TypeError(f"replicas is a whole number of ranks (1..64), not {replicas!r}")
        if replicas != 1:
            check(C.kestrel_job_spec_set_replicas(spec, replicas))
        if environment:
            check(C.kestrel_job_spec_set_environment(spec, _b(environment)))
        if requirements:
            with open(requirements, "r", encoding="utf-8") as f:
                check(C.kestrel_job_spec_set_requirements(spec, _b(f.read())))
        for path, ref_ in (data or {}).items():
            check(C.kestrel_job_spec_add_data(spec, _b(ref_), _b(path)))
        if git and code:
            raise ValueError("give code= or git=, not both")
        if code:
            from .repo import push_code
            check(C.kestrel_job_spec_set_code(spec, _b(push_code(self, code, max_bytes=max_code_size))))
        if git:
            check(C.kestrel_job_spec_set_git(spec, _b(git), _b(ref) if ref else ffi.NULL))
        elif ref:
            raise ValueError("ref= needs git=")
        if workdir:
            check(C.kestrel_job_spec_set_workdir(spec, _b(workdir)))
        if gpu_type:
            check(C.kestrel_job_spec_set_gpu_type(spec, _b(gpu_type)))
        if min_gpu_memory:
            check(C.kestrel_job_spec_set_min_gpu_memory(spec, _mb(min_gpu_memory)))
        if pool:
            check(C.kestrel_job_spec_set_pool(spec, _b(pool)))
        for dep in after_ok:
            check(C.kestrel_job_spec_add_dependency(spec, int(dep), C.KESTREL_AFTER_OK))
        for dep in after_any:
            check(C.kestrel_job_spec_add_dependency(spec, int(dep), C.KESTREL_AFTER_ANY))
        check(C.kestrel_job_spec_set_preemptible(spec, 1 if preemptible else 0))
        if grace_period is not None:
            check(C.kestrel_job_spec_set_grace_period(spec, int(grace_period)))
        check(C.kestrel_job_spec_set_retry(spec, 1 if retry else 0))
        check(C.kestrel_job_spec_set_max_retries(spec, int(retries)))
        for pname, (pattern, actions) in (log_policies or {}).items():
            check(C.kestrel_job_spec_add_log_policy(spec, _b(pname), _b(pattern), _b(actions)))
        for node in exclude_nodes:
            check(C.kestrel_job_spec_exclude_node(spec, _b(node)))
        jout = ffi.new("kestrel_job **")
        with self._lock:
            check(C.kestrel_job_submit(jout, self._p(), spec))
        return _job_from_ptr(self, jout[0])

    def environments(self) -> List[Dict[str, Any]]:
        """The server's standard environments: dicts of name, digest, state, packages."""
        import json
        buf = ffi.new("kestrel_buf *")
        try:
            with self._lock:
                check(C.kestrel_environments_get(buf, self._p()))
            found: List[Dict[str, Any]] = json.loads(ffi.string(buf.ptr).decode()).get("environments", [])
            return found
        finally:
            C.kestrel_buf_dispose(buf)

    def rerun(self, job_id: int) -> Job:
        """Queue job_id again: the same code version, datasets, params, argv and env."""
        out = ffi.new("kestrel_job **")
        with self._lock:
            check(C.kestrel_job_rerun(out, self._p(), int(job_id)))
        return _job_from_ptr(self, out[0])

    def reproduce(self, ref: str) -> Job:
        """Rerun the job that pushed the model version ref ("team/m@3"): see rerun()."""
        out = ffi.new("kestrel_job **")
        with self._lock:
            check(C.kestrel_job_reproduce(out, self._p(), _b(ref)))
        return _job_from_ptr(self, out[0])

    def job(self, job_id: int) -> Job:
        """The job job_id as the server has it now (KestrelNotFoundError if you may not see it)."""
        out = ffi.new("kestrel_job **")
        with self._lock:
            check(C.kestrel_job_get(out, self._p(), int(job_id)))
        return _job_from_ptr(self, out[0])

    def jobs(self, state: Optional[str] = None, name: Optional[str] = None, label: Optional[str] = None,
             limit: int = 100, param: Optional[str] = None) -> "JobList":
        """Your jobs, newest first (all pages up to limit); label and param filter by "key=value";
        state is one of queued, running, succeeded, failed, cancelled, preempted. In Jupyter the list
        shows as a table."""
        result = JobList()
        token: bytes = b""
        while len(result) < limit:
            opts = ffi.new("kestrel_job_list_options *")
            check(C.kestrel_job_list_options_init(opts, C.KESTREL_JOB_LIST_OPTIONS_VERSION))
            keep: List[Any] = []
            if state:
                if state.upper() not in STATES:
                    raise ValueError(f"state must be one of {', '.join(s.lower() for s in STATES)}, not {state!r}")
                opts.state = STATES[state.upper()]
            for field, value in (("name", name), ("label", label), ("param", param), ("page_token", token)):
                if value:
                    keep.append(ffi.new("char[]", _b(value)))
                    setattr(opts, field, keep[-1])
            opts.page_size = min(1000, limit - len(result))
            out = ffi.new("kestrel_job_page **")
            with self._lock:
                check(C.kestrel_job_list(out, self._p(), opts))
            page = ffi.gc(out[0], C.kestrel_job_page_free)
            for i in range(C.kestrel_job_page_count(page)):
                result.append(Job._from_c(self, C.kestrel_job_page_at(page, i)))
            token = bytes(ffi.string(C.kestrel_job_page_next_token(page)))
            if not token:
                break
        return result

    def alerts(self, job: Optional[int] = None, limit: int = 100) -> List[Dict[str, Any]]:
        """kestreld's alerts (log policies, NaN loss, idle GPUs) you may see, newest first."""
        from .logsearch import alerts
        return alerts(self, job, limit)

    def search_logs(self, pattern: str, **kwargs: Any) -> List["LogHit"]:
        """Lines matching pattern across every job you may see (see kestrel.logsearch.search_logs)."""
        from .logsearch import search_logs
        return search_logs(self, pattern, **kwargs)

    def queue(self) -> "QueueList":
        """Your queued jobs in scheduling order: (job, position, reason) tuples (a table in Jupyter)."""
        out = ffi.new("kestrel_queue **")
        with self._lock:
            check(C.kestrel_queue_get(out, self._p()))
        q = ffi.gc(out[0], C.kestrel_queue_free)
        return QueueList((Job._from_c(self, C.kestrel_queue_job(q, i)), C.kestrel_queue_position(q, i),
                          ffi.string(C.kestrel_queue_reason(q, i)).decode()) for i in range(C.kestrel_queue_count(q)))

    def nodes(self) -> "NodeList":
        """The server's nodes with their devices and allocations (dicts; a table in Jupyter)."""
        out = ffi.new("kestrel_node_list **")
        with self._lock:
            check(C.kestrel_node_list_get(out, self._p()))
        nl = ffi.gc(out[0], C.kestrel_node_list_free)
        nodes = NodeList()
        for i in range(C.kestrel_node_list_count(nl)):
            devs: List[Dict[str, Any]] = []
            for k in range(C.kestrel_node_device_count(nl, i)):
                d = C.kestrel_node_device_at(nl, i, k)
                devs.append({"index": d.index, "uuid": ffi.string(d.uuid).decode(), "type": ffi.string(d.type).decode(),
                             "name": ffi.string(d.name).decode(), "memory_total_mb": d.memory_total_mb,
                             "memory_free_mb": d.memory_free_mb, "utilization": d.utilization,
                             "compute_capability": (d.cc_major, d.cc_minor), "job_id": d.job_id})
            nodes.append({"name": ffi.string(C.kestrel_node_name(nl, i)).decode(),
                          "pool": ffi.string(C.kestrel_node_pool(nl, i)).decode(), "devices": devs})
        return nodes

    # -- the repository (file:///path URLs in this release) ---------------------------------------
    def push(self, name: str, path: str, *, alias: Optional[str] = None, metadata: Optional[Dict[str, Any]] = None,
             progress: Optional[Callable[["Progress"], None]] = None) -> int:
        """Push a file or a directory (a tree of its files) as the next version of name (deduplicated
        chunks); returns the version."""
        from . import repo
        return repo.push(self, name, path, alias=alias, metadata=metadata, progress=progress)

    def pull(self, ref: str, dest: str, *, progress: Optional[Callable[["Progress"], None]] = None) -> str:
        """Pull "name", "name@N" or "name@alias" into dest (a file, or a directory for a directory
        version), verified; returns dest. dest is the path made, never a folder to pull into (as
        `kestrel pull REF DIR` takes it): a file version replaces a file or a symbolic link there (the
        link itself, never what it points to), a directory version replaces a directory."""
        from . import repo
        return repo.pull(self, ref, dest, progress=progress)

    def versions(self, name: str) -> List["Version"]:
        """name's versions, oldest first: Version(version, size, sha256, created_ms, chunks, aliases, metadata)."""
        from . import repo
        return repo.versions(self, name)

    def version(self, ref: str) -> "Version":
        """The version ref names (NAME, NAME@N, NAME@latest, NAME@ALIAS), reading its listing alone:
        Version(version, size, sha256, created_ms, chunks, aliases, metadata); kestrel.NotFoundError
        (a LookupError) when there is none."""
        from . import repo
        return repo.versions(self, ref, one=True)[0]

    def models(self) -> "ModelList":
        """The names of the models you may read (a table in Jupyter)."""
        from . import repo
        return ModelList(repo.models(self))

    def set_alias(self, name: str, alias: str, version: int) -> None:
        """Point name@alias at version (the writers of name's namespace may)."""
        from . import repo
        repo.set_alias(self, name, alias, version)

    def delete_version(self, name: str, version: int) -> None:
        """Delete one version of name (its chunks go at the server's next repository gc)."""
        from . import repo
        repo.delete(self, name, version)

    def gc(self, grace_s: Optional[int] = None) -> "GcResult":
        """Collect the repository: chunks no version names once older than grace_s seconds (None: the
        repository's own grace), and killed writers' temp files once older than that and an hour. A
        file:// store is collected in this process; a kestreld only for an admin (AuthError)."""
        from . import repo
        return repo.gc(self, grace_s)

    # -- access: tokens, teams, who may read a model ------------------------------------------------
    def create_token(self, user: Optional[str] = None, *, team: Optional[str] = None,
                     expires: Union[None, int, float, datetime.timedelta] = None,
                     scope: str = "write", name: Optional[str] = None) -> "NewToken":
        """A new token (a kestrel.tokens.NewToken: .token is shown this once, .id revokes it).

        Any user creates read or write tokens for itself; an admin creates them for any user
        (creating it, in team, when missing). expires: seconds or a timedelta (None: never);
        scope "read" can only read (GET): for inference programs and CI."""
        from . import tokens
        return tokens.create(self, user, team=team, expires=expires, scope=scope, name=name)

    def tokens(self, user: Optional[str] = None) -> List["TokenInfo"]:
        """Your tokens as kestrel.tokens.TokenInfo (an admin: everyone's, or user's)."""
        from . import tokens
        return tokens.list_(self, user)

    def revoke_token(self, token_id: int) -> None:
        """Revoke a token of yours (an admin: anyone's): it gets 401 from now on."""
        from . import tokens
        tokens.revoke(self, token_id)

    def set_team(self, user: str, team: str) -> None:
        """Move user into team ("" : none). Admins only: the one way a user's team changes."""
        from . import tokens
        tokens.set_team(self, user, team)

    def set_visibility(self, name: str, visibility: str) -> None:
        """Who may read model name: "all" (default), "team" or "private" (its namespace's writers)."""
        from . import tokens
        tokens.set_visibility(self, name, visibility)

    def __repr__(self) -> str:
        return f"<kestrel.Client {self.url}{' closed' if self._ptr is None else ''}>"
