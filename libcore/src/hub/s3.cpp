// The S3 destination of mds-hub-sync (s3.h): URLs, SigV4, settings and the REST calls.
#include "mds/hub/s3.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>

#include "hub/local_scan.h"
#include "mds/hub/hash.h"
#include "mds/hub/xml.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // printable
#include "mds/util/text.h"

namespace mds::hub {
namespace {



// A header value as SigV4 canonicalises it: trimmed, runs of spaces made one.
std::string canonical_value(std::string_view v) {
    std::string out;
    bool space = false;
    for (char c : trim(v)) {
        if (c == ' ' || c == '\t') {
            space = true;
            continue;
        }
        if (space && !out.empty()) out.push_back(' ');
        space = false;
        out.push_back(c);
    }
    return out;
}

std::string hmac_raw(std::string_view key, std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
              data.size(), out, &len))
        throw Error("OpenSSL: HMAC-SHA256 failed");
    return std::string(reinterpret_cast<const char*>(out), len);
}

std::string to_hex(std::string_view raw) {
    static const char* k = "0123456789abcdef";
    std::string s;
    for (unsigned char c : raw) {
        s.push_back(k[c >> 4]);
        s.push_back(k[c & 15]);
    }
    return s;
}

std::string unquote(std::string s) {
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
    return s;
}

std::string amz_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? trim(v) : std::string();
}

// [section] → key → value of an AWS shared credentials / config file.
std::map<std::string, std::map<std::string, std::string>> read_ini(const std::string& path) {
    std::map<std::string, std::map<std::string, std::string>> out;
    // A few hundred bytes per profile: a larger file is not an AWS configuration.
    const std::string text = read_file(path, std::uint64_t{1} << 20, "AWS credentials or config file");
    std::string section;
    std::size_t line_no = 0;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string_view raw = std::string_view(text).substr(start, end - start);
        const std::string line = trim(raw);
        ++line_no;
        start = end + 1;
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line.front() == '[') {
            if (line.back() != ']') throw UsageError(path + ":" + std::to_string(line_no) + ": expected [section]");
            section = trim(line.substr(1, line.size() - 2));
            continue;
        }
        const auto eq = line.find('=');
        if (eq == std::string::npos) {
            if (raw[0] == ' ' || raw[0] == '\t') continue;  // inside a nested value (s3 =\n  key = value)
            throw UsageError(path + ":" + std::to_string(line_no) + ": expected key = value");
        }
        if (!section.empty()) out[section][to_lower(trim(line.substr(0, eq)))] = trim(line.substr(eq + 1));
    }
    return out;
}

std::string home_file(const char* env_name, const char* under_home) {
    std::string p = env(env_name);
    if (!p.empty()) return p;
    const std::string home = env("HOME");
    return home.empty() ? std::string() : home + "/" + under_home;
}

bool valid_bucket(const std::string& b) {
    if (b.size() < 3 || b.size() > 222) return false;
    return std::all_of(b.begin(), b.end(), [](char c) {
               return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
           }) &&
           std::isalnum(static_cast<unsigned char>(b.front())) && std::isalnum(static_cast<unsigned char>(b.back()));
}

// S3's <Error><Code>..</Code><Message>..</Message></Error>, or the status.
std::string describe_error(const HttpResponse& r) {
    if (r.status == 0 || r.body.empty()) return r.describe();
    try {
        const XmlElement e = parse_xml(r.body, "S3 error");
        if (e.name == "Error") {
            std::string s = "HTTP " + std::to_string(r.status) + " " + printable(e.child_text("Code"), 80);
            const std::string msg = e.child_text("Message");
            if (!msg.empty()) s += ": " + printable(msg, 300);
            return s;
        }
    } catch (const Error&) {
    }
    return r.describe();
}

std::string error_code(const HttpResponse& r) {
    try {
        const XmlElement e = parse_xml(r.body, "S3 error");
        if (e.name == "Error") return e.child_text("Code");
    } catch (const Error&) {
    }
    return {};
}

