"""The web console kestreld serves at /: login (token -> session cookie), CSRF, CSP, and every page
driven in Debian's headless Chromium against the real kestreld. Screenshots of each page go to
build/console-screenshots/ (KESTREL_SCREENSHOTS to put them elsewhere)."""
import http.client
import json
import os
import pathlib
import re
import sys
import time
import urllib.parse

import pytest
from selenium.common.exceptions import NoAlertPresentException

from browser import Browser
from test_observability import STUB, write_gpus

HERE = pathlib.Path(__file__).resolve().parent
SHOTS = pathlib.Path(os.environ.get("KESTREL_SCREENSHOTS", HERE.parent.parent / "build" / "console-screenshots"))
XSS = "<img src=x onerror=alert(1)>"

TRAIN = r'''
import json, math, os, sys, time, urllib.request
url, tok, jid = os.environ["KESTREL_URL"], os.environ["KESTREL_TOKEN"], os.environ["KESTREL_JOB_ID"]
steps, pause = int(sys.argv[1]), float(sys.argv[2])
for step in range(1, steps + 1):
    loss = 2.0 * math.exp(-step / (8 * float(os.environ.get("SLOW", "1"))))
    now = int(time.time() * 1000)
    body = json.dumps({"metrics": [{"name": "loss", "step": step, "value": loss, "wall_time_ms": now},
                                   {"name": "accuracy", "step": step, "value": 1 - loss / 2, "wall_time_ms": now}]})
    req = urllib.request.Request(f"{url}/api/v1/jobs/{jid}/metrics", data=body.encode(), method="POST",
                                 headers={"Authorization": f"Bearer {tok}", "Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
    print(f"epoch 1 step {step} loss {loss:.4f}", flush=True)
    time.sleep(pause)
print("training done", flush=True)
if len(sys.argv) > 3:   # push the trained weights: a version whose lineage names this job
    import subprocess
    open("weights.bin", "wb").write(b"w" * 5000)
    subprocess.run([sys.argv[3], "push", "admin/mnist", "weights.bin"], check=True)
'''


