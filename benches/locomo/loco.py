#!/usr/bin/env python3
"""Leave-one-conversation-out check of the read path's tuned constants on LoCoMo.

For each of the five dev conversations: choose the constants that give the best evidence
recall R_all@10 on the other four, then score that choice on the held-out one. If the
defaults were fitted to the split, the held-out recall would fall well below the defaults'
recall on the same questions. The grid is the fusion constants (lexical weight, neighbour
smoothing, speaker boost) unless `--grid` names others, e.g. the lexical key's window:

    benches/locomo/loco.py [--data FILE] [--mnemo BINARY] [--json]
    benches/locomo/loco.py --grid lexical_neighbour_turns=1,2,3,4 --grid lexical_neighbour_decay=0.5,0.7,1.0

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
DEFAULTS = {
    "lexical_weight": 0.7,
    "neighbour_weight": 0.3,
    "speaker_boost": 0.2,
    "lexical_neighbour_turns": 4,
    "lexical_neighbour_decay": 0.5,
    "vocabulary_expansion": 10,
    "vocabulary_expansion_weight": 0.3,
    "document_expansion": 5,
    "document_expansion_weight": 0.3,
}
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
    parser.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                        help="a [retrieval] constant and the values to try (repeatable)")
    args = parser.parse_args()
    grid_values = GRID
    if args.grid:
        grid_values = {}
        for spec in args.grid:
            key, _, values = spec.partition("=")
            if key not in DEFAULTS or not values:
                sys.exit(f"--grid {spec}: expected KEY=V1,V2 with KEY one of {', '.join(DEFAULTS)}")
            grid_values[key] = [json.loads(v) for v in values.split(",")]
    defaults = {key: DEFAULTS[key] for key in grid_values}
    if not os.access(args.mnemo, os.X_OK):
        sys.exit(f"{args.mnemo} is not built: run `scripts/run --help` first")

    grid = [dict(zip(grid_values, values)) for values in itertools.product(*grid_values.values())]
    if defaults not in grid:
        grid.append(defaults)
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        results = []
        for i, constants in enumerate(grid, 1):
            print(f"[{i}/{len(grid)}] {constants}", file=sys.stderr)
            results.append(evaluate(args.mnemo, args.data, store, constants, scratch))

    conversations = sorted(results[0])
    default_results = results[grid.index(defaults)]
    folds = []
    for held_out in conversations:
        train = [c for c in conversations if c != held_out]
        best = max(range(len(grid)), key=lambda i: (weighted(results[i], train), -i))
        folds.append({
            "held_out": held_out,
            "questions": default_results[held_out][1],
            "chosen": grid[best],
            "train_recall": round(weighted(results[best], train), 4),
            "held_out_recall_chosen": round(results[best][held_out][0], 4),
            "held_out_recall_defaults": round(default_results[held_out][0], 4),
        })
    total = sum(f["questions"] for f in folds)
    report = {
        "metric": METRIC,
        "grid": grid_values,
        "defaults": defaults,
        "folds": folds,
        "loco_recall": round(sum(f["held_out_recall_chosen"] * f["questions"] for f in folds) / total, 4),
        "defaults_recall": round(weighted(default_results, conversations), 4),
        "best_in_hindsight_recall": round(max(weighted(r, conversations) for r in results), 4),
        # Every point's recall on all five: how far apart the choices are at all.
        "points": [
            {"constants": constants, "recall": round(weighted(r, conversations), 4)}
            for constants, r in zip(grid, results)
        ],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    names = ", ".join(grid_values)
    for point in report["points"]:
        print(f"{point['constants']}: {point['recall']:.4f}")
    print(f"{'held out':<14} {'n':>4} {'chosen (' + names + ')':>38} {'chosen':>8} {'defaults':>9}")
    for f in folds:
        chosen = "(" + ", ".join(str(v) for v in f["chosen"].values()) + ")"
        print(f"{f['held_out']:<14} {f['questions']:>4} {chosen:>38} "
              f"{f['held_out_recall_chosen']:>8.3f} {f['held_out_recall_defaults']:>9.3f}")
    print(f"{METRIC}: leave-one-out {report['loco_recall']:.4f}, defaults {report['defaults_recall']:.4f}, "
          f"best in hindsight {report['best_in_hindsight_recall']:.4f}")


if __name__ == "__main__":
    main()