// application/x-www-form-urlencoded decoding ('+' is a space), as botocore decodes the keys of a
// listing asked for with encoding-type=url.
std::string form_decode(const std::string& s, const std::string& what) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '+') {
            out.push_back(' ');
        } else if (s[i] == '%') {
            auto hex = [&](char c) -> int {
                if (c >= '0' && c <= '9') return c - '0';
                if (c >= 'a' && c <= 'f') return c - 'a' + 10;
                if (c >= 'A' && c <= 'F') return c - 'A' + 10;
                return -1;
            };
            const int hi = i + 2 < s.size() ? hex(s[i + 1]) : -1, lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) throw Error(what + ": bad percent-encoding in key '" + s + "'");
            out.push_back(static_cast<char>(hi * 16 + lo));
            i += 2;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

std::uint64_t to_u64(const std::string& s, const std::string& what) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) || s.size() > 19)
        throw Error(what + ": expected a number, got '" + s + "'");
    return std::stoull(s);
}

}  // namespace

bool is_s3_url(std::string_view text) { return text.substr(0, 5) == "s3://"; }

S3Url parse_s3_url(const std::string& text) {
    if (!is_s3_url(text)) throw UsageError("'" + text + "' is not an s3:// URL");
    const std::string rest = text.substr(5);
    const auto slash = rest.find('/');
    S3Url u;
    u.bucket = rest.substr(0, slash);
    if (!valid_bucket(u.bucket))
        throw UsageError("'" + text + "': '" + u.bucket +
                         "' is not a bucket name (3 or more of a-z 0-9 . - _, starting and ending with a letter or digit)");
    std::string prefix = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::size_t start = 0;
    while (!prefix.empty() && start <= prefix.size()) {
        std::size_t end = prefix.find('/', start);
        if (end == std::string::npos) end = prefix.size();
        const std::string seg = prefix.substr(start, end - start);
        if (seg.empty() || seg == "." || seg == "..")
            throw UsageError("'" + text + "': the prefix must not have empty, '.' or '..' segments");
        start = end + 1;
    }
    u.prefix = prefix;
    return u;
}

std::string uri_encode(std::string_view text, bool keep_slash) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : text) {
        if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 15]);
        }
    }
    return out;
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) { return to_hex(hmac_raw(key, data)); }

SigV4Output sigv4_sign(const SigV4Input& in, const S3Credentials& cred, const std::string& region, const std::string& service,
                       const std::string& amz_date) {
    const auto digits = [&](std::size_t from, std::size_t n) {
        return std::all_of(amz_date.begin() + static_cast<std::ptrdiff_t>(from), amz_date.begin() + static_cast<std::ptrdiff_t>(from + n),
                           [](char c) { return c >= '0' && c <= '9'; });
    };
    if (amz_date.size() != 16 || amz_date[8] != 'T' || amz_date.back() != 'Z' || !digits(0, 8) || !digits(9, 6))
        throw Error("SigV4: the date must be YYYYMMDDTHHMMSSZ, not '" + amz_date + "'");
    const std::string day = amz_date.substr(0, 8);
    std::map<std::string, std::string> headers;  // lower-case name → canonical value (sorted)
    for (const auto& [k, v] : in.headers) {
        const std::string name = to_lower(trim(k));
        const std::string value = canonical_value(v);
        auto [it, fresh] = headers.emplace(name, value);
        if (!fresh) it->second += "," + value;
    }
    headers["host"] = canonical_value(in.host);
    headers["x-amz-date"] = amz_date;
    headers["x-amz-content-sha256"] = in.payload_sha256;
    if (!cred.session_token.empty()) headers["x-amz-security-token"] = canonical_value(cred.session_token);

    std::vector<std::pair<std::string, std::string>> query;
    for (const auto& [k, v] : in.query) query.emplace_back(uri_encode(k, false), uri_encode(v, false));
    std::sort(query.begin(), query.end());
    std::string canonical_query, canonical_headers, signed_headers;
    for (const auto& [k, v] : query) {
        if (!canonical_query.empty()) canonical_query += '&';
        canonical_query += k;
        canonical_query += '=';
        canonical_query += v;
    }
    for (const auto& [k, v] : headers) {
        canonical_headers += k;
        canonical_headers += ':';
        canonical_headers += v;
        canonical_headers += '\n';
        if (!signed_headers.empty()) signed_headers += ';';
        signed_headers += k;
    }
    SigV4Output out;
    out.canonical_request = in.method + "\n" + (in.path.empty() ? "/" : in.path) + "\n" + canonical_query + "\n" +
                            canonical_headers + "\n" + signed_headers + "\n" + in.payload_sha256;
    const std::string scope = day + "/" + region + "/" + service + "/aws4_request";
    out.string_to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + sha256_hex(out.canonical_request);
    std::string key = hmac_raw("AWS4" + cred.secret_key, day);
    key = hmac_raw(key, region);
    key = hmac_raw(key, service);
    key = hmac_raw(key, "aws4_request");
    const std::string signature = hmac_sha256_hex(key, out.string_to_sign);
    out.headers.emplace_back("Authorization", "AWS4-HMAC-SHA256 Credential=" + cred.access_key + "/" + scope +
                                                  ", SignedHeaders=" + signed_headers + ", Signature=" + signature);
    out.headers.emplace_back("x-amz-date", amz_date);
    out.headers.emplace_back("x-amz-content-sha256", in.payload_sha256);
    if (!cred.session_token.empty()) out.headers.emplace_back("x-amz-security-token", cred.session_token);
    return out;
}

