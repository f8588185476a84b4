#!/usr/bin/env python3
"""Weir beside Flink 2.3 on word count and keyed count (issue 11, item 5).

Run by benches/flink-wordcount/run.sh, which installs Flink, compiles
WordCount.java, writes the Flink launcher and builds Weir; it can also be
run directly:

    python3 benches/flink-wordcount/harness.py --weir target/release/weir \\
        --flink target/flink-wordcount/classes/flink-wordcount --work target/flink-wordcount \\
        [--rounds 3] [--workloads words,keys] [--backends rocksdb,heap] [--parallelism 1,2] \\
        [--check-only] [--no-check] [--csv FILE]

Workloads, over the same input folder for both systems:

* words: `udfs/data/kjv.txt` copied --copies times (default 10: 8.5 M
  words) into a folder of that many files, tokenized (Weir's `tokenize`;
  WordCount.java's `Tokenize`, the same rules), counted per word in keyed
  ValueState with every update emitted, into a blackhole. Rates are words/s.
* keys: --lines lines (default 5 M), one key per line, --keys distinct keys
  (default 100 000: "user" + 8 digits, key of line i is i * 48271 mod keys,
  a fixed permutation visited over and over, as benches/benches/state.rs),
  in --files files; the same count without tokenizing. Rates are lines/s.

The input is a folder of several files rather than one file so that both
systems can read it in parallel at p=2: Flink's TextLineInputFormat does not
split a file, Weir's file source does (in 32 MiB ranges).

Every run is a child process pinned with `taskset -c 0` (p=1) or
`taskset -c 0,1` (p=2), timed by `/usr/bin/time` (wall, user + system CPU,
peak RSS); Flink's JVM start-up and MiniCluster are in its time, as Weir's
embedded cluster is in Weir's. Each round runs, per case, Weir and Flink
alternately (which goes first alternates by round), each also over an empty
file: the medians of those are the start-up, subtracted in the second table.
Weir's modules are compiled once before the rounds (the cache is warm, as
for any repeated `weir run`). Before each timed run the harness waits (up to
--quiet-wait seconds) for the rest of the machine to be idle, and it records
how much CPU time other processes used during each run ("others' CPU-s"): on
a shared machine that column says which rows to trust.

Checks: before measuring, a small input (the first 3 000 lines of the KJV,
plus lines with non-ASCII words, and some keys) is run through both systems
with their updates written out, and the two multisets of "key\\tcount" lines
must be equal, per workload, backend and parallelism. In every timed run the
number of updates the count emitted must equal on both sides (Weir's
`records_out` of the `count` vertex, Flink's accumulator) and equal the
words (lines) of the input as counted here.
"""

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KJV = os.path.join(ROOT, "udfs", "data", "kjv.txt")
SPECS = {"words": os.path.join(HERE, "words.toml"), "keys": os.path.join(HERE, "keys.toml")}
FLINK_BACKEND = {"rocksdb": "rocksdb", "heap": "hashmap"}
STRIDE = 48_271

# Non-ASCII lines for the tokenizer check (final sigma, Greek, accents,
# numbers of other kinds, a non-breaking space, a combining mark).
UNICODE_LINES = [
    "Hello, world!  ÓDYSSEUS--ΟΔΥΣΣΕΥΣ 42",
    "ΣΊΣΥΦΟΣ ΟΔΟΣ. Straße ǅemal İstanbul",
    "½ Ⅻ ③ ٣٤ x²\u00a0naïve cafe\u0301 — “quoted” ‘words’",
]


def cores(p):
    return ",".join(str(i) for i in range(p))


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def busy_seconds():
    """CPU seconds all processes have used so far (/proc/stat, every core)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def busy_builders():
    """Running cargo or rustc processes: timings beside them mean little."""
    out = subprocess.run(["pgrep", "-x", "-d", " ", "cargo|rustc"], capture_output=True, text=True)
    return out.stdout.split()


def ascii_words(text):
    """`tokenize`'s rules for ASCII text: split on non-[0-9A-Za-z], lowercase."""
    return [w.lower() for w in re.split(r"[^0-9A-Za-z]+", text) if w]


# --- inputs ---------------------------------------------------------------


