#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""prometheus-check.py KNEM_STAT [--sysfs DIR] [--nonzero NAME,...]

knem-stat --prometheus --output FILE, as knem-stat-prometheus.service runs
it, with FILE in a fresh directory: FILE alone is left there (the
temporary file was renamed), mode 0644, and its text, read by the
reference parser (the Python prometheus_client package's
text_string_to_metric_families), agrees with the module's counters read
here from DIR (default /sys/class/misc/knem), each file holding one
unsigned integer:

  - the levels (contexts, regions, pinned_pages, offload_threads) are the
    gauges knem_NAME, every other counter the counter knem_NAME_total,
    each with its HELP text, its value that of the file and no label;
  - knem_pins_refused_memlock_warning is a gauge, 1 when
    pins_refused_memlock is not 0, else 0;
  - no other metric family.

The counters are read before and after knem-stat and must not change in
between (nothing else may run).  Each counter of --nonzero must not be 0,
so that the comparison is not one of zeros.  Prints one line,
"prometheus: ..." (exit 0) or "prometheus: FAIL: ..." (exit 1).
"""

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile

from prometheus_client.parser import text_string_to_metric_families

# The counters of struct knem_core_stats that are levels, not totals
# (c-shim/knem_core.h).
GAUGES = {"contexts", "regions", "pinned_pages", "offload_threads"}
WARNING = "knem_pins_refused_memlock_warning"


def read_counters(d):
    out = {}
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            out[name] = int(text)
    return out


def problems_of(text, counters):
    """What is wrong with the exposition TEXT for COUNTERS (a list)."""
    bad = []
    families = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in families:
            bad.append(f"family {fam.name} twice")
        families[fam.name] = fam
    want = {}
    for name, value in counters.items():
        if name in GAUGES:
            want["knem_" + name] = ("gauge", "knem_" + name, value)
        else:
            # The parser names a counter's family without its _total.
            want["knem_" + name] = ("counter", "knem_" + name + "_total", value)
    if "pins_refused_memlock" in counters:
        want[WARNING] = ("gauge", WARNING, int(counters["pins_refused_memlock"] > 0))
    for fam_name, (kind, sample, value) in want.items():
        fam = families.get(fam_name)
        if fam is None:
            bad.append(f"no {sample}")
            continue
        if fam.type != kind:
            bad.append(f"{sample} is a {fam.type}, not a {kind}")
        if not fam.documentation:
            bad.append(f"{sample} has no HELP")
        got = [(s.name, s.labels, s.value) for s in fam.samples]
        if got != [(sample, {}, float(value))]:
            bad.append(f"{sample}: {got}, not {value}")
    for fam_name in sorted(set(families) - set(want)):
        bad.append(f"unexpected family {fam_name}")
    return bad, families


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("knem_stat")
    ap.add_argument("--sysfs", default="/sys/class/misc/knem")
    ap.add_argument("--nonzero", default="")
    a = ap.parse_args()

    out_dir = tempfile.mkdtemp(prefix="knem-prometheus-")
    out = os.path.join(out_dir, "knem-rs.prom")
    try:
        before = read_counters(a.sysfs)
        run = subprocess.run(
            [a.knem_stat, "--prometheus", "--output", out, "--sysfs", a.sysfs],
            capture_output=True,
            text=True,
        )
        after = read_counters(a.sysfs)
        left = sorted(os.listdir(out_dir))
        text, mode = "", None
        if os.path.exists(out):
            mode = stat.S_IMODE(os.stat(out).st_mode)
            with open(out) as f:
                text = f.read()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    if run.returncode != 0:
        print(f"prometheus: FAIL: knem-stat --prometheus exited {run.returncode}: {run.stderr.strip()}")
        return 1
    if left != ["knem-rs.prom"] or mode != 0o644:
        shown = oct(mode) if mode is not None else "-"
        print(f"prometheus: FAIL: --output left {left} (mode {shown}), not knem-rs.prom 0o644")
        return 1
    if before != after:
        changed = [n for n in after if before.get(n) != after[n]]
        print(f"prometheus: FAIL: counters changed while knem-stat read them: {changed}")
        return 1
    zeros = [n for n in a.nonzero.split(",") if n and after.get(n, 0) == 0]
    if zeros:
        print(f"prometheus: FAIL: {', '.join(zeros)} still 0 in {a.sysfs}: nothing to compare")
        return 1
    try:
        bad, families = problems_of(text, after)
    except ValueError as e:
        bad, families = [f"the parser refused the text: {e}"], {}
    if bad:
        print(f"prometheus: FAIL: {'; '.join(bad)}")
        print(text, end="")
        return 1
    kinds = [f.type for f in families.values()]
    nonzero = sum(1 for v in after.values() if v)
    shown = ", ".join(
        f"{n}{'' if n in GAUGES else '_total'} {after[n]}"
        for n in a.nonzero.split(",")
        if n
    )
    print(
        f"prometheus: knem-stat --prometheus --output FILE parsed by prometheus_client: "
        f"{kinds.count('counter')} counters and {kinds.count('gauge')} gauges, each equal to "
        f"{a.sysfs} ({nonzero} of {len(after)} counters non-zero: {shown}; "
        f"{WARNING} {int(after.get('pins_refused_memlock', 0) > 0)} with "
        f"pins_refused_memlock {after.get('pins_refused_memlock')})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
