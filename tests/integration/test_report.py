#!/usr/bin/env python3
"""mds-report end to end, checked in a real browser (headless Chromium from Debian):
  - a tiny mds-train run (TensorBoard, codecarbon, run ledger, a loss alert from a too-high learning rate) stopped by --exit-interval
    and resumed from its checkpoint, both jobs' output appended to one main_log.txt, as a SLURM chain writes it;
  - mds-report on the run folder: Chromium's DOM (--dump-dom) holds, in each chart's value table, exactly the numbers
    the log printed (loss, validation loss, learning rate, grad norm, tokens per second, TFLOPs, energy, CO2, against
    consumed tokens), the alerts the log printed, both ledger jobs, and a job-boundary line in every iteration chart;
    the page has no <script> and references nothing outside itself;
  - screenshots: the whole page is not blank, and each chart's .svg (--svg-dir) shows pixels of each of its series'
    colours, of the alert marker and of the job-boundary line inside its own plot area;
  - the event files alone give the loss curve TensorBoard's own reader (tensorboard's EventAccumulator) reads;
  - the same values as Megatron-DeepSpeed's training_log prints them (its format strings, with DeepSpeed lines,
    timer blocks and warnings between, and a half-written last line) give the same curves;
  - a missing input, a malformed ledger line and a damaged event file exit non-zero, naming file and line / offset,
    and leave no page behind.
Exits 77 without mds-train (no LibTorch) or without chromium."""
import csv
import glob
import html.parser
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402
import tiny_dataset  # noqa: E402

REPORT = testkit.binary("mds-report")
TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    testkit.skip("no chromium (scripts/setup.sh installs Debian's)")

ITERS, EXIT_AT, GBS = 12, 7, 4
LINE = re.compile(r"^ iteration +(\d+)/ +\d+ \|(.*)$")
VALID = re.compile(r"^ ?(\S+) loss at iteration (\d+) \| lm loss value: (\S+) \|")
BLUE, ORANGE, RED, GREY = (0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e), (0xd6, 0x27, 0x28), (0x7f, 0x7f, 0x7f)


def train(tmp, data, extra):
    args = [*data, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", str(GBS),
            "--train-iters", str(ITERS), "--lr", "0.2", "--lr-warmup-iters", "3", "--clip-grad", "1.0",
            "--log-interval", "1", "--eval-interval", "4", "--eval-iters", "1", "--seed", "3", "--threads", "2",
            "--device", "cpu", "--save", "ckpt", "--save-interval", "3", "--tensorboard-dir", "tb",
            "--log-timers-to-tensorboard", "--log-batch-size-to-tensorboard", "--codecarbon-dir", "carbon",
            # lr 0.2 makes this tiny model's loss jump at iterations 4-6 (to ~1.5x its trend): an alert to mark.
            "--alert-loss-window", "5", "--alert-loss-spike-ratio", "1.2", *extra]
    r = subprocess.run([TRAIN, *args], capture_output=True, text=True, cwd=tmp, timeout=300)
    check(r.returncode == 0, f"mds-train {extra} exited {r.returncode}: {r.stderr[-2000:]}")
    with open(os.path.join(tmp, "main_log.txt"), "a") as f:  # both streams, as `2>&1 | tee -a main_log.txt`
        f.write(r.stderr + r.stdout)
    return r


def log_values(text):
    """{iteration: {field: text}} and [(iteration, validation loss text)], last value of an iteration kept."""
    its, valid = {}, []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            fields = {}
            for part in m[2].split("|"):
                if ":" in part:
                    k, _, v = part.rpartition(":")
                    fields[k.strip()] = v.strip()
            its[int(m[1])] = fields
        m = VALID.match(line)
        if m:
            valid.append((m[1], int(m[2]), m[3]))
    return its, valid


