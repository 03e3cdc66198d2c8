#!/usr/bin/env python3
"""A local Hugging Face Hub for the tests of mds-hub-sync: the HTTP API that huggingface_hub (and the
C++ uploader) call, with the LFS data plane, on loopback, with fault injection.

Standard library only. Protocol as in docs of ops.md section 2 and as huggingface_hub 2.4.0 calls it:
  POST /api/repos/create, DELETE /api/repos/delete, GET /api/whoami-v2, POST /api/validate-yaml
  GET  /api/{models,datasets,spaces}/{ns}/{name}[/revision/{rev}]     repo info, `sha` = head commit
  GET  /api/{type}s/{repo}/refs[?include_prs=1]
  POST|DELETE /api/{type}s/{repo}/branch/{branch}                    body {"startingPoint": rev}?
  GET  /api/{type}s/{repo}/tree/{rev}[/{path}]?recursive=&expand=    pages: Link: <...>; rel="next"
  POST /api/{type}s/{repo}/paths-info/{rev}                          form paths=..&expand=.. (or JSON)
  GET  /api/{type}s/{repo}/commits/{rev}                             newest first, paginated
  POST /api/{type}s/{repo}/preupload/{rev}[?create_pr=1]             lfs / regular, shouldIgnore, oid
  POST /api/{type}s/{repo}/commit/{rev}[?create_pr=1]                NDJSON; parentCommit -> 412
  POST /{prefix}{repo}.git/info/lfs/objects/batch                    basic / multipart actions
  POST /{prefix}{repo}.git/info/lfs/objects/verify                   optional verify action
  GET|HEAD /{prefix}{repo}/resolve/{rev}/{path}                      ETag, X-Repo-Commit, X-Linked-*
Data plane ("presigned", no auth; `expires` + `signature` query parameters checked):
  PUT  /_storage/objects/{sha256}                                    basic transfer
  PUT  /_storage/multipart/{upload_id}/{part}                        part, answers an ETag
  POST /api/complete_multipart?uploadId=..                           completion {"oid","parts":[...]}
  GET  /_cdn/{sha256}                                                LFS download (when cdn_host is set)
Admin (no auth, never faulted, not logged):
  POST /_admin/faults (a rule or a list), GET|DELETE /_admin/faults, GET|DELETE /_admin/log,
  GET /_admin/stats, GET /_admin/commits?repo=&type=&revision=, GET /_admin/files?repo=&type=&revision=

Embedding:
    with HubServer(root, token="hf_test", lfs_threshold=4096, multipart_threshold=65536,
                   chunk_size=16384, tree_page_size=3) as hub:
        hub.url; hub.add_fault(method="PUT", path=r"^/_storage/multipart/", status=503)
        hub.files("user/repo") -> {path: bytes}; hub.commits("user/repo") -> [newest first]
        hub.log(); hub.stats()
Command line: python hub_server.py --port N --root DIR [--token T] ... (prints the URL when ready).

State (repositories, branches, every commit's file map) is kept in memory and in ROOT/state.json;
LFS objects under ROOT/lfs/objects/aa/bb/<sha256>, regular blobs under ROOT/blobs/aa/<git sha1>."""
import argparse
import base64
import datetime
import fnmatch
import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
import urllib.parse

MB = 1024 * 1024

# The .gitattributes the Hub puts in the initial commit of a new repository (model template).
DEFAULT_GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*", "*.mlmodel",
    "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt",
    "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm",
    "*.xz", "*.zip", "*.zst", "*tfevents*"))

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
WEB_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def git_blob_sha1(data):
    """Git's blob id: sha1("blob <len>\\0" + data) (huggingface_hub utils/sha.py git_hash)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256, size):
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now_iso(t=None):
    return datetime.datetime.fromtimestamp(t if t is not None else time.time(), datetime.timezone.utc) \
        .strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _tree_oids(files):
    """Real git tree ids for every directory of a {path: entry} map ("" = root)."""
    root = {}
    for path, e in files.items():
        node = root
        parts = path.split("/")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = e["oid"]
    oids = {}

    def walk(node, prefix):
        items = []
        for name, v in node.items():
            if isinstance(v, dict):
                sub = walk(v, f"{prefix}{name}/")
                items.append((name + "/", b"40000 " + name.encode() + b"\0" + bytes.fromhex(sub)))
            else:
                items.append((name, b"100644 " + name.encode() + b"\0" + bytes.fromhex(v)))
        body = b"".join(raw for _, raw in sorted(items, key=lambda t: t[0].encode()))
        oid = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        oids[prefix.rstrip("/")] = oid
        return oid

    walk(root, "")
    return oids


def _attr_patterns(text, want):
    """Patterns of a .gitattributes (want="filter=lfs") or .gitignore (want=None) file."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("!"):
            continue
        if want is None:
            out.append(line)
        else:
            fields = line.split()
            if want in fields[1:]:
                out.append(fields[0])
    return out


def _matches(path, pattern):
    base = path.rsplit("/", 1)[-1]
    pat = pattern.lstrip("/")
    if pat.endswith("/"):
        return path.startswith(pat) or f"/{pat}" in f"/{path}"
    if "/" not in pat:
        return fnmatch.fnmatchcase(base, pat) or any(fnmatch.fnmatchcase(d, pat) for d in path.split("/")[:-1])
    return fnmatch.fnmatchcase(path, pat) or fnmatch.fnmatchcase(path, pat.replace("**/", ""))


