"""memdb's ONNX encoder: a small graph that onnxruntime must load and run as numpy computes it,
and the BERT runtime's graph read back by the onnx package (its parser and its checker)."""

from __future__ import annotations

import numpy as np
import onnx  # the test extra: never skipped, its checker is the point
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from memdb.models import bert, onnxproto


def test_graph_runs_as_numpy_computes_it() -> None:
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10 - 0.5
    nodes = [
        onnxproto.node("MatMul", ["x", "w"], ["xw"]),
        onnxproto.node("LeakyRelu", ["xw"], ["leaky"], alpha=0.25),  # a float attribute
        onnxproto.node("Softmax", ["leaky"], ["y"], axis=-1),  # a negative int attribute
    ]
    model = onnxproto.model(nodes, [onnxproto.tensor("w", w)], [onnxproto.value_info("x", onnxproto.FLOAT, ["rows", 3])],
                            [onnxproto.value_info("y", onnxproto.FLOAT, ["rows", 4])], {"": 17}, name="tiny")
    x = np.array([[1, 2, 3], [-3, 0, 1]], dtype=np.float32)
    (actual,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    xw = x @ w
    leaky = np.where(xw > 0, xw, 0.25 * xw)
    expected = np.exp(leaky) / np.exp(leaky).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_tensors_keep_their_type_and_shape() -> None:
    for array in (np.array([[1, -2]], np.int8), np.array([7, 300], np.int64), np.zeros((2, 0, 3), np.float32)):
        model = onnxproto.model([onnxproto.node("Identity", ["t"], ["out"])], [onnxproto.tensor("t", array)], [],
                                [onnxproto.value_info("out", onnxproto.tensor_type(array), list(array.shape))],
                                {"": 17}, name="const")
        (actual,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {})
        assert (array.dtype, array.shape, array.tolist()) == (actual.dtype, actual.shape, actual.tolist())


def test_unsupported_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="float64"):
        onnxproto.tensor("t", np.zeros(2))


class TinyWeights:
    """A two-layer BERT of random weights (hidden 64, FFN 128), in floats and in Q4_0 blocks."""

    shape = bert.Shape(hidden=64, layers=2, heads=4, ffn=128, eps=1e-12)

    def __init__(self) -> None:
        self.rng = np.random.default_rng(5)
        self.made: dict[str, np.ndarray] = {}

    def vector(self, name: str) -> np.ndarray:
        size = self.shape.ffn if name.endswith("fi.b") else self.shape.hidden
        return self.made.setdefault(name, self.rng.normal(0, 0.1, size).astype(np.float32))

    def blocks(self, name: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = self.shape.ffn if ".fi." in name else self.shape.hidden
        scales = self.made.setdefault(name + "/scales", self.rng.uniform(0.01, 0.02, (n, k // 32)).astype(np.float32))
        values = self.made.setdefault(name + "/values", self.rng.integers(0, 16, (n, k // 32, 32)).astype(np.uint8))
        return scales, values

    def matrix(self, name: str, k: int) -> np.ndarray:
        scales, values = self.blocks(name, k)
        return ((values.astype(np.float32) - 8) * scales[..., None]).reshape(-1, k)


@pytest.mark.parametrize("arithmetic", bert.ARITHMETIC)
def test_the_onnx_checker_accepts_the_encoder_graph(arithmetic: str) -> None:
    weights = TinyWeights()
    serialized = bert.graph(weights, weights.shape, lambda layer, part: arithmetic, name="tiny")
    model = onnx.load_from_string(serialized)
    onnx.checker.check_model(model, full_check=True)
    assert (onnxproto.IR_VERSION, {"": 17, "com.microsoft": 1}) == (
        model.ir_version, {o.domain: o.version for o in model.opset_import})
    assert (["hidden", "mask"], ["states"]) == ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
    hidden = model.graph.input[0].type.tensor_type
    assert (onnx.TensorProto.FLOAT, ["batch", "tokens", 64]) == (
        hidden.elem_type, [d.dim_param or d.dim_value for d in hidden.shape.dim])
    ops = {"float": "MatMul", "q4": "MatMulNBits", "int8": "DynamicQuantizeMatMul"}[arithmetic]
    assert 2 * 4 == sum(n.op_type == ops for n in model.graph.node)  # qkv, ao, fi, fo in each layer
    params = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(weights.vector("l1.fi.b"), params["l1.fi.b"])
    if arithmetic == "float":  # q, k and v side by side, as (inputs, outputs)
        expected = np.concatenate([weights.matrix(f"l0.{p}.w", 64) for p in "qkv"]).T
        np.testing.assert_array_equal(expected, params["l0.qkv.w"])


def test_the_encoder_graph_runs_alike_in_every_arithmetic() -> None:
    weights = TinyWeights()
    rng = np.random.default_rng(9)
    hidden = rng.normal(0, 1, (2, 5, 64)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
    states = {}
    for arithmetic in bert.ARITHMETIC:
        session = bert.session(bert.graph(weights, weights.shape, lambda layer, part: arithmetic, name="tiny"), 1)
        (states[arithmetic],) = session.run(None, {"hidden": hidden, "mask": mask})
    # q4 is float arithmetic over the same values as float; int8 rounds them
    np.testing.assert_allclose(states["float"], states["q4"], atol=1e-3)
    cos = (states["float"] * states["int8"]).sum(-1) / np.linalg.norm(states["float"], axis=-1) / np.linalg.norm(states["int8"], axis=-1)
    assert cos.min() > 0.99
    # padding is masked out: the second text's first three tokens come out as they do alone
    (alone,) = bert.session(bert.graph(weights, weights.shape, lambda layer, part: "float", name="tiny"), 1).run(
        None, {"hidden": hidden[1:, :3], "mask": mask[1:, :3]})
    np.testing.assert_allclose(states["float"][1, :3], alone[0], atol=1e-4)


@pytest.mark.embedder
def test_the_onnx_checker_accepts_the_real_encoders_graphs(cache) -> None:
    from memdb.models import assets, e5, minilm

    e5.encoder(threads=1)  # the encoders themselves, not the process's loaded ones: built in this cache
    minilm.encoder(assets.model_dir(), assets.file_sha256(assets.model_zip()), 1)
    graphs = sorted(cache.glob("*.onnx"))
    assert 2 == len(graphs)
    for path in graphs:
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
