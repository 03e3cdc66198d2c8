"""mds-ckpt-shrink, mds-ckpt-reshape and mds-ckpt-to-hf under the inputs of issue 24 (one regression each), on tiny
BigScience-style checkpoints (tests/crosscheck/bmd_checkpoint.py):
  1. source = destination, nested, through a symbolic link or "..": refused (exit 2) by all three; the source unchanged;
  2. a `latest` holding "../../tagdir" or binary bytes, or --tag ../x: refused, the folder outside untouched, the bytes
     shown escaped (never raw on the terminal);
  3. mds-ckpt-to-hf onto a regular file (--overwrite): refused, the file kept; --overwrite never empties a folder
     that is not an earlier export; stale temporaries of dead processes (.X.tmp-<pid>-<host>) are removed by the
     next run, those of live processes and other hosts kept;
  4. mds-ckpt-shrink with a truncated layer file: exit 1 naming it, nothing under the final name (--no-verify copies);
  5. a flipped byte inside a tensor: exit 1 naming the file and the tensor, in all three (--no-verify: converts);
  6. a GPT-2-sized tokenizer on a 128-row model: refused naming both numbers (vocab.json, tokenizer.json);
  7. args.vocab_file relative to the training folder: found from elsewhere and named; missing: exit 1 naming the
     paths tried and the flags; --no-tokenizer exports without a word; no vocabulary in the args: a warning;
  8. --target-dp 0, --target-tp 0, --original-vocab-size -1, nan, a bad --max-shard-size: exit 2 naming the flag;
  9. an unwritable or not-a-folder destination: a worded error (exit 1), never "internal error";
  10. progress: totals, percent and ETA in plain lines (no terminal codes when stderr is not a terminal);
  and SIGTERM in the middle of a copy: 128+15 or done, never a partial tag; the next run cleans up.
Exits 77 without torch or the binaries."""
import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from testkit import check, finish, skip  # noqa: F401
import ckpt_hostile_kit as kit

T = kit.tools()
SHRINK, RESHAPE, TOHF = T["mds-ckpt-shrink"], T["mds-ckpt-reshape"], T["mds-ckpt-to-hf"]
TAG = "global_step10"


def err(r):
    return r.stderr.decode("utf-8", "replace")


def no_internal(r, what):
    check(b"internal error" not in r.stderr and r.returncode in (0, 1, 2), f"{what}: exit {r.returncode}: {err(r)[-600:]}")


def tool_args(tool, src, dst):
    return [src, dst] + (["--target-tp", "1", "--target-pp", "1"] if tool == RESHAPE else [])


def test_overlap(tmp, template):
    src = kit.copy_tree(template, os.path.join(tmp, "ov", "ckpt"))
    before = kit.tree_digest(src)
    os.symlink(src, os.path.join(tmp, "ov", "link"))
    cases = [(src, "same folder"), (os.path.join(src, "inner"), "lies inside"),
             (os.path.join(tmp, "ov", "link", "x"), "lies inside"), (os.path.join(tmp, "ov", "other", "..", "ckpt"), "same folder"),
             (os.path.join(tmp, "ov"), "lies inside")]
    for tool in (SHRINK, RESHAPE, TOHF):
        for dst, words in cases:
            r = kit.run(tool, *tool_args(tool, src, dst), "--overwrite")
            check(r.returncode == 2 and words in err(r), f"{os.path.basename(tool)} {dst}: {r.returncode} {err(r)}")
        # A tag folder given as SRC, the destination its checkpoint root.
        if tool != SHRINK:
            r = kit.run(tool, *tool_args(tool, os.path.join(src, TAG), src), "--overwrite")
            check(r.returncode == 2 and "lies inside" in err(r), f"{os.path.basename(tool)} tag -> root: {r.returncode} {err(r)}")
    check(kit.tree_digest(src) == before, "overlap: the source changed")
    check(not os.path.exists(os.path.join(tmp, "ov", "other")), "overlap: something was created")


