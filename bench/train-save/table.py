"""The table of bench/train-save/run.sh from the logs of its runs: logs/<mode>.<round>.log and .wall."""
import os
import re
import statistics
import sys

SAVED = re.compile(r"successfully saved checkpoint at iteration (\d+) to .* \(([\d.]+) MB in ([\d.]+) s(?:, training blocked ([\d.]+) s)?\)")
TIMERS = re.compile(r"time \(ms\) \| save-checkpoint: ([\d.]+)(?: \| save-checkpoint-blocked: ([\d.]+))?")


def read(logs, mode, r):
    """(walls s, [(MB, save s, blocked s)] per save) of one run."""
    text = open(os.path.join(logs, f"{mode}.{r}.log")).read()
    wall = float(open(os.path.join(logs, f"{mode}.{r}.wall")).read())
    saves = [(float(m[2]), float(m[3]), float(m[4]) if m[4] else None) for m in SAVED.finditer(text)]
    timers = [(float(m[1]) / 1e3, float(m[2]) / 1e3 if m[2] else None) for m in TIMERS.finditer(text)]
    out = []
    for k, (mb, s, blocked) in enumerate(saves):
        # The timers line is the reference for the blocked time; without a blocked column the save blocked
        # the step throughout (synchronous).
        t_total, t_blocked = timers[k] if k < len(timers) else (s, None)
        out.append((mb, s, blocked if blocked is not None else (t_blocked if t_blocked is not None else t_total)))
    return wall, out


def main():
    logs, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    runs = {m: [read(logs, m, r) for r in range(rounds)] for m in modes}
    wall = {m: statistics.median(w for w, _ in runs[m]) for m in modes}
    saves = {m: [s for _, ss in runs[m] for s in ss] for m in modes}
    sync_blocked = statistics.median(b for _, _, b in saves["sync"]) if saves.get("sync") else None
    print("| saves | saves per run | checkpoint MB | blocked s per save (median) | blocked vs sync | save s (median, write + fsync) "
          "| MB/s written | end-to-end s (median) | over no saves |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in modes:
        name = {"none": "none", "sync": "synchronous (--no-async-save)", "async": "asynchronous (--async-save)"}[m]
        ss = saves[m]
        if not ss:
            print(f"| {name} | 0 | | | | | | {wall[m]:.1f} | |")
            continue
        mb = statistics.median(s[0] for s in ss)
        blocked = statistics.median(s[2] for s in ss)
        took = statistics.median(s[1] for s in ss)
        rate = sum(s[0] for s in ss) / sum(s[1] for s in ss)
        ratio = f"{blocked / sync_blocked:.1%}" if sync_blocked else ""
        over = f"{wall[m] - wall['none']:+.1f} s" if "none" in wall else ""
        print(f"| {name} | {len(ss) // len(runs[m])} | {mb:.0f} | {blocked:.2f} | {ratio} | {took:.2f} | {rate:.0f} | "
              f"{wall[m]:.1f} | {over} |")


if __name__ == "__main__":
    main()