class Raw:
    """Plain HTTP without redirects or cookie jars: what a browser sends, spelled out."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port

    def __call__(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        c.close()
        return out


def token(d, user, **extra):
    status, body = d.api("POST", "/api/v1/tokens", {"user": user, **extra})
    assert status == 201, body
    return body


def login(raw, tok):
    status, h, _ = raw("GET", "/?token=" + urllib.parse.quote(tok))
    assert status == 303 and h["location"] == "/", (status, h)
    cookie = h["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
    sid = cookie.split(";")[0]
    status, h, body = raw("GET", "/ui/session", headers={"Cookie": sid})
    assert status == 200, body
    assert h.get("cache-control") == "no-store", h   # its CSRF token is kept by no cache (a hostile test)
    return sid, json.loads(body)["csrf_token"]


def n_jobs(d):
    return len(d.api("GET", "/api/v1/jobs?page_size=1000")[1]["jobs"])


def test_pages_are_served_with_a_strict_csp_and_no_inline_script(kestreld):
    raw = Raw(kestreld.url)
    status, h, body = raw("GET", "/")
    assert status == 200 and h["content-type"].startswith("text/html")
    csp = h["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp and h["x-frame-options"] == "DENY"
    html = body.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "an inline script"
    assert not re.search(r"\son[a-z]+=|\sstyle=", html), "an inline handler or style"
    for asset in re.findall(r'(?:src|href)="(/ui/[^"]+)"', html):
        status, h, _ = raw("GET", asset)
        assert status == 200 and "content-security-policy" in h, asset
    status, h, js = raw("GET", "/ui/js/dom.js")
    assert status == 200 and h["content-type"].startswith("text/javascript")
    assert b"innerHTML" not in js and b"insertAdjacentHTML" not in js
    assert raw("GET", "/ui/js/nope.js")[0] == 404
    assert raw("GET", "/ui/../admin.token")[0] == 404
    # the pages hold no data: everything behind them still needs a session or a token
    assert raw("GET", "/api/v1/jobs")[0] == 401
    assert raw("GET", "/ui/session")[0] == 401


def test_login_sessions_and_csrf(kestreld):
    d, raw = kestreld, Raw(kestreld.url)
    # a bad token: back to the login page, no cookie, and the token is not in the address
    status, h, _ = raw("GET", "/?token=kst_nope")
    assert status == 303 and h["location"] == "/?error=token" and "set-cookie" not in h
    status, h, _ = raw("POST", "/ui/login", b"token=kst_nope", {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 303 and h["location"] == "/?error=token"
    # the login form
    status, h, _ = raw("POST", "/ui/login", ("token=" + urllib.parse.quote(d.token)).encode(),
                       {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 303 and h["location"] == "/" and "HttpOnly" in h["set-cookie"]
    sid, csrf = login(raw, d.token)
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": sid})[0] == 200
    before = n_jobs(d)
    spec = {"argv": ["true"], "name": "from-the-console"}
    # a cookie-borne change without the CSRF header, or with another one, is refused and changes nothing
    for headers in ({"Cookie": sid}, {"Cookie": sid, "X-Kestrel-CSRF": "0" * 64},
                    {"Cookie": sid, "X-Kestrel-CSRF": csrf[:-1]}):
        status, _, body = raw("POST", "/api/v1/jobs", spec, {**headers, "Content-Type": "application/json"})
        assert status == 403 and json.loads(body)["code"] == "csrf_failed", body
    assert n_jobs(d) == before
    status, _, body = raw("POST", "/api/v1/jobs", spec,
                          {"Cookie": sid, "X-Kestrel-CSRF": csrf, "Content-Type": "application/json"})
    assert status == 201, body
    assert n_jobs(d) == before + 1
    # another session's CSRF token does not fit this session
    sid2, csrf2 = login(raw, d.token)
    status, _, _ = raw("POST", f"/api/v1/jobs/{json.loads(body)['id']}/cancel", {},
                       {"Cookie": sid, "X-Kestrel-CSRF": csrf2, "Content-Type": "application/json"})
    assert status == 403
    # job and metrics tokens cannot log in
    jid = json.loads(body)["id"]
    for tok in (token(d, "prom", scope="metrics")["token"],):
        status, h, _ = raw("GET", "/?token=" + tok)
        assert status == 303 and h["location"] == "/?error=scope" and "set-cookie" not in h
    # logout ends the session (with CSRF: a page elsewhere cannot log you out)
    assert raw("POST", "/ui/logout", b"", {"Cookie": sid2})[0] == 403
    status, h, _ = raw("POST", "/ui/logout", b"", {"Cookie": sid2, "X-Kestrel-CSRF": csrf2})
    assert status == 303 and "Max-Age=0" in h["set-cookie"]
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": sid2})[0] == 401
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": sid})[0] == 200
    # a revoked token ends its sessions at once
    alice = token(d, "alice")
    asid, acsrf = login(raw, alice["token"])
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": asid})[0] == 200
    # ... and a session has exactly its token's rights: alice cannot see or cancel admin's job
    status, _, _ = raw("POST", f"/api/v1/jobs/{jid}/cancel", {},
                       {"Cookie": asid, "X-Kestrel-CSRF": acsrf, "Content-Type": "application/json"})
    assert status == 404
    assert raw("GET", f"/api/v1/jobs/{jid}", headers={"Cookie": asid})[0] == 404
    # ... nor through the console's own reads: the versions it pushed, its sampled metrics, ?user=
    for path in (f"/api/v1/jobs/{jid}/models", f"/api/v1/jobs/{jid}/metrics?max_points=100"):
        assert raw("GET", path, headers={"Cookie": asid})[0] == 404, path
    listing = json.loads(raw("GET", "/api/v1/jobs?user=admin", headers={"Cookie": asid})[2])
    assert listing["jobs"] == [], listing
    assert d.api("DELETE", f"/api/v1/tokens/{alice['id']}")[0] == 200
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": asid})[0] == 401
    assert raw("GET", "/ui/session", headers={"Cookie": asid})[0] == 401
    # a read-scoped session reads and cannot act, CSRF token or not
    rsid, rcsrf = login(raw, token(d, "admin", scope="read")["token"])
    assert raw("GET", f"/api/v1/jobs/{jid}", headers={"Cookie": rsid})[0] == 200
    status, _, _ = raw("POST", "/api/v1/jobs", spec, {"Cookie": rsid, "X-Kestrel-CSRF": rcsrf,
                                                       "Content-Type": "application/json"})
    assert status == 403
    # junk cookies are no session
    for junk in ("kestrel_session=", "kestrel_session=zz", "kestrel_session=" + "a" * 64, "kestrel_session=" + "a" * 500):
        assert raw("GET", "/api/v1/whoami", headers={"Cookie": junk})[0] == 401
    # a login token past its bound is refused, not stored
    status, h, _ = raw("GET", "/?token=" + "k" * 600)
    assert status == 303 and h["location"] == "/?error=token"


def test_a_job_token_cannot_log_in(kestreld):
    """The job tries it with its own token, from inside."""
    d = kestreld
    probe = ("import http.client, os, urllib.parse as u; p = u.urlparse(os.environ['KESTREL_URL']); "
             "c = http.client.HTTPConnection(p.hostname, p.port); "
             "c.request('GET', '/?token=' + os.environ['KESTREL_TOKEN']); r = c.getresponse(); "
             "print('login', r.status, r.getheader('Location'), r.getheader('Set-Cookie'))")
    jid = d.submit("--", "/usr/bin/python3", "-c", probe)
    assert d.wait(jid)["state"] == "SUCCEEDED"
    assert "login 303 /?error=scope None" in d.cli("logs", str(jid)).stdout


def test_kestrel_ui_prints_a_one_time_login_address(kestreld):
    d, raw = kestreld, Raw(kestreld.url)
    url = d.cli("ui").stdout.strip()
    assert url.startswith(f"{d.url}/?code=") and d.token not in url
    path = url[len(d.url):]
    status, h, _ = raw("GET", path)
    assert status == 303 and h["location"] == "/" and "kestrel_session=" in h["set-cookie"]
    sid = h["set-cookie"].split(";")[0]
    assert json.loads(raw("GET", "/ui/session", headers={"Cookie": sid})[2])["user"] == "admin"
    # spent: a second use, a made-up code or junk logs no one in
    for p in (path, "/?code=" + "0" * 64, "/?code=zz", "/?code=" + "a" * 65):
        status, h, _ = raw("GET", p)
        assert status == 303 and h["location"] == "/?error=code" and "set-cookie" not in h, p
    # a bad token gets no code; nor do metrics tokens
    bad = d.cli("ui", env=d.env(KESTREL_TOKEN="kst_bad"), check=False)
    assert bad.returncode == 1 and "kst_bad" not in bad.stdout
    prom = token(d, "prom", scope="metrics")["token"]
    p = d.cli("ui", env=d.env(KESTREL_TOKEN=prom), check=False)
    assert p.returncode == 1 and "cannot log in" in p.stderr
    assert raw("POST", "/ui/login-code", b"")[0] == 401
    assert "2 minutes" in d.cli("ui", "--help").stdout


def test_another_site_cannot_log_the_browser_in(kestreld):
    """Login CSRF: a page of another site that sends the browser to /?token= or posts the login form
    (Sec-Fetch-Site: cross-site) swaps no one's session; typed or pasted addresses (none) and the
    console's own form (same-origin) log in."""
    d, raw = kestreld, Raw(kestreld.url)
    form = ("token=" + urllib.parse.quote(d.token)).encode()
    ctype = {"Content-Type": "application/x-www-form-urlencoded"}
    for site in ("cross-site", "same-site"):
        status, h, _ = raw("GET", "/?token=" + d.token, headers={"Sec-Fetch-Site": site})
        assert status == 303 and h["location"] == "/?error=site" and "set-cookie" not in h
        status, h, _ = raw("POST", "/ui/login", form, {**ctype, "Sec-Fetch-Site": site})
        assert status == 303 and h["location"] == "/?error=site" and "set-cookie" not in h
    status, h, _ = raw("POST", "/ui/login", form, {**ctype, "Origin": "http://evil.example"})
    assert status == 303 and h["location"] == "/?error=site"
    for site in ("none", "same-origin"):
        status, h, _ = raw("GET", "/?token=" + d.token, headers={"Sec-Fetch-Site": site})
        assert status == 303 and "kestrel_session=" in h["set-cookie"]
    host = d.url.split("//")[1]
    status, h, _ = raw("POST", "/ui/login", form, {**ctype, "Origin": d.url, "Host": host})
    assert status == 303 and "kestrel_session=" in h["set-cookie"]
    # a login link (kestrel ui) tried from another site is refused and stays the user's: a refusal
    # spent it (a hostile test)
    status, body = d.api("POST", "/ui/login-code", {})
    assert status == 201, body
    code = body["code"]
    status, h, _ = raw("GET", "/?code=" + code, headers={"Origin": "http://evil.example"})
    assert status == 303 and h["location"] == "/?error=site" and "set-cookie" not in h
    status, h, _ = raw("GET", "/?code=" + code, headers={"Sec-Fetch-Site": "none"})
    assert status == 303 and "kestrel_session=" in h["set-cookie"]


