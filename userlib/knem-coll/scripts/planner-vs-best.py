#!/usr/bin/env python3
"""Planner pick vs best measured algorithm, from the JSON of
`knem-bench coll --out FILE.json` or `knem-coll bench --out FILE.json`.

    scripts/planner-vs-best.py results.json [more.json ...] [--tol 0.10]

With several files (repeated runs) each algorithm's time is the median of
its per-run medians.

For every op x size: the algorithm the planner picks (the row marked
chosen), its measured median, the best measured median among the explicit
algorithms, their ratio, and whether it is within the tolerance; then the
count.  The `planner:` row (the same algorithm chosen at run time) is shown
too, as a second sample of the pick.
"""
import json
import sys


def main():
    args = sys.argv[1:]
    tol = 0.10
    if "--tol" in args:
        i = args.index("--tol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    runs = [json.load(open(a)) for a in args]
    rows = []
    for r in runs[0]:
        same = [x for run in runs for x in run
                if (x["op"], x["size"], x["algorithm"]) == (r["op"], r["size"], r["algorithm"])]
        meds = sorted(x["median"] for x in same)
        rows.append(dict(r, median=meds[len(meds) // 2]))
    keys = []
    for r in rows:
        k = (r["op"], r["size"])
        if k not in keys:
            keys.append(k)
    ok = 0
    print(f"{'op':<10} {'size':>9} {'pick':<18} {'pick_us':>9} {'planner_us':>10} "
          f"{'best':<18} {'best_us':>9} {'ratio':>6}  within")
    for op, size in keys:
        rs = [r for r in rows if (r["op"], r["size"]) == (op, size)]
        algs = [r for r in rs if not r["algorithm"].startswith("planner:")]
        plan = [r for r in rs if r["algorithm"].startswith("planner:")]
        chosen = [r for r in algs if r.get("chosen")]
        best = min(algs, key=lambda r: r["median"])
        if chosen:
            pick = chosen[0]
        else:  # the planner's algorithm has no row of its own
            pick = {"algorithm": plan[0]["algorithm"].split(":", 1)[1],
                    "median": plan[0]["median"]}
        ratio = pick["median"] / best["median"]
        good = ratio <= 1.0 + tol
        ok += good
        pl = plan[0]["median"] * 1e6 if plan else float("nan")
        print(f"{op:<10} {size:>9} {pick['algorithm']:<18} {pick['median'] * 1e6:>9.1f} "
              f"{pl:>10.1f} {best['algorithm']:<18} {best['median'] * 1e6:>9.1f} "
              f"{ratio:>6.2f}  {'yes' if good else 'NO'}")
    print(f"{ok} of {len(keys)} within {tol:.0%}")


if __name__ == "__main__":
    main()
