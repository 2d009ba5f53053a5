#!/usr/bin/env python3
"""Helpers for scripts/bench: make test data, time file operations in-process, talk to
ubiq-server's HTTP API, print the result table. Standard library only.

Timing happens inside this process (time.perf_counter around the system calls), so the cost of
starting Python is never part of a measured interval, except where a comment says otherwise.
"""
import argparse
import concurrent.futures
import hashlib
import http.client
import json
import ssl
import math
import os
import queue
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

FILES_PER_DIR = 100
MB = 1_000_000  # rates are MB/s with 1 MB = 10^6 bytes, as dd and curl report them
READ_CHUNK = 1 << 20  # 1 MiB reads: large enough that syscall overhead does not matter


# ---------------------------------------------------------------------------------------------
# The test tree: FILES small files, FILES_PER_DIR per folder, the same names on every system.

def tree_layout(files):
    """Yields (dirname, filename) for the tree of `files` files."""
    ndirs = math.ceil(files / FILES_PER_DIR)
    width = max(3, len(str(ndirs - 1)))
    for i in range(files):
        yield f"d{i // FILES_PER_DIR:0{width}d}", f"f{i % FILES_PER_DIR:03d}.txt"


def tree_content(dirname, filename):
    # A few distinct bytes per file: content-addressed stores must keep 10,000 blobs, as in life.
    return f"{dirname}/{filename}\n".encode()


def cmd_make_tree(a):
    for d, f in tree_layout(a.files):
        os.makedirs(os.path.join(a.dir, d), exist_ok=True)
        with open(os.path.join(a.dir, d, f), "wb") as out:
            out.write(tree_content(d, f))


# The query tree: `items` files under query/, FILES_PER_DIR per folder. One name in ten ends in
# .txt, and one in four of those in .TXT (what `[c]` and `find -iname` must fold); the others
# end in .md, .bin or .jpg. Every system gets the same names.

QUERY_EXTS = (".txt", ".md", ".md", ".md", ".bin", ".bin", ".bin", ".jpg", ".jpg", ".jpg")
QUERY_CONTENT = b"a query item\n"  # one blob for every item: the rows are about names


def query_layout(items):
    """Yields (dirname, filename) for the query tree of `items` files."""
    ndirs = math.ceil(items / FILES_PER_DIR)
    dwidth = max(4, len(str(ndirs - 1)))
    nwidth = max(6, len(str(items - 1)))
    for i in range(items):
        ext = ".TXT" if i % 40 == 0 else QUERY_EXTS[i % 10]
        yield f"q{i // FILES_PER_DIR:0{dwidth}d}", f"item-{i:0{nwidth}d}{ext}"


def cmd_query_expect(a):
    """The number of names of the query tree that `*.txt` matches, case folded."""
    print(sum(1 for _, f in query_layout(a.items) if f.lower().endswith(".txt")))


def cmd_make_query_tree(a):
    for d, f in query_layout(a.items):
        os.makedirs(os.path.join(a.dir, d), exist_ok=True)
        with open(os.path.join(a.dir, d, f), "wb") as out:
            out.write(QUERY_CONTENT)


def cmd_make_random(a):
    """One file of random bytes: incompressible, so no layer can cheat by compressing."""
    with open(a.path, "wb") as out:
        left = a.size
        while left:
            n = min(left, READ_CHUNK)
            out.write(os.urandom(n))
            left -= n


def cmd_make_small(a):
    os.makedirs(a.dir, exist_ok=True)
    width = len(str(a.count - 1))
    for i in range(a.count):
        with open(os.path.join(a.dir, f"s{i:0{width}d}.bin"), "wb") as out:
            out.write(os.urandom(a.size))


# ---------------------------------------------------------------------------------------------
# Measurements. Each prints one number on stdout.

def cmd_stat_rate(a):
    paths = [os.path.join(a.root, d, f) for d, f in tree_layout(a.files)]
    start = time.perf_counter()
    for p in paths:
        os.stat(p)
    print(f"{len(paths) / (time.perf_counter() - start):.1f}")


