// Alert delivery (slurm/notify.h): the e-mail message built for SMTP (headers, CRLF line ends,
// RFC 2047 subjects, no header injection), the user's alert command (calling convention, no shell
// evaluation of the message, errors and timeouts), and send_mail's failures returned as text.
// Delivery to a real SMTP server is covered by the integration tests.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mds/slurm/notify.h"
#include "test_support.h"

using mds::test::contains;
using mds::test::slurp;

namespace fs = std::filesystem;
using namespace mds::slurm;

namespace {

constexpr std::int64_t kMailNow = 1'760'000'000;

// The header block (up to the empty line), split into lines without their CRLF.
std::vector<std::string> header_lines(const std::string& mail) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start < mail.size()) {
        const std::size_t end = mail.find("\r\n", start);
        if (end == std::string::npos || end == start) break;
        lines.push_back(mail.substr(start, end - start));
        start = end + 2;
    }
    return lines;
}

std::string header(const std::string& mail, const std::string& name) {
    for (const auto& l : header_lines(mail))
        if (l.rfind(name + ": ", 0) == 0) return l.substr(name.size() + 2);
    return "\x01missing";
}

std::string body_of(const std::string& mail) {
    const auto sep = mail.find("\r\n\r\n");
    return sep == std::string::npos ? std::string() : mail.substr(sep + 4);
}

bool crlf_only(const std::string& s) {
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) return false;
        if (s[i] == '\r' && (i + 1 >= s.size() || s[i + 1] != '\n')) return false;
    }
    return true;
}

std::string unbase64(const std::string& in) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::string out;
    unsigned acc = 0;
    int bits = 0;
    for (char c : in) {
        const int v = val(c);
        if (v < 0) break;  // '='
        acc = (acc << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xff);
        }
    }
    return out;
}

// Decodes a header value made of RFC 2047 "=?UTF-8?B?...?=" words (separated by folding
// whitespace) or plain text.
std::string decode_2047(const std::string& value) {
    std::string out;
    std::size_t pos = 0;
    bool any = false;
    while (true) {
        const auto b = value.find("=?UTF-8?B?", pos);
        if (b == std::string::npos) break;
        const auto e = value.find("?=", b + 10);
        if (e == std::string::npos) break;
        out += unbase64(value.substr(b + 10, e - b - 10));
        pos = e + 2;
        any = true;
    }
    return any ? out : value;
}

MailConfig mail_config() {
    MailConfig c;
    c.from = "watchdog@cluster.example.org";
    c.to = {"oncall@example.org", "stas@example.org"};
    return c;
}

}  // namespace

// --- build_mail ----------------------------------------------------------------------------------

TEST_CASE("notify: the mail has the required headers and CRLF line ends everywhere") {
    const std::string body = "tr1-13B-round3 is neither RUNNING nor SCHEDULED\nsecond line\r\n\n.a dot line\nlast";
    const std::string m = build_mail(mail_config(), "[ALERT] tr1-13B-round3 is stalled", body, kMailNow);
    INFO(m);
    CHECK(crlf_only(m));
    CHECK(header(m, "From") == "watchdog@cluster.example.org");
    CHECK(header(m, "To") == "oncall@example.org, stas@example.org");
    CHECK(header(m, "Subject") == "[ALERT] tr1-13B-round3 is stalled");
    const std::string date = header(m, "Date");
    // "Thu, 09 Oct 2025 10:13:20 +0200": day, date, time, numeric zone (RFC 5322 §3.3).
    REQUIRE(date.size() == 31);
    CHECK(date[3] == ',');
    CHECK((date[26] == '+' || date[26] == '-'));
    CHECK(contains(date, "2025"));
    CHECK(contains(date, "Oct"));
    const std::string id = header(m, "Message-ID");
    CHECK(id.front() == '<');
    CHECK(id.back() == '>');
    CHECK(contains(id, "@cluster.example.org>"));
    CHECK(contains(header(m, "Content-Type"), "charset=utf-8"));
    // Body: each line once, CRLF-terminated, in order.
    CHECK(body_of(m) == "tr1-13B-round3 is neither RUNNING nor SCHEDULED\r\nsecond line\r\n\r\n.a dot line\r\nlast\r\n");
}