def test_one_user_cannot_push_other_sessions_or_login_codes_out(kestreld):
    d, raw = kestreld, Raw(kestreld.url)
    sid, _ = login(raw, d.token)
    bob = token(d, "bob")["token"]
    # more logins than the table holds, 16 of each of bob's 263 tokens: the bound was per token, and
    # a user's tokens (up to 1000) logged every other user out (a hostile test)
    bobs = [bob] + [d.api("POST", "/api/v1/tokens", {"scope": "read"}, token=bob)[1]["token"] for _ in range(262)]
    for t in bobs:
        for _ in range(16):
            raw("GET", "/?token=" + t)
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": sid})[0] == 200
    # bob's own oldest went: he holds at most 16, all his tokens together
    first, _ = login(raw, bob)
    for t in bobs[:16]:
        login(raw, t)
    assert raw("GET", "/api/v1/whoami", headers={"Cookie": first})[0] == 401
    # login codes (kestrel ui) likewise: 256 of bob's spent the admin's link
    status, body = d.api("POST", "/ui/login-code", {})
    assert status == 201, body
    mine = body["code"]
    for t in bobs[:256]:
        assert d.api("POST", "/ui/login-code", {}, token=t)[0] == 201
    status, h, _ = raw("GET", "/?code=" + mine, headers={"Sec-Fetch-Site": "none"})
    assert status == 303 and "kestrel_session=" in h["set-cookie"], h