def write_parts(folder, parts):
    """Writes a folder of files from (name, bytes) pairs, atomically."""
    if os.path.isdir(folder):
        return
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name, data in parts:
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    os.rename(tmp, folder)


def prepare(args):
    data = os.path.join(args.work, "data")
    os.makedirs(data, exist_ok=True)
    with open(KJV, "rb") as f:
        kjv = f.read()
    kjv_text = kjv.decode("ascii")  # the KJV here is ASCII; fails loudly if not
    kjv_words = ascii_words(kjv_text)

    inputs = {}
    words_dir = os.path.join(data, f"kjv-x{args.copies}")
    write_parts(words_dir, ((f"part-{i:02}", kjv) for i in range(args.copies)))
    inputs["words"] = {
        "path": words_dir,
        "records": len(kjv_words) * args.copies,
        "distinct": len(set(kjv_words)),
    }

    keys_dir = os.path.join(data, f"keys-{args.keys}-{args.lines}-{args.files}")
    if not os.path.isdir(keys_dir):
        per = -(-args.lines // args.files)
        parts = []
        for f in range(args.files):
            lo, hi = f * per, min((f + 1) * per, args.lines)
            body = "".join(f"user{(i * STRIDE) % args.keys:08}\n" for i in range(lo, hi))
            parts.append((f"part-{f:02}", body.encode()))
        write_parts(keys_dir, parts)
    inputs["keys"] = {
        "path": keys_dir,
        "records": args.lines,
        "distinct": min(args.keys, args.lines),
    }

    empty_dir = os.path.join(data, "empty")
    write_parts(empty_dir, [("part-00", b"")])

    check_dir = os.path.join(data, "check")
    check_lines = kjv_text.splitlines()[:3000] + UNICODE_LINES
    check_keys = "".join(f"user{(i * STRIDE) % 997:08}\n" for i in range(20_000))
    write_parts(
        check_dir,
        [
            ("part-00", ("\n".join(check_lines) + "\n").encode()),
            ("part-01", ("\n".join(reversed(check_lines)) + "\n").encode()),
        ],
    )
    check_keys_dir = os.path.join(data, "check-keys")
    write_parts(check_keys_dir, [("part-00", check_keys.encode()), ("part-01", check_keys.encode())])
    return data, inputs, empty_dir, {"words": check_dir, "keys": check_keys_dir}


# --- running one system ---------------------------------------------------


def wait_quiet(limit):
    """Waits (at most `limit` seconds) until the machine is idle for a second:
    other processes using under 0.15 CPU-s. Says so when it waited."""
    start = time.monotonic()
    while True:
        b0 = busy_seconds()
        time.sleep(1)
        used = busy_seconds() - b0
        if used < 0.15:
            waited = time.monotonic() - start
            if waited > 2:
                print(f"  (waited {waited:.0f} s for a quiet machine)", flush=True)
            return
        if time.monotonic() - start > limit:
            print(f"  (not quiet after {limit} s: {used:.2f} CPU-s/s in use; running anyway)", flush=True)
            return


def timed(cmd, p, log):
    """Runs cmd pinned to p cores under /usr/bin/time.

    Returns (stdout, wall, cpu, rss_kib, load, others): `others` is the CPU
    time the rest of the machine used meanwhile (all cores' busy time from
    /proc/stat minus the run's own): near 0 on a quiet machine.
    """
    load = load1()
    busy0 = busy_seconds()
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        full = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", t.name, "taskset", "-c", cores(p)] + cmd
        proc = subprocess.run(full, capture_output=True, text=True)
        with open(log, "a") as f:
            f.write("$ " + " ".join(full) + "\n" + proc.stdout + proc.stderr + "\n")
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"harness: failed ({proc.returncode}): {' '.join(cmd)}")
        fields = t.read().split()[-4:]
    others = busy_seconds() - busy0
    wall, user, system, rss = float(fields[0]), float(fields[1]), float(fields[2]), int(fields[3])
    return proc.stdout, wall, user + system, rss, load, max(0.0, others - user - system)


