#!/usr/bin/env python3
"""Markdown tables from `ptdp validate --format json` files: a summary (one row per plan), then
every figure of every plan. Usage: table.py VALIDATE.json..."""
import json
import os
import sys


def ms(s):
    return f"{s * 1e3:.1f} ms"


def mb(b):
    return f"{b / 1e6:.2f} MB"


def err(c, difference=False):
    if c["error"] is None:
        return "-"
    return f"{c['error']:+.3f}" if difference else f"{100 * c['error']:+.0f}%"


def name_of(path):
    return os.path.splitext(os.path.basename(path))[0]


def main(paths):
    runs = [(name_of(p), json.load(open(p))) for p in paths]
    print("| plan | layout | ranks | step time measured | simulated | error | bubble measured | "
          "simulated | forward error (stages) | backward error (stages) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, v in runs:
        st = v["stages"]
        fwd = ", ".join(err(s["forward_s"]) for s in st)
        bwd = ", ".join(err(s["backward_s"]) for s in st)
        print(f"| {name} | {v['layout']} | {v['ranks']} | {ms(v['step_time_s']['measured'])} | "
              f"{ms(v['step_time_s']['simulated'])} | {err(v['step_time_s'])} | "
              f"{v['bubble_fraction']['measured']:.3f} | {v['bubble_fraction']['simulated']:.3f} | "
              f"{fwd} | {bwd} |")
    for name, v in runs:
        print(f"\n#### {name}: {v['layout']}, {v['ranks']} rank(s)\n")
        for note in v["notes"]:
            print(f"Note: {note}\n")
        times = ", ".join(f"{t * 1e3:.0f}" for t in v["measured_step_times_s"])
        print(f"Measured step times (ms, steps {v['first_step']}.."
              f"{v['first_step'] + v['steps_run'] - 1}): {times}\n")
        print("| figure | measured | simulated | error |")
        print("|---|---|---|---|")
        rows = [("step time (median, steps 2..)", v["step_time_s"], ms, False),
                ("pipeline phase", v["pipeline_s"], ms, False),
                ("bubble fraction", v["bubble_fraction"], lambda f: f"{f:.3f}", True)]
        for s in v["stages"]:
            i = s["stage"]
            rows += [(f"stage {i} busy per step", s["busy_s"], ms, False),
                     (f"stage {i} forward, 1 micro-batch", s["forward_s"], ms, False),
                     (f"stage {i} backward (B + W), 1 micro-batch", s["backward_s"], ms, False)]
        for s in v["stages"]:
            i = s["stage"]
            m = s["memory_bytes"]
            for key in ("weights", "gradients", "optimizer", "activations", "total"):
                label = "total (accounted; simulated without allowances)" if key == "total" else key
                rows.append((f"stage {i} {label}", m[key], mb, False))
        for label, c, fmt, diff in rows:
            print(f"| {label} | {fmt(c['measured'])} | {fmt(c['simulated'])} | {err(c, diff)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