def cmd_ttfb(a):
    """Milliseconds from open() to holding the first 4 KiB."""
    start = time.perf_counter()
    fd = os.open(a.path, os.O_RDONLY)
    try:
        got = os.read(fd, 4096)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    if len(got) != 4096:
        sys.exit(f"read {len(got)} bytes from {a.path}, expected 4096")
    print(f"{elapsed * 1000:.3f}")


def cmd_read_rate(a):
    """MB/s of one sequential read of the whole file, open included."""
    buf = bytearray(READ_CHUNK)
    total = 0
    start = time.perf_counter()
    with open(a.path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    elapsed = time.perf_counter() - start
    if total != a.size:
        sys.exit(f"read {total} bytes from {a.path}, expected {a.size}")
    print(f"{total / elapsed / MB:.1f}")


def cmd_time_command(a):
    """The median wall time in ms of a whole command, process start included, as a user runs it:
    one run untimed first (the caches warm), then `samples` timed. Every run's answer is
    checked: the number it prints (--output number) or how many lines it prints (--output
    lines) must be `expect`, or at least `at_least`."""
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    times = []
    for n in range(a.samples + 1):
        start = time.perf_counter()
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=a.timeout)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"{command[0]} exited {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}")
        out = done.stdout.decode(errors="replace")
        if a.output == "lines":
            got = out.count("\n")
        else:
            try:
                got = int(out.strip())
            except ValueError:
                sys.exit(f"{command[0]} printed {out.strip()[:100]!r}, not a number")
        if (a.expect is not None and got != a.expect) or (a.at_least is not None and got < a.at_least):
            want = a.expect if a.expect is not None else f"at least {a.at_least}"
            sys.exit(f"{' '.join(command)}: {got} matches, expected {want}")
        if n:
            times.append(elapsed * 1000)
    print(f"{os.path.basename(command[0])}: {', '.join(f'{t:.2f}' for t in times)} ms", file=sys.stderr)
    print(f"{statistics.median(times):.3f}")


