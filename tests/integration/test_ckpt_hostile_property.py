"""Property test of mds-ckpt-shrink, mds-ckpt-reshape and mds-ckpt-to-hf under hostile checkpoints (issue 24), with a
fixed seed: each case copies a tiny checkpoint, then draws
  - a `latest`: random bytes, "..", "../sentinel/global_step10", absolute paths, separators, 300 and 5000 bytes,
    empty, binary, NUL, a missing tag, a symbolic link out, a folder, a FIFO, or none;
  - a layout: missing, truncated or garbage files, a FIFO in place of a file, extra folders, a tag folder or file
    that is a symbolic link into the sentinel folder;
  - a destination: new, an existing folder with other files, a file, the source itself, inside the source, the
    folder holding source and sentinel, a symbolic link to a folder or to the source, "." from an empty folder;
  - flags: --overwrite, --tag (good, missing, "..", "../x"), --all, --dry-run, --no-verify, --json.
For every case: the exit status is 0, 1 or 2 (never a signal), an error says "error:" and never "internal error",
stderr carries no raw control bytes, every file of the source tree and of a sentinel folder beside the destination
hashes the same before and after, nothing outside the destination changes (its parent folders may be created), no
temporary is left, and a success leaves a destination folder. 300 cases (150 under sanitizers).
Exits 77 without torch or the binaries."""
import json
import os
import random
import shutil
import sys
import tempfile
import time

from testkit import check, finish
import ckpt_hostile_kit as kit

T = kit.tools()
TAG = "global_step10"
SEED = 24
CASES = 150 if os.environ.get("MDS_SANITIZE") else 300


def random_latest(rng, case):
    """Writes case/src/latest (or something in its place)."""
    latest = os.path.join(case, "src", "latest")
    kind = rng.randrange(2) if rng.random() < 0.4 else rng.randrange(22)  # a good one often, or little succeeds
    if os.path.lexists(latest):
        os.remove(latest)
    texts = {0: TAG, 1: TAG + "\n", 2: "..", 3: "../sentinel", 4: "../sentinel/" + TAG, 5: "/etc",
             6: os.path.join(case, "sentinel", TAG), 7: TAG + "/..", 8: TAG + "/", 9: "a/b", 10: "x" * 300,
             11: "g" * 5000, 12: "", 13: "\n\n", 14: "global_step99", 15: ".", 16: "../../" + TAG}
    if kind in texts:
        data = texts[kind].encode()
    elif kind == 17:
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    elif kind == 18:
        data = b"\x1b[31m" + TAG.encode() + b"\x00\xff\x07"
    elif kind == 19:
        os.symlink(os.path.join(case, "sentinel", "secret.txt"), latest)
        return
    elif kind == 20:
        os.makedirs(latest) if rng.random() < 0.5 else os.mkfifo(latest)  # a FIFO must not block the tools
        return
    else:
        return  # no latest at all
    with open(latest, "wb") as f:
        f.write(data)