class HubError(Exception):
    def __init__(self, status, message, code=None, headers=None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class _Drop(Exception):
    """Close the connection now, without (the rest of) a response."""


class HubServer:
    def __init__(self, root, token="hf_test", user="test-user", port=0, lfs_threshold=10 * MB,
                 binary_threshold=1 * MB, multipart_threshold=20 * MB, chunk_size=8 * MB, tree_page_size=1000,
                 commits_page_size=50, verify=False, initial_gitattributes=True, cdn_host=None, host="127.0.0.1",
                 url_expiry_s=3600):
        if not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
            raise ValueError(f"refusing to listen on {host}: loopback only")
        self.root = os.path.abspath(root)
        self.token, self.user = token, user
        self.lfs_threshold, self.binary_threshold = lfs_threshold, binary_threshold
        self.multipart_threshold, self.chunk_size = multipart_threshold, chunk_size
        self.tree_page_size, self.commits_page_size = tree_page_size, commits_page_size
        self.verify, self.initial_gitattributes, self.cdn_host = verify, initial_gitattributes, cdn_host
        self.url_expiry_s = url_expiry_s
        self.host, self._port = host, port
        self.secret = secrets.token_bytes(16)
        self.lock = threading.RLock()
        self._faults, self._log = [], []
        self._fault_seq = 0
        self._stats = {"commits": 0, "lfs_objects_stored": 0, "lfs_stored": {}, "lfs_bytes_received": {},
                       "lfs_puts": {}, "regular_blobs_stored": 0, "requests": 0, "faults_fired": 0}
        self.uploads = {}  # multipart upload id -> {oid, size, chunk_size, parts: {n: etag}}
        os.makedirs(self.root, exist_ok=True)
        self.repos = self._load()
        self.httpd = None
        self.thread = None

    # ---------------------------------------------------------------- lifecycle
    def start(self):
        handler = type("Handler", (_Handler,), {"hub": self})
        self.httpd = _Server((self.host, self._port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        """Stops accepting, then waits for the requests in flight: a handler still writing an upload from a client
        that was killed must be done before the caller removes the root (else rmtree races it)."""
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd.join_handlers(timeout_s=30)
            self.httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    # ---------------------------------------------------------------- test API
    def add_fault(self, method=None, path=".*", times=1, skip=0, status=None, retry_after=None, ratelimit=None,
                  drop_after_read=None, drop_after_write=None, delay=None, lose_response=False, message=None):
        """The next `times` requests (after `skip` more) whose METHOD matches and whose path (with query)
        matches the regex `path` get: `status` (JSON error; `retry_after` seconds -> Retry-After;
        `ratelimit`=(remaining, reset_s) -> RateLimit headers), or the connection dropped after reading
        `drop_after_read` bytes of the request body / writing `drop_after_write` bytes of the response
        body, or the request applied and its response lost (`lose_response`). `delay` seconds first."""
        rule = {"method": method.upper() if method else None, "path": path, "times": times, "skip": skip,
                "status": status, "retry_after": retry_after, "ratelimit": list(ratelimit) if ratelimit else None,
                "drop_after_read": drop_after_read, "drop_after_write": drop_after_write, "delay": delay,
                "lose_response": bool(lose_response), "message": message, "fired": 0}
        re.compile(path)
        with self.lock:
            self._fault_seq += 1
            rule["id"] = self._fault_seq
            self._faults.append(rule)
        return rule["id"]

    def clear_faults(self):
        with self.lock:
            self._faults = []

    def faults(self):
        with self.lock:
            return [dict(r) for r in self._faults]

    def log(self, clear=False):
        """[{method, path, status, req_bytes, resp_bytes, fault, t}]; status None = connection dropped."""
        with self.lock:
            out = list(self._log)
            if clear:
                self._log = []
            return out

    def clear_log(self):
        self.log(clear=True)

    def stats(self):
        with self.lock:
            return json.loads(json.dumps(self._stats))

    def repo_key(self, repo_id, repo_type="model"):
        return f"{repo_type or 'model'}:{repo_id}"

    def head(self, repo_id, revision="main", repo_type="model"):
        with self.lock:
            return self._resolve(self._repo(repo_type or "model", repo_id), revision)

    def entries(self, repo_id, revision="main", repo_type="model"):
        with self.lock:
            repo = self._repo(repo_type or "model", repo_id)
            return json.loads(json.dumps(repo["commits"][self._resolve(repo, revision)]["files"]))

    def files(self, repo_id, revision="main", repo_type="model"):
        return {p: self._read_entry(e) for p, e in self.entries(repo_id, revision, repo_type).items()}

    def commits(self, repo_id, revision="main", repo_type="model"):
        """Commits reachable from `revision`, newest first: {oid, parent, summary, description, date,
        regular_files (inline `file` lines), lfs_files, deleted_files, deleted_folders, added, deleted}."""
        with self.lock:
            repo = self._repo(repo_type or "model", repo_id)
            out, oid = [], self._resolve(repo, revision)
            while oid:
                c = repo["commits"][oid]
                out.append({k: v for k, v in c.items() if k != "files"} | {"oid": oid})
                oid = c["parent"]
            return json.loads(json.dumps(out))

    # ---------------------------------------------------------------- storage
    def _state_path(self):
        return os.path.join(self.root, "state.json")

    def _load(self):
        try:
            with open(self._state_path()) as f:
                return json.load(f)["repos"]
        except FileNotFoundError:
            return {}

    def _save(self):
        tmp = self._state_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"repos": self.repos}, f)
        os.replace(tmp, self._state_path())

    def _lfs_path(self, oid):
        return os.path.join(self.root, "lfs", "objects", oid[:2], oid[2:4], oid)

    def _blob_path(self, sha1):
        return os.path.join(self.root, "blobs", sha1[:2], sha1)

    def _write_atomic(self, path, data):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def _store_lfs(self, oid, data):
        with self.lock:
            self._write_atomic(self._lfs_path(oid), data)
            self._stats["lfs_objects_stored"] += 1
            self._stats["lfs_stored"][oid] = self._stats["lfs_stored"].get(oid, 0) + 1

    def _store_lfs_file(self, oid, path):
        """Moves a complete object file into the store."""
        with self.lock:
            os.makedirs(os.path.dirname(self._lfs_path(oid)), exist_ok=True)
            os.replace(path, self._lfs_path(oid))
            self._stats["lfs_objects_stored"] += 1
            self._stats["lfs_stored"][oid] = self._stats["lfs_stored"].get(oid, 0) + 1

    def _lfs_size(self, oid):
        try:
            return os.path.getsize(self._lfs_path(oid))
        except OSError:
            return None

    def _read_entry(self, e):
        path = self._lfs_path(e["sha256"]) if e["lfs"] else self._blob_path(e["oid"])
        with open(path, "rb") as f:
            return f.read()

    # ---------------------------------------------------------------- repositories
    def _repo(self, repo_type, repo_id):
        repo = self.repos.get(self.repo_key(repo_id, repo_type))
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def _resolve(self, repo, rev):
        rev = rev or "main"
        if rev.startswith("refs/heads/"):
            rev = rev[len("refs/heads/"):]
        if rev in repo["branches"]:
            return repo["branches"][rev]
        m = re.fullmatch(r"refs/pr/(\d+)", rev)
        if m and m.group(1) in repo["prs"]:
            return repo["prs"][m.group(1)]
        if re.fullmatch(r"[0-9a-f]{40}", rev) and rev in repo["commits"]:
            return rev
        raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")

    def _make_commit(self, repo, parent, files, summary, description, counts):
        tree = _tree_oids(files)[""] if files else hashlib.sha1(b"tree 0\0").hexdigest()
        t = time.time()
        ident = f"{self.user} <{self.user}@users.noreply.huggingface.co> {int(t)} +0000"
        body = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "") + \
            f"author {ident}\ncommitter {ident}\n\n{summary}\n" + (f"\n{description}\n" if description else "")
        oid = hashlib.sha1(b"commit %d\0" % len(body.encode()) + body.encode()).hexdigest()
        repo["commits"][oid] = {"parent": parent, "summary": summary, "description": description,
                                "date": _now_iso(t), "files": files, **counts}
        return oid

    def _regular_entry(self, data):
        sha1 = git_blob_sha1(data)
        path = self._blob_path(sha1)
        if not os.path.exists(path):
            self._write_atomic(path, data)
            self._stats["regular_blobs_stored"] += 1
        return {"lfs": False, "oid": sha1, "size": len(data)}

    def create_repo(self, repo_type, repo_id, private=False):
        with self.lock:
            key = self.repo_key(repo_id, repo_type)
            if key in self.repos:
                raise HubError(409, f"You already created this {repo_type} repo", None,
                               {"_url": self._repo_url(repo_type, repo_id)})
            repo = {"type": repo_type, "id": repo_id, "private": bool(private), "created": _now_iso(),
                    "branches": {}, "prs": {}, "commits": {}}
            files = {}
            if self.initial_gitattributes:
                files[".gitattributes"] = self._regular_entry(DEFAULT_GITATTRIBUTES.encode())
            counts = {"regular_files": len(files), "lfs_files": 0, "deleted_files": 0, "deleted_folders": 0,
                      "added": sorted(files), "deleted": []}
            repo["branches"]["main"] = self._make_commit(repo, None, files, "initial commit", "", counts)
            self.repos[key] = repo
            self._save()
            return repo

    def _repo_url(self, repo_type, repo_id, base=None):
        return f"{base or self.url}/{WEB_PREFIX[repo_type]}{repo_id}"

    def upload_mode(self, files, path, size, sample):
        """ops.md 2.4: lfs if .gitattributes says so, or size >= lfs_threshold, or binary (NUL in the
        sample) and size > binary_threshold; empty files are regular."""
        if size == 0:
            return "regular"
        attrs = self._read_entry(files[".gitattributes"]).decode("utf-8", "replace") \
            if ".gitattributes" in files else ""
        if any(_matches(path, p) for p in _attr_patterns(attrs, "filter=lfs")):
            return "lfs"
        if size >= self.lfs_threshold or (b"\0" in sample and size > self.binary_threshold):
            return "lfs"
        return "regular"

    # ---------------------------------------------------------------- signed data-plane URLs
    def _sign(self, path, expires, extra):
        msg = f"{path}\n{expires}\n" + urllib.parse.urlencode(sorted(extra.items()))
        return hmac.new(self.secret, msg.encode(), hashlib.sha256).hexdigest()

    def signed_url(self, base, path, extra=None):
        """A URL that works without the token until it expires (like S3's presigned URLs)."""
        extra = dict(extra or {})
        expires = int(time.time()) + self.url_expiry_s
        q = dict(extra, expires=str(expires), signature=self._sign(path, expires, extra))
        return f"{base}{path}?{urllib.parse.urlencode(q)}"

    def check_signature(self, path, query):
        extra = {k: v[0] for k, v in query.items() if k not in ("expires", "signature")}
        try:
            expires = int(query.get("expires", ["0"])[0])
        except ValueError:
            expires = 0
        if not hmac.compare_digest(query.get("signature", [""])[0], self._sign(path, expires, extra)):
            raise HubError(403, "SignatureDoesNotMatch", "SignatureDoesNotMatch")
        if expires < time.time():
            raise HubError(403, "Request has expired", "AccessDenied")