def test_latest(tmp, template):
    base = os.path.join(tmp, "lt")
    src = kit.copy_tree(template, os.path.join(base, "x", "ckpt"))
    victim = kit.copy_tree(os.path.join(template, TAG), os.path.join(base, "tagdir"))
    with open(os.path.join(victim, "precious.txt"), "w") as f:
        f.write("not yours")
    before = kit.tree_digest(base)
    with open(os.path.join(src, "latest"), "w") as f:
        f.write("../../tagdir")
    dst = os.path.join(base, "d1", "d2")
    for tool in (SHRINK, RESHAPE, TOHF):
        r = kit.run(tool, *tool_args(tool, src, dst), "--overwrite")
        check(r.returncode == 1 and "latest" in err(r) and "../../tagdir" in err(r) and "--overwrite" not in err(r),
              f"{os.path.basename(tool)} latest ../../tagdir: {r.returncode} {err(r)}")
    with open(os.path.join(src, "latest"), "w") as f:
        f.write(TAG)
    for tool in (SHRINK, RESHAPE, TOHF):
        r = kit.run(tool, *tool_args(tool, src, os.path.join(base, "d3")), "--tag", "../../tagdir")
        check(r.returncode == 2 and "--tag" in err(r), f"{os.path.basename(tool)} --tag ../../tagdir: {r.returncode} {err(r)}")
    with open(os.path.join(src, "latest"), "wb") as f:
        f.write(b"\x1b]0;owned\x07global_step\x00\xff\x1b[2J\n")
    for tool in (SHRINK, RESHAPE, TOHF):
        r = kit.run(tool, *tool_args(tool, src, os.path.join(base, "d4")))
        check(r.returncode == 1 and not kit.raw_control_bytes(r.stderr) and "\\x1b" in err(r),
              f"{os.path.basename(tool)} binary latest: {r.returncode} {r.stderr!r}")
    with open(os.path.join(src, "latest"), "w") as f:
        f.write(TAG)
    after = kit.tree_digest(base)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not k.startswith("./x/ckpt/latest"))
    check(not changed, f"latest: changed outside the destinations: {changed[:5]}")


def test_destination(tmp, template):
    base = os.path.join(tmp, "ds")
    src = kit.copy_tree(template, os.path.join(base, "ckpt"))
    f = os.path.join(base, "F")
    with open(f, "w") as fh:
        fh.write("a file, not a folder")
    r = kit.run(TOHF, src, f, "--overwrite")
    check(r.returncode == 1 and "not a folder" in err(r) and open(f).read() == "a file, not a folder", f"to-hf onto a file: {err(r)}")
    os.symlink(os.path.join(base, "elsewhere"), os.path.join(base, "L"))
    r = kit.run(TOHF, src, os.path.join(base, "L"), "--overwrite")
    check(r.returncode == 1 and "symbolic link" in err(r), f"to-hf onto a link: {err(r)}")
    home = os.path.join(base, "home")
    os.makedirs(home)
    with open(os.path.join(home, "thesis.tex"), "w") as fh:
        fh.write("years of work")
    r = kit.run(TOHF, src, home, "--overwrite")
    check(r.returncode == 1 and "not an earlier export" in err(r) and os.path.exists(os.path.join(home, "thesis.tex")),
          f"to-hf --overwrite onto another folder: {err(r)}")
    hf = os.path.join(base, "out", "hf")
    check(kit.run(TOHF, src, hf, "-q").returncode == 0, "to-hf")
    r = kit.run(TOHF, src, hf, "-q")
    check(r.returncode == 1 and "exists; pass --overwrite" in err(r), f"to-hf existing: {err(r)}")
    check(kit.run(TOHF, src, hf, "-q", "--overwrite").returncode == 0, "to-hf --overwrite of an earlier export")
    # shrink: a destination tag that is a file is refused even with --overwrite.
    d = os.path.join(base, "sh")
    os.makedirs(d)
    with open(os.path.join(d, TAG), "w") as fh:
        fh.write("x")
    r = kit.run(SHRINK, src, d, "--overwrite")
    check(r.returncode == 1 and "not a folder" in err(r) and open(os.path.join(d, TAG)).read() == "x", f"shrink onto a file tag: {err(r)}")

    # Stale temporaries: a dead process's (with and without the host part) go, a live one's and another host's stay.
    for tool, folder, final in ((SHRINK, os.path.join(base, "t1"), TAG), (RESHAPE, os.path.join(base, "t2"), TAG),
                                (TOHF, os.path.join(base, "t3"), "hf")):
        os.makedirs(folder)
        dead = kit.stale_temp(folder, final)
        old = kit.stale_temp(folder, final, host="")
        live = kit.stale_temp(folder, final, pid=os.getpid())
        other = kit.stale_temp(folder, final, host="another-node")
        out = os.path.join(folder, "hf") if tool == TOHF else folder
        r = kit.run(tool, *tool_args(tool, src, out))
        check(r.returncode == 0, f"{os.path.basename(tool)} with stale temporaries: {err(r)}")
        check(not os.path.exists(dead) and not os.path.exists(old), f"{os.path.basename(tool)}: dead temporaries stayed")
        check(os.path.exists(live) and os.path.exists(other), f"{os.path.basename(tool)}: removed a live or foreign temporary")
        check("removed ." in err(r), f"{os.path.basename(tool)}: the clean-up is not reported: {err(r)}")
        left = [n for n in os.listdir(folder) if ".tmp-" in n and n not in (os.path.basename(live), os.path.basename(other))]
        check(not left, f"{os.path.basename(tool)}: temporaries left: {left}")


