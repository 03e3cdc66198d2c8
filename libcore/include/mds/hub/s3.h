// mds-hub-sync's second destination, s3://bucket/prefix: S3 and S3-compatible stores (MinIO, Ceph,
// Google Cloud Storage with HMAC keys) over their REST API, with AWS Signature Version 4 computed
// here (HMAC-SHA256 from OpenSSL) and sent through HttpClient (http.h: retries, loopback-only http).
// Objects carry the sha256 of their bytes as x-amz-meta-sha256 so that a re-run can tell which
// files the bucket already holds; large files go up as multipart uploads, whose parts are found
// again (ListParts, compared by MD5) after a kill.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mds/hub/http.h"
#include "mds/util/error.h"

namespace mds::hub {

// s3://bucket[/prefix] → bucket, prefix without leading or trailing '/'. Throws mds::UsageError for
// anything else (another scheme, an empty or invalid bucket name, "." / ".." / empty segments).
struct S3Url {
    std::string bucket;
    std::string prefix;
};
bool is_s3_url(std::string_view text);
S3Url parse_s3_url(const std::string& text);

// Percent-encoding as SigV4 wants it: every byte but A-Z a-z 0-9 - . _ ~ as %XX (upper-case hex);
// '/' kept when `keep_slash` (object keys in paths).
std::string uri_encode(std::string_view text, bool keep_slash);

struct S3Credentials {
    std::string access_key;
    std::string secret_key;
    std::string session_token;  // temporary credentials: sent as x-amz-security-token
};

// What is signed: the method, the Host header as sent, the encoded path, the query parameters (not
// encoded), the headers to sign besides host / x-amz-date / x-amz-content-sha256 /
// x-amz-security-token (which sigv4_sign adds), and the payload's sha256 (hex) or "UNSIGNED-PAYLOAD".
struct SigV4Input {
    std::string method;
    std::string host;
    std::string path;
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string payload_sha256;
};

struct SigV4Output {
    std::vector<std::pair<std::string, std::string>> headers;  // to add: Authorization, x-amz-date, ...
    std::string canonical_request;
    std::string string_to_sign;
};

// `amz_date` is the request time as YYYYMMDDTHHMMSSZ (UTC).
SigV4Output sigv4_sign(const SigV4Input& input, const S3Credentials& credentials, const std::string& region,
                       const std::string& service, const std::string& amz_date);
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

// Where and how to reach the store, and with which keys. From the flags, else the AWS environment:
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the profile AWS_PROFILE (or
// "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials); the region from AWS_REGION,
// AWS_DEFAULT_REGION or AWS_CONFIG_FILE (~/.aws/config), else us-east-1; the endpoint from
// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's regional one. Path-style addressing
// (endpoint/bucket/key) for a custom endpoint, virtual-hosted (bucket.endpoint/key) for AWS.
struct S3Settings {
    std::string endpoint;  // scheme://host[:port], no trailing '/'
    std::string region = "us-east-1";
    S3Credentials credentials;
    bool path_style = true;
};
// Throws mds::UsageError when no keys are found or a file is malformed (naming it and the line).
S3Settings find_s3_settings(const std::string& endpoint_flag, const std::string& region_flag);

struct S3Object {
    std::string key;
    std::uint64_t size = 0;
    std::string etag;  // without its quotes
};

struct S3Head {
    std::uint64_t size = 0;
    std::string etag;
    std::string sha256;  // x-amz-meta-sha256; empty when the object has none
};

struct S3Part {
    int number = 0;
    std::uint64_t size = 0;
    std::string etag;  // without quotes
};

// Thrown when a CompleteMultipartUpload got no clear answer (it may have been applied).
struct S3Uncertain : Error {
    using Error::Error;
};

// The calls mds-hub-sync makes, each retried by the HttpClient as retry.h says. Errors (S3's <Error>
// documents) become mds::Error naming the call, the key, the code and the message (HttpError, with
// the answer's status, for a refused call).
class S3Client {
public:
    S3Client(HttpClient& http, S3Settings settings);

    bool bucket_exists(const std::string& bucket);
    void create_bucket(const std::string& bucket);
    // ListObjectsV2 under `prefix`, every page.
    std::vector<S3Object> list(const std::string& bucket, const std::string& prefix);
    std::optional<S3Head> head(const std::string& bucket, const std::string& key);
    // PUT of bytes [0, size) of `file`, whose sha256 is `sha256`. Returns the ETag.
    std::string put(const std::string& bucket, const std::string& key, const std::string& file, std::uint64_t size,
                    const std::string& sha256);
    std::string create_multipart(const std::string& bucket, const std::string& key, const std::string& sha256);
    std::string upload_part(const std::string& bucket, const std::string& key, const std::string& upload_id, int number,
                            const std::string& file, std::uint64_t offset, std::uint64_t length);
    // None when the upload is gone (completed, aborted or expired).
    std::optional<std::vector<S3Part>> list_parts(const std::string& bucket, const std::string& key,
                                                  const std::string& upload_id);
    // Returns the object's ETag. Throws S3Uncertain when the answer was lost; the caller checks the object.
    std::string complete_multipart(const std::string& bucket, const std::string& key, const std::string& upload_id,
                            const std::vector<S3Part>& parts);
    void abort_multipart(const std::string& bucket, const std::string& key, const std::string& upload_id);
    void delete_object(const std::string& bucket, const std::string& key);

private:
    struct Call {
        std::string method;
        std::string bucket;
        std::string key;
        std::vector<std::pair<std::string, std::string>> query;
        std::vector<std::pair<std::string, std::string>> headers;
        std::string body;
        std::string body_file;
        std::uint64_t body_offset = 0;
        std::uint64_t body_length = 0;
        std::string payload_sha256;  // empty: computed from the body
        bool retry = true;
        std::string what;
    };
    HttpResponse send(const Call& call);
    HttpResponse send_ok(const Call& call);
    HttpClient& http_;
    S3Settings s_;
};

}  // namespace mds::hub
