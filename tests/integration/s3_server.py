#!/usr/bin/env python3
"""A local S3-compatible server for the tests of mds-hub-sync's s3:// destination: moto's server mode (moto 5)
on loopback, in a thread of the test process, with AWS Signature V4 enforced and fault injection.

Signatures: moto checks SigV4 (botocore recomputes the signature with the secret it holds) on every S3 call once
ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT. start() lets the first IAM calls
through unauthenticated (POST /moto-api/reset-auth with a count of "inf"), creates with them an IAM user, a policy
allowing s3:* on *, and an access key, then sets the count to 0 (POST /moto-api/reset-auth "0"): from then on every
request must be signed with that key, a wrong secret gets 403 SignatureDoesNotMatch. start() checks all this
before returning (a request signed with a wrong secret and an unsigned one are refused, a good one is not).
In front of moto, what it does not check and S3 does (for requests signed with the Authorization header):
  - no Authorization header (and no presigned X-Amz-Signature): 403 AccessDenied (moto answers a 500 there);
  - no x-amz-content-sha256: 400 InvalidRequest; a hex x-amz-content-sha256 that is not the sha256 of the body
    received: 400 XAmzContentSHA256Mismatch (moto signs with the header's value but never hashes the body);
  - x-amz-date more than 15 minutes off: 403 RequestTimeTooSkewed; a credential scope whose date is not
    x-amz-date's, or whose region / service is not this server's: 400 AuthorizationHeaderMalformed;
  - a body shorter than its Content-Length (the client died mid-request): dropped, nothing stored (moto would
    store the truncated part).
And where moto's answers differ from S3's: ListParts' document is <ListPartsResult> (moto 5.2 answers
<ListPartsResponse>).

Faults (add_fault): rules matched in order against METHOD and a regex searched in the raw request target
(path as sent, percent-encoded, + "?" + query); each fires `times` times after `skip` matches:
  status=500 / 503 / 429 ... (an S3 <Error> document; 503 defaults to code SlowDown; retry_after -> Retry-After),
  delay=S (wait S seconds, then handle normally), delay_after=S (handle, then hold the answer S seconds),
  drop_after_read=N (read N bytes of the body, then close the socket without an answer),
  apply_first=True: the request is applied by moto, then its answer is lost: replaced by `status`, or without a
  status the connection is closed.
Status faults read the whole body first (the answer is never a reset).

Log (log()): one entry per request, appended when it arrives (before its answer leaves): method, path (raw),
query (raw), key (the decoded path), bytes (body bytes read), status (None: dropped or in flight), fault (rule
id or None), t (time.monotonic() at arrival), done (time.monotonic() when handled). Requests made by client()
(the test's own boto3 clients) are neither logged nor faulted.

moto's backends are process-global: one S3Server per process at a time (start() resets them).

    with S3Server() as s3:
        s3.endpoint, s3.access_key, s3.secret_key, s3.region
        boto = s3.client()                      # signed with the server's key
        s3.add_fault(method="PUT", path=r"partNumber=2&", status=503, retry_after=1)
        s3.log(); s3.clear_log(); s3.wait_idle()
Command line: python s3_server.py [--port N] prints the endpoint and the keys, serves until SIGINT / SIGTERM."""
import datetime
import hashlib
import io
import ipaddress
import json
import re
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
from xml.sax.saxutils import escape

from werkzeug.serving import ThreadedWSGIServer

from moto import settings as moto_settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

ADMIN_AGENT = "mds-s3-server-admin"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
_DEFAULT_CODES = {400: "BadRequest", 403: "AccessDenied", 408: "RequestTimeout", 429: "TooManyRequests",
                  500: "InternalError", 502: "BadGateway", 503: "SlowDown", 504: "GatewayTimeout"}
_DEFAULT_MESSAGES = {"SlowDown": "Please reduce your request rate.",
                     "InternalError": "We encountered an internal error. Please try again."}


class _Drop(Exception):
    """Close the connection now, without (the rest of) an answer."""


