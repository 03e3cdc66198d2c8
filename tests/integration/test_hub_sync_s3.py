#!/usr/bin/env python3
"""mds-hub-sync LOCAL_DIR s3://BUCKET[/PREFIX] against s3_server.py (moto's S3 on loopback, AWS Signature V4
enforced: every request must be signed with the server's IAM key; plus fault injection and a request log):
  - the server itself: a request signed by boto3 with a wrong secret, or not signed, is refused;
  - usage errors (exit 2, nothing sent): --revision / --path-in-repo / --private with s3://, --part-size-mib 4,
    an empty bucket name, plain http to a remote host;
  - a missing bucket without --create-repo: exit 1 naming the bucket; a wrong secret: exit 1,
    SignatureDoesNotMatch, no secret printed;
  - basic: a tree (text, binary, empty, nested, names with spaces, unicode, + = & ~ % ( )) goes to PREFIX/REL,
    byte for byte, each object with x-amz-meta-sha256; .git/ and .cache/mds-hub-sync/ stay home; a re-run sends
    nothing (no PUT / POST / DELETE); a same-size change sends that file only; an object put by someone else
    without metadata but with the local MD5 as ETag is unchanged, one with other bytes is replaced;
  - a file deleted locally stays (remote_only); --dry-run --delete changes nothing; --delete with --include
    deletes only the matching remote-only keys, without globs all remote-only keys under the prefix, never a key
    outside it (even one that shares the prefix's characters); --include / --exclude;
  - credentials from ~/.aws/credentials (AWS_PROFILE), the endpoint from AWS_ENDPOINT_URL_S3, --state-file;
  - multipart: 13 MiB with --part-size-mib 5 -> 3 parts (ETag "-3"), each part sent once;
  - faults (500 x2 on a PUT, 503 SlowDown + Retry-After on a PUT and on a part, 500 on a part, 429 on the
    listing, a connection dropped mid-part, a slow answer, a lost CompleteMultipartUpload answer): exit 0, every
    file in the bucket exactly once with its bytes, Retry-After honoured (+1 s), no upload left in progress;
  - kill -9 mid multipart (40 MiB, 5 MiB parts, --jobs 1), then a re-run: the same upload is resumed (no new
    CreateMultipartUpload), the parts stored before the kill are not sent again, one complete object;
  - giving up (a PUT that always fails; run in the background meanwhile): 6 tries 1, 2, 4, 8, 8 s apart, exit
    1, the others uploaded, `failed` names it.
Exits 77 without the binary or moto / boto3."""
import glob
import hashlib
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testkit  # noqa: E402
from testkit import binary, check, finish, skip  # noqa: E402

TOOL = binary("mds-hub-sync")
try:
    importlib.import_module("boto3")  # s3_server's client() needs it
    import botocore.exceptions
    from s3_server import S3Server
except ImportError as err:
    skip(f"moto / boto3 not importable: {err}")

