#!/usr/bin/env python3
"""Prints a hardware profile's derived GEMM efficiency table (YAML list items).

The derivation the H100, H200 and Blackwell profiles state in their comments, for GPUs without a
measured grid (`ptdp calibrate` writes measured ones):

    eff(m, n, k) = min(E, E * W(m, n) * K(k) / (W(m*, n*) * K(k*)))
    W(m, n) = tiles / (ceil(tiles / sms) * sms),  tiles = ceil(m / 128) * ceil(n / 128)
    K(k)    = k / (k + k0)

E is the level (the largest fraction of peak reached), (m*, n*, k*) the shape where it is
reached, W the wave quantization over the GPU's SMs (NVIDIA's Matrix Multiplication Background
User's Guide, 3.2) and K the fixed cost per output tile amortised over k.

Usage: gemm_table.py --level 0.801 --k0 256 --sms 132 [--best 6144,17920,2816]
"""
import argparse
import math

GRID_MN = [256, 1024, 4096, 16384]
GRID_K = [64, 256, 1024, 4096, 16384]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=float, required=True, help="E, the table's largest value")
    ap.add_argument("--k0", type=float, required=True, help="k0 of K(k) = k / (k + k0)")
    ap.add_argument("--sms", type=int, default=132, help="streaming multiprocessors")
    ap.add_argument("--best", default="6144,17920,2816", help="m*,n*,k*")
    args = ap.parse_args()
    bm, bn, bk = (int(x) for x in args.best.split(","))

    def waves(m, n):
        tiles = math.ceil(m / 128) * math.ceil(n / 128)
        return tiles / (math.ceil(tiles / args.sms) * args.sms)

    def k_term(k):
        return k / (k + args.k0)

    ref = waves(bm, bn) * k_term(bk)
    for m in GRID_MN:
        for n in GRID_MN:
            for k in GRID_K:
                e = min(args.level, args.level * waves(m, n) * k_term(k) / ref)
                print(f"    - {{m: {m}, n: {n}, k: {k}, efficiency: {round(e, 3):g}}}")


if __name__ == "__main__":
    main()
