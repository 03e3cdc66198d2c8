"""Cross-check: mds's AWS Signature Version 4 for S3 (mds::hub::sigv4_sign, driven by
tests/tools/s3_sigv4_probe.cpp) against botocore's own S3 signer, botocore.auth.S3SigV4Auth.

Every case is signed by both at a fixed time (botocore's clock, botocore.auth.get_current_datetime,
is patched: S3SigV4Auth.add_auth overwrites request.context['timestamp'] with it), and the full
Authorization header, x-amz-date, x-amz-content-sha256, x-amz-security-token, the canonical request
and the string to sign must be equal. The cases:
  1. AWS's documented S3 examples (GET Object with Range, GET ?lifecycle, GET ?max-keys&prefix),
     whose signatures AWS publishes;
  2. a few hundred seeded random requests shaped like the ones S3Client makes: ListObjectsV2
     (list-type=2, prefix with odd characters, continuation-token with / + =), CreateMultipartUpload
     (?uploads, empty value), UploadPart / ListParts (partNumber, uploadId), plus random query
     parameters; object keys with spaces, unicode, + = & ~ % / ? #; path-style and virtual-hosted
     hosts, default ports (dropped from Host as S3Client::send and botocore both do), other ports
     and IPv6; x-amz-meta-sha256, Content-Type with inner runs of spaces, repeated headers in mixed
     case; access and secret keys with spaces, unicode and punctuation; with and without session
     tokens; UNSIGNED-PAYLOAD (botocore's payload_signing_enabled=False); many regions, dates and
     the methods GET PUT POST HEAD DELETE;
  3. dates that are not YYYYMMDDTHHMMSSZ are refused by the probe.

How botocore is fed the same request: the URL is scheme://host[:default port]/path with the path
already URI-encoded exactly as S3Client::send encodes it (uri_encode(key, keep_slash=true), which is
urllib's quote(key, safe='/'); S3SigV4Auth signs the path as it stands, without normalising it).
The query goes in two ways, alternating: as AWSRequest params (botocore encodes each name and value
itself with quote(safe='-_.~')), or as the query string of the URL built as S3Client::send builds it
(botocore then only splits and sorts it). The payload hash: S3SigV4Auth always replaces
X-Amz-Content-SHA256 with its own payload(request), so botocore gets the body and hashes it itself
(or UNSIGNED-PAYLOAD through the client config), and the probe gets sha256(body).
The probe's uri_encode is also compared with urllib.parse.quote for every key and query component.

Exit 77 (skipped) without botocore. The probe comes from $MDS_BIN.
"""
import datetime
import hashlib
import json
import os
import random
import subprocess
import sys
import types
from unittest import mock
from urllib.parse import quote

SKIP = 77
try:
    import botocore
    import botocore.auth
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
except Exception as e:  # pragma: no cover
    print(f"SKIP: cannot import botocore: {e!r}")
    sys.exit(SKIP)

N_RANDOM = 600
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
AWS_KEYS = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


class CapturingS3SigV4Auth(S3SigV4Auth):
    """botocore's S3 signer, keeping the canonical request and string to sign it computed."""

    def canonical_request(self, request):
        self.captured_canonical_request = super().canonical_request(request)
        return self.captured_canonical_request

    def string_to_sign(self, request, canonical_request):
        self.captured_string_to_sign = super().string_to_sign(request, canonical_request)
        return self.captured_string_to_sign


def sigv4_quote(text, keep_slash):
    return quote(text, safe="/~" if keep_slash else "~")  # '-_.' and alphanumerics are always safe


def url_query(query):
    """The query string as S3Client::send writes it into the URL: encoded pairs, sorted, 'k' for an empty value."""
    pairs = sorted((sigv4_quote(k, False), sigv4_quote(v, False)) for k, v in query)
    return "&".join(k + ("=" + v if v else "") for k, v in pairs)


def botocore_sign(case):
    url = f"{case['scheme']}://{case['url_host']}{case['path']}"
    params = None
    if case["query"]:
        if case["query_in_url"]:
            url += "?" + url_query(case["query"])
        else:
            params = [tuple(p) for p in case["query"]]
    request = AWSRequest(method=case["method"], url=url, data=case["body"], params=params)
    for k, v in case["headers"]:
        request.headers[k] = v  # HTTPHeaders adds: repeated names stay repeated, in order
    if case["unsigned"]:
        request.context["client_config"] = types.SimpleNamespace(s3={"payload_signing_enabled": False})
    auth = CapturingS3SigV4Auth(Credentials(case["access_key"], case["secret_key"], case["session_token"] or None),
                                case["service"], case["region"])
    when = datetime.datetime.strptime(case["amz_date"], "%Y%m%dT%H%M%SZ")
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
        auth.add_auth(request)
    headers = {k.lower(): v for k, v in request.headers.items()
               if k.lower() in ("authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token")}
    return headers, auth.captured_canonical_request, auth.captured_string_to_sign