TEST_CASE("notify: the Message-ID differs between messages sent at different times") {
    const auto c = mail_config();
    CHECK(header(build_mail(c, "s", "b", kMailNow), "Message-ID") != header(build_mail(c, "s", "b", kMailNow + 1), "Message-ID"));
}

TEST_CASE("notify: a non-ASCII subject is RFC 2047 encoded and decodes back") {
    const std::string subject = "[ALERT] entra\xc3\xaenement arr\xc3\xaat\xc3\xa9 \xe2\x9a\xa0";  // "entraînement arrêté ⚠"
    const std::string m = build_mail(mail_config(), subject, "corps", kMailNow);
    INFO(m);
    const std::string value = header(m, "Subject");
    CHECK(value.rfind("=?UTF-8?B?", 0) == 0);
    CHECK(value.size() >= 12);
    CHECK(value.substr(value.size() - 2) == "?=");
    CHECK(decode_2047(value) == subject);
    // Headers are 7-bit.
    for (const auto& l : header_lines(m))
        for (char c : l) CHECK(static_cast<unsigned char>(c) < 128);
    CHECK(crlf_only(m));
    // The body keeps its UTF-8 as is (8bit).
    const std::string b = build_mail(mail_config(), "s", "\xc3\xa9t\xc3\xa9", kMailNow);
    CHECK(body_of(b) == "\xc3\xa9t\xc3\xa9\r\n");
}

TEST_CASE("notify: a long non-ASCII subject is split into encoded words of at most 75 characters") {
    // RFC 2047 §2: an encoded-word is at most 75 characters; longer text takes several words
    // separated by CRLF SPACE. A job name with an accent makes any watchdog subject this long.
    const std::string subject = "[ALERT] tr1-13B-round3-\xc3\xa9t\xc3\xa9 is neither running nor scheduled to run";
    const std::string m = build_mail(mail_config(), subject, "b", kMailNow);
    INFO(m);
    std::string value;  // unfolded
    bool in_subject = false;
    for (const auto& l : header_lines(m)) {
        if (l.rfind("Subject: ", 0) == 0) {
            value = l.substr(9);
            in_subject = true;
        } else if (in_subject && !l.empty() && (l[0] == ' ' || l[0] == '\t')) {
            value += l;
        } else {
            in_subject = false;
        }
    }
    CHECK(decode_2047(value) == subject);
    std::size_t pos = 0;
    while ((pos = value.find("=?", pos)) != std::string::npos) {
        const auto end = value.find("?=", pos + 10);
        REQUIRE(end != std::string::npos);
        CHECK(end + 2 - pos <= 75);
        pos = end + 2;
    }
}

TEST_CASE("notify: CR/LF in a subject or an address cannot inject headers") {
    MailConfig c = mail_config();
    c.to = {"oncall@example.org\r\nBcc: victim@evil.example"};
    c.from = "watchdog@cluster.example.org\nX-Injected: 1";
    const std::string m = build_mail(c, "job tr1\r\nBcc: everyone@evil.example\r\n\r\nfake body", "real body", kMailNow);
    INFO(m);
    CHECK(crlf_only(m));
    for (const auto& l : header_lines(m)) {
        CHECK(l.rfind("Bcc", 0) != 0);
        CHECK(l.rfind("X-Injected", 0) != 0);
        CHECK(l.rfind("fake body", 0) != 0);
    }
    CHECK(contains(header(m, "Subject"), "job tr1"));
    CHECK(contains(header(m, "Subject"), "fake body"));  // kept, on the one Subject line
    CHECK(body_of(m) == "real body\r\n");
}

TEST_CASE("notify: an empty From uses <user>@<host>") {
    MailConfig c = mail_config();
    c.from.clear();
    const std::string m = build_mail(c, "s", "b", kMailNow);
    const std::string from = header(m, "From");
    CHECK(from == default_mail_from());
    CHECK(contains(from, "@"));
}

// --- run_alert_command ---------------------------------------------------------------------------

