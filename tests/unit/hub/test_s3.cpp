// The S3 destination's pure parts (hub/s3.h): s3:// URLs, SigV4's URI encoding, the structure of
// sigv4_sign's output, and where find_s3_settings takes keys, region and endpoint from. The VALUE of
// signatures is checked against botocore in tests/crosscheck/test_s3_sigv4.py; the AWS examples
// below are the ones from AWS's SigV4 documentation for S3, which that cross-check also confirms.
#include <doctest/doctest.h>
#include <stdlib.h>  // setenv, unsetenv

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mds/hub/hash.h"
#include "mds/hub/s3.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::hub;

namespace {

// The message of the UsageError f() throws, or "" when it returns. Any other exception fails the test.
template <class F>
std::string usage_error(F&& f) {
    try {
        f();
    } catch (const mds::UsageError& e) {
        return e.what();
    }
    return "";
}

std::string header(const SigV4Output& out, const std::string& name) {
    for (const auto& [k, v] : out.headers)
        if (k == name) return v;
    return "<none>";
}

// The lines of a canonical request.
std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (;;) {
        const auto nl = s.find('\n', start);
        out.push_back(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
        if (nl == std::string::npos) return out;
        start = nl + 1;
    }
}

bool is_lower_hex(const std::string& s, std::size_t n) {
    return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

const std::string kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const S3Credentials kAwsExampleKeys{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};

// Every variable find_s3_settings reads, unset for the test and restored after it; HOME is a fresh
// scratch directory, so that the real ~/.aws is never read.
class AwsEnv {
public:
    explicit AwsEnv(const std::string& name) {
        for (const char* v : kVars) {
            const char* old = std::getenv(v);
            saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
            ::unsetenv(v);
        }
        home = mds::test::scratch_dir("s3-" + name);
        set("HOME", home.string());
    }
    ~AwsEnv() {
        for (const auto& [k, v] : saved_) {
            if (v) ::setenv(k.c_str(), v->c_str(), 1);
            else ::unsetenv(k.c_str());
        }
        std::error_code ec;
        std::filesystem::remove_all(home, ec);
    }
    AwsEnv(const AwsEnv&) = delete;
    AwsEnv& operator=(const AwsEnv&) = delete;

    void set(const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); }
    void unset(const char* k) { ::unsetenv(k); }
    // Writes `text` to HOME/rel (creating folders) and returns the path.
    std::string write(const std::string& rel, const std::string& text) {
        const auto p = home / rel;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary) << text;
        return p.string();
    }