S3Settings find_s3_settings(const std::string& endpoint_flag, const std::string& region_flag) {
    S3Settings s;
    const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
    s.credentials.access_key = env("AWS_ACCESS_KEY_ID");
    s.credentials.secret_key = env("AWS_SECRET_ACCESS_KEY");
    s.credentials.session_token = env("AWS_SESSION_TOKEN");
    if (s.credentials.access_key.empty() || s.credentials.secret_key.empty()) {
        const std::string path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
        if (!path.empty() && file_exists(path)) {
            const auto ini = read_ini(path);
            if (auto it = ini.find(profile); it != ini.end()) {
                auto get = [&](const char* k) {
                    const auto v = it->second.find(k);
                    return v == it->second.end() ? std::string() : v->second;
                };
                s.credentials = {get("aws_access_key_id"), get("aws_secret_access_key"), get("aws_session_token")};
            }
        }
    }
    if (s.credentials.access_key.empty() || s.credentials.secret_key.empty())
        throw UsageError("no S3 keys: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile '" + profile +
                         "' in ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE)");
    std::string region = region_flag;
    if (region.empty()) region = env("AWS_REGION");
    if (region.empty()) region = env("AWS_DEFAULT_REGION");
    if (region.empty()) {
        const std::string path = home_file("AWS_CONFIG_FILE", ".aws/config");
        if (!path.empty() && file_exists(path)) {
            const auto ini = read_ini(path);
            auto it = ini.find("profile " + profile);  // [default] or [profile default] for the default one
            if (it == ini.end() && profile == "default") it = ini.find(profile);
            if (it != ini.end())
                if (auto r = it->second.find("region"); r != it->second.end()) region = r->second;
        }
    }
    if (!region.empty()) s.region = region;
    if (!std::all_of(s.region.begin(), s.region.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; }))
        throw UsageError("'" + s.region + "' is not a region name");
    std::string endpoint = endpoint_flag;
    if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL_S3");
    if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
    s.path_style = !endpoint.empty();
    if (endpoint.empty()) endpoint = "https://s3." + s.region + ".amazonaws.com";
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    check_url_allowed(endpoint);
    const auto scheme_end = endpoint.find("://");
    const std::string authority = to_lower(endpoint.substr(scheme_end + 3));
    // host[:port] or [v6]:port, nothing else: the Host header is signed as written here.
    const std::size_t host_end = authority.empty() || authority[0] != '[' ? authority.find(':') : authority.find(']') + 1;
    const std::string host = authority.substr(0, host_end), port = host_end < authority.size() ? authority.substr(host_end) : "";
    const bool host_ok = !host.empty() && (host[0] == '[' ? host.size() > 2 && host.back() == ']' &&
                                                                std::all_of(host.begin() + 1, host.end() - 1, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; })
                                                          : std::all_of(host.begin(), host.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.'; }));
    const bool port_ok = port.empty() || (port.size() >= 2 && port.size() <= 6 && port[0] == ':' &&
                                          std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; }));
    if (!host_ok || !port_ok)
        throw UsageError("the S3 endpoint '" + endpoint + "' must be scheme://host[:port], without a path");
    s.endpoint = to_lower(endpoint.substr(0, scheme_end)) + "://" + authority;
    return s;
}

