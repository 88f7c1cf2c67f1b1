#!/usr/bin/env python3
"""Draws one step of a measured `ptdp execute --trace` file as an SVG timeline (stdlib only).

usage: plot_trace.py TRACE.json OUT.svg [STEP] [TITLE]
One row per rank; forward blue, backward green, weight-gradient purple, with the micro-batch
number; idle time (waiting for a neighbour, the pipeline bubble) is the white space. When the
step has data-parallel exchanges (gradient reductions, parameter gathers), a strip at the foot
of each row shows them in orange, from start to completion.
Perfetto (https://ui.perfetto.dev) opens the trace itself with every operation.
"""
import json
import sys

COLOURS = {"forward": "#4c78a8", "backward": "#54a24b", "weight-grad": "#b279a2"}
DP_COLOUR = "#f58518"


def main():
    trace_path, out_path = sys.argv[1], sys.argv[2]
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    title = sys.argv[4] if len(sys.argv) > 4 else f"measured trace, step {step}"
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    steps = {e["tid"]: e for e in events if e["ph"] == "X" and e["name"] == f"step {step}"}
    start = min(s["ts"] for s in steps.values())
    end = max(s["ts"] + s["dur"] for s in steps.values())
    def in_step(e):
        s = steps.get(e["tid"])
        return s is not None and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]

    ops = [e for e in events if e["ph"] == "X" and e["cat"] in COLOURS and in_step(e)]
    dp = [e for e in events if e["ph"] == "X" and e["cat"] == "dp-comm" and in_step(e)
          and not e["name"].startswith("wait")]
    strip = 8 if dp else 0  # the data-parallel strip's height

    tids = sorted(steps)
    left, right, top, row = 190, 20, 50, 34
    width = 1000
    height = top + row * len(tids) + 50

    def x(ts):
        return left + (ts - start) / (end - start) * (width - left - right)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="14">{title}</text>']
    for i, tid in enumerate(tids):
        y = top + i * row
        out.append(f'<text x="{left - 8}" y="{y + row / 2 + 4}" text-anchor="end">'
                   f'{names.get(tid, tid)}</text>')
        out.append(f'<rect x="{left}" y="{y + 3}" width="{width - left - right}" '
                   f'height="{row - 6}" fill="none" stroke="#dddddd"/>')
    for e in ops:
        i = tids.index(e["tid"])
        y = top + i * row
        x0, x1 = x(e["ts"]), x(e["ts"] + e["dur"])
        out.append(f'<rect x="{x0:.1f}" y="{y + 4}" width="{max(x1 - x0, 0.5):.1f}" '
                   f'height="{row - 8 - strip}" fill="{COLOURS[e["cat"]]}" stroke="white" '
                   f'stroke-width="0.5"/>')
        if x1 - x0 > 14:
            out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y + (row - strip) / 2 + 4}" '
                       f'fill="white" text-anchor="middle">{e["name"]}</text>')
    for e in dp:
        y = top + tids.index(e["tid"]) * row + row - 4 - strip
        x0, x1 = x(e["ts"]), x(min(e["ts"] + e["dur"], end))
        out.append(f'<rect x="{x0:.1f}" y="{y + 1}" width="{max(x1 - x0, 0.5):.1f}" '
                   f'height="{strip - 2}" fill="{DP_COLOUR}" fill-opacity="0.45" '
                   f'stroke="{DP_COLOUR}" stroke-width="0.5"/>')
    ms = (end - start) / 1000
    out.append(f'<text x="{left}" y="{height - 18}">0 ms</text>')
    out.append(f'<text x="{width - right}" y="{height - 18}" text-anchor="end">{ms:.1f} ms</text>')
    if dp:
        out.append(f'<rect x="{width / 2 - 120}" y="{height - 28}" width="14" height="8" '
                   f'fill="{DP_COLOUR}" fill-opacity="0.45" stroke="{DP_COLOUR}"/>')
        out.append(f'<text x="{width / 2 - 100}" y="{height - 20}">data-parallel exchanges '
                   f'(start to completion)</text>')
    out.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