def probe_input(case):
    return {
        "method": case["method"], "host": case["host"], "path": case["path"], "query": case["query"],
        "headers": case["headers"], "payload_sha256": case["payload_sha256"], "access_key": case["access_key"],
        "secret_key": case["secret_key"], "session_token": case["session_token"], "region": case["region"],
        "service": case["service"], "amz_date": case["amz_date"],
        "uri_encode": [[t, ks] for t, ks in case.get("encode", [])],
    }


def make_case(method, scheme, host, path, query=(), headers=(), body=b"", keys=AWS_KEYS, token="", region="us-east-1",
              service="s3", amz_date="20130524T000000Z", unsigned=False, query_in_url=False, url_port="", encode=()):
    return {
        "method": method, "scheme": scheme, "host": host, "url_host": host + url_port, "path": path,
        "query": [list(p) for p in query], "headers": [list(h) for h in headers], "body": body,
        "payload_sha256": "UNSIGNED-PAYLOAD" if unsigned else hashlib.sha256(body).hexdigest(),
        "access_key": keys[0], "secret_key": keys[1], "session_token": token, "region": region, "service": service,
        "amz_date": amz_date, "unsigned": unsigned, "query_in_url": query_in_url, "encode": list(encode),
    }


def aws_examples():
    """AWS's examples: (case, the signature AWS's documentation gives)."""
    return [
        (make_case("GET", "https", "examplebucket.s3.amazonaws.com", "/test.txt", headers=[("Range", "bytes=0-9")]),
         "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
        (make_case("GET", "https", "examplebucket.s3.amazonaws.com", "/", query=[("lifecycle", "")]),
         "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
        (make_case("GET", "https", "examplebucket.s3.amazonaws.com", "/", query=[("max-keys", "2"), ("prefix", "J")]),
         "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
    ]


# Characters for random text: ASCII punctuation that matters to URLs and SigV4, and non-ASCII letters
# and symbols. No whitespace besides ' ' and '\t' (see the note on header values in random_case).
ODD = " +=&~%/?#!*'()$,;:@[]\"<>^`{|}\\._-"
UNICODE = "üéßøåçñ€£¥日本語中文한국어ДжЯ😀🚀∑√→"
BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def rtext(rnd, n_min, n_max, alphabet=None):
    alphabet = alphabet or ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 2 + ODD + UNICODE)
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(n_min, n_max)))


def random_key(rnd):
    kind = rnd.random()
    if kind < 0.3:  # what mds-hub-sync uploads: a prefix and a relative path
        parts = [rtext(rnd, 1, 8, "abcdefghij0123456789_-.") for _ in range(rnd.randint(1, 4))]
        parts[-1] += rnd.choice([".pt", ".json", ".tfevents", ".safetensors", ""])
        return "/".join(parts)
    if kind < 0.4:
        return rnd.choice(["a b/c d.txt", "x+y=z&w~v%20u", "日本語/ファイル.txt", "//double//slash//", "a/../b/./c",
                           "100%/sure", "with?query#frag", "trailing/", "~tilde/", "😀"])
    return rtext(rnd, 1, 40)


def random_query(rnd):
    kind = rnd.randrange(7)
    if kind == 0:  # ListObjectsV2
        q = [("list-type", "2")]
        if rnd.random() < 0.8:
            q.append(("prefix", rtext(rnd, 0, 20) + rnd.choice(["/", ""])))
        if rnd.random() < 0.5:
            q.append(("continuation-token", rtext(rnd, 20, 80, BASE64)))
        return q
    if kind == 1:  # CreateMultipartUpload
        return [("uploads", "")]
    if kind == 2:  # UploadPart
        return [("partNumber", str(rnd.randint(1, 10000))), ("uploadId", rtext(rnd, 10, 90, BASE64 + "._-~"))]
    if kind == 3:  # ListParts
        q = [("uploadId", rtext(rnd, 10, 90, BASE64 + "._-"))]
        if rnd.random() < 0.5:
            q.append(("part-number-marker", str(rnd.randint(1, 9999))))
        return q
    if kind == 4:  # random names and values, maybe empty, maybe repeated names
        q = [(rtext(rnd, 1, 10), rtext(rnd, 0, 15)) for _ in range(rnd.randint(1, 5))]
        if rnd.random() < 0.3:
            q.append((q[0][0], rtext(rnd, 0, 5)))
        return q
    if kind == 5:  # names that sort differently encoded and raw: 'a b' (a%20b) vs 'a-b' vs 'a_b' vs 'A'
        return [(k, rtext(rnd, 0, 4)) for k in rnd.sample(["a b", "a-b", "a_b", "A", "a", "a~", "a%", "Z", "_"], 5)]
    return []