def raw_status(d, b):
    """What the browser's (now cleared) session cookie gets from the API."""
    return b.js_async("""const done = arguments[arguments.length - 1];
        fetch('/api/v1/whoami').then((r) => done(r.status));""")


def shot(b, name):
    b.screenshot(SHOTS / f"{name}.png")


def chart_points(b, metric):
    el = b.all(f'#charts .chart[data-metric="{metric}"]')
    return int(el[0].get_attribute("data-points")) if el else 0


def test_the_console_in_a_real_browser(daemon, tmp_path):
    gpus = tmp_path / "gpus.txt"
    write_gpus(gpus, [35, 80])
    env = dict(os.environ, KESTREL_NVML_LIBRARY=STUB, KESTREL_FAKE_GPU_FILE=str(gpus))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    d = daemon("--grace-period", "5", "--gpu-sample-interval", "1", env=env)
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    py = "/usr/bin/python3"
    model = tmp_path / "weights.bin"
    for v in (b"v1" * 1000, b"v2" * 1000):
        model.write_bytes(v)
        d.cli("push", "admin/mnist", str(model), "--meta", "note=console test")
    release = tmp_path / "release"   # the blocker holds its dependent in the queue until the test looks
    blocker = d.submit("--name", "blocker", "--", "sh", "-c", f"while [ ! -e {release} ]; do sleep 0.1; done")
    jid = d.submit("--name", "resnet-small", "--param", "lr=0.01", "--param", "batch=64", "--after-ok", str(blocker),
                   "--log-policy", "mark:alert=step 3[0-9] ",   # events within its run: not more runs
                   "--", py, str(train), "40", "0.25", os.environ["KESTREL_CLI"])
    other = d.submit("--name", XSS, "--param", "lr=0.1", "--param", "batch=64", "--env", "SLOW=2",
                     "--", py, str(train), "30", "0")
    # a job on both GPUs, preempted by an urgent one and run again: its timeline tells it
    doomed = d.submit("--name", "to-cancel", "--gpus", "2", "--", "sh", "-c",
                      "trap 'exit 0' TERM; while :; do sleep 0.1; done")
    d.wait_state(doomed, "RUNNING")
    urgent = d.submit("--name", "urgent", "--gpus", "2", "--priority", "urgent", "--", "sleep", "3")
    with Browser(tmp_path / "chromium") as b:
        # log in: the token leaves the address, the cookie is out of the page's reach
        b.open(d.cli("ui").stdout.strip())   # kestrel ui's one-time address
        b.wait_css("#who:not(:empty)")
        assert "code=" not in b.d.current_url and "token=" not in b.d.current_url
        assert b.js("return document.cookie") == ""
        assert not b.css("#login").is_displayed() and b.css("#nav").is_displayed()
        fcp = b.first_paint_ms(d.url + "/#/queue")
        # the queue: the job waits for its dependency, with the reason
        b.wait_until(lambda: any(f"#{jid}" in r.text and "after" in r.text.lower() for r in b.all("table tr")),
                     "the queue shows the waiting job with why")
        shot(b, "queue")
        # the job, from QUEUED to SUCCEEDED, its curve growing as it runs (released once its page
        # shows it waiting)
        b.open(f"{d.url}/#/job/{jid}")
        b.wait_css(".badge.st-queued")
        release.write_text("go")
        b.wait_css(".badge.st-running", timeout=30)
        first = b.wait_until(lambda: chart_points(b, "loss"), "a first point of loss")
        b.wait_until(lambda: chart_points(b, "loss") > first + 3, "the loss curve grows while the job runs")
        shot(b, "job-running")
        b.wait_css(".badge.st-succeeded", timeout=60)
        b.wait_until(lambda: chart_points(b, "loss") == 40, "all 40 points of loss")
        assert "queued → running (run 1)" in b.css("#timeline").text
        assert "running → running" in b.css("#timeline").text and "(run 2)" not in b.css("#timeline").text
        # search its log as you type: only matching lines, the match highlighted
        b.wait_until(lambda: "training done" in b.css("#log").text, "the whole log")
        box = b.css("#log-search")
        box.send_keys("step 7")
        b.wait_until(lambda: b.css("#log-count").text.startswith("1 of"), "the one line with 'step 7'")
        lines = [l.text for l in b.all("#log .ln")]
        assert lines and all("step 7" in l for l in lines), lines
        assert {m.text for m in b.all("#log mark")} == {"step 7"}
        b.css("#log-search-server").click()
        b.wait_until(lambda: "1 line in the whole log" in b.css(".hits").text, "the server's search of the log")
        shot(b, "job")
        # the other job: its name shows as characters, and nothing ran
        d.wait(other)
        b.open(f"{d.url}/#/job/{other}")
        b.wait_css(".badge.st-succeeded")
        assert XSS in b.css("h1").text
        assert not b.all("main img"), "a job's name became an element"
        assert b.js("return document.querySelectorAll('img').length") == 0   # nowhere on the page
        try:   # onerror=alert(1) would have opened one
            b.d.switch_to.alert.dismiss()
            raise AssertionError("an alert opened: the job's name ran as HTML")
        except NoAlertPresentException:
            pass
        # jobs: filters, the key metric, and two jobs picked to compare
        b.open(f"{d.url}/#/jobs?param=batch%3D64")
        b.wait_css("#jobs-table tbody tr[data-job]")
        rows = b.all("#jobs-table tbody tr[data-job]")
        assert sorted(int(r.get_attribute("data-job")) for r in rows) == sorted([int(jid), int(other)])
        assert all(re.search(r"\d\.\d", r.find_elements("css selector", "td")[-1].text) for r in rows)
        shot(b, "jobs")
        for r in rows:
            r.find_element("css selector", "input[type=checkbox]").click()
        b.css("#compare-selected").click()
        b.wait_css('#compare-chart[data-series="2"]')
        assert "param lr" in b.css("main").text and "0.01" in b.css("main").text and "0.1" in b.css("main").text
        assert XSS in b.css("main").text
        shot(b, "compare")
        # the job pushed a version: on its page, with the lineage back to it on the model's
        b.open(f"{d.url}/#/job/{jid}")
        b.wait_until(lambda: "admin/mnist@3" in b.css("#models").text, "the version the job pushed")
        # preempted by the urgent job, running again: the timeline links the job that took its GPUs
        d.wait(urgent)
        b.open(f"{d.url}/#/job/{doomed}")
        b.wait_until(lambda: "(run 2)" in b.css("#timeline").text, "the second run in the timeline")
        link = b.css(f'#timeline a[href="#/job/{urgent}"]')
        assert link.text == f"job {urgent}" and "preempted by" in b.css("#timeline").text
        b.wait_until(lambda: b.all("#gpus .chart"), "the job's GPU utilisation and memory charts")
        shot(b, "job-preempted")
        assert not b.all("#change-class"), "a running job offers a class change kestreld refuses"
        # a waiting job's class changes, after saying yes
        waiter = d.submit("--name", "waiter", "--after-ok", str(doomed), "--", "true")
        b.open(f"{d.url}/#/job/{waiter}")
        b.wait_css("#job-class").send_keys("high")
        b.css("#change-class").click()
        b.css("#confirm-yes").click()
        b.wait_until(lambda: d.job(waiter)["spec"]["priority"] == "HIGH", "the class changed", timeout=10)
        # cancel the running one, after saying yes
        b.open(f"{d.url}/#/job/{doomed}")
        b.wait_css(".badge.st-running", timeout=30)
        b.css("#cancel-job").click()
        b.css("#confirm-no").click()
        time.sleep(0.5)
        assert d.job(doomed)["state"] == "RUNNING"
        b.css("#cancel-job").click()
        b.css("#confirm-yes").click()
        b.wait_css(".badge.st-cancelled", timeout=30)
        assert d.job(doomed)["state"] == "CANCELLED"
        # nodes
        b.open(f"{d.url}/#/nodes")
        b.wait_until(lambda: "35 %" in b.css("main").text and "80 %" in b.css("main").text, "the GPUs' utilisation")
        shot(b, "nodes")
        # models: versions, and an alias moved after confirmation
        b.open(f"{d.url}/#/models")
        b.wait_css("#model-list a").click()
        b.wait_css("#alias-name").send_keys("production")
        b.js("document.getElementById('alias-version').value = '1'")
        b.css("#alias-move").click()
        b.css("#confirm-yes").click()
        b.wait_until(lambda: "production" in b.css("main table").text, "the alias in the versions table")
        assert b.css(f'main table a[href="#/job/{jid}"]').text == f"job #{jid}"   # @3's lineage
        status, v = d.api("GET", "/api/v1/models/admin/mnist/versions/production")
        assert status == 200 and int(v["version"]) == 1, v
        shot(b, "model")
        # no CSP violation and no script error on any page
        errors = [l for l in b.d.get_log("browser") if l["level"] == "SEVERE" and "favicon" not in l["message"]]
        assert not errors, errors
        # from inside the page: a request without the CSRF header is refused, and did nothing
        status = b.js_async("""
            const done = arguments[arguments.length - 1];
            fetch('/api/v1/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                    body: JSON.stringify({ argv: ['true'], name: 'forged' }) })
              .then((r) => done(r.status), (e) => done(String(e)));""")
        assert status == 403
        assert not [j for j in d.api("GET", "/api/v1/jobs?name=forged")[1]["jobs"]]
        # logout: back to the login form, and the session is gone
        b.open(d.url + "/#/queue")
        b.wait_css("#logout:not([hidden])").click()
        b.wait_css("#login:not([hidden])")
        assert b.css("#login").is_displayed() and not b.all("#main table")
        assert b.all("#main table") == [] and raw_status(d, b) == 401
        shot(b, "login")
    (SHOTS / "figures.json").write_text(json.dumps({"first_contentful_paint_ms": fcp}))
    print(f"first contentful paint {fcp:.0f} ms; screenshots in {SHOTS}")


