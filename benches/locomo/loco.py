#!/usr/bin/env python3
"""Leave-one-conversation-out check of the read path's fusion constants on LoCoMo.

For each of the five dev conversations: choose the constants (lexical weight, neighbour
smoothing, speaker boost) that give the best evidence recall R_all@10 on the other four, then
score that choice on the held-out one. If the defaults were fitted to the split, the held-out
recall would fall well below the defaults' recall on the same questions.

    benches/locomo/loco.py [--data FILE] [--mnemo BINARY] [--json]

Ingests the conversations once into a temporary store (the constants only change ranking, so
every run reuses it), then runs `mnemo eval locomo` once per grid point. About 27 runs of 760
questions: 10-15 minutes on 2 cores. Needs the built binary (`scripts/run --help` builds it).
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULTS = {"lexical_weight": 0.7, "neighbour_weight": 0.3, "speaker_boost": 0.2}
GRID = {
    "lexical_weight": [0.6, 0.7, 0.8],
    "neighbour_weight": [0.2, 0.3, 0.4],
    "speaker_boost": [0.1, 0.2, 0.3],
}
METRIC = "R_all@10"


def evaluate(mnemo, data, store, constants, scratch):
    """Per-conversation recall of one configuration: {conversation: (recall, questions)}."""
    config = os.path.join(scratch, "config.toml")
    with open(config, "w") as f:
        f.write("[retrieval]\n")
        for key, value in constants.items():
            f.write(f"{key} = {value}\n")
    out = subprocess.run(
        [mnemo, "eval", "locomo", "--data", data, "--memory-path", store,
         "--config", config, "--json"],
        check=True, capture_output=True, text=True,
    )
    report = json.loads(out.stdout)
    return {
        name: (row[METRIC], int(row["questions"]))
        for name, row in report["per_conversation"].items()
    }


def weighted(results, conversations):
    """Question-weighted mean recall over `conversations`."""
    total = sum(results[c][1] for c in conversations)
    return sum(results[c][0] * results[c][1] for c in conversations) / total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "locomo", "locomo_dev.json"))
    parser.add_argument("--mnemo", default=os.path.join(ROOT, "target", "debug", "mnemo"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.access(args.mnemo, os.X_OK):
        sys.exit(f"{args.mnemo} is not built: run `scripts/run --help` first")

    grid = [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]
    if DEFAULTS not in grid:
        grid.append(DEFAULTS)
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        results = []
        for i, constants in enumerate(grid, 1):
            print(f"[{i}/{len(grid)}] {constants}", file=sys.stderr)
            results.append(evaluate(args.mnemo, args.data, store, constants, scratch))

    conversations = sorted(results[0])
    defaults = results[grid.index(DEFAULTS)]
    folds = []
    for held_out in conversations:
        train = [c for c in conversations if c != held_out]
        best = max(range(len(grid)), key=lambda i: (weighted(results[i], train), -i))
        folds.append({
            "held_out": held_out,
            "questions": defaults[held_out][1],
            "chosen": grid[best],
            "train_recall": round(weighted(results[best], train), 4),
            "held_out_recall_chosen": round(results[best][held_out][0], 4),
            "held_out_recall_defaults": round(defaults[held_out][0], 4),
        })
    total = sum(f["questions"] for f in folds)
    report = {
        "metric": METRIC,
        "grid": GRID,
        "defaults": DEFAULTS,
        "folds": folds,
        "loco_recall": round(sum(f["held_out_recall_chosen"] * f["questions"] for f in folds) / total, 4),
        "defaults_recall": round(weighted(defaults, conversations), 4),
        "best_in_hindsight_recall": round(max(weighted(r, conversations) for r in results), 4),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'held out':<14} {'n':>4} {'chosen (lexical, neighbour, speaker)':>38} {'chosen':>8} {'defaults':>9}")
    for f in folds:
        c = f["chosen"]
        chosen = f"({c['lexical_weight']}, {c['neighbour_weight']}, {c['speaker_boost']})"
        print(f"{f['held_out']:<14} {f['questions']:>4} {chosen:>38} "
              f"{f['held_out_recall_chosen']:>8.3f} {f['held_out_recall_defaults']:>9.3f}")
    print(f"{METRIC}: leave-one-out {report['loco_recall']:.4f}, defaults {report['defaults_recall']:.4f}, "
          f"best in hindsight {report['best_in_hindsight_recall']:.4f}")


if __name__ == "__main__":
    main()