def random_case(rnd, i):
    method = rnd.choice(["GET", "PUT", "POST", "HEAD", "DELETE"])
    region = rnd.choice(["us-east-1", "us-west-2", "eu-central-1", "ap-southeast-2", "cn-north-1", "us-gov-west-1",
                         "auto", "garage", "minio", rtext(rnd, 1, 12, "abcdefghijklmnopqrstuvwxyz0123456789-")])
    bucket = rnd.choice(["mds-runs", "bucket", "my.dotted.bucket", "b_9", rtext(rnd, 3, 20, "abcdefghijklmnopqrstuvwxyz0123456789-")])
    key = random_key(rnd) if rnd.random() < 0.85 else ""
    # Where the request goes, as S3Client::send decides: AWS virtual-hosted, or an endpoint path-style.
    style = rnd.randrange(5)
    port_suffix = ""
    if style == 0:
        scheme, host, path_style = "https", f"{bucket}.s3.{region}.amazonaws.com", False
        if rnd.random() < 0.3:
            port_suffix = ":443"  # an endpoint given with its default port: not in the Host header
    elif style == 1:
        scheme, host, path_style = "https", f"s3.{region}.amazonaws.com", True
    elif style == 2:
        scheme, host, path_style = "http", rnd.choice(["localhost:9000", "127.0.0.1:9000", "[::1]:9000", "localhost"]), True
        if host == "localhost" and rnd.random() < 0.5:
            port_suffix = ":80"
    elif style == 3:
        scheme, host, path_style = "https", rnd.choice(["storage.googleapis.com", "minio.example.org:9000",
                                                        "s3.eu-central-003.backblazeb2.com", "[2001:db8::1]:8443",
                                                        "10.1.2.3:9000"]), True
    else:
        scheme, host, path_style = "https", f"{bucket}.{rnd.choice(['r2.cloudflarestorage.com', 'minio.example.org:9443'])}", False
    path = "/"
    if path_style:
        path += bucket + ("/" if key else "")
    path += sigv4_quote(key, True)

    query = random_query(rnd)
    body = b""
    if method in ("PUT", "POST") and rnd.random() < 0.7:
        body = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 300)))
    headers = []
    if rnd.random() < 0.5:
        headers.append((rnd.choice(["x-amz-meta-sha256", "X-Amz-Meta-Sha256"]), hashlib.sha256(body).hexdigest()))
    if rnd.random() < 0.4:
        headers.append((rnd.choice(["Content-Type", "content-type"]),
                        rnd.choice(["application/xml", "  text/plain;   charset=utf-8  ", "application/octet-stream",
                                    "multipart/form-data;\tboundary=\t\tx  y"])))
    if rnd.random() < 0.2:
        headers.append(("Content-MD5", rtext(rnd, 24, 24, BASE64)))
    if rnd.random() < 0.2:
        headers.append(("Range", f"bytes={rnd.randint(0, 99)}-{rnd.randint(100, 999)}"))
    # Header values: mds trims ' ' '\t' '\r' '\n' at the ends and folds runs of ' ' / '\t' inside;
    # botocore folds everything str.split() calls whitespace. They agree on what HTTP header values
    # hold (no CR / LF / VT / FF inside; no Unicode spaces), which is what is generated here.
    if rnd.random() < 0.3:
        headers.append(("x-amz-meta-note", rtext(rnd, 0, 20) + "  \t " + rtext(rnd, 0, 10)))
    if rnd.random() < 0.15:  # repeated names, in mixed case: joined with ',' in order
        headers += [("X-Amz-Meta-Dup", rtext(rnd, 0, 6)), ("x-amz-meta-dup", " " + rtext(rnd, 0, 6) + " ")]
    if rnd.random() < 0.1:
        headers.append(("x-amz-storage-class", "STANDARD_IA"))
    rnd.shuffle(headers)

    key_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 3 + " +=&~%/" + "üé€日"
    keys = (rtext(rnd, 4, 24, key_alphabet), rtext(rnd, 8, 48, key_alphabet + "abcdefghijklmnopqrstuvwxyz"))
    token = ""
    if rnd.random() < 0.4:
        token = rtext(rnd, 20, 400, BASE64)
    when = datetime.datetime(1990, 1, 1) + datetime.timedelta(seconds=rnd.randrange(110 * 365 * 86400))
    unsigned = rnd.random() < 0.15
    service = "s3" if rnd.random() < 0.9 else rnd.choice(["s3express", "s3-outposts"])
    encode = [(key, True), (key, False)] + [(t, False) for p in query for t in p]
    return make_case(method, scheme, host, path, query, headers, body, keys, token, region, service,
                     when.strftime("%Y%m%dT%H%M%SZ"), unsigned, query_in_url=(i % 2 == 1), url_port=port_suffix,
                     encode=encode)