def run_weir(args, workload, backend, p, path, out=None):
    cmd = [
        args.weir, "run", SPECS[workload], "--json", "--parallelism", str(p),
        "--set", f"job.state_backend={backend}",
        "--set", f"source.lines.path={path}",
        "--allow-path", os.path.dirname(path),
    ]
    if out:
        cmd += ["--set", "sink.out.type=file", "--set", f"sink.out.path={out}",
                "--set", "sink.out.format=value", "--allow-path", os.path.dirname(out)]
    stdout, wall, cpu, rss, load, others = timed(cmd, p, args.log)
    summary = json.loads(stdout.strip().splitlines()[-1])
    count = next(v for v in summary["vertices"] if v["id"] == "count")
    return {
        "emitted": count["records_out"],
        "keys": None,
        "job_s": summary["elapsed_ms"] / 1000,
        "wall_s": wall, "cpu_s": cpu, "rss_kib": rss, "load1": load, "others_cpu_s": others,
    }


def run_flink(args, workload, backend, p, path, out=None):
    cmd = [args.flink, workload, path, "--backend", FLINK_BACKEND[backend], "--parallelism", str(p)]
    if out:
        cmd += ["--out", out]
    stdout, wall, cpu, rss, load, others = timed(cmd, p, args.log)
    line = next(l for l in stdout.splitlines() if l.startswith("FLINK "))
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    return {
        "emitted": int(kv["emitted"]),
        "keys": int(kv["keys"]),
        "job_s": int(kv["net_ms"]) / 1000,
        "wall_s": wall, "cpu_s": cpu, "rss_kib": rss, "load1": load, "others_cpu_s": others,
    }


RUN = {"weir": run_weir, "flink": run_flink}


# --- the check --------------------------------------------------------------


def read_lines(prefix):
    """Every line of a file sink's output: `prefix` and `prefix.N`."""
    folder, base = os.path.split(prefix)
    lines = []
    for name in os.listdir(folder):
        if name == base or (name.startswith(base + ".") and name[len(base) + 1:].isdigit()):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                lines += f.read().splitlines()
    return sorted(lines)


def check(args, check_dirs):
    """Both systems' updates on a small input, compared line for line."""
    out_dir = os.path.join(args.work, "check-out")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    ok = True
    for workload in args.workloads:
        for backend in args.backends:
            for p in args.parallelism:
                tag = f"{workload}-{backend}-p{p}"
                wout = os.path.join(out_dir, f"weir-{tag}.txt")
                fout = os.path.join(out_dir, f"flink-{tag}.txt")
                run_weir(args, workload, backend, p, check_dirs[workload], out=wout)
                run_flink(args, workload, backend, p, check_dirs[workload], out=fout)
                w, f = read_lines(wout), read_lines(fout)
                same = w == f
                ok &= same
                print(f"check {tag}: Weir {len(w)} updates, Flink {len(f)}: "
                      + ("identical" if same else "DIFFERENT"), flush=True)
                if not same:
                    only_w = sorted(set(w) - set(f))[:5]
                    only_f = sorted(set(f) - set(w))[:5]
                    print(f"  only in Weir: {only_w}\n  only in Flink: {only_f}")
    if not ok:
        raise SystemExit("harness: Weir's and Flink's updates differ (see above)")


# --- measuring --------------------------------------------------------------


CSV_FIELDS = ["workload", "backend", "parallelism", "system", "input", "round", "records",
              "emitted", "job_s", "wall_s", "cpu_s", "rss_kib", "load1", "others_cpu_s"]


