"""Draws docs/benchmarks.png: every tinybox/raw ratio measured in one run of
contrib/bench/run, one bar each, with the issue's target where there is one
(and the microVM exec next to a namespace box's, the baseline there).
Usage: python3 contrib/bench/plot.py OUT_DIR docs/benchmarks.png"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out, png = sys.argv[1], sys.argv[2]


def pair(name, row=1):
    """(ratio tinybox/raw) from a hyperfine export whose first result is raw
    and whose result `row` is tinybox's."""
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    results = json.load(open(path))["results"]
    raw, tb = results[0]["median"], results[row]["median"]
    return tb / raw


bars = []  # (label, ratio, target or None, lower is better)
for label, name, target, row in [
    ("exec true, daemon\n(passthrough vs direct)", "exec.json", None, 2),
    ("exec true, daemon\n(namespace vs raw bwrap)", "namespace-exec.json", None, 2),
    ("exec true\n(docker vs docker exec)", "docker-exec.json", 1.1, 1),
    ("create\n(docker vs docker run -d)", "docker-create.json", 1.1, 1),
    ("microVM create + exec\n(vs raw QEMU boot)", "microvm-boot.json", 1.2, 1),
    ("exec true, microVM\n(vs namespace box)", "microvm-exec.json", None, 1),
]:
    r = pair(name, row)
    if r is not None:
        bars.append((label, r, target))
stream = pair("stream.json")
if stream is not None:
    # Throughput ratio is the inverse of the time ratio; higher is better.
    bars.append(("1 GiB exec cat\nthroughput vs raw pipe", 1 / stream, 0.8))
sync_path = os.path.join(out, "ssh-sync-unchanged.json")
if os.path.exists(sync_path):
    res = json.load(open(sync_path))["results"]
    bars.append(("sync, unchanged tree\n(vs rsync -a)", res[1]["median"] / res[0]["median"], 0.5))

fig, ax = plt.subplots(figsize=(13, 5))
labels = [b[0] for b in bars]
ratios = [b[1] for b in bars]
colors = ["#4c72b0"] * len(bars)
ax.bar(range(len(bars)), ratios, color=colors)
ax.set_yscale("log")
for i, (_, r, target) in enumerate(bars):
    ax.text(i, max(r, target or 0) * 1.06, f"{r:.2f}×", ha="center", va="bottom", fontsize=9)
    if target is not None:
        ax.hlines(target, i - 0.4, i + 0.4, colors="#c44e52", linestyles="dashed")
ax.axhline(1.0, color="grey", linewidth=0.8)
ax.set_xticks(range(len(bars)), labels, fontsize=7.5)
ax.set_ylabel("tinybox ÷ baseline, same run (log scale)")
ax.set_title("tinybox next to the raw tool it wraps (dashed: the issue's target)")
fig.tight_layout()
fig.savefig(png, dpi=110)
print(f"wrote {png}")