    std::filesystem::path home;

private:
    static constexpr const char* kVars[] = {"HOME",
                                            "AWS_ACCESS_KEY_ID",
                                            "AWS_SECRET_ACCESS_KEY",
                                            "AWS_SESSION_TOKEN",
                                            "AWS_PROFILE",
                                            "AWS_SHARED_CREDENTIALS_FILE",
                                            "AWS_CONFIG_FILE",
                                            "AWS_REGION",
                                            "AWS_DEFAULT_REGION",
                                            "AWS_ENDPOINT_URL_S3",
                                            "AWS_ENDPOINT_URL"};
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// s3:// URLs

TEST_CASE("s3: is_s3_url") {
    CHECK(is_s3_url("s3://b"));
    CHECK(is_s3_url("s3://"));
    CHECK_FALSE(is_s3_url("s3:/b"));
    CHECK_FALSE(is_s3_url("S3://b"));
    CHECK_FALSE(is_s3_url("s3"));
    CHECK_FALSE(is_s3_url(""));
    CHECK_FALSE(is_s3_url("hf://user/repo"));
    CHECK_FALSE(is_s3_url("./s3://b"));
}

TEST_CASE("s3: parse_s3_url accepts a bucket and a prefix without leading or trailing '/'") {
    struct Good {
        std::string url, bucket, prefix;
    };
    const Good good[] = {
        {"s3://bucket", "bucket", ""},
        {"s3://bucket/", "bucket", ""},
        {"s3://bucket//", "bucket", ""},  // only trailing slashes: no prefix
        {"s3://bucket/run1", "bucket", "run1"},
        {"s3://bucket/run1/", "bucket", "run1"},
        {"s3://bucket/run1///", "bucket", "run1"},
        {"s3://bucket/a/b/c", "bucket", "a/b/c"},
        {"s3://abc", "abc", ""},
        {"s3://my.bucket-1_x/run 1/ü/x?y#z", "my.bucket-1_x", "run 1/ü/x?y#z"},
        {"s3://0bucket9/...", "0bucket9", "..."},
        {"s3://b-b/.a/b./..c/c..", "b-b", ".a/b./..c/c.."},
        {"s3://" + std::string(63, 'a'), std::string(63, 'a'), ""},
    };
    for (const Good& g : good) {
        CAPTURE(g.url);
        const S3Url u = parse_s3_url(g.url);
        CHECK(u.bucket == g.bucket);
        CHECK(u.prefix == g.prefix);
    }
}

TEST_CASE("s3: parse_s3_url refuses other schemes, bad bucket names and '', '.', '..' segments") {
    const std::string bad[] = {
        "",
        "s3:/bucket",
        "S3://bucket",
        "https://bucket.s3.amazonaws.com/x",
        "gs://bucket",
        "bucket/prefix",
        "s3://",
        "s3:///bucket",
        "s3:///",
        "s3://ab",           // fewer than 3 characters
        "s3://ab/prefix",
        "s3://Bucket",       // upper case
        "s3://-bucket",      // must start and end with a letter or digit
        "s3://bucket-",
        "s3://.bucket",
        "s3://bucket.",
        "s3://_bucket",
        "s3://bu cket",
        "s3://bucket:9000",
        "s3://user@bucket",
        "s3://bücket",
        "s3://" + std::string(223, 'a'),
        std::string("s3://buc\0ket", 12),
        "s3://bucket//a",    // an empty segment (a leading '/' in the prefix)
        "s3://bucket/a//b",
        "s3://bucket/./a",
        "s3://bucket/a/.",
        "s3://bucket/a/./",
        "s3://bucket/..",
        "s3://bucket/../",
        "s3://bucket/a/../b",
        "s3://bucket/.",
    };
    for (const std::string& url : bad) {
        CAPTURE(url);
        const std::string msg = usage_error([&] { (void)parse_s3_url(url); });
        CHECK_FALSE(msg.empty());
    }
    CHECK(usage_error([] { (void)parse_s3_url("s3://Bucket/x"); }).find("'Bucket' is not a bucket name") != std::string::npos);
    CHECK(usage_error([] { (void)parse_s3_url("s3://bucket/a//b"); }).find("empty, '.' or '..' segments") != std::string::npos);
    CHECK(usage_error([] { (void)parse_s3_url("gs://bucket"); }).find("'gs://bucket' is not an s3:// URL") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
// uri_encode

TEST_CASE("s3: uri_encode keeps A-Z a-z 0-9 - . _ ~ and encodes every other byte as upper-case %XX") {
    const std::string unreserved = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";
    CHECK(uri_encode(unreserved, false) == unreserved);
    CHECK(uri_encode(unreserved, true) == unreserved);
    CHECK(uri_encode("", false) == "");
    CHECK(uri_encode("a b", false) == "a%20b");  // never '+'
    CHECK(uri_encode("a+b=c&d", false) == "a%2Bb%3Dc%26d");
    CHECK(uri_encode("100%", false) == "100%25");
    CHECK(uri_encode("%2F", false) == "%252F");  // never decoded first
    CHECK(uri_encode("*!'()$,;:@?#[]", false) == "%2A%21%27%28%29%24%2C%3B%3A%40%3F%23%5B%5D");
    CHECK(uri_encode("a/b/c", false) == "a%2Fb%2Fc");
    CHECK(uri_encode("a/b/c", true) == "a/b/c");
    CHECK(uri_encode("/run 1//x/", true) == "/run%201//x/");
    CHECK(uri_encode("ü", false) == "%C3%BC");
    CHECK(uri_encode("€/😀", true) == "%E2%82%AC/%F0%9F%98%80");
    CHECK(uri_encode(std::string("\0\x01\x7F\x80\xFF", 5), false) == "%00%01%7F%80%FF");
    CHECK(uri_encode("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=", false) == "1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D");
    // Every byte: kept when unreserved (or '/' with keep_slash), else three characters.
    for (int b = 0; b < 256; ++b) {
        const char c = static_cast<char>(b);
        const bool keep = unreserved.find(c) != std::string::npos;
        static const char* hex = "0123456789ABCDEF";
        const std::string escaped = std::string("%") + hex[b >> 4] + hex[b & 15];
        CAPTURE(b);
        CHECK(uri_encode(std::string(1, c), false) == (keep ? std::string(1, c) : escaped));
        CHECK(uri_encode(std::string(1, c), true) == (keep || c == '/' ? std::string(1, c) : escaped));
    }
}

// ---------------------------------------------------------------------------------------------------
// SigV4

TEST_CASE("s3: hmac_sha256_hex against RFC 4231's test vectors") {
    CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    // Case 6: a key longer than the block size is hashed first.
    CHECK(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    CHECK(hmac_sha256_hex("", "") == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST_CASE("s3: sigv4_sign reproduces AWS's documented S3 examples") {
    // "Example: GET Object" of AWS's "Authenticating Requests: Using the Authorization Header".
    SigV4Input in{"GET", "examplebucket.s3.amazonaws.com", "/test.txt", {}, {{"Range", "bytes=0-9"}}, kEmptySha256};
    SigV4Output out = sigv4_sign(in, kAwsExampleKeys, "us-east-1", "s3", "20130524T000000Z");
    CHECK(out.canonical_request ==
          "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\nx-amz-content-sha256:" + kEmptySha256 +
              "\nx-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n" + kEmptySha256);
    CHECK(out.string_to_sign ==
          "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
          "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    CHECK(header(out, "Authorization") ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
          "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    CHECK(header(out, "x-amz-date") == "20130524T000000Z");
    CHECK(header(out, "x-amz-content-sha256") == kEmptySha256);

    // "Example: GET Bucket Lifecycle": a query parameter without a value.
    in = {"GET", "examplebucket.s3.amazonaws.com", "/", {{"lifecycle", ""}}, {}, kEmptySha256};
    out = sigv4_sign(in, kAwsExampleKeys, "us-east-1", "s3", "20130524T000000Z");
    CHECK(lines(out.canonical_request)[2] == "lifecycle=");
    CHECK(header(out, "Authorization") ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
          "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");

    // "Example: Get Bucket (List Objects)": parameters sorted.
    in = {"GET", "examplebucket.s3.amazonaws.com", "/", {{"prefix", "J"}, {"max-keys", "2"}}, {}, kEmptySha256};
    out = sigv4_sign(in, kAwsExampleKeys, "us-east-1", "s3", "20130524T000000Z");
    CHECK(lines(out.canonical_request)[2] == "max-keys=2&prefix=J");
    CHECK(header(out, "Authorization") ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
          "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("s3: sigv4_sign's canonical request, string to sign and Authorization header") {
    const std::string payload = sha256_hex("hello");
    SigV4Input in;
    in.method = "PUT";
    in.host = "minio.local:9000";
    in.path = "/mds-runs/run%201/ckpt/model.pt";
    in.query = {{"uploadId", "2~abc/def+g=="}, {"partNumber", "12"}, {"list-type", "2"}};
    in.headers = {{"X-Amz-Meta-Sha256", payload},
                  {"  Content-Type ", "  application/octet-stream;   charset=x \t "},
                  {"x-amz-meta-note", "a"},
                  {"X-Amz-Meta-Note", "b   c"}};
    in.payload_sha256 = payload;
    const S3Credentials cred{"AK ID", "secret/+=", ""};
    const SigV4Output out = sigv4_sign(in, cred, "eu-west-3", "s3", "20240229T235959Z");
    const auto cr = lines(out.canonical_request);
    REQUIRE(cr.size() == 12);
    CHECK(cr[0] == "PUT");
    CHECK(cr[1] == "/mds-runs/run%201/ckpt/model.pt");  // the path as given: already encoded
    // Encoded, then sorted by name.
    CHECK(cr[2] == "list-type=2&partNumber=12&uploadId=2~abc%2Fdef%2Bg%3D%3D");
    // Names lower-case and sorted; values trimmed with inner runs of blanks made one space; repeated
    // names joined with ',' in the order given.
    CHECK(cr[3] == "content-type:application/octet-stream; charset=x");
    CHECK(cr[4] == "host:minio.local:9000");
    CHECK(cr[5] == "x-amz-content-sha256:" + payload);
    CHECK(cr[6] == "x-amz-date:20240229T235959Z");
    CHECK(cr[7] == "x-amz-meta-note:a,b c");
    CHECK(cr[8] == "x-amz-meta-sha256:" + payload);
    CHECK(cr[9] == "");
    CHECK(cr[10] == "content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-note;x-amz-meta-sha256");
    CHECK(cr[11] == payload);
    CHECK(out.string_to_sign ==
          "AWS4-HMAC-SHA256\n20240229T235959Z\n20240229/eu-west-3/s3/aws4_request\n" + sha256_hex(out.canonical_request));
    const std::string auth = header(out, "Authorization");
    const std::string head =
        "AWS4-HMAC-SHA256 Credential=AK ID/20240229/eu-west-3/s3/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-note;x-amz-meta-sha256, Signature=";
    REQUIRE(auth.size() == head.size() + 64);
    CHECK(auth.substr(0, head.size()) == head);
    CHECK(is_lower_hex(auth.substr(head.size()), 64));
    // The headers to add: Authorization, x-amz-date and x-amz-content-sha256; no token without one.
    REQUIRE(out.headers.size() == 3);
    CHECK(header(out, "x-amz-date") == "20240229T235959Z");
    CHECK(header(out, "x-amz-content-sha256") == payload);
    CHECK(header(out, "x-amz-security-token") == "<none>");
}

TEST_CASE("s3: sigv4_sign with a session token signs and adds x-amz-security-token") {
    SigV4Input in{"GET", "bucket.s3.us-west-2.amazonaws.com", "/", {{"list-type", "2"}}, {}, kEmptySha256};
    const S3Credentials plain{"AKID", "SECRET", ""};
    const S3Credentials temp{"ASIAID", "SECRET", "IQoJb3JpZ2luX2VjEB4aCXVzLWVhc3QtMSJHMEUCIQ+/="};
    const SigV4Output a = sigv4_sign(in, plain, "us-west-2", "s3", "20240101T000000Z");
    const SigV4Output b = sigv4_sign(in, temp, "us-west-2", "s3", "20240101T000000Z");
    CHECK(header(a, "x-amz-security-token") == "<none>");
    CHECK(a.canonical_request.find("x-amz-security-token") == std::string::npos);
    CHECK(header(b, "x-amz-security-token") == temp.session_token);
    CHECK(b.canonical_request.find("\nx-amz-security-token:" + temp.session_token + "\n") != std::string::npos);
    CHECK(header(b, "Authorization").find("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, ") !=
          std::string::npos);
    CHECK(header(b, "Authorization").find("Credential=ASIAID/20240101/us-west-2/s3/aws4_request, ") != std::string::npos);
    REQUIRE(b.headers.size() == 4);
}

TEST_CASE("s3: sigv4_sign is deterministic, and every input changes the signature") {
    const SigV4Input in{"GET", "h.example", "/k", {{"a", "1"}}, {{"x-amz-meta-sha256", "00"}}, kEmptySha256};
    const S3Credentials cred{"AK", "SK", ""};
    const auto sig = [](const SigV4Output& o) {
        const std::string a = header(o, "Authorization");
        return a.substr(a.size() - 64);
    };
    const SigV4Output base = sigv4_sign(in, cred, "us-east-1", "s3", "20240102T030405Z");
    const SigV4Output again = sigv4_sign(in, cred, "us-east-1", "s3", "20240102T030405Z");
    CHECK(base.headers == again.headers);
    CHECK(base.canonical_request == again.canonical_request);
    CHECK(base.string_to_sign == again.string_to_sign);

    struct Case {
        SigV4Input in;
        S3Credentials cred;
        std::string region = "us-east-1", service = "s3", date = "20240102T030405Z";
    };
    const Case b{in, cred};
    std::vector<Case> cases(12, b);
    cases[0].in.method = "HEAD";
    cases[1].in.host = "h.example:8443";
    cases[2].in.path = "/k/";
    cases[3].in.query[0].second = "2";
    cases[4].in.headers[0].second.push_back('1');
    cases[5].in.payload_sha256 = "UNSIGNED-PAYLOAD";
    cases[6].cred.secret_key = "SK2";
    cases[7].cred.session_token = "T";
    cases[8].region = "eu-west-1";
    cases[9].service = "s3express";
    cases[10].date = "20240102T030406Z";
    cases[11].date = "20240103T030405Z";
    std::vector<std::string> sigs{sig(base)};
    for (const Case& c : cases) sigs.push_back(sig(sigv4_sign(c.in, c.cred, c.region, c.service, c.date)));
    for (std::size_t i = 0; i < sigs.size(); ++i) {
        CAPTURE(i);
        CHECK(is_lower_hex(sigs[i], 64));
        for (std::size_t j = 0; j < i; ++j) CHECK(sigs[i] != sigs[j]);
    }
    // The access key is not signed: only the Credential= part changes.
    const SigV4Output other_id = sigv4_sign(in, {"AK2", "SK", ""}, "us-east-1", "s3", "20240102T030405Z");
    CHECK(sig(other_id) == sig(base));
    CHECK(header(other_id, "Authorization").find("Credential=AK2/20240102/") != std::string::npos);
}

TEST_CASE("s3: sigv4_sign's empty path is '/'; host, x-amz-date and x-amz-content-sha256 among the headers are replaced") {
    SigV4Input in{"GET", "b.s3.amazonaws.com", "", {}, {{"Host", "evil.example"}, {"X-Amz-Date", "19700101T000000Z"}}, kEmptySha256};
    const SigV4Output out = sigv4_sign(in, {"AK", "SK", ""}, "us-east-1", "s3", "20240102T030405Z");
    const auto cr = lines(out.canonical_request);
    CHECK(cr[1] == "/");
    CHECK(cr[2] == "");
    CHECK(out.canonical_request.find("host:b.s3.amazonaws.com\n") != std::string::npos);
    CHECK(out.canonical_request.find("evil") == std::string::npos);
    CHECK(out.canonical_request.find("19700101") == std::string::npos);
}

TEST_CASE("s3: sigv4_sign wants the date as YYYYMMDDTHHMMSSZ") {
    const SigV4Input in{"GET", "h", "/", {}, {}, kEmptySha256};
    const S3Credentials cred{"AK", "SK", ""};
    CHECK_NOTHROW(sigv4_sign(in, cred, "us-east-1", "s3", "20240102T030405Z"));
    for (const char* bad : {"", "20240102", "20240102T030405", "20240102T030405z", "2024-01-02T03:04:05Z", "20240102 030405Z",
                            "20240102T0304050Z", "Tue, 02 Jan 2024 03:04:05 GMT"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(sigv4_sign(in, cred, "us-east-1", "s3", bad), mds::Error);
    }
}

// ---------------------------------------------------------------------------------------------------
// find_s3_settings

TEST_CASE("s3: find_s3_settings without any keys is a UsageError") {
    AwsEnv env("nokeys");
    const std::string msg = usage_error([] { (void)find_s3_settings("", ""); });
    CHECK(msg.find("no S3 keys") != std::string::npos);
    CHECK(msg.find("'default'") != std::string::npos);
    // One of the two variables is not enough, nor an empty or blank one.
    env.set("AWS_ACCESS_KEY_ID", "AKID");
    CHECK_THROWS_AS(find_s3_settings("", ""), mds::UsageError);
    env.set("AWS_SECRET_ACCESS_KEY", "  ");
    CHECK_THROWS_AS(find_s3_settings("", ""), mds::UsageError);
    // A profile the credentials file lacks, and a credentials file that is not there.
    env.unset("AWS_SECRET_ACCESS_KEY");
    env.write(".aws/credentials", "[other]\naws_access_key_id = A\naws_secret_access_key = S\n");
    env.set("AWS_PROFILE", "work");
    CHECK(usage_error([] { (void)find_s3_settings("", ""); }).find("'work'") != std::string::npos);
    env.set("AWS_SHARED_CREDENTIALS_FILE", (env.home / "missing").string());
    env.set("AWS_PROFILE", "other");
    CHECK_THROWS_AS(find_s3_settings("", ""), mds::UsageError);
}

TEST_CASE("s3: find_s3_settings from the environment: AWS's regional endpoint, virtual-hosted") {
    AwsEnv env("env");
    env.set("AWS_ACCESS_KEY_ID", "  AKIDENV\n");
    env.set("AWS_SECRET_ACCESS_KEY", "secret/env+key");
    env.set("AWS_SESSION_TOKEN", "tok+en/=");
    // Not read: the environment's keys come first, whatever AWS_PROFILE says.
    env.write(".aws/credentials", "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = SFILE\n");
    env.set("AWS_PROFILE", "default");
    const S3Settings s = find_s3_settings("", "");
    CHECK(s.credentials.access_key == "AKIDENV");
    CHECK(s.credentials.secret_key == "secret/env+key");
    CHECK(s.credentials.session_token == "tok+en/=");
    CHECK(s.region == "us-east-1");
    CHECK(s.endpoint == "https://s3.us-east-1.amazonaws.com");
    CHECK_FALSE(s.path_style);

    env.set("AWS_REGION", "eu-central-1");
    const S3Settings r = find_s3_settings("", "");
    CHECK(r.endpoint == "https://s3.eu-central-1.amazonaws.com");
    CHECK_FALSE(r.path_style);
}

TEST_CASE("s3: find_s3_settings from ~/.aws/credentials and ~/.aws/config, [default] and AWS_PROFILE") {
    AwsEnv env("files");
    env.write(".aws/credentials",
              "# made by aws configure\r\n"
              "[default]\r\n"
              "aws_access_key_id = AKIDDEFAULT\r\n"
              "aws_secret_access_key = SDEFAULT/with=equals\r\n"
              "\r\n"
              "; another comment\n"
              "[ work ]\n"
              "  AWS_ACCESS_KEY_ID=AKIDWORK  \n"
              "aws_secret_access_key\t=\tSWORK\n"
              "aws_session_token = TWORK\n"
              "[profile work]\n"  // the credentials file names profiles without "profile "
              "aws_access_key_id = WRONG\n"
              "aws_secret_access_key = WRONG\n");
    env.write(".aws/config",
              "[default]\n"
              "region = us-west-2\n"
              "s3 =\n"
              "  addressing_style = path\n"
              "  max_concurrent_requests\n"
              "[work]\n"  // the config file names them "profile work": this one is not read
              "region = ap-south-1\n"
              "[profile work]\n"
              "region = eu-north-1\n");
    S3Settings s = find_s3_settings("", "");
    CHECK(s.credentials.access_key == "AKIDDEFAULT");
    CHECK(s.credentials.secret_key == "SDEFAULT/with=equals");
    CHECK(s.credentials.session_token == "");
    CHECK(s.region == "us-west-2");
    CHECK(s.endpoint == "https://s3.us-west-2.amazonaws.com");
    CHECK_FALSE(s.path_style);

    env.set("AWS_PROFILE", "work");
    s = find_s3_settings("", "");
    CHECK(s.credentials.access_key == "AKIDWORK");
    CHECK(s.credentials.secret_key == "SWORK");
    CHECK(s.credentials.session_token == "TWORK");
    CHECK(s.region == "eu-north-1");

    // The default profile may also be written [profile default] in the config file.
    env.unset("AWS_PROFILE");
    env.write(".aws/config", "[profile default]\nregion = sa-east-1\n");
    CHECK(find_s3_settings("", "").region == "sa-east-1");
    env.set("AWS_PROFILE", "work");

    // Only one key in the environment: the profile's pair is taken whole, not mixed.
    env.set("AWS_ACCESS_KEY_ID", "AKIDENV");
    s = find_s3_settings("", "");
    CHECK(s.credentials.access_key == "AKIDWORK");
    CHECK(s.credentials.secret_key == "SWORK");

    // AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE instead of the files under HOME.
    env.unset("AWS_ACCESS_KEY_ID");
    env.unset("AWS_PROFILE");
    env.set("AWS_SHARED_CREDENTIALS_FILE",
            env.write("elsewhere/creds", "[default]\naws_access_key_id = AKIDELSEWHERE\naws_secret_access_key = S\n"));
    env.set("AWS_CONFIG_FILE", env.write("elsewhere/conf", "[default]\nregion = sa-east-1\n"));
    s = find_s3_settings("", "");
    CHECK(s.credentials.access_key == "AKIDELSEWHERE");
    CHECK(s.region == "sa-east-1");

    // No HOME and no files: no keys.
    env.unset("AWS_SHARED_CREDENTIALS_FILE");
    env.unset("AWS_CONFIG_FILE");
    env.unset("HOME");
    CHECK_THROWS_AS(find_s3_settings("", ""), mds::UsageError);
    env.set("AWS_ACCESS_KEY_ID", "A");
    env.set("AWS_SECRET_ACCESS_KEY", "S");
    CHECK(find_s3_settings("", "").region == "us-east-1");
}

TEST_CASE("s3: find_s3_settings region: flag, AWS_REGION, AWS_DEFAULT_REGION, the config file, us-east-1") {
    AwsEnv env("region");
    env.set("AWS_ACCESS_KEY_ID", "A");
    env.set("AWS_SECRET_ACCESS_KEY", "S");
    CHECK(find_s3_settings("", "").region == "us-east-1");
    env.write(".aws/config", "[default]\nregion = ca-central-1\n");
    CHECK(find_s3_settings("", "").region == "ca-central-1");
    env.set("AWS_DEFAULT_REGION", "eu-west-2");
    CHECK(find_s3_settings("", "").region == "eu-west-2");
    env.set("AWS_REGION", "ap-northeast-1");
    CHECK(find_s3_settings("", "").region == "ap-northeast-1");
    CHECK(find_s3_settings("", "me-south-1").region == "me-south-1");
    CHECK(find_s3_settings("", "me-south-1").endpoint == "https://s3.me-south-1.amazonaws.com");
    // A custom endpoint keeps the region (it is signed) but not AWS's host name.
    const S3Settings m = find_s3_settings("https://minio.example:9000", "garage");
    CHECK(m.region == "garage");
    CHECK(m.endpoint == "https://minio.example:9000");
    // A region is letters, digits and '-'.
    for (const char* bad : {"us east 1", "us-east-1/x", "eu_west", "../x", "ü"}) {
        CAPTURE(bad);
        CHECK(usage_error([&] { (void)find_s3_settings("", bad); }).find("is not a region name") != std::string::npos);
    }
    env.unset("AWS_REGION");
    env.set("AWS_DEFAULT_REGION", "bad region");
    CHECK_THROWS_AS(find_s3_settings("", ""), mds::UsageError);
}

TEST_CASE("s3: find_s3_settings endpoint: flag, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL; custom ones are path-style") {
    AwsEnv env("endpoint");
    env.set("AWS_ACCESS_KEY_ID", "A");
    env.set("AWS_SECRET_ACCESS_KEY", "S");
    env.set("AWS_ENDPOINT_URL", "https://storage.googleapis.com");
    S3Settings s = find_s3_settings("", "");
    CHECK(s.endpoint == "https://storage.googleapis.com");
    CHECK(s.path_style);
    env.set("AWS_ENDPOINT_URL_S3", "https://s3.eu-central-003.backblazeb2.com/");
    s = find_s3_settings("", "");
    CHECK(s.endpoint == "https://s3.eu-central-003.backblazeb2.com");  // trailing '/' dropped
    CHECK(s.path_style);
    s = find_s3_settings("http://127.0.0.1:9000//", "");
    CHECK(s.endpoint == "http://127.0.0.1:9000");
    CHECK(s.path_style);
    // Even AWS's own endpoint, when named, is used path-style.
    CHECK(find_s3_settings("https://s3.us-east-1.amazonaws.com", "").path_style);

    // Plain http only to loopback.
    for (const char* ok : {"http://localhost:9000", "http://127.0.0.1", "http://[::1]:9000",
                           "https://minio.internal:9000", "https://10.0.0.5:9000"}) {
        CAPTURE(ok);
        CHECK_NOTHROW(find_s3_settings(ok, ""));
    }
    for (const char* refused : {"http://minio.internal:9000", "http://10.0.0.5:9000", "http://s3.amazonaws.com",
                                "http://127.evil.example:9000", "http://127.0.0.1.nip.io"}) {
        CAPTURE(refused);
        CHECK(usage_error([&] { (void)find_s3_settings(refused, ""); }).find("plain http") != std::string::npos);
    }
    env.unset("AWS_ENDPOINT_URL_S3");
    env.set("AWS_ENDPOINT_URL", "http://minio.internal:9000");
    CHECK(usage_error([] { (void)find_s3_settings("", ""); }).find("plain http") != std::string::npos);
    env.unset("AWS_ENDPOINT_URL");

    // scheme://host[:port] and nothing else.
    for (const char* bad : {"https://minio.example/bucket", "https://minio.example/a/", "https://minio.example?x=1",
                            "https://minio.example#f", "ftp://minio.example", "minio.example:9000",
                            "https://user:pass@minio.example", "https://", "s3://bucket", "https://[::1", "https://a b",
                            "https://minio.example:", "https://minio.example:9x"}) {
        CAPTURE(bad);
        CHECK_FALSE(usage_error([&] { (void)find_s3_settings(bad, ""); }).empty());
    }
    CHECK(usage_error([] { (void)find_s3_settings("https://minio.example/bucket", ""); }).find("without a path") !=
          std::string::npos);
    // Written in lower case: the Host header is signed as the endpoint says.
    CHECK(find_s3_settings("HTTP://LocalHost:9000", "").endpoint == "http://localhost:9000");
}

TEST_CASE("s3: find_s3_settings names the file and line of a malformed credentials or config file") {
    AwsEnv env("malformed");
    const std::string creds = env.write(".aws/credentials",
                                        "[default]\n"
                                        "aws_access_key_id = A\n"
                                        "\n"
                                        "this line has no equals sign\n"
                                        "aws_secret_access_key = S\n");
    std::string msg = usage_error([] { (void)find_s3_settings("", ""); });
    CHECK(msg == creds + ":4: expected key = value");
    env.write(".aws/credentials", "# c\n[default\naws_access_key_id = A\naws_secret_access_key = S\n");
    CHECK(usage_error([] { (void)find_s3_settings("", ""); }) == creds + ":2: expected [section]");
    // A malformed line in another profile's section still names the file.
    env.write(".aws/credentials", "[default]\naws_access_key_id = A\naws_secret_access_key = S\n[other]\ngarbage\n");
    CHECK(usage_error([] { (void)find_s3_settings("", ""); }) == creds + ":5: expected key = value");

    // The credentials file is not read when the environment has the keys; the config file is read for the region.
    env.set("AWS_ACCESS_KEY_ID", "A");
    env.set("AWS_SECRET_ACCESS_KEY", "S");
    CHECK_NOTHROW(find_s3_settings("", ""));
    const std::string conf = env.write(".aws/config", "[default]\r\nregion = eu-west-1\r\noops\r\n");
    CHECK(usage_error([] { (void)find_s3_settings("", ""); }) == conf + ":3: expected key = value");
    // ... but not when the region is given.
    env.set("AWS_REGION", "eu-west-1");
    CHECK_NOTHROW(find_s3_settings("", ""));
    CHECK_NOTHROW(find_s3_settings("", "us-west-1"));
}

TEST_CASE("s3: SigV4 canonicalises the session token like any header, and wants a numeric date") {
    const SigV4Input in{"GET", "h", "/", {}, {}, "UNSIGNED-PAYLOAD"};
    S3Credentials a{"AK", "SK", "ab  cd"}, b{"AK", "SK", " ab cd"};
    const SigV4Output sa = sigv4_sign(in, a, "us-east-1", "s3", "20240102T030405Z");
    const SigV4Output sb = sigv4_sign(in, b, "us-east-1", "s3", "20240102T030405Z");
    CHECK(sa.canonical_request.find("\nx-amz-security-token:ab cd\n") != std::string::npos);
    CHECK(sa.string_to_sign == sb.string_to_sign);
    for (const char* bad : {"abcdefghTijklmnZ", "2024010xT030405Z", "20240102T03040xZ", "20240102 030405Z", "20240102T030405"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(sigv4_sign(in, a, "us-east-1", "s3", bad), mds::Error);
    }
}
