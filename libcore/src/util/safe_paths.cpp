#include "mds/util/safe_paths.h"

#include <fcntl.h>     // open
#include <signal.h>    // kill
#include <sys/stat.h>  // stat
#include <unistd.h>    // access, gethostname, getpid, unlink

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "mds/util/error.h"
#include "mds/util/files.h"

namespace mds {
namespace fs = std::filesystem;

namespace {

std::string this_host() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
    std::string h = buf;
    // Only characters that are safe in a file name.
    for (char& c : h)
        if (c == '/' || static_cast<unsigned char>(c) < 0x20) c = '_';
    return h.empty() ? "localhost" : h;
}

// The path with its existing part resolved (symbolic links, "..") and the rest appended.
fs::path resolved(const std::string& p) {
    std::error_code ec;
    auto abs = fs::absolute(p, ec);
    if (ec) return fs::path(p).lexically_normal();
    auto r = fs::weakly_canonical(abs, ec);
    return ec ? abs.lexically_normal() : r.lexically_normal();
}

bool is_prefix(const fs::path& parent, const fs::path& child) {
    auto p = parent.begin(), c = child.begin();
    for (; p != parent.end(); ++p, ++c) {
        if (p->empty()) continue;  // a trailing separator
        if (c == child.end() || *p != *c) return false;
    }
    return true;
}

// Creates and removes a probe file in `dir`; throws the user-worded error when that fails.
void probe_writable(const std::string& dir, const std::string& what) {
    const std::string probe = dir + "/.mds-write-test-" + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(system_error_message("cannot write into the " + what, dir, errno));
    ::close(fd);
    ::unlink(probe.c_str());
}

}  // namespace

std::string printable(std::string_view s, std::size_t max_chars) {
    std::string out;
    std::size_t shown = 0;
    for (unsigned char c : s) {
        if (shown >= max_chars) {
            out += "...";
            break;
        }
        if (c < 0x20 || c >= 0x7f || c == '\\') {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
        ++shown;
    }
    return out;
}

std::string checked_entry_name(std::string_view name, const std::string& source) {
    const auto bad = [&](const std::string& why) {
        return Error(source + ": \"" + printable(name) + "\" is not a usable name (" + why + ")");
    };
    if (name.empty()) throw bad("empty");
    if (name.size() > 255) throw bad(std::to_string(name.size()) + " bytes; a file name has at most 255");
    if (name == "." || name == "..") throw bad("it names a folder above or the same folder");
    for (unsigned char c : name) {
        if (c == '/') throw bad("it contains '/': only a name inside the folder is allowed");
        if (c < 0x20 || c == 0x7f) throw bad("it contains control bytes");
    }
    return std::string(name);
}

std::string in_quotes(std::string_view s) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "'" + s + "'".
    std::string q = "'";
    q += printable(s, 200);
    q += '\'';
    return q;
}

bool paths_overlap(const std::string& a, const std::string& b) {
    const auto ra = resolved(a), rb = resolved(b);
    return is_prefix(ra, rb) || is_prefix(rb, ra);
}

void refuse_overlap(const std::string& a, const std::string& what_a, const std::string& b, const std::string& what_b) {
    const auto ra = resolved(a), rb = resolved(b);
    if (ra == rb)
        throw UsageError(what_a + " " + in_quotes(a) + " and " + what_b + " " + in_quotes(b) +
                         " are the same folder; write to another folder");
    if (is_prefix(ra, rb))
        throw UsageError(what_b + " " + in_quotes(b) + " lies inside " + what_a + " " + in_quotes(a) + "; write outside it");
    if (is_prefix(rb, ra))
        throw UsageError(what_a + " " + in_quotes(a) + " lies inside " + what_b + " " + in_quotes(b) + "; write elsewhere");
}

std::string temp_path_for(const std::string& final_path) {
    auto slash = final_path.rfind('/');
    std::string dir = slash == std::string::npos ? "" : final_path.substr(0, slash + 1);
    std::string base = slash == std::string::npos ? final_path : final_path.substr(slash + 1);
    return dir + "." + base + ".tmp-" + std::to_string(::getpid()) + "-" + this_host();
}

TempOwner parse_temp_name(std::string_view name) {
    TempOwner owner;
    if (name.empty() || name[0] != '.') return owner;
    const auto at = name.rfind(".tmp-");
    if (at == std::string_view::npos || at == 0) return owner;
    std::string_view rest = name.substr(at + 5);
    std::size_t i = 0;
    long pid = 0;
    while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && i < 10) pid = pid * 10 + (rest[i++] - '0');
    if (i == 0 || pid <= 0) return owner;
    if (i == rest.size()) {
        owner.pid = pid;
    } else if (rest[i] == '-' && i + 1 < rest.size()) {
        owner.pid = pid;
        owner.host = std::string(rest.substr(i + 1));
    }
    return owner;
}