def cmd_daemon_query(a):
    """The median ms of a mount daemon's own answer to a counted query (`count=1`), asked over
    its control socket: the query without the CLI's process start. One untimed first, then
    `samples` timed; each answer's count must be `expect`, or at least `at_least`."""
    # Spaces as %20: the daemon takes a `+` in a query string literally.
    query = urllib.parse.urlencode({"q": a.predicate, "args": "[]", "scope": "all", "count": "1"}, quote_via=urllib.parse.quote)
    times = []
    for n in range(a.samples + 1):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(a.timeout)
            s.connect(a.socket)
            start = time.perf_counter()
            s.sendall(f"GET /query?{query} HTTP/1.1\r\nHost: ubiq\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            elapsed = time.perf_counter() - start
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            sys.exit(f"the daemon answered {head[:100]!r}")
        answer = json.loads(body)
        got = answer.get("count")
        if got is None or (a.expect is not None and got != a.expect) or (a.at_least is not None and got < a.at_least):
            sys.exit(f"{a.predicate}: the daemon answered {str(answer)[:300]}")
        if n:
            times.append(elapsed * 1000)
    print(f"daemon: {', '.join(f'{t:.2f}' for t in times)} ms", file=sys.stderr)
    print(f"{statistics.median(times):.3f}")


def cmd_pid_of(a):
    """The one process whose arguments include every --has and whose executable is --exe; none,
    or more than one, is an error."""
    want = os.path.realpath(a.exe)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            exe = os.path.realpath(f"/proc/{entry}/exe")
        except OSError:
            continue  # gone, or not ours to read
        if exe == want and all(h in argv for h in a.has):
            found.append(entry)
    if len(found) != 1:
        sys.exit(f"{len(found)} processes of {want} with the arguments {a.has}, expected 1")
    print(found[0])


def cmd_rss(a):
    """MB of resident memory (VmRSS) of process `pid`."""
    with open(f"/proc/{a.pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    print(f"process {a.pid}: VmRSS {kb} kB", file=sys.stderr)
    print(f"{kb * 1024 / MB:.1f}")


# ---------------------------------------------------------------------------------------------
# Waits: every one polls with a deadline and exits 1 when it passes.

def poll(check, deadline, interval, what):
    end = time.monotonic() + deadline
    while True:
        if check():
            return
        if time.monotonic() > end:
            sys.exit(f"timed out after {deadline:g} s waiting for {what}")
        time.sleep(interval)


def cmd_wait_port(a):
    def listening():
        try:
            socket.create_connection(("127.0.0.1", a.port), timeout=1).close()
            return True
        except OSError:
            return False
    poll(listening, a.deadline, 0.05, f"127.0.0.1:{a.port} to listen")


def cmd_wait_files(a):
    """Until `dir` holds `count` files of `size` bytes (the rclone server's folder, on local disk)."""
    def complete():
        try:
            with os.scandir(a.dir) as it:
                return sum(1 for e in it if e.is_file() and e.stat().st_size == a.size) >= a.count
        except FileNotFoundError:
            return False
    poll(complete, a.deadline, 0.02, f"{a.count} files of {a.size} bytes in {a.dir}")


def cmd_wait_visible(a):
    """Polls stat(path) until it succeeds; prints the wall-clock time (time.time()) it did.

    The caller takes its own wall-clock time right after creating the file elsewhere and
    subtracts; both use CLOCK_REALTIME. Polling starts before the creation (the ready file
    says so), so Python's start-up is never inside the measured interval.
    """
    open(a.ready, "w").close()
    end = time.monotonic() + a.deadline
    while True:
        try:
            os.stat(a.path)
            print(f"{time.time():.6f}")
            return
        except FileNotFoundError:
            pass
        if time.monotonic() > end:
            sys.exit(f"{a.path} not visible after {a.deadline:g} s")
        time.sleep(0.002)


def cmd_wait_xattr(a):
    def has_value():
        try:
            return os.getxattr(a.path, a.name) == a.value.encode()
        except OSError:
            return False
    poll(has_value, a.deadline, 0.05, f"{a.name}={a.value} on {a.path}")


# ---------------------------------------------------------------------------------------------
# ubiq-server's HTTP API (Sources/SyncAPI/Paths.swift, WireTypes.swift).

CONTAINER = "default"


class Api:
    """One keep-alive connection per thread to ubiq-server."""

    def __init__(self, server, token=None):
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        # https: the server's certificate checked against BENCH_CA_FILE (the bench's own CA).
        self.tls = ssl.create_default_context(cafile=os.environ.get("BENCH_CA_FILE")) if u.scheme == "https" else None
        self.token = token
        self.local = threading.local()

    def conn(self):
        if getattr(self.local, "conn", None) is None:
            # 1 MiB blocks when streaming a file body; http.client's default is 8 KiB.
            if self.tls:
                self.local.conn = http.client.HTTPSConnection(self.host, self.port, timeout=120, blocksize=READ_CHUNK, context=self.tls)
            else:
                self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=120, blocksize=READ_CHUNK)
        return self.local.conn

    def request(self, method, path, body=None, headers=None, ok=(200, 201)):
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            try:
                c = self.conn()
                c.request(method, path, body=body, headers=headers)
                resp = c.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                # The server may close an idle keep-alive connection: reconnect once.
                self.local.conn = None
                if attempt == 2 or hasattr(body, "read"):
                    raise
        if resp.status not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {data[:300]!r}")
        return json.loads(data) if data else None

    def login(self, user, password):
        self.token = self.request("POST", "/v1/auth/token", {"user": user, "password": password})["token"]
        self.request("PUT", f"/v1/containers/{CONTAINER}")

    def put_blob(self, data):
        digest = hashlib.sha256(data).hexdigest()
        self.request("PUT", f"/v1/blobs/{digest}", data, {"Content-Type": "application/octet-stream"})
        return digest

    def put_blob_file(self, path):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(READ_CHUNK):
                h.update(chunk)
        digest = h.hexdigest()
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            self.request("PUT", f"/v1/blobs/{digest}", f,
                         {"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        return digest, size

    def create(self, parent, name, kind, digest=None, size=None):
        body = {"parentID": parent, "name": name, "kind": kind}
        if digest is not None:
            body["digest"], body["size"] = digest, size
        return self.request("POST", f"/v1/containers/{CONTAINER}/items", body)["id"]

    def children(self, item):
        return self.request("GET", f"/v1/containers/{CONTAINER}/items/{item}/children")["items"]


def load_manifest(path):
    with open(path) as f:
        return json.load(f)


def cmd_ubiq_populate(a):
    """Puts the tree and the big files on the server, as another device would have."""
    api = Api(a.server)
    api.login(a.user, os.environ["BENCH_UBIQ_PASSWORD"])
    tree = api.create("root", "tree", "folder")
    layout = list(tree_layout(a.files))
    folders = {d: api.create(tree, d, "folder") for d in dict.fromkeys(d for d, _ in layout)}

    def upload(entry):
        d, f = entry
        data = tree_content(d, f)
        api.create(folders[d], f, "file", api.put_blob(data), len(data))

    # A few threads with keep-alive connections: 10,000 files × 2 requests one by one with curl
    # would take minutes of process start-ups.
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.threads) as pool:
        for _ in pool.map(upload, layout):
            pass
    ids = {}
    uploaded = {}  # (device, inode): (digest, size); links of one file go up once
    for path in a.big:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        if key not in uploaded:
            uploaded[key] = api.put_blob_file(path)
        digest, size = uploaded[key]
        ids[os.path.basename(path)] = api.create("root", os.path.basename(path), "file", digest, size)
    fd = os.open(a.manifest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the token
    with os.fdopen(fd, "w") as f:
        json.dump({"server": a.server, "token": api.token, "ids": ids}, f)


def cmd_ubiq_create(a):
    """Creates a small file at the container root, as another device would."""
    m = load_manifest(a.manifest)
    api = Api(m["server"], m["token"])
    data = b"created elsewhere\n"
    blob = api.put_blob(data)
    api.create("root", a.name, "file", blob, len(data))
    # The moment the server acknowledged the commit: the change interval starts here (the
    # blob upload and this tool's start-up are not part of it).
    print(f"{time.time():.6f}")


BATCH_ITEMS = 64  # SyncProtocol.maxBatchItems: the most creates one batch request carries


def cmd_ubiq_populate_query(a):
    """Puts the query tree on the server: the one blob once, then the folders and the items in
    batches of creates (one request and one commit per 64), from a few threads with keep-alive
    connections: a million one by one took the server most of an hour."""
    m = load_manifest(a.manifest)
    api = Api(m["server"], m["token"])
    start = time.perf_counter()
    digest = api.put_blob(QUERY_CONTENT)
    top = api.create("root", "query", "folder")
    layout = list(query_layout(a.items))
    dirs = list(dict.fromkeys(d for d, _ in layout))

    def batch(creates):
        answer = api.request("POST", f"/v1/containers/{CONTAINER}/batch", {"creates": creates})
        refused = [r["error"] for r in answer["results"] if r.get("error")]
        if refused:
            raise RuntimeError(f"batch create refused: {refused[:3]}")
        return [r["item"]["id"] for r in answer["results"]]

    def chunks(items):
        return [items[i:i + BATCH_ITEMS] for i in range(0, len(items), BATCH_ITEMS)]

    with concurrent.futures.ThreadPoolExecutor(max_workers=a.threads) as pool:
        folder_ids = [i for ids in pool.map(lambda c: batch([{"parentID": top, "name": d, "kind": "folder"} for d in c]), chunks(dirs)) for i in ids]
        folders = dict(zip(dirs, folder_ids))
        files = [{"parentID": folders[d], "name": f, "kind": "file", "digest": digest, "size": len(QUERY_CONTENT)} for d, f in layout]
        for _ in pool.map(batch, chunks(files)):
            pass
    elapsed = time.perf_counter() - start
    print(f"{len(layout)} items in {len(dirs)} folders created in {elapsed:.1f} s "
          f"({len(layout) / elapsed:.0f}/s)", file=sys.stderr)


def proc_start(pid):
    """Field 22 of /proc/PID/stat (the start time), as scripts/bench's proc_start reads it."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def cmd_ubiq_live_latency(a):
    """Runs `ubiq query --live --json PREDICATE` and, `samples` times, creates a file the
    predicate matches: in the mount (--mode local, timed from just before the create) or through
    the server's API (--mode remote, timed from the server's answer to the create, as the remote
    change row). Each interval ends when the update line whose `added` holds the new name is
    read from the query's output. Prints the median in ms.

    The query's process is listed in --pids (scripts/bench's cleanup stops it if this tool
    cannot), and its output is copied into --log."""
    if a.mode == "remote":
        m = load_manifest(a.manifest)
        api = Api(m["server"], m["token"])
        blob = api.put_blob(b"created elsewhere\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: stop the query too
    with open(a.log + ".stderr", "ab") as err:
        proc = subprocess.Popen([a.ubiq, "query", "--live", "--json", f"name LIKE '{a.prefix}*'", "--mount", a.mount],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        with open(a.pids, "a") as f:
            f.write(f"{proc.pid} {proc_start(proc.pid)}\n")
        lines = queue.Queue()

        def reader():  # each line with the moment it was read
            with open(a.log, "ab") as log:
                for raw in proc.stdout:
                    at = time.perf_counter()
                    log.write(raw)
                    log.flush()
                    lines.put((at, raw))
            lines.put((time.perf_counter(), None))
        threading.Thread(target=reader, daemon=True).start()

        def next_line(end, what):
            """The next (moment, parsed line); None once `end` passes with nothing new, and only
            when `what` is None (else it is an error)."""
            left = end - time.perf_counter()
            try:
                at, raw = lines.get(timeout=max(0.0, left))
            except queue.Empty:
                if what is None:
                    return None
                sys.exit(f"timed out after {a.deadline:g} s waiting for {what}")
            if raw is None:
                sys.exit(f"`ubiq query --live` exited {proc.wait()} (see {a.log}.stderr)")
            try:
                return at, json.loads(raw)
            except ValueError:
                return at, {}

        def names(line, key):
            return {i.get("name") for i in line.get(key, [])}

        end = time.perf_counter() + a.deadline
        while next_line(end, "the live query's finishGathering")[1].get("event") != "finishGathering":
            pass
        samples = []
        for n in range(1, a.samples + 1):
            name = f"{a.prefix}{a.mode}-{n}"
            if a.mode == "local":
                t0 = time.perf_counter()
                os.close(os.open(os.path.join(a.mount, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            else:
                api.create("root", name, "file", blob, len(b"created elsewhere\n"))
                t0 = time.perf_counter()  # the server's answer: the commit is done
            end = time.perf_counter() + a.deadline
            uploaded = False
            while True:
                at, line = next_line(end, f"an update adding {name}")
                if line.get("event") == "update" and name in names(line, "added"):
                    # A line can be read before the create's answer is: never below 0.
                    samples.append(max(0.0, at - t0) * 1000)
                    uploaded = any(i.get("name") == name and i.get("isUploaded") for i in line["added"])
                    break
            # The next sample starts on a quiet mount: a local file's upload done (its change
            # reported), then no line for three batch intervals.
            end = time.perf_counter() + a.deadline
            while not uploaded:
                at, line = next_line(end, f"{name}'s upload to be reported")
                uploaded = any(i.get("name") == name and i.get("isUploaded") for i in line.get("changed", []))
            while next_line(time.perf_counter() + 0.3, None) is not None:
                if time.perf_counter() > end:
                    sys.exit(f"the live query did not go quiet within {a.deadline:g} s after {name}")
        print(f"live {a.mode}: {', '.join(f'{t:.2f}' for t in samples)} ms", file=sys.stderr)
        print(f"{statistics.median(samples):.3f}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # `timeout` passes a Ctrl-C on: a second one
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cmd_ubiq_conflict(a):
    """One conflict on the file PATH of the mount (NAME at the container root), timed from the
    server's refusal of another device's stale edit until the mount flags the file: the mount's
    own edit reached the server first, and the other device, refused, keeps its edit as a
    conflict version, as a mount does. Prints the milliseconds."""
    m = load_manifest(a.manifest)
    api = Api(m["server"], m["token"])

    def server_item(content):
        digest = hashlib.sha256(content).hexdigest()
        found = []

        def landed():
            found[:] = [i for i in api.children("root") if i["name"] == a.name and i.get("digest") == digest]
            return bool(found)
        poll(landed, a.deadline, 0.005, f"{a.name} with its new content on the server")
        return found[0]

    def write(content):
        with open(a.path, "wb") as f:
            f.write(content)

    write(b"base\n")
    base = server_item(b"base\n")
    write(b"the mount's edit\n")
    server_item(b"the mount's edit\n")
    theirs = b"the other device's edit\n"
    blob = api.put_blob(theirs)
    api.request("PUT", f"/v1/containers/{CONTAINER}/items/{base['id']}/content",
                {"baseRevision": base["revision"], "digest": blob, "size": len(theirs)}, ok=(409,))
    refused = time.time()
    version = {"id": secrets.token_hex(16), "digest": blob, "size": len(theirs), "device": "bench-other",
               "modified": time.time_ns(), "base": base["revision"]}
    api.request("POST", f"/v1/containers/{CONTAINER}/items/{base['id']}/conflicts", {"version": version})

    def flagged():
        try:
            return os.getxattr(a.path, "user.ubiq.hasUnresolvedConflicts") == b"1"
        except OSError:
            return False
    poll(flagged, a.deadline, 0.001, f"{a.path} to show the conflict")
    print(f"{(time.time() - refused) * 1000:.3f}")


def cmd_ubiq_content_url(a):
    m = load_manifest(a.manifest)
    print(f"{m['server']}/v1/containers/{CONTAINER}/items/{m['ids'][a.name]}/content")


def cmd_ubiq_token(a):
    print(load_manifest(a.manifest)["token"])


def cmd_ubiq_wait_folder(a):
    """Until the server's root folder `name` holds `count` files of `size` bytes."""
    m = load_manifest(a.manifest)
    api = Api(m["server"], m["token"])

    folder = {}

    def complete():
        # The folder is looked up once: each poll then lists only it, so that the waiter costs
        # the server it measures as little as it can.
        if "id" not in folder:
            found = next((i for i in api.children("root") if i["name"] == a.name and i["kind"] == "folder"), None)
            if found is None:
                return False
            folder["id"] = found["id"]
        return sum(1 for i in api.children(folder["id"]) if i["kind"] == "file" and i["size"] == a.size) >= a.count
    poll(complete, a.deadline, 0.05, f"{a.count} files in {a.name} on the server")


# ---------------------------------------------------------------------------------------------
# Small arithmetic for the shell.

def cmd_median(a):
    print(f"{statistics.median(a.values):.3f}")


def cmd_ratio(a):
    """count / seconds, where seconds = end - start (wall-clock stamps)."""
    print(f"{a.count / (a.end - a.start):.3f}")


def cmd_ms_between(a):
    """Milliseconds from start to end, never negative: a change can be seen before the
    creating request has returned to its caller."""
    print(f"{max(0.0, (a.end - a.start) * 1000):.3f}")


# ---------------------------------------------------------------------------------------------
# The result table.

SYSTEMS = ("ubiq", "ubiqtls", "native", "rclone")


def rows(p):
    big = f"{p.big_mib} MiB"
    return [
        ("fresh_mount", f"fresh device: from mount until find counts all {p.files:,} files", "s"),
        ("ls_cold", f"ls -lR of {p.files:,} files, cold (median of 3)", "s"),
        ("ls_warm", "ls -lR, warm (each after a cold one; median)", "s"),
        ("stat_rate", f"stat of each of the {p.files:,} files", "stats/s"),
        ("read_downloaded", f"sequential read, downloaded {big} file (median of 3)", "MB/s"),
        ("ttfb", f"first 4 KiB of a {big} placeholder (median of 5)", "ms"),
        ("ttfb_warm", "  the same with the caches warm (median of 5)", "ms"),
        ("read_placeholder", f"full read of a {big} placeholder", "MB/s"),
        ("curl", "  curl of the same content from the server", "MB/s"),
        ("curl_file", "  curl of the same into a file on this disk", "MB/s"),
        ("cp_returns", f"cp -r {p.small:,} x 4 KiB files until cp returns", "s"),
        ("cp_upload", "  the same until on the server (native: cp and sync)", "files/s"),
        ("big_cp_returns", f"cp of one {big} file until cp returns", "s"),
        ("big_upload", "  the same until on the server (native: cp and sync)", "MB/s"),
        ("big_after_close", "  the same, from cp's return until on the server (native: sync)", "s"),
        ("change", "remote change visible in mount (median of 5)", "ms"),
        ("conflict", "stale edit refused until the mount flags the file (median of 20)", "ms"),
        ("query_like", f"query name LIKE[c] '*.txt' over {p.query_items:,} items (median of 5)", "ms"),
        ("query_like_plocate", "  the same with plocate (native only; index built beforehand, not timed)", "ms"),
        ("query_like_daemon", "  the same, the daemon's answer on its socket (ubiq only; no process start)", "ms"),
        ("query_status", "query downloadingStatus == 'notDownloaded' (median of 5)", "ms"),
        ("query_status_daemon", "  the same, the daemon's answer on its socket (ubiq only)", "ms"),
        ("live_local", "live query: a local create reported (median of 10)", "ms"),
        ("live_remote", "live query: a remote create reported, from the server's commit (median of 10)", "ms"),
        ("daemon_rss", f"mount daemon's resident memory with {p.query_items + p.files:,} items", "MB"),
        ("fresh_mount_all", f"fresh device with those {p.query_items + p.files:,} items: from mount until find counts them", "s"),
    ]


def fmt(v):
    if isinstance(v, str):
        return v
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cmd_table(a):
    values, status = {}, {}
    with open(a.results) as f:
        for line in f:
            sysname, key, value = line.rstrip("\n").split("\t", 2)
            if key == "_status":
                status[sysname] = value
                continue
            try:
                values[sysname, key] = float(value)
            except ValueError:
                values[sysname, key] = value
    table = []
    for key, label, unit in rows(a):
        # A missing value: the system was not run (n/a) or stopped before this row (failed).
        cells = [values.get((s, key), "failed" if status.get(s) == "failed" else "n/a") for s in SYSTEMS]
        table.append((key, label, unit, cells))
    header = ("measurement", "unit") + SYSTEMS
    lines = [header] + [(label, unit, *map(fmt, cells)) for _, label, unit, cells in table]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    if a.json:
        with open(a.json, "w") as f:
            for key, label, unit, cells in table:
                f.write(json.dumps({"key": key, "measurement": label.strip(), "unit": unit, **dict(zip(SYSTEMS, cells))}) + "\n")


# ---------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name, fn, *args):
        s = sub.add_parser(name)
        for arg, kw in args:
            s.add_argument(arg, **kw)
        s.set_defaults(fn=fn)

    add("free-port", lambda a: print(free_port()))
    add("make-tree", cmd_make_tree, ("dir", {}), ("files", {"type": int}))
    add("query-expect", cmd_query_expect, ("items", {"type": int}))
    add("make-query-tree", cmd_make_query_tree, ("dir", {}), ("items", {"type": int}))
    add("make-random", cmd_make_random, ("path", {}), ("size", {"type": int}))
    add("make-small", cmd_make_small, ("dir", {}), ("count", {"type": int}), ("size", {"type": int}))
    add("stat-rate", cmd_stat_rate, ("root", {}), ("files", {"type": int}))
    add("ttfb", cmd_ttfb, ("path", {}))
    add("read-rate", cmd_read_rate, ("path", {}), ("size", {"type": int}))
    add("time-command", cmd_time_command, ("--samples", {"type": int, "default": 5}),
        ("--timeout", {"type": float, "required": True}), ("--output", {"choices": ("number", "lines"), "required": True}),
        ("--expect", {"type": int}), ("--at-least", {"type": int}), ("command", {"nargs": argparse.REMAINDER}))
    add("daemon-query", cmd_daemon_query, ("--socket", {"required": True}), ("--predicate", {"required": True}),
        ("--samples", {"type": int, "default": 5}), ("--timeout", {"type": float, "required": True}),
        ("--expect", {"type": int}), ("--at-least", {"type": int}))
    add("pid-of", cmd_pid_of, ("--exe", {"required": True}), ("--has", {"action": "append", "required": True}))
    add("rss", cmd_rss, ("pid", {"type": int}))
    add("wait-port", cmd_wait_port, ("port", {"type": int}), ("deadline", {"type": float}))
    add("wait-files", cmd_wait_files, ("dir", {}), ("count", {"type": int}), ("size", {"type": int}),
        ("deadline", {"type": float}))
    add("wait-visible", cmd_wait_visible, ("path", {}), ("ready", {}), ("deadline", {"type": float}))
    add("wait-xattr", cmd_wait_xattr, ("path", {}), ("name", {}), ("value", {}), ("deadline", {"type": float}))
    add("ubiq-populate", cmd_ubiq_populate, ("--server", {"required": True}), ("--user", {"required": True}),
        ("--files", {"type": int, "required": True}), ("--big", {"action": "append", "default": []}),
        ("--threads", {"type": int, "default": 8}), ("--manifest", {"required": True}))
    add("ubiq-create", cmd_ubiq_create, ("manifest", {}), ("name", {}))
    add("ubiq-populate-query", cmd_ubiq_populate_query, ("manifest", {}), ("items", {"type": int}),
        ("--threads", {"type": int, "default": 8}))
    add("ubiq-live-latency", cmd_ubiq_live_latency, ("--ubiq", {"required": True}), ("--mount", {"required": True}),
        ("--mode", {"choices": ("local", "remote"), "required": True}), ("--manifest", {}),
        ("--samples", {"type": int, "default": 10}), ("--prefix", {"default": "live-"}),
        ("--deadline", {"type": float, "required": True}), ("--pids", {"required": True}), ("--log", {"required": True}))
    add("ubiq-content-url", cmd_ubiq_content_url, ("manifest", {}), ("name", {}))
    add("ubiq-conflict", cmd_ubiq_conflict, ("manifest", {}), ("name", {}), ("path", {}), ("deadline", {"type": float}))
    add("ubiq-token", cmd_ubiq_token, ("manifest", {}))
    add("ubiq-wait-folder", cmd_ubiq_wait_folder, ("manifest", {}), ("name", {}), ("count", {"type": int}),
        ("size", {"type": int}), ("deadline", {"type": float}))
    add("median", cmd_median, ("values", {"type": float, "nargs": "+"}))
    add("ratio", cmd_ratio, ("count", {"type": float}), ("start", {"type": float}), ("end", {"type": float}))
    add("ms-between", cmd_ms_between, ("start", {"type": float}), ("end", {"type": float}))
    add("table", cmd_table, ("results", {}), ("--files", {"type": int}), ("--big-mib", {"type": int}),
        ("--small", {"type": int}), ("--query-items", {"type": int}), ("--json", {}))
    a = p.parse_args()
    try:
        a.fn(a)
    except KeyboardInterrupt:
        # Die of SIGINT, as a program stopped by Ctrl-C must: bash takes an ordinary exit as the
        # program's own answer to the signal, and the bench would go on.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