def measure(args, inputs, empty):
    rows = []
    failures = []
    writer = None
    if args.csv:
        fcsv = open(args.csv, "w", newline="")
        writer = csv.DictWriter(fcsv, fieldnames=CSV_FIELDS)
        writer.writeheader()
    cases = [(w, b, p) for w in args.workloads for b in args.backends for p in args.parallelism]
    # Warm-up, untimed: Weir compiles its modules into the cache once.
    for w in args.workloads:
        run_weir(args, w, args.backends[0], 1, empty)
    for r in range(args.rounds):
        systems = ["weir", "flink"] if r % 2 == 0 else ["flink", "weir"]
        for workload, backend, p in cases:
            inp = inputs[workload]
            for system in systems:
                for kind, path in (("full", inp["path"]), ("empty", empty)):
                    if kind == "empty" and args.no_startup:
                        continue
                    if args.quiet_wait > 0:
                        wait_quiet(args.quiet_wait)
                    m = RUN[system](args, workload, backend, p, path)
                    row = {"workload": workload, "backend": backend, "parallelism": p,
                           "system": system, "input": kind, "round": r + 1,
                           "records": inp["records"] if kind == "full" else 0, **m}
                    rows.append(row)
                    if writer:
                        writer.writerow({k: row[k] for k in CSV_FIELDS})
                        fcsv.flush()
                    if kind == "full":
                        bad = []
                        if m["emitted"] != inp["records"]:
                            bad.append(f"emitted {m['emitted']}, expected {inp['records']}")
                        if m["keys"] is not None and m["keys"] != inp["distinct"]:
                            bad.append(f"{m['keys']} distinct keys, expected {inp['distinct']}")
                        if bad:
                            failures.append(f"{system} {workload} {backend} p={p} round {r + 1}: "
                                            + "; ".join(bad))
                    print(f"round {r + 1} {workload:5} {backend:7} p={p} {system:5} {kind:5}: "
                          f"wall {m['wall_s']:7.2f} s  cpu {m['cpu_s']:7.2f} s  "
                          f"job {m['job_s']:7.2f} s  emitted {m['emitted']:>9}  "
                          f"rss {m['rss_kib'] // 1024:>5} MiB  load {m['load1']:.2f}  "
                          f"others {m['others_cpu_s']:.1f} CPU-s", flush=True)
    return rows, failures


def med(rows, **match):
    sel = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return sel


def fmt_rate(x):
    if x is None or x <= 0:
        return "n/a"
    return f"{x / 1e6:.2f} M" if x >= 1e5 else f"{x / 1e3:.0f} K"


def ratio(a, b):
    if a is None or b is None or a <= 0 or b <= 0:
        return "n/a"
    return f"{a / b:.1f}×"