class _Server(http.server.ThreadingHTTPServer):
    """Keeps its handler threads so that stop() can wait for the requests in flight (ThreadingHTTPServer's daemon
    threads are not waited for) and close the connections that sit idle between keep-alive requests."""
    daemon_threads = True
    block_on_close = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handlers, self.busy, self.handlers_lock = [], set(), threading.Lock()

    def process_request(self, request, client_address):
        t = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        with self.handlers_lock:
            self.handlers = [(h, r) for h, r in self.handlers if h.is_alive()] + [(t, request)]
        t.start()

    def set_busy(self, request, busy):
        with self.handlers_lock:
            (self.busy.add if busy else self.busy.discard)(request)

    def join_handlers(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        with self.handlers_lock:
            handlers = list(self.handlers)
            for _, request in handlers:
                if request not in self.busy:
                    try:
                        request.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        for t, _ in handlers:
            t.join(max(0.0, deadline - time.monotonic()))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def parse_request(self):
        self.server.set_busy(self.request, True)
        return super().parse_request()

    def handle_one_request(self):
        try:
            super().handle_one_request()
        finally:
            self.server.set_busy(self.request, False)
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stalls
    hub = None  # set by HubServer.start

    def log_message(self, *args):
        pass

    # ---------------------------------------------------------------- plumbing
    def _base(self):
        host = self.headers.get("Host") or f"{self.hub.host}:{self.hub.port}"
        return f"http://{host}"

    def _read_body(self, limit=None):
        """The request body (Content-Length or chunked); with `limit`, read that many bytes and drop."""
        n = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                if limit is not None and sum(map(len, chunks)) >= limit:
                    break
            data = b"".join(chunks)
        else:
            total = int(n or 0)
            data = self.rfile.read(min(total, limit) if limit is not None else total)
        if limit is not None:
            self.body_len = len(data[:limit])
            return data[:limit]
        self.body_len = len(data)
        return data

    def _send(self, status, body=b"", headers=None, ctype="application/json; charset=utf-8"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        cut = self.fault.get("drop_after_write") if self.fault else None
        dropping = self.command != "HEAD" and cut is not None and cut < len(body)
        # Logged before the answer leaves: a client that reacts to it finds its request in the log.
        self._record(None if dropping else status, 0 if self.command == "HEAD" else (cut if dropping else len(body)))
        self.send_response(status)
        if body or status not in (204, 304):
            self.send_header("Content-Type", ctype)
        hdrs = dict(headers or {})
        hdrs.setdefault("Content-Length", str(len(body)))
        for k, v in hdrs.items():
            self.send_header(k, str(v))
        self.end_headers()
        self.status = status
        if self.command != "HEAD":
            if dropping:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.resp_bytes = cut
                raise _Drop()
            self.wfile.write(body)
            self.resp_bytes = len(body)

    def _error(self, err):
        headers = {"X-Error-Message": err.message}
        if err.code:
            headers["X-Error-Code"] = err.code
        body = {"error": err.message}
        for k, v in err.headers.items():
            if k == "_url":
                body["url"] = v
            else:
                headers[k] = v
        if err.code in ("SignatureDoesNotMatch", "AccessDenied"):  # what S3 answers
            xml = f"<?xml version=\"1.0\"?><Error><Code>{err.code}</Code><Message>{err.message}</Message></Error>"
            self._send(err.status, xml, {}, "application/xml")
            return
        self._send(err.status, body, headers)

    def _take_fault(self):
        hub = self.hub
        if self.path.startswith("/_admin"):
            return None
        with hub.lock:
            for rule in hub._faults:
                if rule["times"] <= 0:
                    continue
                if rule["method"] and rule["method"] != self.command:
                    continue
                if not re.search(rule["path"], self.path):
                    continue
                if rule["skip"] > 0:
                    rule["skip"] -= 1
                    continue
                rule["times"] -= 1
                rule["fired"] += 1
                hub._stats["faults_fired"] += 1
                return dict(rule)
        return None

    def _record(self, status, resp_bytes):
        """Appends this request to the log (once), with the status sent (None: no answer)."""
        if self.logged or self.path.startswith("/_admin"):
            return
        self.logged = True
        label = self.fault_label
        with self.hub.lock:
            self.hub._stats["requests"] += 1
            self.hub._log.append({"method": self.command, "path": self.path, "status": status,
                                  "req_bytes": self.body_len, "resp_bytes": resp_bytes, "fault": label,
                                  "t": round(self.t0, 3)})

    def _handle(self):
        self.status, self.body_len, self.resp_bytes = None, 0, 0
        self.logged = False
        self.fault = self._take_fault()
        self.t0 = time.time()
        f = self.fault
        self.fault_label = ",".join(k for k in ("status", "drop_after_read", "drop_after_write", "delay", "lose_response")
                                    if f.get(k)) if f else None
        try:
            self._dispatch(f)
        except _Drop:
            self.close_connection = True
            self._record(None, self.resp_bytes)  # before the client sees the connection close
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.status = None  # logged as "no response"
        except OSError:  # the client went away
            self.close_connection = True
        except Exception as err:  # a bug here: say so (500) rather than hang up
            import traceback
            traceback.print_exc()
            self.close_connection = True
            if self.status is None:
                try:
                    self.fault = None
                    self._error(HubError(500, f"hub_server internal error: {err!r}"))
                except OSError:
                    pass
        finally:
            self._record(self.status, self.resp_bytes)  # no answer was sent (dropped, lost, client gone)

    def _dispatch(self, f):
        if f:
            if f.get("delay"):
                time.sleep(f["delay"])
            if f.get("drop_after_read") is not None:
                self._count_partial(self._read_body(limit=f["drop_after_read"]))
                raise _Drop()
            if f.get("status"):
                self._read_body()
                headers = {}
                if f.get("retry_after") is not None:
                    headers["Retry-After"] = str(f["retry_after"])
                if f.get("ratelimit"):
                    r, t = f["ratelimit"]
                    headers["RateLimit"] = f'"api";r={r};t={t}'
                    headers["RateLimit-Policy"] = '"fixed window";"api";q=500;w=300'
                msg = f.get("message") or {429: "Too Many Requests", 500: "Internal Error", 502: "Bad Gateway",
                                           503: "Service Unavailable", 504: "Gateway Timeout"}.get(f["status"],
                                                                                                  "injected fault")
                self.fault = None
                self._send(f["status"], {"error": msg}, headers)
                return
        if self.path.startswith("/_admin"):
            self._admin()
            return
        body = self._read_body()
        try:
            status, payload, headers, ctype = self._route(body)
        except HubError as err:
            if f and f.get("lose_response"):
                raise _Drop()
            self._error(err)
            return
        if f and f.get("lose_response"):
            raise _Drop()  # applied, but the client never hears of it
        self._send(status, payload, headers, ctype)

    def _count_partial(self, data):
        m = re.match(r"^/_storage/(?:objects/([0-9a-f]{64})|multipart/([0-9a-f]+)/\d+)", self.path)
        if not m:
            return
        oid = m.group(1) or self.hub.uploads.get(m.group(2), {}).get("oid")
        if oid:
            with self.hub.lock:
                st = self.hub._stats
                st["lfs_bytes_received"][oid] = st["lfs_bytes_received"].get(oid, 0) + len(data)
                st["lfs_puts"][oid] = st["lfs_puts"].get(oid, 0) + 1

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

    # ---------------------------------------------------------------- auth
    def _auth(self, repo=None, write=False):
        """Bearer token. A wrong token: 401 'Invalid credentials in Authorization header' (the client
        raises a plain HfHubHTTPError); none: private repos and writes are refused like a missing repo."""
        auth = self.headers.get("Authorization", "")
        if auth:
            m = re.fullmatch(r"Bearer\s+(\S+)", auth.strip())
            if not m or m.group(1) != self.hub.token:
                raise HubError(401, "Invalid credentials in Authorization header")
            return True
        if write:
            raise HubError(401, "Invalid username or password.")
        if repo is not None and repo["private"]:
            raise HubError(401, "Repository not found", "RepoNotFound")
        return False

    # ---------------------------------------------------------------- routing
    def _route(self, body):
        hub = self.hub
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        raw = url.path.split("/")[1:]
        seg = [urllib.parse.unquote(s) for s in raw]
        m = self.command
        base = self._base()

        # data plane
        if seg[:2] == ["_storage", "objects"] and len(seg) == 3 and m == "PUT":
            hub.check_signature(url.path, q)
            return self._put_object(seg[2], body)
        if seg[:2] == ["_storage", "multipart"] and len(seg) == 4 and m == "PUT":
            hub.check_signature(url.path, q)
            return self._put_part(seg[2], seg[3], body)
        if seg[:2] == ["api", "complete_multipart"] and m == "POST":
            hub.check_signature(url.path, q)
            return self._complete(q.get("uploadId", [""])[0], body)
        if seg[:1] == ["_cdn"] and len(seg) == 2 and m in ("GET", "HEAD"):
            hub.check_signature(url.path, q)
            if not SHA256_RE.match(seg[1]) or hub._lfs_size(seg[1]) is None:
                raise HubError(404, "NoSuchKey", "EntryNotFound")
            with open(hub._lfs_path(seg[1]), "rb") as f:
                data = f.read()
            return self._ranged(data, {"ETag": f'"{seg[1]}"'}, "application/octet-stream")

        if seg[:1] == ["api"]:
            if seg[1:] == ["whoami-v2"] and m == "GET":
                self._auth(write=True)
                return 200, {"type": "user", "name": hub.user, "fullname": hub.user, "orgs": [],
                             "auth": {"type": "access_token",
                                      "accessToken": {"displayName": "test", "role": "write"}}}, None, None
            if seg[1:] == ["validate-yaml"] and m == "POST":  # README.md metadata: accepted as is
                self._auth(write=True)
                return 200, {"errors": [], "warnings": []}, None, None
            if seg[1:] == ["repos", "create"] and m == "POST":
                return self._create_repo(body, base)
            if seg[1:] == ["repos", "delete"] and m == "DELETE":
                self._auth(write=True)
                p = json.loads(body or b"{}")
                rtype = p.get("type") or "model"
                rid = f"{p.get('organization') or hub.user}/{p['name']}"
                with hub.lock:
                    hub._repo(rtype, rid)
                    del hub.repos[hub.repo_key(rid, rtype)]
                    hub._save()
                return 200, {}, None, None
            if len(seg) >= 4 and seg[1] in REPO_TYPES:
                return self._repo_api(REPO_TYPES[seg[1]], f"{seg[2]}/{seg[3]}", seg[4:], raw[4:], q, body, base)
            raise HubError(404, "Sorry, we can't find the page you are looking for.")

        # git / LFS and downloads under the web prefix
        rtype = "model"
        if seg and seg[0] in ("datasets", "spaces"):
            rtype, seg, raw = REPO_TYPES[seg[0]], seg[1:], raw[1:]
        if len(seg) >= 6 and seg[1].endswith(".git") and seg[2:5] == ["info", "lfs", "objects"] and m == "POST":
            repo_id = f"{seg[0]}/{seg[1][:-4]}"
            if seg[5] == "batch":
                return self._lfs_batch(rtype, repo_id, body, base)
            if seg[5] == "verify":
                return self._lfs_verify(rtype, repo_id, body)
        if len(seg) >= 5 and seg[2] == "resolve" and m in ("GET", "HEAD"):
            return self._resolve_file(rtype, f"{seg[0]}/{seg[1]}", seg[3], urllib.parse.unquote("/".join(raw[4:])),
                                      base)
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    def _repo_api(self, rtype, repo_id, seg, raw, q, body, base):
        hub = self.hub
        m = self.command
        with hub.lock:
            repo = hub.repos.get(hub.repo_key(repo_id, rtype))
        write = m in ("POST", "DELETE", "PUT") and not (seg and seg[0] == "paths-info")
        self._auth(repo, write=write)
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        if not seg and m == "GET":
            return self._repo_info(repo, "main", base)
        action = seg[0]
        if action == "revision" and len(seg) >= 2 and m == "GET":
            return self._repo_info(repo, urllib.parse.unquote("/".join(raw[1:])), base)
        if action == "refs" and m == "GET":
            return self._refs(repo, q)
        if action == "branch" and len(seg) >= 2:
            return self._branch(repo, urllib.parse.unquote("/".join(raw[1:])), body)
        if action == "tree" and len(seg) >= 2 and m == "GET":
            return self._tree(repo, seg[1], urllib.parse.unquote("/".join(raw[2:])), q, base)
        if action == "paths-info" and len(seg) >= 2 and m == "POST":
            return self._paths_info(repo, seg[1], body)
        if action == "commits" and len(seg) >= 2 and m == "GET":
            return self._list_commits(repo, seg[1], q, base)
        if action == "preupload" and len(seg) >= 2 and m == "POST":
            return self._preupload(repo, seg[1], body, q)
        if action == "commit" and len(seg) >= 2 and m == "POST":
            return self._commit(repo, seg[1], body, q, base)
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    # ---------------------------------------------------------------- repo endpoints
    def _create_repo(self, body, base):
        hub = self.hub
        self._auth(write=True)
        p = json.loads(body or b"{}")
        rtype = p.get("type") or "model"
        if rtype not in WEB_PREFIX or not p.get("name") or not re.fullmatch(r"[\w.\-]+", p["name"]):
            raise HubError(400, "Invalid repo name or type")
        repo_id = f"{p.get('organization') or hub.user}/{p['name']}"
        private = p.get("private") or p.get("visibility") == "private"
        try:
            hub.create_repo(rtype, repo_id, private)
        except HubError as err:
            err.headers["_url"] = hub._repo_url(rtype, repo_id, base)
            raise
        return 200, {"url": hub._repo_url(rtype, repo_id, base), "name": repo_id, "id": repo_id}, None, None

    def _repo_info(self, repo, rev, base):
        hub = self.hub
        with hub.lock:
            sha = hub._resolve(repo, rev)
            c = repo["commits"][sha]
            siblings = []
            for p, e in sorted(c["files"].items()):
                s = {"rfilename": p, "size": e["size"], "blobId": e["oid"]}
                if e["lfs"]:
                    s["lfs"] = {"size": e["size"], "sha256": e["sha256"], "pointerSize": e["pointerSize"]}
                siblings.append(s)
        ns = repo["id"].split("/")[0]
        return 200, {"_id": hashlib.sha1(repo["id"].encode()).hexdigest()[:24], "id": repo["id"], "author": ns,
                     "sha": sha, "lastModified": c["date"], "createdAt": repo["created"], "private": repo["private"],
                     "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                     "siblings": siblings}, None, None

    def _refs(self, repo, q):
        with self.hub.lock:
            out = {"branches": [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": oid}
                                for b, oid in sorted(repo["branches"].items())], "converts": [], "tags": []}
            if q.get("include_prs"):
                out["pullRequests"] = [{"name": n, "ref": f"refs/pr/{n}", "targetCommit": oid}
                                       for n, oid in sorted(repo["prs"].items(), key=lambda t: int(t[0]))]
        return 200, out, None, None

    def _branch(self, repo, name, body):
        hub = self.hub
        if name.startswith("refs/") or not re.fullmatch(r"[\w.\-/]+", name) or name.endswith(".lock"):
            raise HubError(400, f"Invalid reference for a branch: {name}")
        with hub.lock:
            if self.command == "DELETE":
                if name not in repo["branches"]:
                    raise HubError(404, f"Invalid rev id: {name}", "RevisionNotFound")
                if name == "main":
                    raise HubError(403, "Cannot delete the default branch")
                del repo["branches"][name]
            else:
                if name in repo["branches"]:
                    raise HubError(409, "Reference already exists")
                start = (json.loads(body or b"{}") or {}).get("startingPoint") or "main"
                repo["branches"][name] = hub._resolve(repo, start)
            hub._save()
        return 200, {}, None, None

    def _entry_json(self, path, e):
        out = {"type": "file", "oid": e["oid"], "size": e["size"], "path": path}
        if e["lfs"]:
            out["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": e["pointerSize"]}
        return out

    def _listing(self, files):
        """All entries (files and directories) of a file map: {path: json}."""
        trees = _tree_oids(files) if files else {"": None}
        out = {p: self._entry_json(p, e) for p, e in files.items()}
        for d, oid in trees.items():
            if d:
                out[d] = {"type": "directory", "oid": oid, "size": 0, "path": d}
        return out

    def _tree(self, repo, rev, path, q, base):
        hub = self.hub
        path = path.strip("/")
        recursive = q.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = q.get("expand", ["false"])[0].lower() in ("1", "true")
        with hub.lock:
            sha = hub._resolve(repo, rev)
            c = repo["commits"][sha]
            listing = self._listing(c["files"])
        if path and (path not in listing or listing[path]["type"] != "directory"):
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": sha})
        prefix = f"{path}/" if path else ""
        items = []
        for p in sorted(listing):
            if not p.startswith(prefix):
                continue
            if not recursive and "/" in p[len(prefix):]:
                continue
            e = dict(listing[p])
            if expand:
                e["lastCommit"] = {"id": sha, "title": c["summary"], "date": c["date"]}
            items.append(e)
        size = min(hub.tree_page_size, 50) if expand else hub.tree_page_size
        start = int(q.get("cursor", ["0"])[0] or 0)
        page = items[start:start + size]
        headers = {}
        if start + size < len(items):
            nq = {"recursive": str(recursive).lower(), "expand": str(expand).lower(), "cursor": str(start + size)}
            quoted = urllib.parse.quote(path, safe="")
            nxt = f"{base}/api/{repo['type']}s/{repo['id']}/tree/{urllib.parse.quote(rev, safe='')}" + \
                (f"/{quoted}" if path else "") + "?" + urllib.parse.urlencode(nq)
            headers["Link"] = f'<{nxt}>; rel="next"'
        return 200, page, headers, None

    def _paths_info(self, repo, rev, body):
        hub = self.hub
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            paths = json.loads(body or b"{}").get("paths", [])
        else:
            paths = urllib.parse.parse_qs(body.decode(), keep_blank_values=True).get("paths", [])
        with hub.lock:
            sha = hub._resolve(repo, rev)
            listing = self._listing(repo["commits"][sha]["files"])
        out = [listing[p.strip("/")] for p in paths if p.strip("/") in listing]
        return 200, out, None, None

    def _list_commits(self, repo, rev, q, base):
        hub = self.hub
        with hub.lock:
            oid = hub._resolve(repo, rev)
            items = []
            while oid:
                c = repo["commits"][oid]
                msg = c["summary"] + (f"\n\n{c['description']}" if c["description"] else "")
                items.append({"id": oid, "title": c["summary"], "message": msg,
                              "authors": [{"user": hub.user}], "date": c["date"]})
                oid = c["parent"]
        page_n = int(q.get("p", ["0"])[0] or 0)
        size = hub.commits_page_size
        headers = {}
        if (page_n + 1) * size < len(items):
            nxt = f"{base}/api/{repo['type']}s/{repo['id']}/commits/{urllib.parse.quote(rev, safe='')}?p={page_n + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return 200, items[page_n * size:(page_n + 1) * size], headers, None

    def _preupload(self, repo, rev, body, q):
        hub = self.hub
        p = json.loads(body or b"{}")
        with hub.lock:
            sha = hub._resolve(repo, "main" if q.get("create_pr") and rev == "main" else rev)
            files = repo["commits"][sha]["files"]
            gitignore = p.get("gitIgnore")
            if gitignore is None and ".gitignore" in files:
                gitignore = hub._read_entry(files[".gitignore"]).decode("utf-8", "replace")
            ignore = _attr_patterns(gitignore, None)
            out = []
            for f in p.get("files", []):
                path, size = f["path"], int(f["size"])
                sample = base64.b64decode(f.get("sample") or "")
                mode = hub.upload_mode(files, path, size, sample)
                e = files.get(path)
                oid = None if e is None else (e["sha256"] if e["lfs"] else e["oid"])
                out.append({"path": path, "uploadMode": mode, "shouldIgnore": any(_matches(path, i) for i in ignore),
                            "oid": oid})
        return 200, {"files": out, "commitOid": sha}, None, None

    def _commit(self, repo, rev, body, q, base):
        hub = self.hub
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The first line of the payload must be the header")
        header = lines[0]["value"]
        summary = header.get("summary") or ""
        if not summary:
            raise HubError(400, "Commit summary is required")
        create_pr = bool(q.get("create_pr"))
        with hub.lock:
            if rev.startswith("refs/heads/"):
                rev = rev[len("refs/heads/"):]
            if rev not in repo["branches"] and not re.fullmatch(r"refs/pr/\d+", rev):
                raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
            head = hub._resolve(repo, rev)
            parent_commit = header.get("parentCommit")
            if parent_commit and not create_pr and not head.startswith(parent_commit.lower()):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            base_oid = head
            if create_pr and parent_commit:
                base_oid = next((o for o in repo["commits"] if o.startswith(parent_commit.lower())), None)
                if base_oid is None:
                    raise HubError(404, f"Invalid rev id: {parent_commit}", "RevisionNotFound")
            files = dict(repo["commits"][base_oid]["files"])
            counts = {"regular_files": 0, "lfs_files": 0, "deleted_files": 0, "deleted_folders": 0, "added": [],
                      "deleted": []}
            for item in lines[1:]:
                key, v = item.get("key"), item.get("value") or {}
                path = v.get("path", "")
                if key in ("file", "lfsFile", "deletedFile", "deletedFolder"):
                    path = path.strip("/") if key == "deletedFolder" else path
                    if not path or path.startswith("/") or ".." in path.split("/") or \
                            ".git" in path.split("/"):
                        raise HubError(400, f"Invalid path: {path}")
                if key == "file":
                    data = base64.b64decode(v.get("content", "")) if v.get("encoding") == "base64" \
                        else v.get("content", "").encode()
                    if len(data) >= hub.lfs_threshold:
                        raise HubError(400, "Your push was rejected because it contains files larger than 10 MiB. "
                                            f"Please use https://git-lfs.github.com/ to store large files ({path})")
                    if b"\0" in data[:512] and len(data) > hub.binary_threshold:
                        raise HubError(400, "Your push was rejected because it contains binary files. Please use "
                                            f"https://huggingface.co/docs/hub/xet to store binary files ({path})")
                    files[path] = hub._regular_entry(data)
                    counts["regular_files"] += 1
                    counts["added"].append(path)
                elif key == "lfsFile":
                    oid = (v.get("oid") or "").lower()
                    stored = hub._lfs_size(oid) if SHA256_RE.match(oid) else None
                    if v.get("algo", "sha256") != "sha256" or stored is None:
                        raise HubError(400, f"LFS file {path} (oid {oid}) was not uploaded: upload it through the "
                                            "LFS batch API first")
                    if v.get("size") is not None and int(v["size"]) != stored:
                        raise HubError(400, f"LFS file {path}: size {v['size']} does not match the stored {stored}")
                    ptr = lfs_pointer(oid, stored)
                    files[path] = {"lfs": True, "sha256": oid, "size": stored, "oid": git_blob_sha1(ptr),
                                   "pointerSize": len(ptr)}
                    counts["lfs_files"] += 1
                    counts["added"].append(path)
                elif key == "deletedFile":
                    if path not in files:
                        raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                    del files[path]
                    counts["deleted_files"] += 1
                    counts["deleted"].append(path)
                elif key == "deletedFolder":
                    gone = [p for p in files if p.startswith(path + "/")]
                    if not gone:
                        raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for p in gone:
                        del files[p]
                    counts["deleted_folders"] += 1
                    counts["deleted"].extend(gone)
                else:
                    raise HubError(400, f"Unknown key in the commit payload: {key}")
            oid = hub._make_commit(repo, base_oid, files, summary, header.get("description") or "", counts)
            pr_url = None
            if create_pr:
                n = str(max([int(k) for k in repo["prs"]] + [0]) + 1)
                repo["prs"][n] = oid
                pr_url = f"{hub._repo_url(repo['type'], repo['id'], base)}/discussions/{n}"
            elif rev.startswith("refs/pr/"):
                repo["prs"][rev.split("/")[-1]] = oid
            else:
                repo["branches"][rev] = oid
            hub._stats["commits"] += 1
            hub._save()
        return 200, {"success": True, "commitOid": oid, "hookOutput": "",
                     "commitUrl": f"{hub._repo_url(repo['type'], repo['id'], base)}/commit/{oid}",
                     "pullRequestUrl": pr_url}, None, None

    # ---------------------------------------------------------------- LFS
    def _lfs_batch(self, rtype, repo_id, body, base):
        hub = self.hub
        with hub.lock:
            repo = hub.repos.get(hub.repo_key(repo_id, rtype))
        self._auth(repo, write=True)
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        p = json.loads(body or b"{}")
        if p.get("operation") != "upload":
            raise HubError(400, "only the upload operation is implemented")
        if p.get("hash_algo", "sha256") != "sha256":
            raise HubError(409, "Unsupported hash algorithm")
        transfers = p.get("transfers") or ["basic"]
        objects, used_multipart = [], False
        for o in p.get("objects", []):
            oid, size = str(o.get("oid", "")), o.get("size")
            if not SHA256_RE.match(oid) or not isinstance(size, int) or size < 0:
                objects.append({"oid": oid, "size": size if isinstance(size, int) else 0,
                                "error": {"code": 422, "message": "Invalid object"}})
                continue
            stored = hub._lfs_size(oid)
            if stored == size:
                objects.append({"oid": oid, "size": size})  # already stored: no actions
                continue
            actions = {}
            if size >= hub.multipart_threshold and "multipart" in transfers:
                used_multipart = True
                upload_id = secrets.token_hex(12)
                nparts = max(1, -(-size // hub.chunk_size))
                with hub.lock:
                    hub.uploads[upload_id] = {"oid": oid, "size": size, "chunk_size": hub.chunk_size,
                                              "nparts": nparts, "parts": {}}
                header = {"chunk_size": str(hub.chunk_size)}
                for n in range(1, nparts + 1):
                    header[f"{n:05d}"] = hub.signed_url(base, f"/_storage/multipart/{upload_id}/{n}")
                actions["upload"] = {"href": hub.signed_url(base, "/api/complete_multipart", {"uploadId": upload_id}),
                                     "header": header}
            else:
                actions["upload"] = {"href": hub.signed_url(base, f"/_storage/objects/{oid}", {"size": str(size)}),
                                     "header": {}}
            if hub.verify:
                actions["verify"] = {"href": f"{base}/{WEB_PREFIX[rtype]}{repo_id}.git/info/lfs/objects/verify",
                                     "header": {}}
            objects.append({"oid": oid, "size": size, "authenticated": True, "actions": actions})
        out = {"transfer": "multipart" if used_multipart else "basic", "objects": objects, "hash_algo": "sha256"}
        return 200, out, None, "application/vnd.git-lfs+json"

    def _put_object(self, oid, body):
        hub = self.hub
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        with hub.lock:
            st = hub._stats
            st["lfs_bytes_received"][oid] = st["lfs_bytes_received"].get(oid, 0) + len(body)
            st["lfs_puts"][oid] = st["lfs_puts"].get(oid, 0) + 1
        if str(len(body)) != q.get("size", [""])[0] or hashlib.sha256(body).hexdigest() != oid:
            raise HubError(400, "BadDigest: the uploaded content does not match the object's sha256 / size",
                           "BadDigest")
        hub._store_lfs(oid, body)
        return 200, b"", {"ETag": f'"{hashlib.md5(body).hexdigest()}"'}, "text/plain"

    def _put_part(self, upload_id, part, body):
        hub = self.hub
        with hub.lock:
            up = hub.uploads.get(upload_id)
            if up is None:
                raise HubError(404, "NoSuchUpload")
            n = int(part)
            if not 1 <= n <= up["nparts"]:
                raise HubError(400, "InvalidPart")
            st = hub._stats
            st["lfs_bytes_received"][up["oid"]] = st["lfs_bytes_received"].get(up["oid"], 0) + len(body)
            st["lfs_puts"][up["oid"]] = st["lfs_puts"].get(up["oid"], 0) + 1
        etag = f'"{hashlib.md5(body).hexdigest()}"'
        hub._write_atomic(os.path.join(hub.root, "uploads", upload_id, str(n)), body)
        with hub.lock:
            up["parts"][n] = etag
        return 200, b"", {"ETag": etag}, "text/plain"

    def _complete(self, upload_id, body):
        hub = self.hub
        p = json.loads(body or b"{}")
        with hub.lock:
            up = hub.uploads.get(upload_id)
        if up is None:
            if SHA256_RE.match(str(p.get("oid", ""))) and hub._lfs_size(p["oid"]) is not None:
                return 200, {"success": True}, None, None  # completed before (a retried completion)
            raise HubError(404, "NoSuchUpload")
        if p.get("oid") != up["oid"]:
            raise HubError(400, "oid does not match the upload")
        parts = p.get("parts") or []
        if [x.get("partNumber") for x in parts] != list(range(1, up["nparts"] + 1)):
            raise HubError(400, f"InvalidPart: expected parts 1..{up['nparts']}")
        for x in parts:
            if up["parts"].get(x["partNumber"]) != x.get("etag"):
                raise HubError(400, f"InvalidPart: part {x['partNumber']} missing or its ETag differs")
        # Assembled on disk, block by block (objects of several GB must not pass through memory).
        d = os.path.join(hub.root, "uploads", upload_id)
        assembled = os.path.join(d, "assembled")
        digest, size = hashlib.sha256(), 0
        with open(assembled, "wb") as out:
            for n in range(1, up["nparts"] + 1):
                with open(os.path.join(d, str(n)), "rb") as f:
                    while block := f.read(16 << 20):
                        digest.update(block)
                        size += len(block)
                        out.write(block)
        if size != up["size"] or digest.hexdigest() != up["oid"]:
            raise HubError(400, "BadDigest: the assembled object does not match its sha256 / size", "BadDigest")
        hub._store_lfs_file(up["oid"], assembled)
        shutil.rmtree(d, ignore_errors=True)
        with hub.lock:
            hub.uploads.pop(upload_id, None)
        return 200, {"success": True}, None, None

    def _lfs_verify(self, rtype, repo_id, body):
        hub = self.hub
        with hub.lock:
            repo = hub.repos.get(hub.repo_key(repo_id, rtype))
        self._auth(repo, write=True)
        p = json.loads(body or b"{}")
        if hub._lfs_size(str(p.get("oid", ""))) != p.get("size"):
            raise HubError(404, "Object not found or of another size")
        return 200, {"success": True}, None, "application/vnd.git-lfs+json"

    # ---------------------------------------------------------------- downloads
    def _ranged(self, data, headers, ctype):
        headers = dict(headers, **{"Accept-Ranges": "bytes"})
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if m and (m.group(1) or m.group(2)):
            if m.group(1):
                a = int(m.group(1))
                b = int(m.group(2)) if m.group(2) else len(data) - 1
            else:
                a, b = max(0, len(data) - int(m.group(2))), len(data) - 1
            if a >= len(data) or a > b:
                return 416, b"", dict(headers, **{"Content-Range": f"bytes */{len(data)}"}), ctype
            b = min(b, len(data) - 1)
            return 206, data[a:b + 1], dict(headers, **{"Content-Range": f"bytes {a}-{b}/{len(data)}"}), ctype
        return 200, data, headers, ctype

    def _resolve_file(self, rtype, repo_id, rev, path, base):
        hub = self.hub
        with hub.lock:
            repo = hub.repos.get(hub.repo_key(repo_id, rtype))
            self._auth(repo)
            if repo is None:
                raise HubError(404, "Repository not found", "RepoNotFound")
            sha = hub._resolve(repo, rev)
            e = repo["commits"][sha]["files"].get(path)
        if e is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha}
        if e["lfs"]:
            headers.update({"X-Linked-Etag": f'"{e["sha256"]}"', "X-Linked-Size": str(e["size"]),
                            "ETag": f'"{e["oid"]}"'})
            if hub.cdn_host:
                cdn = f"http://{hub.cdn_host}:{hub.port}"
                headers["Location"] = hub.signed_url(cdn, f"/_cdn/{e['sha256']}")
                return 302, b"", headers, "text/plain"
            headers["ETag"] = f'"{e["sha256"]}"'
            return self._ranged(hub._read_entry(e), headers, "application/octet-stream")
        headers["ETag"] = f'"{e["oid"]}"'
        return self._ranged(hub._read_entry(e), headers, "text/plain; charset=utf-8")

    # ---------------------------------------------------------------- admin
    def _admin(self):
        hub = self.hub
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        body = self._read_body()
        m, path = self.command, url.path.rstrip("/")
        try:
            if path == "/_admin/faults":
                if m == "POST":
                    rules = json.loads(body or b"[]")
                    ids = [hub.add_fault(**r) for r in (rules if isinstance(rules, list) else [rules])]
                    return self._send(200, {"ids": ids})
                if m == "DELETE":
                    hub.clear_faults()
                    return self._send(200, {})
                return self._send(200, hub.faults())
            if path == "/_admin/log":
                if m == "DELETE":
                    hub.clear_log()
                    return self._send(200, {})
                return self._send(200, hub.log()[int(q.get("since", 0)):])
            if path == "/_admin/stats":
                return self._send(200, hub.stats())
            if path in ("/_admin/commits", "/_admin/files"):
                args = (q["repo"], q.get("revision", "main"), q.get("type", "model"))
                if path == "/_admin/commits":
                    return self._send(200, hub.commits(*args))
                return self._send(200, hub.entries(*args))
            raise HubError(404, "unknown admin endpoint")
        except HubError as err:
            self._error(err)
        except (ValueError, TypeError, KeyError) as err:
            self._error(HubError(400, f"bad admin request: {err}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1", help="loopback only")
    ap.add_argument("--root", required=True)
    ap.add_argument("--token", default="hf_test")
    ap.add_argument("--user", default="test-user")
    ap.add_argument("--lfs-threshold", type=int, default=10 * MB)
    ap.add_argument("--binary-threshold", type=int, default=1 * MB)
    ap.add_argument("--multipart-threshold", type=int, default=20 * MB)
    ap.add_argument("--chunk-size", type=int, default=8 * MB)
    ap.add_argument("--tree-page-size", type=int, default=1000)
    ap.add_argument("--verify", action="store_true", help="add the LFS verify action")
    ap.add_argument("--no-gitattributes", action="store_true", help="new repositories start empty")
    ap.add_argument("--cdn-host", default=None, help="redirect LFS downloads to this host name (e.g. localhost)")
    a = ap.parse_args()
    try:
        hub = HubServer(a.root, token=a.token, user=a.user, port=a.port, host=a.host, lfs_threshold=a.lfs_threshold,
                        binary_threshold=a.binary_threshold, multipart_threshold=a.multipart_threshold,
                        chunk_size=a.chunk_size, tree_page_size=a.tree_page_size, verify=a.verify,
                        initial_gitattributes=not a.no_gitattributes, cdn_host=a.cdn_host)
    except ValueError as err:
        print(f"hub_server: {err}", file=sys.stderr)
        return 2
    hub.start()
    print(hub.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
