"""memdb's ONNX encoder: a small graph that onnxruntime must load and run as numpy computes it."""

from __future__ import annotations

import numpy as np
import pytest

from memdb.models import onnxproto

ort = pytest.importorskip("onnxruntime")


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
