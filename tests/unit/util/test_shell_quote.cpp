// Shell quoting (mds/util/shell_quote.h), checked by handing the quoted words to a real /bin/sh.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mds/util/process.h"
#include "mds/util/shell_quote.h"

namespace {

// The words /bin/sh sees after parsing `quoted`, each printed in brackets by printf '[%s]'.
std::string sh_words(const std::string& quoted) {
    const auto r = mds::run_process({"/bin/sh", "-c", "printf '[%s]' " + quoted});
    REQUIRE(r.ok());
    return r.out;
}

}  // namespace

TEST_CASE("shell_quote: plain words stay as they are") {
    CHECK(mds::shell_quote("--data-path") == "--data-path");
    CHECK(mds::shell_quote("/data/oscar_text_document") == "/data/oscar_text_document");
    CHECK(mds::shell_quote("90,8,2") == "90,8,2");
    CHECK(mds::shell_quote("1e-4") == "1e-4");
    CHECK(mds::shell_quote("a=b:c@d%e+f") == "a=b:c@d%e+f");
}

TEST_CASE("shell_quote: everything else is single-quoted") {
    CHECK(mds::shell_quote("") == "''");
    CHECK(mds::shell_quote("a b") == "'a b'");
    CHECK(mds::shell_quote("it's") == "'it'\\''s'");
    CHECK(mds::shell_quote("'") == "''\\'''");
    CHECK(mds::shell_quote("~/x") == "'~/x'");
    CHECK(mds::shell_quote("$HOME") == "'$HOME'");
    CHECK(mds::shell_quote("*") == "'*'");
    CHECK(mds::shell_quote("a\nb") == "'a\nb'");
}

TEST_CASE("shell_quote: /bin/sh reads back exactly the words quoted") {
    const std::vector<std::string> words = {"plain",        "",          "two words", "it's",   "\"dq\"",     "$HOME",
                                            "`id`",         "$(id)",     "a\\b",      "*.txt",  "~",          "x;y|z&",
                                            "line\nbreak",  "tab\there", "!bang",     "#hash",  "{a,b}",      "\xc3\xa9t\xc3\xa9",
                                            "echo \"$1\" >> /tmp/out"};
    std::string expect;
    for (const auto& w : words) expect += "[" + w + "]";
    CHECK(sh_words(mds::shell_join(words)) == expect);
    for (const auto& w : words) CHECK(sh_words(mds::shell_quote(w)) == "[" + w + "]");
}

TEST_CASE("shell_join: words joined by single spaces") {
    CHECK(mds::shell_join({}) == "");
    CHECK(mds::shell_join({"--lr", "1e-4"}) == "--lr 1e-4");
    CHECK(mds::shell_join({"--alert-command", "echo \"$1\""}) == "--alert-command 'echo \"$1\"'");
}