def run_probe(probe, cases):
    stdin = "".join(json.dumps(probe_input(c)) + "\n" for c in cases)
    p = subprocess.run([probe], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: s3_sigv4_probe exited {p.returncode}: {p.stderr}")
    out = [json.loads(line) for line in p.stdout.splitlines()]
    if len(out) != len(cases):
        raise SystemExit(f"FAIL: s3_sigv4_probe answered {len(out)} lines for {len(cases)} requests")
    return out


def compare(case, got):
    """The differences between the probe's answer and botocore's, as text lines."""
    problems = []
    if "error" in got:
        return [f"probe error: {got['error']}"]
    want_headers, want_cr, want_sts = botocore_sign(case)
    got_headers = {k.lower(): v for k, v in got["headers"]}
    if len(got_headers) != len(got["headers"]):
        problems.append(f"repeated headers in {got['headers']}")
    if got_headers != want_headers:
        problems.append(f"headers:\n  mds:      {got_headers}\n  botocore: {want_headers}")
    if got["canonical_request"] != want_cr:
        problems.append(f"canonical request:\n  mds:      {got['canonical_request']!r}\n  botocore: {want_cr!r}")
    if got["string_to_sign"] != want_sts:
        problems.append(f"string to sign:\n  mds:      {got['string_to_sign']!r}\n  botocore: {want_sts!r}")
    want_encoded = [sigv4_quote(t, ks) for t, ks in case["encode"]]
    if got.get("uri_encoded", []) != want_encoded:
        problems.append(f"uri_encode:\n  mds:    {got.get('uri_encoded')}\n  urllib: {want_encoded}")
    return problems


def main():
    src = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_dir = os.environ.get("MDS_BIN") or os.path.join(src, "build", "bin")
    probe = os.path.join(bin_dir, "s3_sigv4_probe")
    if not os.path.exists(probe):
        raise SystemExit(f"FAIL: {probe} not found (set MDS_BIN to the directory of the built binaries)")

    # 1. AWS's examples: botocore and mds both give AWS's published signature.
    examples = aws_examples()
    for (case, signature), got in zip(examples, run_probe(probe, [c for c, _ in examples])):
        want_headers, _, _ = botocore_sign(case)
        assert want_headers["authorization"].endswith("Signature=" + signature), (want_headers, signature)
        problems = compare(case, got)
        assert not problems, "AWS example " + case["path"] + ":\n" + "\n".join(problems)
        assert dict(got["headers"])["Authorization"].endswith("Signature=" + signature), got

    # 2. Random requests.
    rnd = random.Random(20240521)
    cases = [random_case(rnd, i) for i in range(N_RANDOM)]
    failures = []
    for i, (case, got) in enumerate(zip(cases, run_probe(probe, cases))):
        problems = compare(case, got)
        if problems:
            failures.append(f"case {i}: {case['method']} {case['scheme']}://{case['url_host']}{case['path']} "
                            f"query={case['query']} headers={case['headers']} token={bool(case['session_token'])}\n"
                            + "\n".join(problems))
    if failures:
        print("\n\n".join(failures[:5]))
        raise SystemExit(f"FAIL: {len(failures)} of {len(cases)} random requests differ from botocore")
    stats = {
        "with token": sum(bool(c["session_token"]) for c in cases),
        "unsigned payload": sum(c["unsigned"] for c in cases),
        "query in URL": sum(bool(c["query"]) and c["query_in_url"] for c in cases),
        "query as params": sum(bool(c["query"]) and not c["query_in_url"] for c in cases),
        "repeated headers": sum(any(h[0] == "x-amz-meta-dup" for h in c["headers"]) for c in cases),
        "default port in URL": sum(c["url_host"] != c["host"] for c in cases),
    }

    # 3. Dates that are not YYYYMMDDTHHMMSSZ.
    bad_dates = ["2013-05-24T00:00:00Z", "20130524T000000", "20130524", "", "20130524T0000000Z"]
    bad = [dict(examples[0][0], amz_date=d) for d in bad_dates]
    for d, got in zip(bad_dates, run_probe(probe, bad)):
        assert "error" in got and "YYYYMMDDTHHMMSSZ" in got["error"], (d, got)

    print(f"OK: {len(examples)} AWS examples and {len(cases)} random requests signed as botocore "
          f"{botocore.__version__} signs them ({', '.join(f'{k}: {v}' for k, v in stats.items())}); "
          f"{len(bad_dates)} malformed dates refused")


if __name__ == "__main__":
    main()
