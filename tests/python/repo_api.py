"""Helpers of the repository tests: raw HTTP to kestreld, its stored chunks, a collection."""
import json
import urllib.request


def raw(d, method, path, body=b"", ctype="application/json", token=None):
    req = urllib.request.Request(d.url + path, data=body or None, method=method,
                                 headers={"Authorization": f"Bearer {token or d.token}", "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def digest_bytes(d):
    """kestrel_repo_commit_digest_bytes_total by source, from /metrics."""
    text = raw(d, "GET", "/metrics")[1].decode()
    return {src: float(line.split()[-1]) for line in text.splitlines()
            for src in ("stream", "store", "chunk", "latest", "later")
            if line.startswith(f'kestrel_repo_commit_digest_bytes_total{{source="{src}"}}')}


def chunk_files(d):
    return sorted(p for p in (d.data / "repo" / "chunks").rglob("*") if p.is_file())


def gc(d, grace, token=None, expect=200):
    status, body = raw(d, "POST", f"/api/v1/repo/gc?grace_s={grace}", token=token)
    assert status == expect, body
    return status, json.loads(body)

