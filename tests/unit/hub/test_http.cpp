// What the Hub client says about answers (hub/http.h): describe() escapes control bytes of a body
// (a hostile server's junk never reaches the terminal raw) and names a redirect it did not follow;
// URLs in messages lose their query (presigned signatures); the answer caps are ordered by kind.
#include <doctest/doctest.h>

#include "mds/hub/http.h"

using namespace mds::hub;

TEST_CASE("hub: describe() escapes the body and names a redirect") {
    HttpResponse r;
    r.status = 500;
    r.body = std::string("oops\x1b[2J\x00\xff", 10);
    const std::string d = r.describe();
    CHECK(d.find("HTTP 500: oops") == 0);
    for (unsigned char c : d) CHECK((c >= 0x20 && c < 0x7f));
    CHECK(d.find("\\x1b") != std::string::npos);

    HttpResponse redirect;
    redirect.status = 302;
    redirect.headers["location"] = "https://elsewhere.example/x?X-Amz-Signature=secret";
    const std::string rd = redirect.describe();
    CHECK(rd.find("HTTP 302 (a redirect to https://elsewhere.example/x, not followed)") == 0);
    CHECK(rd.find("secret") == std::string::npos);

    HttpResponse none;
    none.error = "no complete answer from http://127.0.0.1:1/x within 2 s";
    CHECK(none.describe() == none.error);

    std::string long_body(100000, 'a');
    HttpResponse big;
    big.status = 400;
    big.body = long_body;
    CHECK(big.describe().size() < 300);
}

TEST_CASE("hub: URLs in messages have no query and no control bytes") {
    CHECK(url_for_message("https://h/p?sig=abc") == "https://h/p");
    CHECK(url_for_message("https://h/p") == "https://h/p");
    CHECK(url_for_message("https://h/\n/p") == "https://h/\\x0a/p");
    CHECK(url_for_message(std::string(1000, 'u')).size() <= 203);
}

TEST_CASE("hub: answer caps by kind") {
    CHECK(kMaxSmallAnswerBytes < kMaxApiAnswerBytes);
    CHECK(kMaxApiAnswerBytes < kMaxLargeAnswerBytes);
    CHECK(HttpRequest{}.max_answer_bytes == kMaxApiAnswerBytes);
    const HttpOptions o;
    CHECK(o.answer_timeout.count() > 0);
    CHECK(o.stall_timeout.count() > 0);
}