def random_layout(rng, case):
    tag = os.path.join(case, "src", TAG)
    for _ in range(rng.choice([0, 0, 1, 2])):
        if os.path.islink(tag):
            break  # the tag folder points into the sentinel: nothing of it is ours to change
        files = sorted(n for n in os.listdir(tag) if os.path.isfile(os.path.join(tag, n))) if os.path.isdir(tag) else []
        kind = rng.randrange(10)
        if kind == 0 and files:
            os.remove(os.path.join(tag, rng.choice(files)))
        elif kind == 1 and files:
            p = os.path.join(tag, rng.choice(files))
            with open(p, "r+b") as f:
                f.truncate(rng.randrange(os.path.getsize(p) + 1))
        elif kind == 2 and files:
            p = os.path.join(tag, rng.choice(files))
            size = os.path.getsize(p)
            if size:
                with open(p, "r+b") as f:
                    f.seek(rng.randrange(size))
                    f.write(bytes([rng.randrange(256)]))
        elif kind == 3:
            os.makedirs(os.path.join(case, "src", "global_step99", "sub"), exist_ok=True)
        elif kind == 4 and os.path.isdir(tag):
            os.makedirs(os.path.join(tag, "subfolder"), exist_ok=True)
        elif kind == 5 and os.path.isdir(tag):
            # The tag folder itself points out of the source.
            shutil.rmtree(tag)
            os.symlink(os.path.join(case, "sentinel", TAG), tag)
        elif kind == 6 and files:
            p = os.path.join(tag, rng.choice(files))
            os.remove(p)
            os.symlink(os.path.join(case, "sentinel", TAG, os.path.basename(p)), p)
        elif kind == 7 and os.path.isdir(tag):
            with open(os.path.join(tag, "layer_07-model_00-model_states.pt"), "wb") as f:
                f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(200))))
        elif kind == 9 and files:
            p = os.path.join(tag, rng.choice(files))
            os.remove(p)
            os.mkfifo(p)
        elif kind == 8 and os.path.isdir(tag) and not os.path.lexists(os.path.join(tag, "notes.txt")):
            os.symlink(os.path.join(case, "sentinel", "secret.txt"), os.path.join(tag, "notes.txt"))


def random_destination(rng, case):
    """(destination as passed, cwd, the folders a run may write: the destination and a link's target)."""
    kind = rng.choice([0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10])
    out = os.path.join(case, "out")
    if kind == 0:
        return out, None, [out]
    if kind == 1:
        os.makedirs(out)
        with open(os.path.join(out, "keep.txt"), "w") as f:
            f.write("someone's file")
        if rng.random() < 0.5:
            os.makedirs(os.path.join(out, TAG))
        return out, None, [out]
    if kind == 2:
        with open(out, "w") as f:
            f.write("a file")
        return out, None, []
    if kind == 3:
        return os.path.join(case, "src"), None, []
    if kind == 4:
        inner = os.path.join(case, "src", rng.choice(["inner", TAG]))
        return inner, None, [inner]  # refused when it overlaps the checkpoint given; a tag folder's sibling is fine
    if kind == 5:
        return case, None, []
    if kind == 6:
        target = os.path.join(case, "dtarget")
        os.makedirs(target)
        os.symlink(target, os.path.join(case, "dl"))
        return os.path.join(case, "dl"), None, [os.path.join(case, "dl"), target]
    if kind == 7:
        os.symlink(os.path.join(case, "src"), os.path.join(case, "dl"))
        return os.path.join(case, "dl"), None, []
    if kind == 8:
        return out + "/", None, [out]
    if kind == 9:
        wd = os.path.join(case, "wd")
        os.makedirs(wd)
        return ".", wd, [wd]
    return os.path.join(case, "sentinel", "..", "out2", "deep"), None, [os.path.join(case, "out2")]


def random_flags(rng, tool):
    flags = []
    if rng.random() < 0.5:
        flags.append("--overwrite")
    r = rng.random()
    if r < 0.3:
        flags += ["--tag", rng.choice([TAG, TAG, TAG, "global_step99", "..", "../sentinel/" + TAG, "x/y", TAG + "\n", "\x1b[2J"])]
    elif r < 0.4 and tool != "mds-ckpt-reshape":
        flags.append("--all")
    if tool != "mds-ckpt-to-hf" and rng.random() < 0.15:
        flags.append("--dry-run")
    if rng.random() < 0.3:
        flags.append("--no-verify")
    if rng.random() < 0.3:
        flags.append("--json")
    if tool == "mds-ckpt-reshape":
        flags += ["--target-tp", "1", "--target-pp", "1"]
        if rng.random() < 0.3:
            flags.append("--with-optimizer")
    return flags


def inside_tree(rel, folder_rel):
    return rel == folder_rel or rel.startswith(folder_rel + "/")


