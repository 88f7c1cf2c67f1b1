#!/usr/bin/env python3
"""Draws the learning curve of a `ptdp execute` results JSON as an SVG (standard library only).

usage: plot_curve.py RESULTS.json OUT.svg [TITLE]
Training loss per step (line), validation loss where it was measured (dots), ln(256) and the
2.5 mark of the issue's criterion as reference lines.
"""
import json
import math
import sys


def main():
    results_path, out_path = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "ptdp execute: learning curve"
    with open(results_path) as f:
        r = json.load(f)
    first = r["first_step"]
    train = [(first + i, loss) for i, loss in enumerate(r["losses"])]
    val = [(step, loss) for step, loss in r.get("validation_losses", [])]

    width, height = 760, 440
    left, right, top, bottom = 70, 20, 50, 60
    x_max = train[-1][0]
    y_min, y_max = 0.0, 6.0

    def x(step):
        return left + (step - 0) / x_max * (width - left - right)

    def y(loss):
        return top + (y_max - loss) / (y_max - y_min) * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="15">{title}</text>',
    ]
    for v in range(0, 7):
        out.append(f'<line x1="{left}" y1="{y(v)}" x2="{width - right}" y2="{y(v)}" '
                   f'stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 8}" y="{y(v) + 4}" text-anchor="end">{v}</text>')
    step_tick = 50 if x_max > 100 else 10
    for s in range(0, x_max + 1, step_tick):
        out.append(f'<line x1="{x(s)}" y1="{height - bottom}" x2="{x(s)}" '
                   f'y2="{height - bottom + 5}" stroke="black"/>')
        out.append(f'<text x="{x(s)}" y="{height - bottom + 18}" text-anchor="middle">{s}</text>')
    out.append(f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" '
               f'y2="{height - bottom}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 18}" '
               f'text-anchor="middle">step</text>')
    out.append(f'<text x="18" y="{(top + height - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(top + height - bottom) / 2})">loss (nats per byte)'
               f'</text>')
    for level, label, colour in [(math.log(256), "ln 256 = 5.55", "#999999"),
                                 (2.5, "2.5", "#cc3333")]:
        out.append(f'<line x1="{left}" y1="{y(level)}" x2="{width - right}" y2="{y(level)}" '
                   f'stroke="{colour}" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{width - right - 4}" y="{y(level) - 5}" text-anchor="end" '
                   f'fill="{colour}">{label}</text>')
    points = " ".join(f"{x(s):.1f},{y(l):.1f}" for s, l in train)
    out.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    for s, l in val:
        out.append(f'<circle cx="{x(s):.1f}" cy="{y(l):.1f}" r="3.5" fill="#ff7f0e"/>')
    lx, ly = width - right - 210, top + 40
    out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="#1f77b4" '
               f'stroke-width="2"/><text x="{lx + 30}" y="{ly + 4}">training loss (batch)</text>')
    out.append(f'<circle cx="{lx + 12}" cy="{ly + 20}" r="3.5" fill="#ff7f0e"/>'
               f'<text x="{lx + 30}" y="{ly + 24}">validation loss (held-out 10%)</text>')
    out.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