class Dom(html.parser.HTMLParser):
    """The value tables (chart id → [(series, iteration, x, y)]), alert items, job rows, and each chart's SVG marks."""

    def __init__(self):
        super().__init__()
        self.tables, self.alerts, self.jobs, self.scripts, self.boundaries = {}, [], 0, 0, {}
        self.table = self.row = self.cell = None
        self.in_alerts = self.in_jobs = False
        self.li = None
        self.svg = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        elif tag == "svg" and "data-chart" in a:
            self.svg = a["data-chart"]
            self.boundaries.setdefault(self.svg, 0)
        elif tag == "line" and a.get("class") == "boundary" and self.svg:
            self.boundaries[self.svg] += 1
        elif tag == "table" and a.get("class") == "values":
            self.table = self.tables.setdefault(a["data-chart"], [])
        elif tag == "table" and a.get("class") == "jobs":
            self.in_jobs = True
        elif tag == "tr" and (self.table is not None or self.in_jobs):
            self.row = []
        elif tag == "td" and self.row is not None:
            self.cell = ""
        elif tag == "ul" and a.get("class") == "alerts":
            self.in_alerts = True
        elif tag == "li" and self.in_alerts:
            self.li = ""

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None
        elif tag == "td" and self.cell is not None:
            self.row.append(self.cell)
            self.cell = None
        elif tag == "tr" and self.row is not None:
            if self.row and self.table is not None:
                self.table.append(tuple(self.row))
            elif self.row and self.in_jobs:
                self.jobs += 1
            self.row = None
        elif tag == "table":
            self.table, self.in_jobs = None, False
        elif tag == "li" and self.li is not None:
            self.alerts.append(self.li)
            self.li = None
        elif tag == "ul":
            self.in_alerts = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        if self.li is not None:
            self.li += data


def dump_dom(page):
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + page],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "</html>" in r.stdout, f"chromium --dump-dom {page}: {r.returncode} {r.stderr[-800:]}")
    d = Dom()
    d.feed(r.stdout)
    return d


def screenshot(url, path, w, h):
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={path}", f"--window-size={w},{h}", url], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and os.path.exists(path), f"chromium --screenshot {url}: {r.returncode} {r.stderr[-800:]}")