S3Client::S3Client(HttpClient& http, S3Settings settings) : http_(http), s_(std::move(settings)) {}

HttpResponse S3Client::send(const Call& c) {
    const auto scheme_end = s_.endpoint.find("://");
    const std::string scheme = s_.endpoint.substr(0, scheme_end);
    std::string authority = s_.endpoint.substr(scheme_end + 3);
    // The Host header as curl would write it: without the scheme's default port.
    if (scheme == "https" && authority.size() > 4 && authority.compare(authority.size() - 4, 4, ":443") == 0) authority.resize(authority.size() - 4);
    if (scheme == "http" && authority.size() > 3 && authority.compare(authority.size() - 3, 3, ":80") == 0) authority.resize(authority.size() - 3);
    // Bucket names with dots would not match the TLS certificate of a virtual host.
    const bool path_style = s_.path_style || c.bucket.empty() || c.bucket.find('.') != std::string::npos;
    SigV4Input in;
    in.method = c.method;
    in.host = path_style || c.bucket.empty() ? authority : c.bucket + "." + authority;
    std::string path = "/";
    if (path_style && !c.bucket.empty()) {
        path += c.bucket;
        if (!c.key.empty()) path += "/";
    }
    path += uri_encode(c.key, true);
    in.path = path;
    in.query = c.query;
    in.headers = c.headers;
    in.headers.emplace_back("host", in.host);
    if (!c.payload_sha256.empty()) in.payload_sha256 = c.payload_sha256;
    else if (!c.body_file.empty()) in.payload_sha256 = sha256_file_range(c.body_file, c.body_offset, c.body_length);
    else in.payload_sha256 = sha256_hex(c.body);
    const SigV4Output sig = sigv4_sign(in, s_.credentials, s_.region, "s3", amz_now());

    HttpRequest req;
    req.method = c.method;
    req.url = scheme + "://" + in.host + path;
    std::vector<std::pair<std::string, std::string>> query;
    for (const auto& [k, v] : c.query) query.emplace_back(uri_encode(k, false), uri_encode(v, false));
    std::sort(query.begin(), query.end());
    for (std::size_t i = 0; i < query.size(); ++i) {
        req.url += i == 0 ? '?' : '&';
        req.url += query[i].first;
        if (!query[i].second.empty()) req.url += "=" + query[i].second;
    }
    req.headers = in.headers;  // with host
    for (const auto& h : sig.headers) req.headers.push_back(h);
    req.body = c.body;
    req.body_file = c.body_file;
    req.body_offset = c.body_offset;
    req.body_length = c.body_length;
    req.authorize = false;
    req.retry = c.retry;
    req.what = c.what;
    // GETs are listings (1,000 keys or parts a page); every other answer is a short document.
    req.max_answer_bytes = c.method == "GET" ? kMaxApiAnswerBytes : kMaxSmallAnswerBytes;
    return http_.send(req);
}

HttpResponse S3Client::send_ok(const Call& c) {
    HttpResponse r = send(c);
    if (!r.ok())
        throw HttpError(c.what + " failed: " + describe_error(r) + (r.attempts > 1 ? " (after " + std::to_string(r.attempts) + " tries)" : ""),
                        r.status);
    return r;
}

bool S3Client::bucket_exists(const std::string& bucket) {
    const HttpResponse r = send({"HEAD", bucket, "", {}, {}, "", "", 0, 0, "", true, "HEAD of bucket " + bucket});
    if (r.status == 404) return false;
    if (r.status == 403) {
        // A HEAD answer has no body to say why: ask again with a GET, whose <Error> names the cause
        // (SignatureDoesNotMatch for a wrong secret, InvalidAccessKeyId, AccessDenied).
        const HttpResponse g = send({"GET", bucket, "", {{"list-type", "2"}, {"max-keys", "0"}}, {}, "", "", 0, 0, "", true,
                                     "listing of bucket " + bucket});
        throw HttpError("bucket " + bucket + ": " + (g.ok() ? describe_error(r) : describe_error(g)) +
                            " (check the keys, the region and the bucket's permissions)",
                        r.status);
    }
    if (!r.ok()) throw HttpError("bucket " + bucket + ": " + describe_error(r), r.status);
    return true;
}

