#!/usr/bin/env python3
"""Builds a tiny cross-encoder for mnemo's reranker tests: `make_tiny_cross_encoder.py OUT_DIR`.

No trained cross-encoder can be downloaded on mnemo's build machines, so the tests use this one.
It has the interface of cross-encoder/ms-marco-MiniLM-L-6-v2 (inputs input_ids, attention_mask,
token_type_ids; output `logits` of shape [batch, 1]) and the BERT tokenizer of all-MiniLM-L6-v2,
but its "model" is a bag of words with hand-picked weights, so tests know the expected order:

    logits = sum over the document's tokens (token_type_ids == 1, attention_mask == 1) of W[token]

with W = 0 except for the words in WEIGHTS. The query's tokens (segment 0) never count, which
lets a test check that pairs are tokenised as (query, document) and not concatenated blindly.
Needs the `onnx` and `numpy` packages (`scripts/setup test` installs them).
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = ROOT / "models" / "all-MiniLM-L6-v2"
TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"]

# Words the tiny model likes, and how much. Each must be a single token of the BERT vocabulary.
WEIGHTS = {"apple": 3.0, "banana": 2.0, "cherry": 1.0, "rotten": -4.0}


def build(vocab: dict) -> onnx.ModelProto:
    weights = np.zeros((len(vocab), 1), dtype=np.float32)
    for word, weight in WEIGHTS.items():
        weights[vocab[word], 0] = weight

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    types = helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    nodes = [
        helper.make_node("Gather", ["W", "input_ids"], ["per_token"], axis=0),  # [b, s, 1]
        helper.make_node("Mul", ["attention_mask", "token_type_ids"], ["doc_mask_i"]),
        helper.make_node("Cast", ["doc_mask_i"], ["doc_mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["doc_mask_f", "axis2"], ["doc_mask"]),  # [b, s, 1]
        helper.make_node("Mul", ["per_token", "doc_mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["logits"], keepdims=0),  # [b, 1]
    ]
    initializers = [
        numpy_helper.from_array(weights, "W"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
    ]
    graph = helper.make_graph(nodes, "tiny_cross_encoder", [ids, mask, types], [logits], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_cross_encoder.py OUT_DIR")
    out = Path(sys.argv[1])
    vocab = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())["model"]["vocab"]
    missing = [w for w in WEIGHTS if w not in vocab]
    if missing:
        sys.exit(f"make_tiny_cross_encoder: not single tokens of the vocabulary: {missing}")
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(TOKENIZER_DIR / name, out / name)
    tmp = out / ".model.onnx.part"
    onnx.save(build(vocab), str(tmp))
    tmp.replace(out / "model.onnx")
    (out / "weights.json").write_text(json.dumps(WEIGHTS, indent=2) + "\n")
    print(f"tiny cross-encoder written to {out}")


if __name__ == "__main__":
    main()