class _Server(ThreadedWSGIServer):
    """werkzeug's threaded server (what make_server(threaded=True) builds), keeping its handler threads so that
    stop() can wait for the requests in flight, and closing the connections that have not sent a request yet."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handlers, self.busy, self.handlers_lock = [], set(), threading.Lock()
        self.errors = []

    def process_request(self, request, client_address):
        t = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        with self.handlers_lock:
            self.handlers = [(h, r) for h, r in self.handlers if h.is_alive()] + [(t, request)]
        t.start()

    def set_busy(self, request, busy):
        with self.handlers_lock:
            (self.busy.add if busy else self.busy.discard)(request)

    def in_flight(self):
        with self.handlers_lock:
            return len(self.busy)

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
        return all(not t.is_alive() for t, _ in handlers)

    def log(self, type, message, *args):  # werkzeug's request / error log: kept, not printed
        if type == "error":
            self.errors.append(message % args if args else message)


class _Handler(MotoRequestHandler):
    protocol_version = "HTTP/1.1"  # set here: werkzeug would otherwise set it on MotoRequestHandler itself

    def parse_request(self):
        self.server.set_busy(self.request, True)
        return super().parse_request()

    def handle_one_request(self):
        try:
            super().handle_one_request()
        finally:
            self.server.set_busy(self.request, False)

    def handle_expect_100(self):
        return True  # werkzeug's run_wsgi sends the 100 Continue (http.server would send a second one)

    def connection_dropped(self, error, environ=None):
        # Also what the middleware raises to drop a connection: read no further request from it (the rest of the
        # body may sit in rfile's buffer and would be parsed as a request line).
        self.close_connection = True

    def log_request(self, code="-", size="-"):
        pass

    def log(self, type, message, *args):
        self.server.log(type, message, *args)


class S3Server:
    def __init__(self, region="us-east-1", port=0, host="127.0.0.1", enforce_auth=True, user="mds-sync-test"):
        if not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
            raise ValueError(f"refusing to listen on {host}: loopback only")
        self.host, self._port, self.region, self.user = host, port, region, user
        self.enforce_auth = enforce_auth
        self.auth_enforced = False
        self.access_key = self.secret_key = None
        self.lock = threading.Lock()
        self._faults, self._log, self._fault_seq = [], [], 0
        self._stopping = threading.Event()
        self.httpd = self.thread = None
        self._saved_auth = None

    # ---------------------------------------------------------------- lifecycle
    def start(self):
        app = DomainDispatcherApplication(create_backend_app)
        self.httpd = _Server(self.host, self._port, self._middleware(app), handler=_Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self._saved_auth = (moto_settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count)
        try:
            self._admin_post("/moto-api/reset", b"")  # a fresh moto: no buckets, no users
            self._admin_post("/moto-api/reset-auth", b"inf")
            iam = self.client("iam", access_key="AKIAIOSFODNN7SETUP00", secret_key="setup")
            iam.create_user(UserName=self.user)
            policy = iam.create_policy(PolicyName=f"{self.user}-s3-all", PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
            iam.attach_user_policy(UserName=self.user, PolicyArn=policy["Policy"]["Arn"])
            key = iam.create_access_key(UserName=self.user)["AccessKey"]
            self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
            if self.enforce_auth:
                self._admin_post("/moto-api/reset-auth", b"0")
                self.auth_enforced = True
                self._check_enforcement()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Stops accepting, cuts the fault delays short, waits for the requests in flight (a handler still storing
        the upload of a killed client must be done before the caller removes its files), then frees moto's
        objects and puts moto's auth settings back."""
        if self.httpd:
            self._stopping.set()
            self.httpd.shutdown()
            self.httpd.server_close()
            if not self.httpd.join_handlers(timeout_s=60):
                print("s3_server: requests still in flight after 60 s", file=sys.stderr)
            self.thread.join(10)
            self.httpd = None
            try:
                from moto.moto_api._internal.models import moto_api_backend
                moto_api_backend.reset()
            except Exception as err:  # noqa: BLE001 - best effort
                print(f"s3_server: moto reset: {err}", file=sys.stderr)
        if self._saved_auth:
            moto_settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = self._saved_auth
            self._saved_auth = None
        self.auth_enforced = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def endpoint(self):
        return f"http://{self.host}:{self.port}"

    @property
    def errors(self):
        """Tracebacks of requests moto failed on (werkzeug's 'Error on request')."""
        return list(self.httpd.errors) if self.httpd else []

    # ---------------------------------------------------------------- test API
    def client(self, service="s3", access_key=None, secret_key=None, region=None, retries=1):
        """A boto3 client for this server, signed with its key (or the given ones); its requests are neither
        logged nor faulted."""
        import boto3
        from botocore.config import Config
        return boto3.client(service, endpoint_url=self.endpoint, region_name=region or self.region,
                            aws_access_key_id=access_key or self.access_key,
                            aws_secret_access_key=secret_key or self.secret_key,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": retries,
                                                                                   "mode": "standard"},
                                          user_agent_extra=ADMIN_AGENT, connect_timeout=10, read_timeout=60))

    def add_fault(self, method=None, path=".*", times=1, skip=0, status=None, code=None, message=None,
                  retry_after=None, delay=None, delay_after=None, drop_after_read=None, apply_first=False):
        if status is None and drop_after_read is None and delay is None and delay_after is None and not apply_first:
            raise ValueError("a fault needs status, drop_after_read, delay, delay_after or apply_first")
        if apply_first and drop_after_read is not None:
            raise ValueError("apply_first without status drops the connection once the request is applied")
        rule = {"method": method.upper() if method else None, "path": path, "regex": re.compile(path),
                "times": times, "skip": skip, "status": status, "code": code, "message": message,
                "retry_after": retry_after, "delay": delay, "delay_after": delay_after,
                "drop_after_read": drop_after_read, "apply_first": bool(apply_first), "fired": 0, "seen": 0}
        with self.lock:
            self._fault_seq += 1
            rule["id"] = self._fault_seq
            self._faults.append(rule)
        return rule["id"]

    def drop_fault(self, fault_id):
        """Lets a fault fire no more (e.g. on apply_first, a lost answer: the request was applied)."""
        with self.lock:
            self._faults = [r for r in self._faults if r["id"] != fault_id]

    def clear_faults(self):
        with self.lock:
            self._faults = []

    def faults(self):
        with self.lock:
            return [{k: v for k, v in r.items() if k != "regex"} for r in self._faults]

    def log(self, clear=False):
        with self.lock:
            out = [dict(e) for e in self._log]
            if clear:
                self._log = []
            return out

    def clear_log(self):
        self.log(clear=True)

    def wait_idle(self, timeout_s=30):
        """Waits until no request is being handled (e.g. the one a killed client was sending)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.httpd.in_flight() == 0:
                return True
            time.sleep(0.02)
        return False

    # ---------------------------------------------------------------- internals
    def _admin_post(self, path, body):
        req = urllib.request.Request(self.endpoint + path, data=body, method="POST",
                                     headers={"User-Agent": ADMIN_AGENT, "Content-Type": "text/plain"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def _check_enforcement(self):
        import botocore.exceptions
        good = self.client()
        good.list_buckets()
        try:
            self.client(secret_key="not-" + self.secret_key).list_buckets()
            raise RuntimeError("moto accepted a request signed with a wrong secret")
        except botocore.exceptions.ClientError as err:
            if err.response["Error"]["Code"] != "SignatureDoesNotMatch":
                raise RuntimeError(f"a wrong secret: {err.response['Error']}") from err
        req = urllib.request.Request(self.endpoint + "/", method="GET", headers={"User-Agent": ADMIN_AGENT})
        try:
            urllib.request.urlopen(req, timeout=30).read()
            raise RuntimeError("an unsigned request was accepted")
        except urllib.error.HTTPError as err:
            if err.code != 403:
                raise RuntimeError(f"an unsigned request: HTTP {err.code}") from err

    def _match_fault(self, method, target):
        with self.lock:
            for r in self._faults:
                if r["fired"] >= r["times"]:
                    continue
                if r["method"] and r["method"] != method:
                    continue
                if not r["regex"].search(target):
                    continue
                r["seen"] += 1
                if r["seen"] <= r["skip"]:
                    continue
                r["fired"] += 1
                return dict(r)
        return None

    @staticmethod
    def _error(start_response, status, code, message, headers=(), resource="", method="GET"):
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{escape(code)}</Code>'
                f"<Message>{escape(message)}</Message><Resource>{escape(resource)}</Resource>"
                f"<RequestId>{secrets.token_hex(8).upper()}</RequestId></Error>").encode()
        start_response(f"{status} {_REASONS.get(status, 'Error')}",
                       [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), *headers])
        return [b""] if method == "HEAD" else [body]

    @staticmethod
    def _read_body(environ, limit=None):
        """Reads the request body (at most `limit` bytes). Returns (bytes, complete)."""
        stream = environ["wsgi.input"]
        length = environ.get("CONTENT_LENGTH")
        want = int(length) if length else None
        if want is None and not environ.get("wsgi.input_terminated"):
            want = 0
        if limit is not None:
            want = limit if want is None else min(want, limit)
        chunks, got = [], 0
        while want is None or got < want:
            n = 1 << 20 if want is None else min(1 << 20, want - got)
            try:
                data = stream.read(n)
            except (ConnectionError, OSError, ValueError):
                data = b""
            if not data:
                break
            chunks.append(data)
            got += len(data)
        body = b"".join(chunks)
        complete = want is None or got >= want
        return body, complete

    def _auth_problem(self, environ, body):
        """What S3 checks of a signed request that moto does not: None, or (status, code, message)."""
        auth = environ.get("HTTP_AUTHORIZATION")
        query = environ.get("QUERY_STRING", "")
        if not auth:
            if "X-Amz-Signature=" in query or "Signature=" in query:
                return None  # presigned: moto checks it
            return 403, "AccessDenied", "Access Denied"
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return 400, "InvalidRequest", "Please use AWS4-HMAC-SHA256."
        sha = environ.get("HTTP_X_AMZ_CONTENT_SHA256")
        if not sha:
            return 400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
        if _HEX64.match(sha) and hashlib.sha256(body).hexdigest() != sha:
            return (400, "XAmzContentSHA256Mismatch",
                    "The provided 'x-amz-content-sha256' header does not match what was computed.")
        amz_date = environ.get("HTTP_X_AMZ_DATE", "")
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return 403, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 15 * 60:
            return (403, "RequestTimeTooSkewed",
                    "The difference between the request time and the current time is too large.")
        m = re.search(r"Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request", auth)
        if not m:
            return 400, "AuthorizationHeaderMalformed", "The authorization header is malformed."
        malformed = "The authorization header is malformed; "
        if m.group(2) != amz_date[:8]:
            return 400, "AuthorizationHeaderMalformed", malformed + "the credential scope's date is not x-amz-date's."
        if m.group(3) != self.region:
            return (400, "AuthorizationHeaderMalformed",
                    malformed + f"the region '{m.group(3)}' is wrong; expecting '{self.region}'")
        if m.group(4) != "s3":
            return 400, "AuthorizationHeaderMalformed", malformed + f"the service '{m.group(4)}' is not s3."
        return None

    def _middleware(self, app):
        server = self

        def wrapped(environ, start_response):
            method = environ["REQUEST_METHOD"].upper()
            raw = environ.get("REQUEST_URI") or environ.get("RAW_URI") or environ.get("PATH_INFO", "/")
            raw_path, _, raw_query = raw.partition("?")
            if not raw_query:
                raw_query = environ.get("QUERY_STRING", "")
            admin = ADMIN_AGENT in environ.get("HTTP_USER_AGENT", "")
            target = raw_path + ("?" + raw_query if raw_query else "")
            entry = None
            if not admin:
                entry = {"method": method, "path": raw_path, "query": raw_query, "key": urllib.parse.unquote(raw_path),
                         "bytes": 0, "status": None, "fault": None, "t": time.monotonic(), "done": None}
                with server.lock:
                    server._log.append(entry)
            fault = None if admin else server._match_fault(method, target)

            def finish(status):
                if entry is not None:
                    with server.lock:
                        entry["status"], entry["done"] = status, time.monotonic()

            def drop():
                finish(None)
                sock = environ.get("werkzeug.socket")
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                # werkzeug treats a ConnectionError from the app as a dropped connection: no answer is written.
                raise ConnectionAbortedError("s3_server: connection dropped (fault or short body)")

            if fault:
                if entry is not None:
                    entry["fault"] = fault["id"]
                if fault["delay"]:
                    server._stopping.wait(fault["delay"])
                if fault["drop_after_read"] is not None:
                    body, _ = server._read_body(environ, limit=fault["drop_after_read"])
                    entry["bytes"] = len(body)
                    drop()

            body, complete = server._read_body(environ)
            if entry is not None:
                entry["bytes"] = len(body)
            if not complete:
                drop()  # the client went away mid-body: nothing is applied
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            environ.pop("HTTP_TRANSFER_ENCODING", None)
            environ["wsgi.input_terminated"] = True

            if fault and fault["status"] and not fault["apply_first"]:
                finish(fault["status"])
                return server._fault_answer(start_response, fault, raw_path, method)

            if server.auth_enforced and not raw_path.startswith("/moto-api/"):
                problem = server._auth_problem(environ, body)
                if problem:
                    finish(problem[0])
                    return server._error(start_response, *problem, resource=urllib.parse.unquote(raw_path),
                                         method=method)

            captured = {}

            def capture(status, headers, exc_info=None):
                captured["status"], captured["headers"] = status, headers
                return lambda data: captured.setdefault("written", []).append(data)

            chunks = app(environ, capture)
            try:
                content = b"".join(captured.pop("written", [])) + b"".join(chunks)
            finally:
                if hasattr(chunks, "close"):
                    chunks.close()
            status = int(captured["status"].split()[0])
            if method == "GET" and status == 200 and "uploadId=" in raw_query:  # ListParts: S3's root element
                content = re.sub(rb"<(/?)ListPartsResponse\b", rb"<\1ListPartsResult", content, count=2)
            if fault and fault["apply_first"]:  # applied; its answer is lost
                if fault["status"]:
                    finish(fault["status"])
                    return server._fault_answer(start_response, fault, raw_path, method)
                drop()
            if fault and fault["delay_after"]:
                server._stopping.wait(fault["delay_after"])
            finish(status)
            headers = [(k, v) for k, v in captured["headers"]
                       if k.lower() not in ("content-length", "transfer-encoding")]
            if method != "HEAD" or content:
                headers.append(("Content-Length", str(len(content))))
            else:
                orig = [v for k, v in captured["headers"] if k.lower() == "content-length"]
                headers += [("Content-Length", orig[0])] if orig else []
            start_response(captured["status"], headers)
            return [content]

        return wrapped

    def _fault_answer(self, start_response, fault, raw_path, method):
        status = fault["status"]
        code = fault["code"] or _DEFAULT_CODES.get(status, "InternalError")
        message = fault["message"] or _DEFAULT_MESSAGES.get(code, f"injected fault {fault['id']}")
        headers = [("Retry-After", str(fault["retry_after"]))] if fault["retry_after"] is not None else []
        if fault["delay_after"]:
            self._stopping.wait(fault["delay_after"])
        return self._error(start_response, status, code, message, headers, resource=urllib.parse.unquote(raw_path),
                           method=method)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--no-auth", action="store_true", help="do not enforce signatures")
    args = ap.parse_args()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with S3Server(region=args.region, port=args.port, enforce_auth=not args.no_auth) as s3:
        print(json.dumps({"endpoint": s3.endpoint, "region": s3.region, "access_key": s3.access_key,
                          "secret_key": s3.secret_key, "auth_enforced": s3.auth_enforced}), flush=True)
        while not done.wait(1):
            pass


if __name__ == "__main__":
    main()