def inside(rel, folders_rel):
    return any(rel == f or rel.startswith(f + "/") or f.startswith(rel + "/") for f in folders_rel)


def one_case(rng, tmp, template, i, tool):
    case = os.path.join(tmp, f"case{i:03d}")
    kit.copy_tree(template, os.path.join(case, "src"))
    sentinel = kit.copy_tree(os.path.join(template, TAG), os.path.join(case, "sentinel", TAG))
    with open(os.path.join(case, "sentinel", "secret.txt"), "w") as f:
        f.write("must never change")
    random_latest(rng, case)
    random_layout(rng, case)
    dst, cwd, writable = random_destination(rng, case)
    flags = random_flags(rng, tool)
    src_arg = os.path.join(case, "src")
    if tool != "mds-ckpt-shrink" and rng.random() < 0.2:
        src_arg = os.path.join(case, "src", TAG)  # a tag folder as SRC
    writable_rel = ["./" + os.path.relpath(w, case) for w in writable]
    source_rel = "./" + os.path.relpath(src_arg, case)  # the checkpoint given; beside it is "outside the destination"
    before = kit.tree_digest(case)
    r = kit.run(T[tool], src_arg, dst, *flags, cwd=cwd)
    after = kit.tree_digest(case)
    what = f"case {i} {tool} {os.path.relpath(src_arg, case)} -> {dst if dst == '.' else os.path.relpath(dst, case)} {flags}"
    e = r.stderr.decode("utf-8", "replace")
    ok = check(r.returncode in (0, 1, 2), f"{what}: exit {r.returncode} {e[-400:]}")
    ok &= check(b"internal error" not in r.stderr, f"{what}: {e[-400:]}")
    ok &= check(r.returncode == 0 or b"error:" in r.stderr, f"{what}: exit {r.returncode} without an error: {e[-400:]}")
    ok &= check(not kit.raw_control_bytes(r.stderr), f"{what}: raw control bytes on stderr: {r.stderr[-300:]!r}")
    for key in sorted(set(before) | set(after)):
        if before.get(key) == after.get(key):
            continue
        if inside_tree(key, source_rel) or inside_tree(key, "./sentinel"):
            ok &= check(False, f"{what}: the {'sentinel' if inside_tree(key, './sentinel') else 'source'} changed: {key}")
            break
        if not inside(key, writable_rel):
            ok &= check(False, f"{what}: wrote outside the destination: {key}")
            break
    left = [k for k in after if ".tmp-" in k or ".mds-write-test" in k]
    ok &= check(not left, f"{what}: temporaries left: {left[:3]}")
    if r.returncode == 0:
        if "--json" in flags:
            try:
                json.loads(r.stdout)
            except ValueError:
                ok &= check(False, f"{what}: --json printed {r.stdout[:200]!r}")
        if "--dry-run" not in flags:
            real = os.path.join(cwd, dst) if cwd else dst
            ok &= check(os.path.isdir(real) and bool(os.listdir(real)), f"{what}: succeeded without an output folder")
    shutil.rmtree(case, ignore_errors=True)
    return r.returncode


def main():
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        template = kit.make_checkpoint(os.path.join(tmp, "template"))
        start = time.time()
        codes = {}
        for i in range(CASES):
            tool = kit.TOOLS[i % 3]
            rc = one_case(rng, tmp, template, i, tool)
            codes[(tool, rc)] = codes.get((tool, rc), 0) + 1
        print(f"{CASES} cases in {time.time() - start:.1f} s; exits: " +
              ", ".join(f"{t[8:]} {rc}: {n}" for (t, rc), n in sorted(codes.items())))
        # The draws must reach both outcomes for every tool, or the property says little.
        for tool in kit.TOOLS:
            check(codes.get((tool, 0), 0) > 0 and codes.get((tool, 1), 0) + codes.get((tool, 2), 0) > 0,
                  f"{tool}: cases do not cover success and failure: {codes}")
    finish()


if __name__ == "__main__":
    sys.exit(main())
