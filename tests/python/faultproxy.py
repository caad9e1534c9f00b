"""A fault proxy for broken transports: forwards loopback TCP to a real kestreld, and damages the
responses to chunk downloads ("GET /api/v1/chunks/SHA" and the batches of "POST /api/v1/chunks/fetch")
- flips one body byte ("corrupt") or cuts the connection halfway through the body ("truncate").
"pause" forwards the first batch's answer up to `at` bytes of its body, then calls `paused()` before it
forwards the rest, reading kestreld's side through a small window meanwhile (kestreld, which keeps at
most 256 KiB of an answer unsent, is then not far ahead of what the client has).
"older" plays a kestreld from before ChunkQueryResult.fills_digests, names_chunks and settles_later (it
drops those fields from the answers to /api/v1/chunks/missing) and before batched downloads (it renames the fetch route, which
kestreld then answers 404, as an older one does); "hang" plays a server that stops answering: from the
first request that starts with `hang_on` on, that connection forwards nothing either way; "busy" answers
the first commit of a version (POST .../versions) itself, once its whole body is in (kept in `busied`),
with the 503 "unavailable" kestreld gives when its memory for bodies is spent; "lost" forwards the first
commit of a version to kestreld, which makes it, and answers the client that same 503 in place of
kestreld's answer (a proxy whose upstream timed out, a kestreld that died before it answered), or
`answer` (a proxy's own 502 or 504 page; with then_close=True the connection closes after it: part of an
answer, cut), or with answer=b"" closes the connection without a word (`lost_then`, when given, is called
once kestreld's answer is in, before the client is told anything); it does so to the first `lose` commits
(None: every one); "pass" changes
nothing; "slow" forwards what clients send at `rate` bytes a second (a repository slower than the
client's hashing); "refuse" refuses the first requests that start with `refuse[0]` at their headers, one
way each from the list `refuse[1]`: "busy" as kestreld refuses a body it will not read (its 503, then the
connection closed), "cut" closing the connection without a word; it keeps in `early` how many bytes of
each one's body came before the connection closed (after a 503, those that came within 0.3 s), and
its head in `refused`. `before=(prefix, fn)` calls fn() once, when the first request that starts with prefix arrives,
before it goes on (whatever the mode). Everything else passes through untouched, and what clients send is kept in `sent`
(not in "slow", which carries hundreds of MiB).
It works on bytes only (it finds the end of the response head, nothing more): the HTTP on both
sides is the real libcurl and libmicrohttpd."""
import signal
import socket
import subprocess
import threading
import time


_BUSY_BODY = b'{"code":"unavailable","message":"kestreld is busy: try again"}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\n\r\n" % len(_BUSY_BODY) + _BUSY_BODY)   # kestreld's 503 "unavailable"


def _whole_answer(pending):
    """(its head's lines, its body, what follows it) once pending holds a whole answer, else None."""
    head = pending.find(b"\r\n\r\n")
    if head < 0:
        return None
    lines = pending[:head].split(b"\r\n")
    length = next(int(h.split(b":")[1]) for h in lines if h.lower().startswith(b"content-length:"))
    if len(pending) < head + 4 + length:
        return None
    return lines, pending[head + 4:head + 4 + length], pending[head + 4 + length:]


def _commits(data):
    """Whether the request that data begins is a commit: POST .../versions, with a query or none."""
    line = data.split(b"\r\n", 1)[0]
    return line.startswith(b"POST /api/v1/models/") and line.rsplit(b" ", 1)[0].split(b"?", 1)[0].endswith(b"/versions")


