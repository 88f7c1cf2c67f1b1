#!/usr/bin/env python3
"""Draws one step of a measured `ptdp execute --trace` file as an SVG timeline (stdlib only).

usage: plot_trace.py TRACE.json OUT.svg [STEP] [TITLE]
One row per rank; forward blue, backward green, weight-gradient purple, with the micro-batch
number; idle time (waiting for a neighbour, the pipeline bubble) is the white space.
Perfetto (https://ui.perfetto.dev) opens the trace itself with every operation.
"""
import json
import sys

COLOURS = {"forward": "#4c78a8", "backward": "#54a24b", "weight-grad": "#b279a2"}


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
    ops = [e for e in events if e["ph"] == "X" and e["cat"] in COLOURS
           and steps[e["tid"]]["ts"] <= e["ts"] <= steps[e["tid"]]["ts"] + steps[e["tid"]]["dur"]]

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
                   f'height="{row - 8}" fill="{COLOURS[e["cat"]]}" stroke="white" '
                   f'stroke-width="0.5"/>')
        if x1 - x0 > 14:
            out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y + row / 2 + 4}" fill="white" '
                       f'text-anchor="middle">{e["name"]}</text>')
    ms = (end - start) / 1000
    out.append(f'<text x="{left}" y="{height - 18}">0 ms</text>')
    out.append(f'<text x="{width - right}" y="{height - 18}" text-anchor="end">{ms:.1f} ms</text>')
    out.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