bool is_stale_temp(std::string_view name) {
    const auto owner = parse_temp_name(name);
    if (owner.pid <= 0 || owner.pid == ::getpid()) return false;
    if (!owner.host.empty() && owner.host != this_host()) return false;  // another node's: cannot tell
    return ::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH;
}

std::vector<std::string> prepare_output_dir(const std::string& dir, const std::string& what) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw Error("the " + what + " '" + printable(dir, 200) + "' exists and is not a folder; refusing to replace it");
    } else {
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw Error(system_error_message("cannot create the " + what, dir, ec.value()));
    }
    probe_writable(dir, what);
    std::vector<std::string> removed;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!is_stale_temp(name)) continue;
        remove_tree(it->path().string());
        removed.push_back(name);
    }
    return removed;
}

void check_output_dir(const std::string& dir, const std::string& what) {
    fs::path p = resolved(dir);
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw Error("the " + what + " '" + printable(dir, 200) + "' exists and is not a folder");
        if (::access(p.c_str(), W_OK | X_OK) != 0) throw Error(system_error_message("cannot write into the " + what, dir, errno));
        return;
    }
    // The nearest existing ancestor must be a folder we may create entries in.
    fs::path up = p.parent_path();
    while (!up.empty() && ::stat(up.c_str(), &st) != 0) {
        if (up == up.parent_path()) break;
        up = up.parent_path();
    }
    if (!S_ISDIR(st.st_mode))
        throw Error("cannot create the " + what + " '" + printable(dir, 200) + "': '" + up.string() + "' is not a folder");
    if (::access(up.c_str(), W_OK | X_OK) != 0)
        throw Error(system_error_message("cannot create the " + what + " '" + printable(dir, 200) + "'", up.string(), errno));
}

// "filesystem error: cannot create directories: Permission denied [/a/b]" as a user reads it:
// "cannot create directories: /a/b: Permission denied". Something the user can cause (a full,
// read-only or missing destination) is never reported as an internal error.
std::string filesystem_error_message(const std::filesystem::filesystem_error& e) {
    std::string what = e.what();
    const std::string prefix = "filesystem error: ";
    if (what.starts_with(prefix)) what = what.substr(prefix.size());
    // libstdc++ appends ": <errno text>" then " [path1] [path2]": keep the operation only.
    const std::string reason = e.code().message();
    if (const auto at = what.find(": " + reason); at != std::string::npos) what = what.substr(0, at);
    std::string paths = printable(e.path1().string(), 200);
    if (!e.path2().empty()) paths += " -> " + printable(e.path2().string(), 200);
    return what + ": " + paths + ": " + reason;
}

std::string system_error_message(const std::string& doing, const std::string& path, int err) {
    return doing + ": " + printable(path, 200) + ": " + std::strerror(err);
}

void check_replaceable_output(const std::filesystem::path& dir, bool overwrite, const std::string& marker,
                              const std::string& marker_text, const std::string& kind) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return;
    if (S_ISLNK(st.st_mode))
        throw Error("the destination " + in_quotes(dir.string()) + " is a symbolic link; refusing to replace it (name the folder it points to)");
    if (!S_ISDIR(st.st_mode)) throw Error("the destination " + in_quotes(dir.string()) + " exists and is not a folder; refusing to replace it");
    if (!overwrite) throw Error(printable(dir.string(), 200) + " exists; pass --overwrite to replace it");
    bool empty = true, marked = false;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        empty = false;
        marked = marked || e.path().filename() == marker;
    }
    if (!empty && !marked)
        throw Error("the destination " + in_quotes(dir.string()) + " is a folder without " + marker_text + ", not an earlier " + kind +
                    "; --overwrite replaces only those (choose another destination, or remove the folder yourself)");
}

void write_output_folder(const fs::path& final_dir, const std::function<void(const fs::path& tmp)>& fill,
                         const std::function<void()>& recheck, const std::function<void(const std::string&)>& note) {
    const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
    for (const auto& removed : prepare_output_dir(parent.string(), "destination's folder"))
        if (note) note("removed " + printable(removed) + ", the unfinished output of an interrupted earlier run");
    const fs::path tmp = temp_path_for(final_dir.string());
    remove_tree(tmp.string());
    try {
        fs::create_directories(tmp);
        fill(tmp);
        sync_directory(tmp.string());
        if (recheck) recheck();
        remove_tree(final_dir.string());
        fs::rename(tmp, final_dir);
        sync_directory(parent.string());
    } catch (...) {
        try {
            remove_tree(tmp.string());
        } catch (const Error&) {
            // The output's own error is the one to report.
        }
        throw;
    }
}

}  // namespace mds