class FaultProxy:
    def __init__(self, upstream_port, mode, at=None, hang_on=None, before=None, rate=None, answer=_BUSY, then_close=False, lost_then=None,
                 lose=1, refuse=(b"", []), paused=None):
        self.upstream = ("127.0.0.1", upstream_port)
        self.before = before
        self.mode = mode
        self.hang_on = hang_on
        self.paused = paused
        assert mode != "hang" or hang_on, "hang needs hang_on: the start of the request that hangs"
        assert mode != "slow" or rate, "slow needs rate: bytes a second"
        self.rate = rate
        self.answer = answer   # "lost": what the client is told in place of kestreld's answer
        self.then_close = then_close
        self.lost_then = lost_then
        self.lose = lose
        self.losing = 0   # commits whose answers it loses, counted as they come
        self.refuse_on, self.refusals = refuse[0], list(refuse[1])
        self.early = []
        self.refused = []
        self.at = at if at is not None else 1000 if mode == "corrupt" else 2048   # the body byte flipped / cut at
        self.damaged = 0
        self.sent = bytearray()
        self.busied = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _recv_more(self, client):
        """The client's next bytes; the client closing mid-request is the connection's end (OSError)."""
        if not (more := client.recv(65536)):
            raise ConnectionAbortedError("the client closed in the middle of a request")
        return more

    def _answer_busy(self, client, data):
        """Read the rest of the request that starts data, keep its body, answer 503; what came after it."""
        while (head := data.find(b"\r\n\r\n")) < 0:
            data += self._recv_more(client)
        lines = data[:head].split(b"\r\n")
        length = next(int(h.split(b":")[1]) for h in lines if h.lower().startswith(b"content-length:"))
        while len(data) < head + 4 + length:
            data += self._recv_more(client)
        self.busied.append(bytes(data[head + 4:head + 4 + length]))
        self.damaged += 1
        client.sendall(_BUSY)
        return data[head + 4 + length:]

    def _next_refusal(self):
        try:
            return self.refusals.pop(0)   # atomic: two connections never take the same one
        except IndexError:
            return None

    def _refuse(self, client, data, how):
        """Refuse the request that starts data at its headers, as how says (the class's "refuse")."""
        while data.find(b"\r\n\r\n") < 0:
            if not (more := client.recv(65536)):
                return
            data += more
        early = len(data) - data.find(b"\r\n\r\n") - 4
        self.refused.append(bytes(data[:data.find(b"\r\n\r\n")]))
        self.damaged += 1
        if how == "busy":
            client.sendall(_BUSY.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
            client.settimeout(0.3)
            try:
                while (more := client.recv(65536)):
                    early += len(more)
            except OSError:
                pass
        self.early.append(early)

    def _serve(self, client):
        try:
            up = socket.socket()
            if self.mode == "pause":   # a small window: kestreld cannot send far ahead
                up.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            up.connect(self.upstream)
        except OSError:   # kestreld is down: the client's connection closes, as it would without us
            client.close()
            return
        state = {"chunk_request": False, "missing_request": False, "hung": False, "lost_request": False}

        def requests():   # client -> server; notes whether the latest request fetches a chunk
            try:
                while (data := client.recv(65536)):
                    if self.before and data.startswith(self.before[0]):
                        before, self.before = self.before[1], None
                        before()
                    if self.mode == "hang" and (state["hung"] or data.startswith(self.hang_on)):
                        self.damaged += not state["hung"]
                        state["hung"] = True
                        continue   # read and dropped: the client's sends never block on us
                    if (data.startswith(b"GET /api/v1/chunks/") and not data.startswith(b"GET /api/v1/chunks/missing")) \
                            or data.startswith((b"POST /api/v1/chunks/fetch ", b"POST /api/v1/chunks/fetch?")):
                        state["chunk_request"] = self.mode in ("corrupt", "truncate")
                        state["pause_request"] = self.mode == "pause" and data.startswith(b"POST ") and self.paused
                    if data.startswith(b"POST /api/v1/chunks/fetch") and self.mode == "older":
                        data = b"POST /api/v1/chunks/fetcx" + data[len(b"POST /api/v1/chunks/fetch"):]
                        self.damaged += 1
                    if data.startswith(b"POST /api/v1/chunks/missing"):
                        state["missing_request"] = self.mode == "older"
                    if self.mode == "refuse" and data.startswith(self.refuse_on) and (how := self._next_refusal()):
                        self._refuse(client, data, how)
                        up.shutdown(socket.SHUT_RDWR)   # ends the answers' loop, and with it the connection
                        return
                    if self.mode == "busy" and not self.busied and data.startswith(b"POST /api/v1/models/") \
                            and _commits(data):
                        data = self._answer_busy(client, data)
                        if not data:
                            continue
                    if self.mode == "lost" and (self.lose is None or self.losing < self.lose) \
                            and data.startswith(b"POST /api/v1/models/") \
                            and _commits(data):
                        state["lost_request"] = True
                        self.losing += 1   # counted as it comes: a try sent again meanwhile passes
                    if self.mode != "slow":
                        self.sent += data
                    up.sendall(data)
                    if self.mode == "slow":
                        time.sleep(len(data) / self.rate)
            except OSError:
                pass
            finally:   # the client's FIN goes on to kestreld, whose close ends the answers' loop below,
                try:   # which closes both: a close() here would free the descriptor while that loop's
                    up.shutdown(socket.SHUT_WR)   # recv() may still use it (and a new socket take it)
                except OSError:
                    pass

        forward = threading.Thread(target=requests, daemon=True)
        forward.start()
        pending = b""
        try:
            while (data := up.recv(65536)):
                if state["hung"]:
                    continue
                if state["missing_request"] or state["lost_request"]:
                    pending += data
                    whole = _whole_answer(pending)
                    if whole is None:
                        continue
                    lines, body, rest = whole
                    pending = b""
                if state["missing_request"]:   # the whole answer, then without fills_digests, names_chunks
                    state["missing_request"] = False   # and settles_later (fields 2, 3, 4: 0x10 0x01, 0x18 0x01,
                    if body.endswith(b"\x20\x01"):     # 0x20 0x01)
                        body = body[:-2]
                    if body.endswith(b"\x18\x01"):
                        body = body[:-2]
                    if body.endswith(b"\x10\x01"):
                        body = body[:-2]
                        self.damaged += 1
                    lines = [h for h in lines if not h.lower().startswith(b"content-length:")]
                    lines.append(b"Content-Length: %d" % len(body))
                    data = b"\r\n".join(lines) + b"\r\n\r\n" + body + rest
                if state["lost_request"]:   # kestreld's whole answer, dropped for a 503
                    state["lost_request"] = False
                    self.damaged += 1
                    self.busied.append(b"\r\n".join(lines) + b"\r\n\r\n" + body)
                    if self.lost_then:
                        self.lost_then()
                    if not self.answer:
                        break   # the connection closed, no answer
                    if self.then_close:
                        client.sendall(self.answer)
                        break
                    data = self.answer + rest
                if state.get("pause_request"):
                    pending += data
                    head = pending.find(b"\r\n\r\n")
                    if head < 0 or len(pending) < head + 4 + self.at:
                        continue
                    state["pause_request"] = False
                    client.sendall(pending)
                    data, pending = b"", b""
                    paused, self.paused = self.paused, None
                    paused()
                    self.damaged += 1
                if state["chunk_request"]:
                    pending += data
                    head = pending.find(b"\r\n\r\n")
                    if head < 0 or len(pending) < head + 4 + max(4096, self.at + 1):
                        continue
                    state["chunk_request"] = False
                    self.damaged += 1
                    body = head + 4
                    if self.mode == "truncate":
                        client.sendall(pending[:body + self.at])
                        break
                    flipped = bytearray(pending)
                    flipped[body + self.at] ^= 0xFF
                    data, pending = bytes(flipped), b""
                client.sendall(data)
        except OSError:
            pass
        finally:   # shutdown() wakes the other thread's recv(); close() alone would not send the FIN,
            for s in (client, up):   # and is left until that thread is done with both sockets (a
                try:                 # descriptor closed under its recv() may be another socket's by then)
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            forward.join(10)
            for s in (client, up):
                s.close()


def interrupt_cli(argv, env, ready, settle=0.0, sig=signal.SIGINT, timeout=20):
    """Run the kestrel CLI (argv, env: its KESTREL_URL a proxy's), wait until ready() holds (a fault
    reached: 30 s at most), settle seconds more, send sig; (its exit status, its stderr), once it
    ended (within timeout seconds: not the minute a request waits for its timeout)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while not ready() and p.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        assert ready(), p.stderr.read() if p.poll() is not None else "the fault was not reached in 30 s"
        time.sleep(settle)
        p.send_signal(sig)
        _, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err