def read_png(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB/RGBA PNG, decoded with zlib (filters undone here)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def count_colour(rows, colour, box, tol=40):
    x0, y0, x1, y1 = box
    return sum(1 for row in rows[y0:y1] for px in row[x0:x1] if sum(abs(p - q) for p, q in zip(px, colour)) <= tol)


def same(text_a, text_b):
    return float(text_a) == float(text_b) or (math.isnan(float(text_a)) and math.isnan(float(text_b)))


def check_table(dom, chart, series, expected, what):
    """expected: {iteration: (tokens text, value text)} from the log; the page's rows must be exactly those."""
    rows = [r for r in dom.tables.get(chart, []) if r[0] == series]
    got = {int(r[1]): (r[2], r[3]) for r in rows}
    check(len(rows) == len(expected) and set(got) == set(expected),
          f"{what}: chart {chart} series {series!r} has iterations {sorted(got)}, the log {sorted(expected)}")
    bad = [(it, got[it], expected[it]) for it in expected if it in got and
           not (int(got[it][0]) == int(expected[it][0]) and same(got[it][1], expected[it][1]))]
    check(not bad, f"{what}: chart {chart} series {series!r} differs from the log (iteration, page, log): {bad[:5]}")


def report(args, cwd):
    return subprocess.run([REPORT, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def main():
    tmp = tempfile.mkdtemp(prefix="mds-report-")
    try:
        run(tmp)
    finally:
        if not testkit.failures:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    testkit.finish()


def run(tmp):
    prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
    data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
    train(tmp, data, ["--exit-interval", str(EXIT_AT)])
    train(tmp, data, ["--load", "ckpt"])
    if testkit.failures:
        return
    log = open(os.path.join(tmp, "main_log.txt")).read()
    its, valid = log_values(log)
    alerts = [line for line in log.splitlines() if line.startswith("***ALERT")]
    check(sorted(its) == list(range(1, ITERS + 1)), f"the log has iterations 1..{ITERS}: {sorted(its)}")
    check(len(alerts) >= 1, "the loss jump printed an alert")
    print(f"log: {len(its)} iterations, {len(valid)} validation losses, {len(alerts)} alerts")

    # ---- the report of the run folder ----
    page = os.path.join(tmp, "report.html")
    r = report([tmp, "-o", page, "--svg-dir", os.path.join(tmp, "svg"), "--title", "tiny run"], tmp)
    if not check(r.returncode == 0, f"mds-report exited {r.returncode}: {r.stderr}"):
        return
    print(r.stderr.strip())
    text = open(page).read()
    check("<script" not in text.lower(), "the page has no script")
    check(not re.search(r"(src|href)=\"(?!#)", text) and "url(" not in text,
          "the page loads nothing from elsewhere (no src=, href=, url())")
    dom = dump_dom(page)
    check(dom.scripts == 0, "no script in the DOM")
    tok = {it: f["consumed tokens"] for it, f in its.items()}
    for chart, series, field in [("loss", "lm loss", "lm loss"), ("learning-rate", "learning rate", "learning rate"),
                                 ("grad-norm", "grad norm", "grad norm"), ("throughput", "tokens per second", "tokens per second"),
                                 ("tflops", "TFLOPs", "TFLOPs"), ("energy", "energy (kWh)", "energy (kWh)"),
                                 ("co2", "CO2 (kg)", "CO2 (kg)"), ("batch-size", "global batch size", "global batch size")]:
        check_table(dom, chart, series, {it: (tok[it], f[field]) for it, f in its.items() if field in f}, "page vs log")
    vsets = {}
    for name, it, v in valid:
        vsets.setdefault(name, {})[it] = (tok[it], v)
    check(sum(len(v) for v in vsets.values()) >= 3, f"validation losses logged: {valid}")
    for name, vexp in vsets.items():
        check_table(dom, "loss", f"{name} lm loss", vexp, "page vs log")
    check(dom.alerts == alerts, f"the page's alerts are the log's: {dom.alerts} vs {alerts}")
    check(dom.jobs == 2, f"two jobs in the ledger table, found {dom.jobs}")
    check(all(dom.boundaries.get(c, 0) == 1 for c in ("loss", "learning-rate", "grad-norm")),
          f"one job-boundary line (resumed at {EXIT_AT}) in each iteration chart: {dom.boundaries}")
    rows = list(csv.DictReader(open(os.path.join(tmp, "carbon", "emissions.csv"))))
    runs = {}
    for row in rows:
        runs[row["run_id"]] = float(row["energy_consumed"] or 0)
    energy = [r for r in dom.tables.get("emissions", []) if r[0] == "energy_consumed (kWh)"]
    check(len(energy) == len(rows) and len(runs) == 2,
          f"emissions chart: {len(energy)} points for {len(rows)} rows of {len(runs)} processes")
    if energy:
        check(math.isclose(float(energy[-1][-1]), sum(runs.values()), rel_tol=1e-12),
              f"emissions chart ends at the two processes' total {sum(runs.values())}: {energy[-1]}")

    # ---- pixels ----
    shot = os.path.join(tmp, "page.png")
    screenshot("file://" + page, shot, 900, 1400)
    w, h, rows_px = read_png(shot)
    check(count_colour(rows_px, BLUE, (0, 0, w, h)) > 300, "the page's first screen shows blue curves")
    svgs = sorted(glob.glob(os.path.join(tmp, "svg", "*.svg")))
    check(len(svgs) >= 10, f"--svg-dir: {len(svgs)} charts: {svgs}")
    # All charts on one page at known places: one browser start for every chart's pixels.
    cols, cw, ch = 2, 760, 320
    grid = os.path.join(tmp, "svg", "grid.html")
    with open(grid, "w") as f:
        f.write("<!DOCTYPE html><html><body style='margin:0'>")
        for i, s in enumerate(svgs):
            f.write(f"<img src='{os.path.basename(s)}' style='position:absolute;left:{(i % cols) * cw}px;"
                    f"top:{(i // cols) * ch}px;width:{cw}px;height:{ch}px'>")
        f.write("</body></html>")
    gshot = os.path.join(tmp, "grid.png")
    screenshot("file://" + grid, gshot, cols * cw, ((len(svgs) + 1) // cols) * ch)
    _, _, g = read_png(gshot)
    for i, s in enumerate(svgs):
        name = os.path.basename(s)[:-4]
        x0, y0 = (i % cols) * cw + 72, (i // cols) * ch + 52  # the plot area (chart.cpp's margins)
        box = (x0 + 1, y0 + 1, x0 + cw - 72 - 16 - 1, y0 + ch - 52 - 44 - 1)
        blue = count_colour(g, BLUE, box)
        check(blue > 40, f"{name}.svg: its first series is drawn ({blue} blue pixels in the plot)")
        if name == "loss":
            for colour, what in ((ORANGE, "validation points"), (RED, "alert marker"), (GREY, "job boundary")):
                n = count_colour(g, colour, box, tol=30)
                check(n > 10, f"loss.svg: {what} drawn ({n} pixels)")
        if name == "emissions":
            check(count_colour(g, ORANGE, box) > 40, "emissions.svg: the CO2 series is drawn")

    # ---- TensorBoard alone, against tensorboard's own reader ----
    from tensorboard.backend.event_processing import event_accumulator
    tb_values = {}
    for path in sorted(glob.glob(os.path.join(tmp, "tb", "events.out.tfevents.*"))):
        acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        for e in acc.Scalars("lm-loss-training/lm loss"):
            tb_values[e.step] = e.value
    tb_page = os.path.join(tmp, "tb.html")
    r = report([os.path.join(tmp, "tb"), "-o", tb_page], tmp)
    check(r.returncode == 0, f"mds-report on tb/: {r.returncode} {r.stderr}")
    tdom = dump_dom(tb_page)
    got = {int(row[1]): float(row[3]) for row in tdom.tables.get("loss", []) if row[0] == "lm loss"}
    check(got == tb_values and len(got) == ITERS, f"TensorBoard's loss curve: page {got} vs EventAccumulator {tb_values}")
    tb_tok = {int(row[1]): int(row[2]) for row in tdom.tables.get("loss", []) if row[0] == "lm loss"}
    check(tb_tok == {it: int(t) for it, t in tok.items()}, f"TensorBoard's x: consumed tokens {tb_tok}")

    # ---- the same values as Megatron-DeepSpeed prints them ----
    bmd = os.path.join(tmp, "bmd")
    os.makedirs(bmd)
    with open(os.path.join(bmd, "main_log.txt"), "w") as f:
        f.write("using world size: 1, data-parallel-size: 1, tensor-model-parallel size: 1, pipeline-model-parallel size: 1\n")
        for it in sorted(its):
            fl = its[it]
            s = ' iteration {:8d}/{:8d} |'.format(it, ITERS)
            s += ' consumed samples: {:12d} |'.format(int(fl["consumed samples"]))
            s += ' consumed tokens: {:12d} |'.format(int(fl["consumed tokens"]))
            s += ' elapsed time per iteration (s): {:.2f} |'.format(float(fl["elapsed time per iteration (s)"]))
            s += ' learning rate: {:.3E} |'.format(float(fl["learning rate"]))
            s += ' global batch size: {:5d} |'.format(int(fl["global batch size"]))
            s += ' {}: {:.6E} |'.format("lm loss", float(fl["lm loss"]))
            s += ' grad norm: {:.3f} |'.format(float(fl["grad norm"]))
            s += ' number of skipped iterations: {:3d} |'.format(0)
            s += ' number of nan iterations: {:3d} |'.format(0)
            s += ' samples per second: {:.3f} |'.format(float(fl["samples per second"]))
            s += ' TFLOPs: {:.2f} |'.format(float(fl["TFLOPs"]))
            f.write(f"[2026-11-26 10:00:{it:02d},000] [INFO] [logging.py:68:log_dist] [Rank 0] step={it}, skipped=0, "
                    f"lr=[{float(fl['learning rate'])}], mom=[(0.9, 0.95)]\n")
            f.write(s + "\n")
            f.write("time (ms) | forward-compute: 12.34 | backward-compute: 23.45 | optimizer: 1.23 | batch-generator: 0.12\n")
            for name, vit, v in valid:
                if vit == it:  # Megatron-DeepSpeed's data_group_name form: '{} loss at {} | '
                    st = '{} loss at iteration {} | '.format(name, it) + '{} value: {:.6E} | '.format("lm loss", float(v))
                    st += '{} PPL: {:.6E} | '.format("lm loss", math.exp(min(20, float(v))))
                    f.write("-" * (len(st) + 1) + "\n" + st + "\n" + "-" * (len(st) + 1) + "\n")
            if it == EXIT_AT:
                f.write("/usr/lib/python3/dist-packages/torch/x.py:1: UserWarning: a warning\n  warnings.warn(\n")
                f.write(f" loading checkpoint from ckpt at iteration {EXIT_AT}\n")
                f.write(f"  successfully loaded checkpoint from ckpt at iteration {EXIT_AT}\n")
        f.write(" iteration       13/      12 | consumed samples:           5")  # still being written
    bmd_page = os.path.join(tmp, "bmd.html")
    r = report([bmd, "-o", bmd_page], tmp)
    check(r.returncode == 0, f"mds-report on the BMD log: {r.returncode} {r.stderr}")
    bdom = dump_dom(bmd_page)
    for chart, series in (("loss", "lm loss"), ("loss", "valid lm loss"), ("learning-rate", "learning rate"),
                          ("grad-norm", "grad norm"), ("tflops", "TFLOPs")):
        mine = [row for row in dom.tables.get(chart, []) if row[0] == series]
        theirs = [row for row in bdom.tables.get(chart, []) if row[0] == series]
        check(mine == theirs and mine, f"BMD-format log: chart {chart} series {series!r} differs: {theirs[:3]} vs {mine[:3]}")
    check(bdom.boundaries.get("loss") == 1, f"BMD-format log: the checkpoint load marks a job boundary: {bdom.boundaries}")

    # ---- errors ----
    r = report([os.path.join(tmp, "nope"), "-o", os.path.join(tmp, "x.html")], tmp)
    check(r.returncode == 2 and "nope: no such file or folder" in r.stderr, f"missing input: {r.returncode} {r.stderr}")
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "runs.jsonl"), "w") as f:
        f.write(open(os.path.join(tmp, "ckpt", "runs.jsonl")).read() + "{not json\n")
    r = report([bad, "-o", os.path.join(bad, "x.html")], tmp)
    check(r.returncode == 1 and "runs.jsonl:3: expected one JSON object" in r.stderr, f"bad ledger: {r.returncode} {r.stderr}")
    ev = sorted(glob.glob(os.path.join(tmp, "tb", "events.out.tfevents.*")))[0]
    damaged = bytearray(open(ev, "rb").read())
    damaged[len(damaged) // 2] ^= 0x10
    with open(os.path.join(bad, "events.out.tfevents.1.x.1.0"), "wb") as f:
        f.write(damaged)
    os.remove(os.path.join(bad, "runs.jsonl"))
    r = report([bad, "-o", os.path.join(bad, "x.html")], tmp)
    check(r.returncode == 1 and re.search(r"events\.out\.tfevents\.1\.x\.1\.0: record at byte \d+", r.stderr),
          f"damaged event file: {r.returncode} {r.stderr}")
    check(not os.path.exists(os.path.join(bad, "x.html")) and not any(".tmp" in n for n in os.listdir(bad)),
          f"no page (nor a temporary) left after an error: {os.listdir(bad)}")


if __name__ == "__main__":
    main()
