"""Just enough of ONNX's protobuf encoding to hand onnxruntime a graph built in memory.

memdb builds one graph (the default embedder, memdb.models.e5) from weights it reads itself, so
it writes the few messages that takes here rather than depending on the onnx package: a model
with its operator sets, a graph of nodes with int and float attributes, tensors as raw
little-endian bytes, and the graph's inputs and outputs with their element type and shape.
Field numbers are those of onnx.proto (IR version 9).
"""

from __future__ import annotations

import struct

import numpy as np

IR_VERSION = 9
FLOAT, UINT8, INT8, INT32, INT64 = 1, 2, 3, 6, 7  # TensorProto.DataType
_DTYPES = {np.dtype("float32"): FLOAT, np.dtype("uint8"): UINT8, np.dtype("int8"): INT8,
           np.dtype("int32"): INT32, np.dtype("int64"): INT64}  # fmt: skip


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s as ten bytes of two's complement, as protobuf does
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _bytes(field: int, data: bytes | str) -> bytes:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(raw)) + raw


def _float(field: int, x: float) -> bytes:
    return _varint(field << 3 | 5) + struct.pack("<f", x)


def node(op: str, inputs: list[str], outputs: list[str], *, domain: str = "", **attrs: int | float) -> bytes:
    """A NodeProto; "" in inputs skips an optional input. Attributes are ints or floats."""
    out = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    out += _bytes(3, outputs[0]) + _bytes(4, op) + (_bytes(7, domain) if domain else b"")
    for name, value in attrs.items():
        if isinstance(value, float):
            attr = _bytes(1, name) + _float(2, value) + _int(20, 1)  # AttributeType FLOAT
        else:
            attr = _bytes(1, name) + _int(3, value) + _int(20, 2)  # AttributeType INT
        out += _bytes(5, attr)
    return out


def tensor_type(array: np.ndarray) -> int:
    """The ONNX element type of a numpy array (ValueError for one memdb never writes)."""
    if array.dtype not in _DTYPES:
        raise ValueError(f"no ONNX tensor type for {array.dtype} here: use one of {', '.join(map(str, _DTYPES))}")
    return _DTYPES[array.dtype]


def tensor(name: str, array: np.ndarray) -> bytes:
    """A TensorProto holding array's values as raw little-endian bytes."""
    kind = tensor_type(array)
    dims = b"".join(_int(1, d) for d in array.shape)
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return dims + _int(2, kind) + _bytes(8, name) + _bytes(9, data)


def value_info(name: str, kind: int, shape: list[int | str]) -> bytes:
    """A graph input or output: element type and shape, a str naming a dimension left free."""
    dims = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _bytes(2, d)) for d in shape)
    tensor_type = _int(1, kind) + _bytes(2, dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def model(nodes: list[bytes], initializers: list[bytes], inputs: list[bytes], outputs: list[bytes],
          opsets: dict[str, int], *, name: str) -> bytes:
    """A serialized ModelProto of one graph; opsets maps domain ("" for ONNX's own) to version."""
    graph = b"".join(_bytes(1, n) for n in nodes) + _bytes(2, name)
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    opset = b"".join(_bytes(8, _bytes(1, domain) + _int(2, version)) for domain, version in opsets.items())
    return _int(1, IR_VERSION) + _bytes(2, "memdb") + _bytes(7, graph) + opset