def test_sampled_metric_reads_stay_bounded_and_keep_the_newest(kestreld):
    d = kestreld
    jid = d.submit("--", "true")
    d.wait(jid)
    post = lambda pts: d.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": pts})[0]
    # one long series: its view stays within 2,000 points however long it grows
    for lo in range(0, 30000, 10000):
        assert post([{"name": "loss", "step": s, "value": 1.0 / (s + 1)} for s in range(lo, lo + 10000)]) == 200
    assert post([{"name": "loss", "step": 29999, "value": "Infinity"}, {"name": "loss", "step": 29999, "value": 0.5}]) == 200
    b = d.api("GET", f"/api/v1/jobs/{jid}/metrics?max_points=2000&name=loss")[1]
    (s,) = b["series"]
    assert int(s["points"]) == 30002 and 1000 <= int(s["shown"]) <= 2001
    assert int(b["metrics"][0]["step"]) == 0
    assert b["metrics"][-1]["value"] == 0.5   # the newest report of the last step, not an older one
    # a smaller ask thins the view further
    b = d.api("GET", f"/api/v1/jobs/{jid}/metrics?max_points=100&name=loss")[1]
    assert int(b["series"][0]["shown"]) <= 101
    # many series share one reply's bound of 100,000 points
    for k in range(0, 300, 30):
        assert post([{"name": f"m{i:03d}", "step": s, "value": s} for i in range(k, k + 30) for s in range(330)]) == 200
    b = d.api("GET", f"/api/v1/jobs/{jid}/metrics?max_points=100000")[1]
    assert len(b["metrics"]) <= 100000 + 301 and b["more_series"] is False
    for bad in ("0", "100001", "-1", "x"):
        assert d.api("GET", f"/api/v1/jobs/{jid}/metrics?max_points={bad}")[0] == 400
