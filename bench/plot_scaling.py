#!/usr/bin/env python3
"""Plots bench_scaling's curves: one PNG per figure (docs/benchmarks.md, "How cost grows").

    ./build/bench_scaling > scaling.txt
    python3 bench/plot_scaling.py scaling.txt OUTDIR [PREFIX]

Reads the lines "curve <name> <x> <median> <min> <max> <unit>" and draws the median with
the min-max spread as error bars. Curves that belong together share a figure (cube and
OpenMP on the same cores, upload and download). Where the design promises a flat line (the
pool hit against live buffers; launches per second against submitting threads) a dashed
reference line is drawn at the first point's median of the figure's first curve.
"pool_hit_scan" (a run of the sliced pool's former coalescing scan, renamed by hand as in
bench/data/scaling_vm_pool_2026-12-04.txt) is drawn with "pool_hit" when present. Without matplotlib it says so and
exits 0 (the plots are documentation, never a test).
"""
import collections
import os
import sys

# figure name -> (title, curve names, x label, log x, log y, flat reference?)
FIGURES = [
    ("pool_hit", "Pool hit (256 B empty + release) against live buffers",
     ["pool_hit", "pool_hit_scan"], "live 256-byte buffers", True, True, True),
    ("launch", "Empty-kernel launches per second against submitting threads",
     ["launch_one_device", "launch_several_devices"], "submitting threads (one stream each)",
     True, False, True),
    ("cpu_saxpy", "Dialect saxpy (memory-bound) against cores",
     ["cpu_saxpy_cube", "cpu_saxpy_openmp"], "cores (threads)", True, False, False),
    ("cpu_fma64", "64 dependent FMAs per element (compute-bound) against cores",
     ["cpu_fma64_cube", "cpu_fma64_openmp"], "cores (threads)", True, False, False),
    ("cpu_ratio", "cube / OpenMP on the same cores",
     ["cpu_saxpy_ratio", "cpu_fma64_ratio"], "cores (threads)", True, False, False),
    ("transfer", "Transfer rate against size (ordinary host memory)",
     ["transfer_upload", "transfer_download"], "bytes", True, False, False),
]


def read_curves(path):
    curves = collections.OrderedDict()
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 7 or parts[0] != "curve":
                continue
            name = parts[1]
            try:
                x, med, lo, hi = (float(v) for v in parts[2:6])
            except ValueError:
                continue
            curves.setdefault(name, {"unit": parts[6], "points": []})["points"].append(
                (x, med, lo, hi))
    return curves


def main(argv):
    if len(argv) < 3:
        print("usage: plot_scaling.py BENCH_OUTPUT OUTDIR [PREFIX]", file=sys.stderr)
        return 2
    curves = read_curves(argv[1])
    if not curves:
        print("plot_scaling: no 'curve' lines in %s" % argv[1], file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_scaling: matplotlib is not installed; no plots written "
              "(pip install matplotlib)")
        return 0
    outdir = argv[2]
    prefix = argv[3] if len(argv) > 3 else "scaling"
    os.makedirs(outdir, exist_ok=True)
    for fig_name, title, names, xlabel, logx, logy, flat in FIGURES:
        present = [n for n in names if n in curves]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        unit = curves[present[0]]["unit"]
        for n in present:
            pts = sorted(curves[n]["points"])
            xs = [p[0] for p in pts]
            med = [p[1] for p in pts]
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=n)
            if flat and n == present[0]:
                ax.axhline(med[0], linestyle="--", linewidth=1, color="grey",
                           label="flat (design): %s at x=%g" % (n, xs[0]))
        if fig_name == "cpu_ratio":
            ax.axhline(1.0, linestyle=":", color="black", linewidth=1, label="parity")
        if logx:
            ax.set_xscale("log", base=2 if fig_name != "pool_hit" else 10)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        out = os.path.join(outdir, "%s_%s.png" % (prefix, fig_name))
        fig.savefig(out, dpi=90)
        plt.close(fig)
        print("plot_scaling: wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
