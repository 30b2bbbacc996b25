"""Writing a model the converters in scripts/ built (minilm_fused.py, mpnet_to_onnx.py)."""

import os
from pathlib import Path

import onnx


def write_checked(model: onnx.ModelProto, out: Path) -> None:
    """Checks `model` and writes it to `out` whole or not at all, its bytes the same on every
    run (set-up pins their sha256)."""
    onnx.checker.check_model(model)  # in memory: the models are under protobuf's 2 GB limit
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(model.SerializeToString(deterministic=True))
    os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.0f} MiB, {len(model.graph.node)} nodes)")