void S3Client::create_bucket(const std::string& bucket) {
    Call c{"PUT", bucket, "", {}, {}, "", "", 0, 0, "", true, "creation of bucket " + bucket};
    if (s_.region != "us-east-1")
        c.body = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>" +
                 xml_escape(s_.region) + "</LocationConstraint></CreateBucketConfiguration>";
    send_ok(c);
}

std::vector<S3Object> S3Client::list(const std::string& bucket, const std::string& prefix) {
    std::vector<S3Object> out;
    std::string token;
    std::set<std::string> tokens;  // a continuation token seen before: the listing loops
    for (int page = 1;; ++page) {
        // encoding-type=url: keys with characters XML 1.0 cannot carry come back percent-encoded.
        Call c{"GET", bucket, "", {{"list-type", "2"}, {"encoding-type", "url"}}, {}, "", "", 0, 0, "", true,
               "listing of s3://" + bucket + "/" + prefix + " (page " + std::to_string(page) + ")"};
        if (!prefix.empty()) c.query.emplace_back("prefix", prefix);
        if (!token.empty()) c.query.emplace_back("continuation-token", token);
        const HttpResponse r = send_ok(c);
        const XmlElement doc = parse_xml(r.body, c.what);
        if (doc.name != "ListBucketResult") throw Error(c.what + ": expected <ListBucketResult>, got <" + doc.name + ">");
        const bool url_encoded = doc.child_text("EncodingType") == "url";
        for (const XmlElement* e : doc.all("Contents")) {
            S3Object o;
            o.key = url_encoded ? form_decode(e->child_text("Key"), c.what) : e->child_text("Key");
            o.size = to_u64(e->child_text("Size"), c.what + ": size of '" + o.key + "'");
            o.etag = unquote(e->child_text("ETag"));
            if (o.key.empty()) throw Error(c.what + ": an object without a key");
            out.push_back(std::move(o));
        }
        if (doc.child_text("IsTruncated") != "true") break;
        token = doc.child_text("NextContinuationToken");
        if (token.empty()) throw Error(c.what + ": truncated, but no NextContinuationToken");
        if (!tokens.insert(token).second) throw Error(c.what + ": the listing loops (a NextContinuationToken given before)");
    }
    return out;
}

std::optional<S3Head> S3Client::head(const std::string& bucket, const std::string& key) {
    const HttpResponse r = send({"HEAD", bucket, key, {}, {}, "", "", 0, 0, "", true, "HEAD of s3://" + bucket + "/" + key});
    if (r.status == 404) return std::nullopt;
    if (!r.ok()) throw HttpError("HEAD of s3://" + bucket + "/" + key + " failed: " + describe_error(r), r.status);
    S3Head h;
    h.size = to_u64(r.header("content-length"), "HEAD of s3://" + bucket + "/" + key + ": Content-Length");
    h.etag = unquote(r.header("etag"));
    h.sha256 = r.header("x-amz-meta-sha256");
    if (h.sha256.empty()) h.sha256 = r.header("x-goog-meta-sha256");  // GCS may answer with its own prefix
    return h;
}

std::string S3Client::put(const std::string& bucket, const std::string& key, const std::string& file, std::uint64_t size,
                          const std::string& sha256) {
    Call c{"PUT", bucket, key, {}, {{"x-amz-meta-sha256", sha256}}, "", file, 0, size, sha256, true,
           "upload of " + file + " to s3://" + bucket + "/" + key};
    if (size == 0) {
        c.body_file.clear();  // nothing to read
    }
    return unquote(send_ok(c).header("etag"));
}

std::string S3Client::create_multipart(const std::string& bucket, const std::string& key, const std::string& sha256) {
    Call c{"POST", bucket, key, {{"uploads", ""}}, {{"x-amz-meta-sha256", sha256}}, "", "", 0, 0, "", true,
           "start of the multipart upload of s3://" + bucket + "/" + key};
    const HttpResponse r = send_ok(c);
    const XmlElement doc = parse_xml(r.body, c.what);
    const std::string id = doc.child_text("UploadId");
    if (doc.name != "InitiateMultipartUploadResult" || id.empty()) throw Error(c.what + ": the answer has no UploadId");
    return id;
}

