"""Tokens (create, list, revoke), users' teams and models' visibility: kestrel.Client's access API."""
import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, List, Optional, Union

from .errors import check
from .ffi import C, ffi
from .ffi import cstr as _b

if TYPE_CHECKING:
    from .client import Client


def _s(p: Any) -> str:
    return str(ffi.string(p).decode()) if p != ffi.NULL else ""


@dataclass(frozen=True)
class TokenInfo:
    """A token as the server lists it (never the token itself: only its hash is stored).

    id: for Client.revoke_token(); user: whose; scope: "read", "write" or "admin"; name: what it is
    for; created_ms / expires_ms (0: never) / revoked_ms (0: live): milliseconds since the epoch;
    hint: the token's last 4 characters."""
    id: int
    user: str
    scope: str
    name: str
    created_ms: int
    expires_ms: int
    revoked_ms: int
    hint: str

    @property
    def live(self) -> bool:
        """Neither revoked nor expired."""
        now = datetime.datetime.now().timestamp() * 1000
        return not self.revoked_ms and not (self.expires_ms and self.expires_ms <= now)


@dataclass(frozen=True)
class NewToken:
    """A token just created: `token` is shown this once."""
    id: int
    token: str

    def __str__(self) -> str:
        return self.token


def create(client: "Client", user: Optional[str] = None, *, team: Optional[str] = None,
           expires: Union[None, int, float, datetime.timedelta] = None, scope: str = "write",
           name: Optional[str] = None) -> NewToken:
    """A new token (shown once): for yourself, or as an admin for any user (created in team when missing)."""
    if scope not in ("read", "write", "admin"):
        raise ValueError("scope must be 'read', 'write' or 'admin'")
    if isinstance(expires, datetime.timedelta):
        expires = expires.total_seconds()
    if expires is not None and expires <= 0:
        raise ValueError("expires must be a positive number of seconds (or None: never)")
    opts = ffi.new("kestrel_token_options *")
    check(C.kestrel_token_options_init(opts, C.KESTREL_TOKEN_OPTIONS_VERSION))
    keep: List[Any] = []
    for field, value in (("user", user), ("team", team), ("scope", scope), ("name", name)):
        if value:
            keep.append(ffi.new("char[]", _b(value)))
            setattr(opts, field, keep[-1])
    opts.expires_s = int(expires or 0)
    buf = ffi.new("kestrel_buf *")
    tid = ffi.new("int64_t *")
    try:
        with client._lock:
            check(C.kestrel_token_create(buf, tid, client._p(), opts))
        return NewToken(int(tid[0]), str(ffi.string(buf.ptr).decode()))
    finally:
        C.kestrel_buf_dispose(buf)


def list_(client: "Client", user: Optional[str] = None) -> List[TokenInfo]:
    """Your tokens (an admin: everyone's, or user's), without their secrets."""
    out = ffi.new("kestrel_token_list **")
    with client._lock:
        check(C.kestrel_token_list_get(out, client._p(), _b(user) if user else ffi.NULL))
    tl = ffi.gc(out[0], C.kestrel_token_list_free)
    result: List[TokenInfo] = []
    for i in range(C.kestrel_token_list_count(tl)):
        t = C.kestrel_token_list_at(tl, i)
        result.append(TokenInfo(t.id, _s(t.user), _s(t.scope), _s(t.name), t.created_ms, t.expires_ms,
                                t.revoked_ms, _s(t.hint)))
    return result


def revoke(client: "Client", token_id: int) -> None:
    """Revoke a token by id: it gets 401 from now on."""
    with client._lock:
        check(C.kestrel_token_revoke(client._p(), int(token_id)))


def set_team(client: "Client", user: str, team: str) -> None:
    """Move user to team (admins; "" takes the user out of its team)."""
    with client._lock:
        check(C.kestrel_user_set_team(client._p(), _b(user), _b(team)))


def set_visibility(client: "Client", name: str, visibility: str) -> None:
    """Who may read model name: "all", "team" or "private" (its writers decide)."""
    if visibility not in ("all", "team", "private"):
        raise ValueError("visibility must be 'all', 'team' or 'private'")
    with client._lock:
        check(C.kestrel_model_set_visibility(client._p(), _b(name), _b(visibility)))
