// Paths that come from untrusted places (a `latest` file, a checkpoint's args, a flag) and folders
// that tools write into: one checked way to turn a name read from a file into a path inside its
// root, one routine that prepares a destination folder, and one rule for telling source and
// destination apart. Every checkpoint tool and mds-train go through here, so a hostile `latest`
// ("../../x"), a destination that is a file, or `SRC == DST` is refused the same way everywhere.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mds {

// `s` made safe to print: control bytes, bytes >= 0x7f and backslashes as \xNN, cut to `max_chars`
// with "..." appended. For echoing file contents and names in messages.
std::string printable(std::string_view s, std::size_t max_chars = 80);

// printable(s, 200) in single quotes: how messages show a path or name that came from outside.
std::string in_quotes(std::string_view s);

// A folder entry name read from `source` (for example a tag in a `latest` file): not empty, at
// most 255 bytes, no '/', no NUL or other control byte, not "." or "..". Returns it; otherwise an
// mds::Error naming `source` and showing the offending text with printable().
std::string checked_entry_name(std::string_view name, const std::string& source);

// True when `a` and `b` are the same folder or one lies inside the other, after resolving
// symbolic links and "..": existing parts of each path are canonicalised, missing tails appended.
bool paths_overlap(const std::string& a, const std::string& b);
// Throws an mds::UsageError "<what_a> A and <what_b> B are the same folder" (or "... lies inside
// ...") when paths_overlap(a, b).
void refuse_overlap(const std::string& a, const std::string& what_a, const std::string& b, const std::string& what_b);

// The temporary name for an output `name` in the same folder: ".<name>.tmp-<pid>-<host>". A process
// that dies before renaming it leaves it behind; prepare_output_dir removes it on a later run.
std::string temp_path_for(const std::string& final_path);

// Where a temporary was made, parsed back from its name (".X.tmp-<pid>" of older mds versions has
// no host and counts as this host's).
struct TempOwner {
    long pid = 0;
    std::string host;  // empty: no host in the name
};
// The owner of a temporary name, or pid 0 when `name` is not one of ours.
TempOwner parse_temp_name(std::string_view name);
// True when `name` is our temporary and its process is gone: same host (or none recorded) and
// kill(pid, 0) says no such process.
bool is_stale_temp(std::string_view name);

// Prepares a folder that a tool will write into: refuses an existing non-folder ("... exists and
// is not a folder"), creates the folder and its parents, checks that a file can be created in it
// (so a read-only or full destination fails now, not after hours of work), and removes stale
// temporaries of ours inside it (removed names are returned, for the caller to report).
// `what` names the folder in errors ("destination", "--save folder", ...).
std::vector<std::string> prepare_output_dir(const std::string& dir, const std::string& what);

// Checks, without creating anything, that `dir` could be prepared: it is a writable folder, or
// it does not exist and its nearest existing ancestor is a writable folder. For start-up checks
// of folders that are made later. Errors as prepare_output_dir's.
void check_output_dir(const std::string& dir, const std::string& what);

// What may stand where a tool writes its output folder `dir` as a whole (written elsewhere, renamed
// into place): nothing, or with `overwrite` an earlier output of the same kind (a folder holding
// `marker`: config.json for a Hugging Face export, `latest` for a checkpoint root) or an empty folder.
// A file, a symbolic link or any other folder is refused with an mds::Error, so that
// `tool SRC ~ --overwrite` never empties a home folder. `marker_text` names the marker in the message,
// `kind` the output ("export", "checkpoint").
void check_replaceable_output(const std::filesystem::path& dir, bool overwrite, const std::string& marker,
                              const std::string& marker_text, const std::string& kind);

// Writes the output folder `final_dir` as a whole, the way every converter does: prepares its parent
// (prepare_output_dir; each stale temporary it removes is passed to `note`), lets `fill` write everything
// into a fresh folder under temp_path_for(final_dir), makes that folder durable, calls `recheck` (the
// destination must still be what was checked before the long work: check_replaceable_output), then
// replaces `final_dir` with it and syncs the parent. Nothing is written at `final_dir` before that
// rename; on any error the temporary is removed and the error rethrown.
void write_output_folder(const std::filesystem::path& final_dir, const std::function<void(const std::filesystem::path& tmp)>& fill,
                         const std::function<void()>& recheck, const std::function<void(const std::string&)>& note);

// A filesystem or system error worded for the user: "<doing>: <path>: <errno text>".
std::string system_error_message(const std::string& doing, const std::string& path, int err);
// std::filesystem's "filesystem error: cannot create directories: Permission denied [/a/b]" worded the
// same way: "cannot create directories: /a/b: Permission denied".
std::string filesystem_error_message(const std::filesystem::filesystem_error& e);

}  // namespace mds