KB, MB = 1024, 1024 * 1024
WRONG_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWRONGSECRET"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def local_files(d):
    """{REL: bytes} of what the tool uploads: everything but .git/ and .cache/."""
    out = {}
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if not (root == d and x in (".git", ".cache"))]
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d).replace(os.sep, "/")] = f.read()
    return out


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Ctx:
    def __init__(self, s3, home):
        self.s3, self.home, self.boto = s3, home, s3.client()

    def env(self, secret=None, extra=None, keys=True):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home, "LANG": "C.UTF-8",
               "LC_ALL": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
        if keys:
            env["AWS_ACCESS_KEY_ID"] = self.s3.access_key
            env["AWS_SECRET_ACCESS_KEY"] = secret or self.s3.secret_key
        env.update(extra or {})
        return env

    def argv(self, local, dest, args, endpoint=True):
        argv = [TOOL, local, dest, "--json", *args]
        if endpoint and "--endpoint" not in args:
            argv += ["--endpoint", self.s3.endpoint]
        return argv

    def run(self, local, dest, *args, expect_rc=0, secret=None, extra_env=None, keys=True, endpoint=True,
            what=None, timeout=120):
        """Runs the tool; checks its exit status and that no secret is printed. Returns (json or None, stderr)."""
        argv = self.argv(local, dest, args, endpoint)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env=self.env(secret, extra_env, keys))
        what = what or " ".join(args) or "(no flags)"
        self.no_secret(r.stdout + r.stderr, what)
        check(r.returncode == expect_rc, f"{what}: exit {r.returncode}, expected {expect_rc}: {r.stderr[-3000:]}")
        out = None
        if r.stdout.strip():
            try:
                out = json.loads(r.stdout)
            except ValueError:
                check(False, f"{what}: --json output is not one JSON object: {r.stdout[:2000]}")
        return out, r.stderr

    def no_secret(self, text, what):
        for secret in (self.s3.secret_key, WRONG_SECRET):
            check(secret not in text, f"{what}: a secret key is printed")

    def keys(self, bucket, prefix=""):
        out = []
        for page in self.boto.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return sorted(out)

    def get(self, bucket, key):
        return self.boto.get_object(Bucket=bucket, Key=key)["Body"].read()

    def head(self, bucket, key):
        try:
            return self.boto.head_object(Bucket=bucket, Key=key)
        except botocore.exceptions.ClientError as err:
            if err.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def uploads(self, bucket):
        return self.boto.list_multipart_uploads(Bucket=bucket).get("Uploads", [])

    def bucket_holds(self, bucket, prefix, files, what, exact=True, foreign=()):
        """The bucket holds every file of {REL: bytes} at PREFIX/REL with its bytes and sha256 metadata (and,
        when exact, nothing else under the prefix). Keys in `foreign` were put by someone else without metadata:
        their ETag is the MD5 of the bytes instead."""
        pre = f"{prefix}/" if prefix else ""
        want = sorted(pre + rel for rel in files)
        got = self.keys(bucket, pre)
        if exact:
            check(got == want, f"{what}: keys under '{pre}': {got}, expected {want}")
        else:
            missing = sorted(set(want) - set(got))
            check(not missing, f"{what}: missing keys {missing}")
        ok = True
        for rel, data in files.items():
            key = pre + rel
            if key not in got:
                continue
            h = self.head(bucket, key)
            ok &= check(h is not None and h["ContentLength"] == len(data), f"{what}: {key}: size")
            if key in foreign:
                ok &= check(h is not None and h["ETag"].strip('"') == hashlib.md5(data).hexdigest(),
                            f"{what}: {key}: the ETag is not the MD5 of the bytes")
            else:
                ok &= check(h is not None and h.get("Metadata", {}).get("sha256") == sha256(data),
                            f"{what}: {key}: x-amz-meta-sha256 {h and h.get('Metadata')} is not the bytes' sha256")
            ok &= check(self.get(bucket, key) == data, f"{what}: {key}: the bytes differ")
        return ok

    def mark(self):
        return len(self.s3.log())

    def requests(self, bucket, since=0, methods=None):
        """Log entries (since a mark) for the bucket (path /BUCKET or /BUCKET/...)."""
        out = []
        for e in self.s3.log()[since:]:
            if e["path"] == f"/{bucket}" or e["path"].startswith(f"/{bucket}/"):
                if methods is None or e["method"] in methods:
                    out.append(e)
        return out


def key_of(entry, bucket):
    """The object key of a logged request on /BUCKET/KEY."""
    return entry["key"][len(bucket) + 2:]


def query_has(entry, name, value=None):
    for part in entry["query"].split("&"):
        k, _, v = part.partition("=")
        if k == name and (value is None or v == value):
            return True
    return False


# ------------------------------------------------------------------------------------------------ sections
def section_server(ctx):
    """The server enforces signatures: the tests would be meaningless otherwise."""
    s3 = ctx.s3
    check(s3.auth_enforced, "the S3 server enforces signatures")
    ctx.boto.create_bucket(Bucket="sig-check")
    try:
        s3.client(secret_key=WRONG_SECRET).put_object(Bucket="sig-check", Key="x", Body=b"x")
        check(False, "boto3 with a wrong secret: accepted")
    except botocore.exceptions.ClientError as err:
        check(err.response["Error"]["Code"] == "SignatureDoesNotMatch" and
              err.response["ResponseMetadata"]["HTTPStatusCode"] == 403,
              f"boto3 with a wrong secret: 403 SignatureDoesNotMatch, not {err.response['Error']}")
    try:
        urllib.request.urlopen(urllib.request.Request(f"{s3.endpoint}/sig-check/x", data=b"x", method="PUT"),
                               timeout=30)
        check(False, "an unsigned PUT: accepted")
    except urllib.error.HTTPError as err:
        check(err.code == 403, f"an unsigned PUT: {err.code}")
    check(ctx.keys("sig-check") == [], "nothing was stored by the refused requests")


