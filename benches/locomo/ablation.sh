#!/usr/bin/env bash
# The read path's ablation on the LoCoMo dev split: one line per config in this folder, each in
# a fresh temporary store. Usage: benches/locomo/ablation.sh [DATA] (needs the built binary:
# `scripts/run --help` builds it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
data="${1:-$root/../shared/data/locomo/locomo_dev.json}"
mnemo="${MNEMO_BIN:-$root/target/debug/mnemo}"
[ -x "$mnemo" ] || { echo "build first: scripts/run --help" >&2; exit 1; }
printf '%-34s %8s %8s %8s %8s %8s\n' config R_all@5 R_all@10 R_any@10 p50_ms p99_ms
for cfg in "$here"/*.toml; do
  "$mnemo" eval locomo --data "$data" --config "$cfg" --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
o = r["overall"]
print("%-34s %8.3f %8.3f %8.3f %8.1f %8.1f" % (sys.argv[1], o["R_all@5"], o["R_all@10"], o["R_any@10"], r["search_ms_p50"], r["search_ms_p99"]))
' "$(basename "$cfg" .toml)"
done
