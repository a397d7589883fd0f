#!/usr/bin/env python3
"""Fit fleet-sim's noise model to per-push scores recorded on real nodes.

    python3 scripts/fit-noise.py SCORES.csv            (a [noise] block and a summary)
    python3 scripts/fit-noise.py --self-test           (fit synthetic scores of known noise)

SCORES.csv has a header and the columns t_s,node,score,healthy (what the GPU check's e2e
stage writes to OUT/e2e/scores.csv: one row per node and push, as Fleet saw it). Only rows
with healthy = 1 are used. The simulator's noise is in fractions of the healthy score
(sim/README.md): per node a constant bias, per push a draw with lag-1 autocorrelation `ar`.
The fit, from each node's residuals x = score / node_median - 1:

- bias_sigma: the spread of the node medians around their median (1.4826 * MAD);
- tail weight and scale: Student-t degrees of freedom matched to the ratio of the lower
  tail to the body, (median - p01) / (median - p25) of the pooled residuals (3.45 for
  Gaussian, 5.94 for df 3), and the scale that puts p25 where t's 25 % quantile is; a ratio
  at or below Gaussian's gives model = "gaussian" with sigma = 1.4826 * MAD;
- ar: the pooled lag-1 autocorrelation of consecutive pushes of each node (pairs further
  apart than 1.5 times the median push gap are skipped).

Standard library only, so it runs on the GPU host as is.
"""
import argparse
import csv
import math
import random
import sys

# Student-t quantiles at 0.99 and 0.75 by degrees of freedom (inf: the normal).
T_QUANTILES = [
    (2.5, 5.604, 0.7846),  # approximations between table entries are interpolated
    (3.0, 4.541, 0.7649),
    (4.0, 3.747, 0.7407),
    (5.0, 3.365, 0.7267),
    (7.0, 2.998, 0.7111),
    (10.0, 2.764, 0.6998),
    (20.0, 2.528, 0.6870),
    (30.0, 2.457, 0.6828),
    (math.inf, 2.326, 0.6745),
]


def quantile(sorted_v, f):
    if not sorted_v:
        raise ValueError("no values")
    pos = f * (len(sorted_v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_v) - 1)
    return sorted_v[lo] + (sorted_v[hi] - sorted_v[lo]) * (pos - lo)


def median(v):
    return quantile(sorted(v), 0.5)


def mad(v):
    m = median(v)
    return median([abs(x - m) for x in v])


def df_for_ratio(ratio):
    """Degrees of freedom whose (q99 / q75) matches `ratio` (linear in 1/df between table
    rows); None when the ratio is at or below the normal's."""
    rows = [(df, q99 / q75) for df, q99, q75 in T_QUANTILES]
    if ratio <= rows[-1][1]:
        return None
    if ratio >= rows[0][1]:
        return rows[0][0]
    for (d1, r1), (d2, r2) in zip(rows, rows[1:]):
        if r2 <= ratio <= r1:
            inv1, inv2 = 1.0 / d1, (0.0 if math.isinf(d2) else 1.0 / d2)
            w = (ratio - r2) / (r1 - r2)
            inv = inv2 + w * (inv1 - inv2)
            return math.inf if inv <= 0 else 1.0 / inv
    return None


def q75_for(df):
    rows = T_QUANTILES
    if df is None or math.isinf(df):
        return rows[-1][2]
    for (d1, _, a), (d2, _, b) in zip(rows, rows[1:]):
        if d1 <= df <= d2:
            inv1, inv2 = 1.0 / d1, (0.0 if math.isinf(d2) else 1.0 / d2)
            w = (1.0 / df - inv2) / (inv1 - inv2)
            return b + w * (a - b)
    return rows[0][2]