def section_usage(ctx, tmp):
    d = os.path.join(tmp, "usage")
    write(os.path.join(d, "a.txt"), b"a\n")
    m = ctx.mark()
    for args, dest in ((["--revision", "main"], "s3://usage-bkt"), (["--path-in-repo", "x"], "s3://usage-bkt"),
                       (["--create-repo", "--private"], "s3://usage-bkt"), (["--part-size-mib", "4"], "s3://usage-bkt"),
                       ([], "s3://")):
        ctx.run(d, dest, *args, expect_rc=2, what=f"usage: {dest} {' '.join(args)}")
    _, err = ctx.run(d, "s3://usage-bkt", "--endpoint", "http://example.org", expect_rc=2,
                     what="plain http to a remote host")
    check("http" in err, f"plain http to a remote host: the message says why: {err}")
    sent = [e for e in ctx.s3.log()[m:] if not e["path"].startswith("/giveup")]  # (running in the background)
    check(sent == [], f"usage errors send nothing: {sent}")
    check(not os.path.exists(os.path.join(d, ".cache", "mds-hub-sync")) or
          not glob.glob(os.path.join(d, ".cache", "mds-hub-sync", "s3-*.json")),
          "usage errors leave no state file")


def section_missing_bucket_and_secret(ctx, run_dir, bucket, prefix):
    m = ctx.mark()
    _, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "-v", expect_rc=1, what="missing bucket")
    check(bucket in err, f"missing bucket: the message names it: {err}")
    check(not ctx.requests(bucket, m, ("PUT", "POST", "DELETE")), "missing bucket: nothing created or sent")
    ctx.boto.create_bucket(Bucket="secret-check")
    out, err = ctx.run(run_dir, "s3://secret-check/p", "-v", secret=WRONG_SECRET, expect_rc=1, what="wrong secret")
    check("SignatureDoesNotMatch" in err or "403" in err, f"wrong secret: the error says why: {err}")
    check(ctx.keys("secret-check") == [], "wrong secret: nothing stored")


def make_tree(run_dir):
    files = {
        "logs/main_log.txt": b" iteration      10/  292968 | lm loss: 9.1 |\n" * 200,
        "codecarbon/emissions.csv": b"timestamp,project_name,duration\n2026,tr11,3600\n",
        "tensorboard/events.out.tfevents.1700000000.jz1": os.urandom(70 * KB),
        "checkpoints/global_step300/layer_01-model_00-model_states.pt": os.urandom(300 * KB + 7),
        "empty.txt": b"",
        "deep/a/b/c/d/e.bin": os.urandom(1000),
        "dir with space/ü ñ+=&~%(1).txt": "naïve + = & ~ % ( )\n".encode(),
        "top level+plus=eq&amp~tilde.txt": b"x" * 33,
    }
    for rel, data in files.items():
        write(os.path.join(run_dir, rel), data)
    write(os.path.join(run_dir, ".git", "config"), b"[core]\n")
    write(os.path.join(run_dir, ".git", "objects", "ab", "cdef"), os.urandom(100))
    return files