std::string S3Client::upload_part(const std::string& bucket, const std::string& key, const std::string& upload_id, int number,
                                  const std::string& file, std::uint64_t offset, std::uint64_t length) {
    Call c{"PUT", bucket, key, {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}}, {}, "", file, offset, length, "",
           true, "part " + std::to_string(number) + " of s3://" + bucket + "/" + key};
    const std::string etag = unquote(send_ok(c).header("etag"));
    if (etag.empty()) throw Error(c.what + ": no ETag in the answer");
    return etag;
}

std::optional<std::vector<S3Part>> S3Client::list_parts(const std::string& bucket, const std::string& key,
                                                        const std::string& upload_id) {
    std::vector<S3Part> out;
    std::string marker;
    std::set<std::string> markers;
    for (;;) {
        Call c{"GET", bucket, key, {{"uploadId", upload_id}}, {}, "", "", 0, 0, "", true,
               "list of the parts of s3://" + bucket + "/" + key};
        if (!marker.empty()) c.query.emplace_back("part-number-marker", marker);
        const HttpResponse r = send(c);
        if (r.status == 404) return std::nullopt;
        if (!r.ok()) throw HttpError(c.what + " failed: " + describe_error(r), r.status);
        const XmlElement doc = parse_xml(r.body, c.what);
        // S3 says <ListPartsResult>; some S3-compatible servers (moto) <ListPartsResponse>.
        if (doc.name != "ListPartsResult" && doc.name != "ListPartsResponse")
            throw Error(c.what + ": expected <ListPartsResult>, got <" + doc.name + ">");
        for (const XmlElement* p : doc.all("Part")) {
            S3Part part;
            part.number = static_cast<int>(to_u64(p->child_text("PartNumber"), c.what + ": PartNumber"));
            part.size = to_u64(p->child_text("Size"), c.what + ": Size");
            part.etag = unquote(p->child_text("ETag"));
            out.push_back(std::move(part));
        }
        if (doc.child_text("IsTruncated") != "true") break;
        const std::string next = doc.child_text("NextPartNumberMarker");
        if (next.empty() || !markers.insert(next).second) throw Error(c.what + ": truncated, but no new NextPartNumberMarker");
        marker = next;
    }
    return out;
}

std::string S3Client::complete_multipart(const std::string& bucket, const std::string& key, const std::string& upload_id,
                                  const std::vector<S3Part>& parts) {
    std::string body = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
    for (const auto& p : parts)
        body += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>\"" + xml_escape(p.etag) + "\"</ETag></Part>";
    body += "</CompleteMultipartUpload>";
    const std::string what = "completion of the multipart upload of s3://" + bucket + "/" + key;
    const HttpResponse r = send({"POST", bucket, key, {{"uploadId", upload_id}}, {{"content-type", "application/xml"}}, body, "", 0, 0,
                                 "", false, what});
    // S3 may answer 200 and then report an error in the body.
    const std::string code = r.ok() ? error_code(r) : std::string();
    if (r.status == 0 || r.status >= 500 || code == "InternalError" || code == "SlowDown")
        throw S3Uncertain(what + ": no clear answer (" + (code.empty() ? describe_error(r) : code) + "); it may have been applied");
    if (!r.ok() || !code.empty()) throw HttpError(what + " failed: " + (code.empty() ? describe_error(r) : code), r.status);
    const XmlElement doc = parse_xml(r.body, what);
    if (doc.name != "CompleteMultipartUploadResult") throw Error(what + ": expected <CompleteMultipartUploadResult>, got <" + doc.name + ">");
    return unquote(doc.child_text("ETag"));
}

void S3Client::abort_multipart(const std::string& bucket, const std::string& key, const std::string& upload_id) {
    const HttpResponse r = send({"DELETE", bucket, key, {{"uploadId", upload_id}}, {}, "", "", 0, 0, "", true,
                                 "abort of the multipart upload of s3://" + bucket + "/" + key});
    if (!r.ok() && r.status != 404)
        throw HttpError("abort of the multipart upload of s3://" + bucket + "/" + key + " failed: " + describe_error(r), r.status);
}

void S3Client::delete_object(const std::string& bucket, const std::string& key) {
    send_ok({"DELETE", bucket, key, {}, {}, "", "", 0, 0, "", true, "deletion of s3://" + bucket + "/" + key});
}

}  // namespace mds::hub