def read_rows(path):
    """{node: [(t, score)]} of the healthy rows, each node's rows in time order."""
    per_node = {}
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        missing = {"t_s", "node", "score", "healthy"} - set(r.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        for i, row in enumerate(r, start=2):
            try:
                if row["healthy"].strip() != "1":
                    continue
                t, score = float(row["t_s"]), float(row["score"])
            except (ValueError, AttributeError) as e:
                raise ValueError(f"{path}:{i}: {e}") from None
            if math.isfinite(t) and math.isfinite(score) and score > 0:
                per_node.setdefault(row["node"], []).append((t, score))
    for v in per_node.values():
        v.sort()
    return per_node


def fit(per_node):
    nodes = {n: v for n, v in per_node.items() if len(v) >= 10}
    if len(nodes) < 1:
        raise ValueError("need at least one node with 10 healthy scores")
    medians = {n: median([s for _, s in v]) for n, v in nodes.items()}
    overall = median(list(medians.values()))
    bias_sigma = 1.4826 * mad([m / overall - 1.0 for m in medians.values()]) if len(nodes) > 2 else 0.0
    resid = {n: [(t, s / medians[n] - 1.0) for t, s in v] for n, v in nodes.items()}
    pooled = sorted(x for v in resid.values() for _, x in v)
    m = quantile(pooled, 0.5)
    lower_body = m - quantile(pooled, 0.25)
    lower_tail = m - quantile(pooled, 0.01)
    robust_sigma = 1.4826 * mad(pooled)
    ratio = lower_tail / lower_body if lower_body > 0 else 0.0
    df = df_for_ratio(ratio)
    if df is None or math.isinf(df) or df > 30:
        model, scale, df_out = "gaussian", robust_sigma, None
    else:
        model, scale, df_out = "student_t", lower_body / q75_for(df), df
    # Lag-1 autocorrelation over consecutive pushes.
    gaps = sorted(b[0] - a[0] for v in resid.values() for a, b in zip(v, v[1:]))
    gap = quantile(gaps, 0.5) if gaps else 0.0
    num = den = 0.0
    for v in resid.values():
        mu = sum(x for _, x in v) / len(v)
        den += sum((x - mu) ** 2 for _, x in v)
        num += sum((a[1] - mu) * (b[1] - mu) for a, b in zip(v, v[1:]) if b[0] - a[0] <= 1.5 * gap)
    ar = num / den if den > 0 else 0.0
    return {
        "nodes": len(nodes), "samples": len(pooled), "median_score": overall,
        "push_gap_s": gap, "robust_sigma": robust_sigma, "tail_ratio": ratio,
        "model": model, "df": df_out, "sigma": scale, "bias_sigma": bias_sigma,
        "ar": max(0.0, min(ar, 0.99)), "ar_raw": ar,
    }


def noise_block(f):
    lines = ["[noise]", f'model = "{f["model"]}"']
    if f["df"] is not None:
        lines.append(f"df = {f['df']:.1f}")
    lines += [f"sigma = {f['sigma']:.5f}", f"bias_sigma = {f['bias_sigma']:.5f}", f"ar = {f['ar']:.2f}"]
    return "\n".join(lines)


def synthetic(path, nodes=64, pushes=1500, df=3.0, scale=0.005, ar=0.5, bias=0.002, seed=7):
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("t_s,node,score,healthy\n")
        for n in range(nodes):
            b = rng.gauss(0.0, bias)
            e = 0.0
            for k in range(pushes):
                chi2 = rng.gammavariate(df / 2.0, 2.0)
                draw = rng.gauss(0.0, 1.0) / math.sqrt(chi2 / df) * scale
                e = ar * e + math.sqrt(1.0 - ar * ar) * draw
                score = 0.93 * (1.0 - b - e)
                injected = n == 0 and 500 <= k < 520
                if injected:
                    score *= 0.8
                f.write(f"{2.0 * k + 0.1 * n:.2f},node-{n},{score:.6f},{0 if injected else 1}\n")


def self_test():
    import tempfile, os
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "scores.csv")
        cases = [dict(df=3.0, scale=0.005, ar=0.5, bias=0.002), dict(df=3.0, scale=0.007, ar=0.0, bias=0.003),
                 dict(df=1e9, scale=0.004, ar=0.0, bias=0.0)]
        for c in cases:
            synthetic(p, df=c["df"], scale=c["scale"], ar=c["ar"], bias=c["bias"])
            f = fit(read_rows(p))
            print(f"synthetic {c}: {f}")
            assert f["nodes"] == 64 and f["samples"] == 64 * 1500 - 20, f
            assert abs(f["ar"] - c["ar"]) < 0.05, f
            if c["df"] < 100:
                # The AR(1) mix of t draws is a little lighter-tailed than one t draw.
                assert f["model"] == "student_t" and 2.5 <= f["df"] <= (6 if c["ar"] else 4), f
                assert abs(f["sigma"] - c["scale"]) < 0.25 * c["scale"], f
                assert abs(f["bias_sigma"] - c["bias"]) < 0.5 * c["bias"], f
            else:
                assert f["model"] == "gaussian" or f["df"] > 20, f
                assert abs(f["robust_sigma"] - c["scale"]) < 0.1 * c["scale"], f
                assert f["bias_sigma"] < 0.001, f
    print("self-test passed")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        self_test()
        return 0
    if not a.csv:
        ap.error("a CSV path (or --self-test)")
    try:
        f = fit(read_rows(a.csv))
    except (OSError, ValueError) as e:
        print(f"fit-noise: {e}", file=sys.stderr)
        return 1
    print(f"# {f['nodes']} nodes, {f['samples']} healthy scores, median {f['median_score']:.4f}, "
          f"push gap {f['push_gap_s']:.2f} s")
    print(f"# robust sigma {f['robust_sigma']:.5f}, lower tail / body {f['tail_ratio']:.2f} "
          f"(Gaussian 3.45, t3 5.94), lag-1 autocorrelation {f['ar_raw']:.3f}")
    print(noise_block(f))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