def section_basic(ctx, run_dir, files, bucket, prefix):
    pre = prefix + "/"
    m = ctx.mark()
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--create-repo", "-v", what="first run")
    want = sorted(pre + rel for rel in files)
    check(out is not None and sorted(out["uploaded"]) == want and out["unchanged"] == 0 and out["failed"] == [] and
          out["deleted"] == [] and out["remote_only"] == [] and out["dry_run"] is False and out["commits"] == [] and
          out["uploaded_bytes"] == sum(len(v) for v in files.values()),
          f"first run: every file uploaded: {out} {err[-2000:]}")
    check(re.search(r"uploaded 8 file\(s\)", err), f"first run: the summary line: {err[-1000:]}")
    check(ctx.bucket_holds(bucket, prefix, local_files(run_dir), "first run"), "first run: the bucket holds the tree")
    check(not [k for k in ctx.keys(bucket) if "/.git/" in k or "/.cache/" in k or k.startswith((".git", ".cache"))],
          f"first run: .git and .cache are not uploaded: {ctx.keys(bucket)}")
    puts = ctx.requests(bucket, m, ("PUT",))
    check(sorted(key_of(e, bucket) for e in puts if e["key"] != f"/{bucket}") == want,
          f"first run: one PUT per file: {[e['key'] for e in puts]}")
    check(glob.glob(os.path.join(run_dir, ".cache", "mds-hub-sync", "s3-*.json")),
          "first run: the state file is LOCAL_DIR/.cache/mds-hub-sync/s3-*.json")

    # Someone else's objects: another prefix that shares our prefix's characters, and outside it.
    ctx.boto.put_object(Bucket=bucket, Key=f"{prefix}-old/keep.txt", Body=b"sibling prefix\n")
    ctx.boto.put_object(Bucket=bucket, Key="other/keep.txt", Body=b"outside the prefix\n")

    # A re-run sends nothing.
    m = ctx.mark()
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", what="re-run")
    check(out is not None and out["uploaded"] == [] and out["unchanged"] == len(files) and out["failed"] == [] and
          out["remote_only"] == [], f"re-run: nothing to send: {out} {err[-1000:]}")
    sent = ctx.requests(bucket, m, ("PUT", "POST", "DELETE"))
    check(sent == [], f"re-run: no PUT / POST / DELETE: {[(e['method'], e['key'], e['query']) for e in sent]}")
    _, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--quiet", what="--quiet re-run")
    check(err.strip() == "", f"--quiet: nothing on stderr: {err}")

    # A same-size change (new mtime) is the only file sent.
    changed = "tensorboard/events.out.tfevents.1700000000.jz1"
    p = os.path.join(run_dir, changed)
    write(p, os.urandom(70 * KB))
    st = os.stat(p)
    os.utime(p, (st.st_atime + 10, st.st_mtime + 10))
    m = ctx.mark()
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", what="a same-size change")
    check(out is not None and out["uploaded"] == [pre + changed] and out["unchanged"] == len(files) - 1,
          f"a same-size change is the only upload: {out} {err[-1000:]}")
    sent = [key_of(e, bucket) for e in ctx.requests(bucket, m, ("PUT", "POST"))]
    check(sent == [pre + changed], f"a same-size change: one PUT: {sent}")
    ctx.bucket_holds(bucket, prefix, local_files(run_dir), "after a change")

    # Objects put by someone else without metadata: same bytes (ETag = MD5) -> unchanged; other bytes -> sent.
    same, other = b"written by aws s3 cp\n", b"local version here\n"
    write(os.path.join(run_dir, "extern", "same.txt"), same)
    write(os.path.join(run_dir, "extern", "other.txt"), other)
    ctx.boto.put_object(Bucket=bucket, Key=pre + "extern/same.txt", Body=same)
    ctx.boto.put_object(Bucket=bucket, Key=pre + "extern/other.txt", Body=b"REMOTE version !!!\n")
    m = ctx.mark()
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", what="objects without metadata")
    check(out is not None and out["uploaded"] == [pre + "extern/other.txt"] and out["unchanged"] == len(files) + 1,
          f"an object without metadata whose ETag is the local MD5 is unchanged, another is replaced: {out} {err}")
    sent = [key_of(e, bucket) for e in ctx.requests(bucket, m, ("PUT", "POST"))]
    check(sent == [pre + "extern/other.txt"], f"objects without metadata: only the different one is sent: {sent}")
    check(ctx.get(bucket, pre + "extern/other.txt") == other, "the replaced object holds the local bytes")
    return files