def test_truncated_and_flipped(tmp, template):
    base = os.path.join(tmp, "tr")
    src = kit.copy_tree(template, os.path.join(base, "ckpt"))
    layer = os.path.join(src, TAG, "layer_03-model_00-model_states.pt")
    size = os.path.getsize(layer)
    with open(layer, "r+b") as f:
        f.truncate(size // 2)
    r = kit.run(SHRINK, src, os.path.join(base, "b1"))
    check(r.returncode == 1 and "layer_03-model_00-model_states.pt" in err(r) and "--no-verify" in err(r),
          f"shrink truncated: {r.returncode} {err(r)}")
    check(not os.path.exists(os.path.join(base, "b1", TAG)) and not os.path.exists(os.path.join(base, "b1", "latest")),
          "shrink truncated: a tag or latest was written")
    r = kit.run(SHRINK, src, os.path.join(base, "b2"), "--no-verify")
    check(r.returncode == 0 and os.path.getsize(os.path.join(base, "b2", TAG, os.path.basename(layer))) == size // 2,
          f"shrink --no-verify: {err(r)}")

    src2 = kit.copy_tree(template, os.path.join(base, "ckpt2"))
    layer = os.path.join(src2, TAG, "layer_01-model_00-model_states.pt")
    names = kit.tensors_by_storage(layer)
    rec = [(n, off, sz) for n, off, sz in kit.zip_records(layer) if n.endswith("/data/0")][0]
    with open(layer, "r+b") as f:
        f.seek(rec[1] + rec[2] // 2)
        b = f.read(1)
        f.seek(rec[1] + rec[2] // 2)
        f.write(bytes([b[0] ^ 0x04]))
    tensor = names["0"][0]
    for tool in (SHRINK, RESHAPE, TOHF):
        out = os.path.join(base, "f-" + os.path.basename(tool))
        r = kit.run(tool, *tool_args(tool, src2, out))
        check(r.returncode == 1 and "layer_01-model_00-model_states.pt" in err(r) and tensor in err(r) and "damaged" in err(r),
              f"{os.path.basename(tool)} flipped byte in {tensor}: {r.returncode} {err(r)}")
        check(not os.path.exists(os.path.join(out, TAG)) and not os.path.exists(os.path.join(out, "config.json")),
              f"{os.path.basename(tool)} flipped byte: output written")
    r = kit.run(TOHF, src2, os.path.join(base, "f-noverify"), "--no-verify", "-q")
    check(r.returncode == 0, f"to-hf --no-verify: {err(r)}")


def write_vocab(folder, n):
    os.makedirs(folder, exist_ok=True)
    vocab = {f"t{i}": i for i in range(n - 1)}
    vocab["<|endoftext|>"] = n - 1
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\nt 0\n")
    return os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")


def test_tokenizer(tmp, template):
    base = os.path.join(tmp, "tk")
    src = kit.copy_tree(template, os.path.join(base, "ckpt"))
    big_v, big_m = write_vocab(os.path.join(base, "gpt2"), 50257)
    out = os.path.join(base, "hf-big")
    r = kit.run(TOHF, src, out, "--vocab-file", big_v, "--merge-file", big_m)
    check(r.returncode == 1 and "50256" in err(r) and "128 rows" in err(r) and not os.path.exists(out),
          f"GPT-2 vocabulary on 128 rows: {r.returncode} {err(r)}")
    tj = os.path.join(base, "tj")
    os.makedirs(tj)
    with open(os.path.join(tj, "tokenizer.json"), "w") as f:
        json.dump({"model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(120)}},
                   "added_tokens": [{"id": 250, "content": "<pad>"}]}, f)
    r = kit.run(TOHF, src, out, "--tokenizer-dir", tj)
    check(r.returncode == 1 and "250" in err(r) and "128 rows" in err(r) and not os.path.exists(out), f"tokenizer.json: {err(r)}")
    ok_v, ok_m = write_vocab(os.path.join(base, "small"), 100)
    out = os.path.join(base, "hf-small")
    r = kit.run(TOHF, src, out, "--vocab-file", ok_v, "--merge-file", ok_m, "-q")
    check(r.returncode == 0, f"a fitting vocabulary: {err(r)}")
    if r.returncode == 0:
        config = json.load(open(os.path.join(out, "config.json")))
        check(config["eos_token_id"] == 99 and os.path.exists(os.path.join(out, "vocab.json")), f"config: {config}")

    # args.vocab_file relative to the folder the training ran in.
    run_dir = os.path.join(base, "run")
    write_vocab(os.path.join(run_dir, "data"), 100)
    ck = kit.make_checkpoint(os.path.join(run_dir, "checkpoints"), extra_args={
        "vocab_file": "data/vocab.json", "merge_file": "data/merges.txt", "tokenizer_type": "GPT2BPETokenizer"})
    elsewhere = os.path.join(base, "elsewhere")
    os.makedirs(elsewhere)
    r = kit.run(TOHF, ck, os.path.join(base, "hf-rel"), cwd=elsewhere)
    found = os.path.join(run_dir, "data", "vocab.json")
    check(r.returncode == 0 and os.path.exists(os.path.join(base, "hf-rel", "vocab.json")) and found in err(r),
          f"relative args.vocab_file from elsewhere: {r.returncode} {err(r)}")
    r = kit.run(TOHF, os.path.join("checkpoints"), os.path.join(base, "hf-rel2"), "-q", cwd=run_dir)
    check(r.returncode == 0 and os.path.exists(os.path.join(base, "hf-rel2", "merges.txt")), f"from the training folder: {err(r)}")
    shutil.rmtree(os.path.join(run_dir, "data"))
    out = os.path.join(base, "hf-missing")
    r = kit.run(TOHF, ck, out, cwd=elsewhere)
    e = err(r)
    check(r.returncode == 1 and "data/vocab.json" in e and "tried" in e and "--vocab-file" in e and "--no-tokenizer" in e
          and os.path.join(run_dir, "data", "vocab.json") in e and not os.path.exists(out), f"missing vocabulary: {r.returncode} {e}")
    r = kit.run(TOHF, ck, out, "--no-tokenizer", cwd=elsewhere)
    check(r.returncode == 0 and not os.path.exists(os.path.join(out, "vocab.json")) and "warning" not in err(r),
          f"--no-tokenizer: {err(r)}")
    r = kit.run(TOHF, src, os.path.join(base, "hf-none"))
    check(r.returncode == 0 and "warning: no tokenizer files are written" in err(r) and "PretrainedFromHF" in err(r),
          f"no vocabulary in the args: {err(r)}")


def test_flags(tmp, template):
    src = template
    dst = os.path.join(tmp, "fl")
    for flag, value in (("--target-dp", "0"), ("--target-dp", "-1"), ("--target-tp", "0"), ("--target-pp", "-2"),
                        ("--target-dp", "nan"), ("--original-vocab-size", "-1"), ("--original-vocab-size", "0")):
        args = [src, dst, "--target-tp", "1", "--target-pp", "1", flag, value]
        r = kit.run(RESHAPE, *args)
        check(r.returncode == 2 and flag in err(r) and "mp_rank" not in err(r), f"reshape {flag} {value}: {r.returncode} {err(r)}")
    for value in ("nan", "inf", "-5GB", "0", "1e400GB", "5XB"):
        r = kit.run(TOHF, src, dst, "--max-shard-size", value)
        check(r.returncode == 2 and "--max-shard-size" in err(r), f"to-hf --max-shard-size {value}: {r.returncode} {err(r)}")
    for tool in (SHRINK, TOHF, RESHAPE):
        r = kit.run(tool, *tool_args(tool, src, dst), "--progress-interval", "nan")
        check(r.returncode == 2 and "--progress-interval" in err(r), f"{os.path.basename(tool)} --progress-interval nan: {err(r)}")
    check(not os.path.exists(dst), "flags: something was written")


def test_worded_errors(tmp, template):
    base = os.path.join(tmp, "we")
    os.makedirs(base)
    src = kit.copy_tree(template, os.path.join(base, "ckpt"))
    with open(os.path.join(base, "F"), "w") as f:
        f.write("x")
    for tool in (SHRINK, RESHAPE, TOHF):
        r = kit.run(tool, *tool_args(tool, src, os.path.join(base, "F", "sub")))
        no_internal(r, f"{os.path.basename(tool)} under a file")
        check(r.returncode == 1 and ("not a folder" in err(r) or "Not a directory" in err(r)),
              f"{os.path.basename(tool)} under a file: {r.returncode} {err(r)}")
    ro = os.path.join(base, "ro")
    os.makedirs(ro)
    os.chmod(ro, 0o555)
    as_nobody = os.geteuid() == 0
    if as_nobody:
        # root writes anywhere: run the tools as nobody, with the source readable by it.
        if not shutil.which("setpriv") or kit.run(SHRINK, "--version", as_nobody=True).returncode != 0:
            print("SKIP (one check): root without a working setpriv: the unwritable destination is not tried")
            return
        for d, _, files in os.walk(tmp):
            os.chmod(d, 0o755 if d != ro else 0o555)
            for n in files:
                if not os.path.islink(os.path.join(d, n)):
                    os.chmod(os.path.join(d, n), 0o644)
    for tool in (SHRINK, RESHAPE, TOHF):
        for dst in (ro, os.path.join(ro, "new")):
            out = os.path.join(dst, "hf") if tool == TOHF and dst == ro else dst
            r = kit.run(tool, *tool_args(tool, src, out), as_nobody=as_nobody)
            no_internal(r, f"{os.path.basename(tool)} unwritable")
            check(r.returncode == 1 and "Permission denied" in err(r) and ro in err(r),
                  f"{os.path.basename(tool)} into {out}: {r.returncode} {err(r)}")
    check(os.listdir(ro) == [], f"unwritable: something appeared: {os.listdir(ro)}")


def test_progress(tmp, template):
    base = os.path.join(tmp, "pg")
    src = kit.copy_tree(template, os.path.join(base, "ckpt"))
    for tool, what in ((SHRINK, "files"), (TOHF, "tensors")):
        out = os.path.join(base, "p-" + os.path.basename(tool))
        r = kit.run(tool, src, out, "--progress", "lines", "--progress-interval", "0.000001")
        e = err(r)
        check(r.returncode == 0 and what in e and "%" in e and "ETA" in e and "B/s" in e, f"{os.path.basename(tool)} progress: {e}")
        r = kit.run(tool, src, out + "-auto")
        check(r.returncode == 0 and b"\r" not in r.stderr and b"\x1b" not in r.stderr, f"{os.path.basename(tool)}: terminal codes")


def test_sigterm(tmp):
    bmd = kit.import_bmd()
    base = os.path.join(tmp, "st")
    src = kit.make_checkpoint(os.path.join(base, "ckpt"), shape=bmd.ModelShape(num_layers=6, hidden=128, heads=4, ffn=512,
                                                                                 padded_vocab=4096, seq=64))
    dst = os.path.join(base, "dst")
    p = subprocess.Popen([SHRINK, src, dst, "-q"], stderr=subprocess.PIPE)
    # The signal goes as soon as the tag's temporary folder appears: in the middle of the copy.
    deadline = time.time() + 30
    while p.poll() is None and time.time() < deadline:
        if os.path.isdir(dst) and any(".tmp-" in n and TAG in n for n in os.listdir(dst)):
            break
        time.sleep(0.001)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    check(p.returncode in (0, -signal.SIGTERM), f"SIGTERM: exit {p.returncode}")
    print(f"SIGTERM during a copy: {'finished first' if p.returncode == 0 else 'killed'}; "
          f"left: {sorted(os.listdir(dst)) if os.path.isdir(dst) else 'nothing'}")
    if p.returncode != 0:
        # Killed: DST/<tag> is absent or complete (the kill came after its rename, before `latest`), never partial;
        # `latest` exists only beside a complete tag.
        kept = sorted(n for n in os.listdir(os.path.join(src, TAG)) if not n.endswith("optim_states.pt"))
        out_tag = os.path.join(dst, TAG)
        if os.path.exists(out_tag):
            complete = sorted(os.listdir(out_tag)) == kept and all(
                filecmp.cmp(os.path.join(src, TAG, n), os.path.join(out_tag, n), shallow=False) for n in kept)
            check(complete, f"SIGTERM: a partial tag under its final name: {sorted(os.listdir(out_tag))}")
        else:
            check(not os.path.exists(os.path.join(dst, "latest")), "SIGTERM: latest without its tag")
    r = kit.run(SHRINK, src, dst, "--overwrite")
    check(r.returncode == 0 and os.path.exists(os.path.join(dst, "latest")), f"after SIGTERM: {err(r)}")
    check(not [n for n in os.listdir(dst) if ".tmp-" in n], f"after SIGTERM: temporaries left: {os.listdir(dst)}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        template = kit.make_checkpoint(os.path.join(tmp, "template"))
        start = time.time()
        for test in (test_overlap, test_latest, test_destination, test_truncated_and_flipped, test_tokenizer, test_flags,
                     test_progress):
            test(tmp, template)
        test_sigterm(tmp)
        test_worded_errors(tmp, template)  # last: it may hand the folders to nobody
        print(f"hostile inputs of the checkpoint tools: {time.time() - start:.1f} s")
    finish()


if __name__ == "__main__":
    sys.exit(main())