def tables(args, rows):
    head = ("| workload | backend | p | Weir rec/s | Flink rec/s | **Weir ÷ Flink** | "
            "Weir rec/CPU-s | Flink rec/CPU-s | **÷ per CPU-s** | Weir wall / CPU s | "
            "Flink wall / CPU s | load | others' CPU-s |")
    sep = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    out = ["Start-up included (process wall and CPU time, medians of "
           f"{args.rounds} rounds; rec = words for `words`, lines for `keys`; load: the "
           "1-minute load average before each run, the runs' own threads included; "
           "others' CPU-s: the most CPU time the rest of the machine used during one "
           "of the row's runs):", "", head, sep]
    net = ["Start-up subtracted (median of the empty-input runs taken off, "
           "both systems the same way):", "",
           "| workload | backend | p | Weir rec/s | Flink rec/s | **Weir ÷ Flink** | "
           "Weir rec/CPU-s | Flink rec/CPU-s | **÷ per CPU-s** | Weir start-up wall / CPU s | "
           "Flink start-up wall / CPU s |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for workload in args.workloads:
        for backend in args.backends:
            for p in args.parallelism:
                m = {}
                for system in ("weir", "flink"):
                    full = med(rows, workload=workload, backend=backend, parallelism=p,
                               system=system, input="full")
                    empty = med(rows, workload=workload, backend=backend, parallelism=p,
                                system=system, input="empty")
                    if not full:
                        continue
                    n = full[0]["records"]
                    wall = statistics.median(r["wall_s"] for r in full)
                    cpu = statistics.median(r["cpu_s"] for r in full)
                    ew = statistics.median(r["wall_s"] for r in empty) if empty else None
                    ec = statistics.median(r["cpu_s"] for r in empty) if empty else None
                    m[system] = {
                        "rate": n / wall, "cpu_rate": n / cpu, "wall": wall, "cpu": cpu,
                        "ew": ew, "ec": ec,
                        "net_rate": n / (wall - ew) if ew is not None and wall > ew else None,
                        "net_cpu_rate": n / (cpu - ec) if ec is not None and cpu > ec else None,
                        "loads": [r["load1"] for r in full],
                        "others": [r["others_cpu_s"] for r in full],
                    }
                if len(m) < 2:
                    continue
                w, f = m["weir"], m["flink"]
                loads = w["loads"] + f["loads"]
                others = w["others"] + f["others"]
                out.append(
                    f"| {workload} | {backend} | {p} | {fmt_rate(w['rate'])} | {fmt_rate(f['rate'])} | "
                    f"**{ratio(w['rate'], f['rate'])}** | {fmt_rate(w['cpu_rate'])} | "
                    f"{fmt_rate(f['cpu_rate'])} | **{ratio(w['cpu_rate'], f['cpu_rate'])}** | "
                    f"{w['wall']:.1f} / {w['cpu']:.1f} | {f['wall']:.1f} / {f['cpu']:.1f} | "
                    f"{min(loads):.1f}–{max(loads):.1f} | {max(others):.1f} |")
                if w["ew"] is not None and f["ew"] is not None:
                    net.append(
                        f"| {workload} | {backend} | {p} | {fmt_rate(w['net_rate'])} | "
                        f"{fmt_rate(f['net_rate'])} | **{ratio(w['net_rate'], f['net_rate'])}** | "
                        f"{fmt_rate(w['net_cpu_rate'])} | {fmt_rate(f['net_cpu_rate'])} | "
                        f"**{ratio(w['net_cpu_rate'], f['net_cpu_rate'])}** | "
                        f"{w['ew']:.2f} / {w['ec']:.2f} | {f['ew']:.1f} / {f['ec']:.1f} |")
    text = "\n".join(out)
    if not args.no_startup:
        text += "\n\n" + "\n".join(net)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", required=True, help="the weir binary")
    ap.add_argument("--flink", required=True, help="the launcher run.sh writes (java ... WordCount)")
    ap.add_argument("--work", required=True, help="folder for inputs, outputs and the log")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="words,keys")
    ap.add_argument("--backends", default="rocksdb,heap")
    ap.add_argument("--parallelism", default="1,2")
    ap.add_argument("--copies", type=int, default=10, help="KJV copies for `words` (default 10)")
    ap.add_argument("--lines", type=int, default=5_000_000, help="lines for `keys` (default 5 M)")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys for `keys`")
    ap.add_argument("--files", type=int, default=10, help="files the `keys` input is cut into")
    ap.add_argument("--csv", help="write every run here")
    ap.add_argument("--check-only", action="store_true", help="run the small-input check, measure nothing")
    ap.add_argument("--no-check", action="store_true", help="skip the small-input check")
    ap.add_argument("--no-startup", action="store_true", help="skip the empty-input runs")
    ap.add_argument("--quiet-wait", type=float, default=120, metavar="SECONDS",
                    help="before each timed run, wait up to this long for the rest of the machine "
                         "to be idle for a second (default 120; 0: do not wait)")
    args = ap.parse_args()
    args.workloads = args.workloads.split(",")
    args.backends = args.backends.split(",")
    args.parallelism = [int(p) for p in args.parallelism.split(",")]
    for w in args.workloads:
        if w not in SPECS:
            ap.error(f"--workloads: words or keys, not {w}")
    for b in args.backends:
        if b not in FLINK_BACKEND:
            ap.error(f"--backends: rocksdb or heap, not {b}")
    if max(args.parallelism) > os.cpu_count():
        ap.error(f"--parallelism {max(args.parallelism)}: this machine has {os.cpu_count()} cores")
    os.makedirs(args.work, exist_ok=True)
    args.log = os.path.join(args.work, "runs.log")
    args.weir = os.path.abspath(args.weir)
    args.flink = os.path.abspath(args.flink)

    data, inputs, empty, check_dirs = prepare(args)
    print(f"inputs: words {inputs['words']['records']} in {inputs['words']['path']}; "
          f"keys {inputs['keys']['records']} in {inputs['keys']['path']}; log {args.log}", flush=True)
    if not args.no_check:
        check(args, check_dirs)
    if args.check_only:
        return
    busy = busy_builders()
    if busy:
        print(f"harness: WARNING: cargo/rustc running (pids {' '.join(busy)}): timings will mean little",
              flush=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows, failures = measure(args, inputs, empty)
    ended = time.strftime("%H:%M UTC", time.gmtime())
    print()
    print(f"{started}–{ended}, {os.cpu_count()} cores, "
          f"taskset -c 0 (p=1) / -c 0,1 (p=2)")
    print()
    print(tables(args, rows))
    if failures:
        print("\nMISMATCHES:\n" + "\n".join(failures))
        raise SystemExit(1)
    print("\nEvery timed run: Weir's and Flink's count emitted the same number of updates "
          "as the input has words (lines).")


if __name__ == "__main__":
    main()