def section_delete(ctx, run_dir, bucket, prefix):
    pre = prefix + "/"
    gone = "checkpoints/global_step300/layer_01-model_00-model_states.pt"
    os.remove(os.path.join(run_dir, gone))
    m = ctx.mark()
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", what="deleted locally")
    check(out is not None and out["remote_only"] == [pre + gone] and out["deleted"] == [] and out["uploaded"] == [],
          f"a file deleted locally is remote-only and kept: {out} {err[-1000:]}")
    check(ctx.head(bucket, pre + gone) is not None, "a file deleted locally stays in the bucket")
    check(not ctx.requests(bucket, m, ("DELETE", "POST")), "deleted locally: nothing deleted")

    # Remote-only keys: one matching --include 'logs/*', one not; plus the other prefixes' objects.
    ctx.boto.put_object(Bucket=bucket, Key=pre + "logs/old.txt", Body=b"old log\n")
    ctx.boto.put_object(Bucket=bucket, Key=pre + "ckpt/stale.bin", Body=b"stale\n")
    before = ctx.keys(bucket)

    m = ctx.mark()
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--dry-run", "--delete", "-v", what="--dry-run --delete")
    would = sorted([pre + gone, pre + "logs/old.txt", pre + "ckpt/stale.bin"])
    check(out is not None and out["dry_run"] is True and sorted(out["deleted"]) in ([], would),
          f"--dry-run --delete: {out}")
    for k in would:
        check(f"would delete {k}" in err, f"--dry-run --delete -v says 'would delete {k}': {err[-2000:]}")
    check(ctx.keys(bucket) == before, "--dry-run --delete changes nothing")
    sent = ctx.requests(bucket, m, ("PUT", "POST", "DELETE"))
    check(sent == [], f"--dry-run --delete: no PUT / POST / DELETE: {[(e['method'], e['key']) for e in sent]}")

    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--delete", "--include", "logs/*", what="--delete --include")
    check(out is not None and out["deleted"] == [pre + "logs/old.txt"], f"--delete --include 'logs/*': {out} {err}")
    check(ctx.keys(bucket) == sorted(set(before) - {pre + "logs/old.txt"}),
          f"--delete --include 'logs/*' deletes only the matching remote-only key: {ctx.keys(bucket)}")

    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--delete", what="--delete")
    check(out is not None and sorted(out["deleted"]) == sorted([pre + gone, pre + "ckpt/stale.bin"]) and
          out["failed"] == [], f"--delete deletes the remote-only keys under the prefix: {out} {err}")
    check(ctx.head(bucket, f"{prefix}-old/keep.txt") is not None and ctx.head(bucket, "other/keep.txt") is not None,
          f"--delete leaves keys outside the prefix alone: {ctx.keys(bucket)}")
    ctx.bucket_holds(bucket, prefix, local_files(run_dir), "after --delete", foreign={pre + "extern/same.txt"})


def section_globs(ctx, run_dir, bucket, prefix):
    pre = prefix + "/"
    write(os.path.join(run_dir, "logs", "new.txt"), b"new log\n")
    write(os.path.join(run_dir, "logs", "skip.tmp"), b"temporary\n")
    write(os.path.join(run_dir, "tensorboard", "events.out.tfevents.2"), os.urandom(2 * KB))
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--include", "logs/*", "--exclude", "*.tmp",
                       what="--include --exclude")
    check(out is not None and out["uploaded"] == [pre + "logs/new.txt"] and out["failed"] == [],
          f"--include 'logs/*' --exclude '*.tmp': {out} {err}")
    check(ctx.head(bucket, pre + "logs/skip.tmp") is None and
          ctx.head(bucket, pre + "tensorboard/events.out.tfevents.2") is None, "the globs keep the others home")
    out, _ = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "--exclude", "*.tmp", what="--exclude")
    check(out is not None and out["uploaded"] == [pre + "tensorboard/events.out.tfevents.2"],
          f"--exclude '*.tmp': the rest: {out}")
    os.remove(os.path.join(run_dir, "logs", "skip.tmp"))


def section_profile(ctx, tmp, run_dir, bucket, prefix):
    """Keys from ~/.aws/credentials (AWS_PROFILE), the endpoint from AWS_ENDPOINT_URL_S3, --state-file."""
    home = os.path.join(tmp, "profile-home")
    write(os.path.join(home, ".aws", "credentials"),
          f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {WRONG_SECRET}\n\n"
          f"[mds]\naws_access_key_id = {ctx.s3.access_key}\naws_secret_access_key = {ctx.s3.secret_key}\n".encode())
    write(os.path.join(home, ".aws", "config"), b"[profile mds]\nregion = us-east-1\n")
    state = os.path.join(tmp, "profile-state", "state.json")
    os.makedirs(os.path.dirname(state))
    env = {"HOME": home, "AWS_PROFILE": "mds", "AWS_ENDPOINT_URL_S3": ctx.s3.endpoint}
    out, err = ctx.run(run_dir, f"s3://{bucket}/{prefix}", "-v", "--state-file", state, keys=False, endpoint=False,
                       extra_env=env, what="credentials from a profile")
    check(out is not None and out["uploaded"] == [] and out["failed"] == [] and out["unchanged"] > 0,
          f"credentials from ~/.aws/credentials [mds], endpoint from AWS_ENDPOINT_URL_S3: {out} {err[-1000:]}")
    check(os.path.exists(state), "--state-file: the state is written there")


def section_multipart(ctx, tmp, bucket):
    d = os.path.join(tmp, "mp")
    big = os.urandom(13 * MB + 123)
    write(os.path.join(d, "model.safetensors"), big)
    write(os.path.join(d, "config.json"), b'{"n_layer": 2}\n')
    m = ctx.mark()
    out, err = ctx.run(d, f"s3://{bucket}/mp", "--part-size-mib", "5", what="multipart")
    check(out is not None and sorted(out["uploaded"]) == ["mp/config.json", "mp/model.safetensors"] and
          out["failed"] == [], f"multipart: {out} {err[-1000:]}")
    h = ctx.head(bucket, "mp/model.safetensors")
    check(h is not None and h["ETag"].strip('"').endswith("-3"), f"13 MiB in 5 MiB parts: 3 parts: {h and h['ETag']}")
    ctx.bucket_holds(bucket, "mp", local_files(d), "multipart")
    reqs = [e for e in ctx.requests(bucket, m) if key_of(e, bucket) == "mp/model.safetensors"]
    creates = [e for e in reqs if e["method"] == "POST" and query_has(e, "uploads")]
    parts = sorted(int(dict(p.partition("=")[::2] for p in e["query"].split("&"))["partNumber"])
                   for e in reqs if e["method"] == "PUT" and query_has(e, "partNumber"))
    completes = [e for e in reqs if e["method"] == "POST" and query_has(e, "uploadId")]
    plain = [e for e in reqs if e["method"] == "PUT" and not query_has(e, "partNumber")]
    check(len(creates) == 1 and parts == [1, 2, 3] and len(completes) == 1 and not plain,
          f"multipart: 1 create, parts 1-3 once each, 1 complete, no single PUT: "
          f"{[(e['method'], e['query'][:40]) for e in reqs]}")
    small = [e for e in ctx.requests(bucket, m, ("PUT", "POST")) if key_of(e, bucket) == "mp/config.json"]
    check(len(small) == 1 and small[0]["method"] == "PUT" and not small[0]["query"], "a small file: one PUT")
    check(ctx.uploads(bucket) == [], "multipart: no upload left in progress")
    m = ctx.mark()
    out, _ = ctx.run(d, f"s3://{bucket}/mp", "--part-size-mib", "5", what="multipart re-run")
    check(out is not None and out["uploaded"] == [] and out["unchanged"] == 2, f"multipart re-run: nothing: {out}")
    check(not ctx.requests(bucket, m, ("PUT", "POST")), "multipart re-run: nothing sent")


def start_give_up(ctx, tmp):
    """A PUT that always fails (500): started in the background, checked by finish_give_up."""
    bucket = "giveup"
    d = os.path.join(tmp, "giveup")
    write(os.path.join(d, "ok1.txt"), b"fine\n")
    write(os.path.join(d, "ok2.bin"), os.urandom(20 * KB))
    write(os.path.join(d, "doomed.bin"), os.urandom(10 * KB))
    ctx.boto.create_bucket(Bucket=bucket)
    ctx.s3.add_fault(method="PUT", path=rf"^/{bucket}/doomed\.bin$", status=500, times=1000)
    argv = ctx.argv(d, f"s3://{bucket}", ["--jobs", "2"])
    p = subprocess.Popen(argv, env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, d, bucket, time.monotonic()


def finish_give_up(ctx, job):
    p, d, bucket, t0 = job
    try:
        stdout, stderr = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        stdout, stderr = p.communicate()
    ctx.no_secret(stdout + stderr, "give up")
    check(p.returncode == 1, f"give up: exit {p.returncode}, expected 1: {stderr[-2000:]}")
    try:
        out = json.loads(stdout)
    except ValueError:
        out = None
        check(False, f"give up: --json output is not JSON: {stdout[:1000]}")
    check(out is not None and sorted(out["uploaded"]) == ["ok1.txt", "ok2.bin"] and
          [f["path"] for f in out["failed"]] == ["doomed.bin"] and all(f["error"] for f in out["failed"]),
          f"give up: the others are uploaded, `failed` names doomed.bin: {out}")
    check("doomed.bin" in stderr, f"give up: the summary names the file: {stderr[-1500:]}")
    check(re.search(r"1 failed", stderr), f"give up: the summary counts it: {stderr[-1500:]}")
    check(ctx.keys(bucket) == ["ok1.txt", "ok2.bin"], f"give up: the bucket: {ctx.keys(bucket)}")
    tries = [e for e in ctx.requests(bucket) if e["method"] == "PUT" and key_of(e, bucket) == "doomed.bin"]
    check(len(tries) == 6, f"give up: 1 try + 5 retries, not {len(tries)}")
    gaps = [round(b["t"] - a["done"], 2) for a, b in zip(tries, tries[1:])]
    check(len(gaps) == 5 and all(g >= w - 0.3 for g, w in zip(gaps, (1, 2, 4, 8, 8))),
          f"give up: backoff 1, 2, 4, 8, 8 s: {gaps}")
    local = local_files(d)
    ctx.bucket_holds(bucket, "", {k: v for k, v in local.items() if k != "doomed.bin"}, "give up")
    return time.monotonic() - t0


def section_faults(ctx, tmp):
    bucket = "faults"
    d = os.path.join(tmp, "faulty")
    write(os.path.join(d, "a.txt"), b"a" * 100)
    write(os.path.join(d, "b.bin"), os.urandom(300 * KB))
    write(os.path.join(d, "c.bin"), os.urandom(64 * KB))
    write(os.path.join(d, "big.bin"), os.urandom(11 * MB + 5))
    s3 = ctx.s3
    ctx.boto.create_bucket(Bucket=bucket)  # (not --create-repo: a new bucket is not listed, a fault below is)
    part = rf"^/{bucket}/big\.bin\?(?=.*uploadId=)(?=.*partNumber=%d(&|$))"
    ids = {
        "500 x2 on a PUT": s3.add_fault(method="PUT", path=rf"^/{bucket}/a\.txt$", status=500, times=2),
        "503 SlowDown + Retry-After on a PUT": s3.add_fault(method="PUT", path=rf"^/{bucket}/b\.bin$", status=503,
                                                            retry_after=2),
        "slow answer": s3.add_fault(method="PUT", path=rf"^/{bucket}/c\.bin$", delay=2),
        "429 on the listing": s3.add_fault(method="GET", path=rf"^/{bucket}/?\?", status=429, code="TooManyRequests",
                                           retry_after=0),
        "dropped mid-part": s3.add_fault(method="PUT", path=part % 1, drop_after_read=1 * MB),
        "500 on a part": s3.add_fault(method="PUT", path=part % 2, status=500),
        "503 SlowDown + Retry-After on a part": s3.add_fault(method="PUT", path=part % 3, status=503, retry_after=1),
        "lost CompleteMultipartUpload answer": s3.add_fault(
            method="POST", path=rf"^/{bucket}/big\.bin\?(?=.*uploadId=)", apply_first=True),
    }
    m = ctx.mark()
    out, err = ctx.run(d, f"s3://{bucket}", "--part-size-mib", "5", "--jobs", "4", "-v",
                       what="through the faults")
    check(out is not None and sorted(out["uploaded"]) == ["a.txt", "b.bin", "big.bin", "c.bin"] and
          out["failed"] == [], f"through the faults: {out} {err[-3000:]}")
    fired = {name: f["fired"] for f in s3.faults() for name, i in ids.items() if f["id"] == i}
    want = {name: (2 if name == "500 x2 on a PUT" else 1) for name in ids}
    check(fired == want, f"every fault fired: {fired}")
    check(ctx.bucket_holds(bucket, "", local_files(d), "faults"), "faults: the bucket holds every file, once")
    h = ctx.head(bucket, "big.bin")
    check(h is not None and h["ETag"].strip('"').endswith("-3"), f"faults: big.bin in 3 parts: {h and h['ETag']}")
    check(ctx.uploads(bucket) == [], f"faults: no upload left in progress: {ctx.uploads(bucket)}")
    log = ctx.requests(bucket, m)
    for name, key in (("503 SlowDown + Retry-After on a PUT", "b.bin"),):
        tries = [e for e in log if e["method"] == "PUT" and key_of(e, bucket) == key]
        gap = tries[1]["t"] - tries[0]["done"] if len(tries) >= 2 else None
        check(gap is not None and gap >= 2.8, f"{name}: the retry waits Retry-After + 1 = 3 s, not {gap}")
    creates = [e for e in log if e["method"] == "POST" and query_has(e, "uploads")]
    check(len(creates) == 1, f"faults: one CreateMultipartUpload for big.bin: {len(creates)}")
    for f in s3.faults():
        if f["id"] in ids.values():
            s3.drop_fault(f["id"])


def section_kill_resume(ctx, tmp):
    bucket = "resume"
    d = os.path.join(tmp, "killed")
    data = os.urandom(40 * MB)
    write(os.path.join(d, "ckpt.pt"), data)
    write(os.path.join(d, "note.txt"), b"resumable\n")
    ctx.boto.create_bucket(Bucket=bucket)
    slow = ctx.s3.add_fault(method="PUT", path=rf"^/{bucket}/ckpt\.pt\?(?=.*partNumber=)", delay_after=0.4,
                            times=10_000)
    m = m0 = ctx.mark()
    argv = ctx.argv(d, f"s3://{bucket}", ["--part-size-mib", "5", "--jobs", "1"])
    p = subprocess.Popen(argv, env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    upload_id, stored = None, []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        ups = [u for u in ctx.uploads(bucket) if u["Key"] == "ckpt.pt"]
        if ups:
            upload_id = ups[0]["UploadId"]
            stored = ctx.boto.list_parts(Bucket=bucket, Key="ckpt.pt", UploadId=upload_id).get("Parts", [])
            if len(stored) >= 2:
                break
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    stdout, stderr = p.communicate()
    check(p.returncode == -9, f"kill: the run was killed mid-upload: {p.returncode} {stderr[-1000:]}")
    ctx.no_secret(stdout + stderr, "killed run")
    ctx.s3.wait_idle()
    ctx.s3.drop_fault(slow)
    check(upload_id is not None, "kill: a multipart upload was started")
    if upload_id is None:
        return
    stored = {pp["PartNumber"]: pp["ETag"] for pp in
              ctx.boto.list_parts(Bucket=bucket, Key="ckpt.pt", UploadId=upload_id).get("Parts", [])}
    check(2 <= len(stored) < 8, f"kill: killed with some parts stored: {sorted(stored)}")
    check(ctx.head(bucket, "ckpt.pt") is None, "kill: no object before the re-run")
    states = glob.glob(os.path.join(d, ".cache", "mds-hub-sync", "s3-*.json"))
    check(states and any(upload_id in open(s, encoding="utf-8", errors="replace").read() for s in states),
          f"kill: the state file records the pending upload id: {states}")

    m = ctx.mark()
    out, err = ctx.run(d, f"s3://{bucket}", "--part-size-mib", "5", "--jobs", "1", "-v", what="resume")
    check(out is not None and "ckpt.pt" in out["uploaded"] and out["failed"] == [], f"resume: {out} {err[-2000:]}")
    reqs = [e for e in ctx.requests(bucket, m) if key_of(e, bucket) == "ckpt.pt"]
    check(not [e for e in reqs if e["method"] == "POST" and query_has(e, "uploads")],
          "resume: no new CreateMultipartUpload (the pending upload is resumed)")
    sent = sorted(int(dict(x.partition("=")[::2] for x in e["query"].split("&"))["partNumber"])
                  for e in reqs if e["method"] == "PUT" and query_has(e, "partNumber"))
    said = [line for line in (err or "").splitlines() if "ckpt.pt" in line][:6]
    check(sent == sorted(set(range(1, 9)) - set(stored)),
          f"resume: only the missing parts are sent ({sorted(set(range(1, 9)) - set(stored))}), not {sent}; the tool "
          f"said: {said}; the killed run's requests for ckpt.pt: "
          f"{[(e['method'], e['query'], e.get('status')) for e in ctx.requests(bucket, m0) if key_of(e, bucket) == 'ckpt.pt']}")
    check(all(query_has(e, "uploadId", upload_id) for e in reqs if e["method"] == "PUT"),
          "resume: the parts go to the pending upload")
    completes = [e for e in reqs if e["method"] == "POST" and query_has(e, "uploadId")]
    check(len(completes) == 1, f"resume: one CompleteMultipartUpload: {len(completes)}")
    print(f"kill -9 with parts {sorted(stored)} of 8 stored; the re-run sent parts {sent}")
    check(ctx.keys(bucket) == ["ckpt.pt", "note.txt"], f"resume: exactly the two objects: {ctx.keys(bucket)}")
    ctx.bucket_holds(bucket, "", local_files(d), "resume")
    h = ctx.head(bucket, "ckpt.pt")
    check(h is not None and h["ETag"].strip('"').endswith("-8"), f"resume: 8 parts: {h and h['ETag']}")
    check(ctx.uploads(bucket) == [], f"resume: no upload left in progress: {ctx.uploads(bucket)}")
    out, _ = ctx.run(d, f"s3://{bucket}", "--part-size-mib", "5", what="after resume")
    check(out is not None and out["uploaded"] == [] and out["unchanged"] == 2, f"after resume: nothing to send: {out}")


def main():
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="hub-sync-s3-")
    try:
        home = os.path.join(tmp, "home")
        os.makedirs(home)
        with S3Server() as s3:
            ctx = Ctx(s3, home)
            sections = []

            def section(name, fn, *args):
                before = len(testkit.failures)
                t = time.monotonic()
                try:
                    fn(*args)
                except Exception as err:  # noqa: BLE001 - report and go on with the next section
                    import traceback
                    traceback.print_exc()
                    check(False, f"{name}: {type(err).__name__}: {err}")
                ok = len(testkit.failures) == before
                sections.append((name, ok, time.monotonic() - t))

            section("server enforces signatures", section_server, ctx)
            give_up = start_give_up(ctx, tmp)
            run_dir, bucket, prefix = os.path.join(tmp, "tr11-176B-ml"), "mds-runs", "runs/tr11"
            files = make_tree(run_dir)
            section("usage errors", section_usage, ctx, tmp)
            section("missing bucket, wrong secret", section_missing_bucket_and_secret, ctx, run_dir, bucket, prefix)
            section("basic upload, re-run, changes", section_basic, ctx, run_dir, files, bucket, prefix)
            section("remote-only, --dry-run --delete, --delete", section_delete, ctx, run_dir, bucket, prefix)
            section("--include / --exclude", section_globs, ctx, run_dir, bucket, prefix)
            section("credentials from a profile", section_profile, ctx, tmp, run_dir, bucket, prefix)
            section("multipart", section_multipart, ctx, tmp, bucket)
            section("faults", section_faults, ctx, tmp)
            section("kill -9 and resume", section_kill_resume, ctx, tmp)
            section("give up", finish_give_up, ctx, give_up)
            if s3.errors:
                print("s3_server: moto failed on requests:\n" + "\n".join(s3.errors[:5]), file=sys.stderr)
            for name, ok, secs in sections:
                print(f"{'ok  ' if ok else 'FAIL'} {name} ({secs:.1f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{time.monotonic() - t0:.1f} s")
    finish()


if __name__ == "__main__":
    main()