TEST_CASE("notify: the alert command gets the message as $1 and in its environment, the report on stdin") {
    const auto dir = mds::test::scratch_dir("notify-command");
    const std::string d = dir.string();
    const std::string command = "printf '%s' \"$1\" > '" + d + "/arg'; printf '%s' \"$MDS_ALERT_MESSAGE\" > '" + d +
                                "/message'; printf '%s' \"$MDS_ALERT_LEVEL\" > '" + d +
                                "/level'; printf '%s' \"$MDS_ALERT_SUBJECT\" > '" + d +
                                "/subject'; printf '%s' \"$MDS_JOB_NAME\" > '" + d + "/job'; cat > '" + d + "/stdin'";
    const std::string message = "tr1-13B-round3 is RUNNING but stalled: last iteration 1200/292968";
    const std::string report = "ALERT [stalled] ...\nPULSE [running:1001] ...\n";
    const std::string err = run_alert_command(command, message, "[ALERT] tr1-13B-round3 is running but stalled", "ALERT",
                                              "tr1-13B-round3", report, std::chrono::seconds(30));
    CHECK(err.empty());
    CHECK(slurp(dir / "arg") == message);
    CHECK(slurp(dir / "message") == message);
    CHECK(slurp(dir / "level") == "ALERT");
    CHECK(slurp(dir / "subject") == "[ALERT] tr1-13B-round3 is running but stalled");
    CHECK(slurp(dir / "job") == "tr1-13B-round3");
    CHECK(slurp(dir / "stdin") == report);
    fs::remove_all(dir);
}

TEST_CASE("notify: shell metacharacters in the message are not executed") {
    const auto dir = mds::test::scratch_dir("notify-inject");
    const std::string d = dir.string();
    const std::string message = "job $(touch '" + d + "/pwned1'); rm -rf '" + d + "/keep' `touch '" + d +
                                "/pwned2'` && touch '" + d + "/pwned3' | \"quoted\" 'single' $HOME * \\";
    std::ofstream(dir / "keep") << "still here";
    const std::string command = "printf '%s' \"$1\" > '" + d + "/arg'; printf '%s' \"$MDS_ALERT_MESSAGE\" > '" + d +
                                "/message'";
    const std::string err = run_alert_command(command, message, "subject $(touch '" + d + "/pwned4')", "ALERT",
                                              "job`touch '" + d + "/pwned5'`", "", std::chrono::seconds(30));
    CHECK(err.empty());
    CHECK(slurp(dir / "arg") == message);
    CHECK(slurp(dir / "message") == message);
    for (const char* f : {"pwned1", "pwned2", "pwned3", "pwned4", "pwned5"}) {
        CAPTURE(std::string(f));
        CHECK_FALSE(fs::exists(dir / f));
    }
    CHECK(slurp(dir / "keep") == "still here");
    fs::remove_all(dir);
}

TEST_CASE("notify: a failing alert command returns its exit status and stderr") {
    const std::string err = run_alert_command("echo 'webhook returned 500' >&2; exit 3", "m", "s", "ALERT", "job", "",
                                              std::chrono::seconds(30));
    CHECK_FALSE(err.empty());
    CHECK(contains(err, "exit status 3"));
    CHECK(contains(err, "webhook returned 500"));
    CHECK_FALSE(contains(err, "\n"));

    const std::string missing =
        run_alert_command("mds-no-such-webhook-tool-xyz", "m", "s", "ALERT", "job", "", std::chrono::seconds(30));
    CHECK(contains(missing, "exit status 127"));
}

TEST_CASE("notify: an alert command that does not read its report does not fail") {
    const std::string err = run_alert_command("exit 0", "m", "s", "UNKNOWN", "job", std::string(4 << 20, 'r'),
                                              std::chrono::seconds(30));
    CHECK(err.empty());
}

TEST_CASE("notify: an alert command that hangs is stopped at the timeout") {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = run_alert_command("sleep 30", "m", "s", "ALERT", "job", "report", std::chrono::seconds(1));
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(contains(err, "timed out"));
    CHECK(took < std::chrono::seconds(5));
}

// --- send_mail -----------------------------------------------------------------------------------

TEST_CASE("notify: send_mail failures come back as text") {
    MailConfig none = mail_config();
    none.to.clear();
    std::string err;
    CHECK_NOTHROW(err = send_mail(none, "s", "b"));
    CHECK_FALSE(err.empty());

    MailConfig closed = mail_config();
    closed.smtp_url = "smtp://127.0.0.1:1";
    closed.timeout = std::chrono::seconds(2);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_NOTHROW(err = send_mail(closed, "s", "b"));
    CHECK_FALSE(err.empty());
    CHECK(contains(err, "smtp://127.0.0.1:1"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}
