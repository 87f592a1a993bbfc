"""How a call reads tensor arguments: the CUDA array interface and DLPack exporters (host stand-ins; torch's own
path runs in the GPU suite), and the checks against the graph that keep a wrong tensor from running."""
from __future__ import annotations

import pytest

import kiln
from kiln import _kiln


class CudaArray:
    """An exporter of the CUDA array interface (as CuPy and Numba are): nothing is read through the pointer."""

    def __init__(self, shape, typestr="<f2", strides=None, ptr=0x7F0000000000):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


@pytest.fixture
def graph(spec_dict):
    return kiln.load(spec_dict)


def test_cuda_array_interface_is_read(graph):
    d = _kiln._describe_tensor(CudaArray([4, 64, 32]), "a")
    assert d["kind"] == "__cuda_array_interface__" and d["on_cuda"]
    assert d["shape"] == (4, 64, 32) and d["strides"] == (64 * 32, 32, 1) and d["dtype"] == "fp16"
    assert _kiln._check_tensor(CudaArray([4, 64, 32]), graph, "a") == 4 * 64 * 32 * 2


def test_byte_strides_become_element_strides():
    d = _kiln._describe_tensor(CudaArray([4, 8], "<f4", strides=(64, 4)), "x")
    assert d["strides"] == (16, 1) and d["dtype"] == "fp32"


@pytest.mark.parametrize("arr,needle", [
    (CudaArray([4, 64, 32], "<f4"), "dtype <f4, the graph's is fp16"),
    (CudaArray([4, 64, 31]), "shape (4, 64, 31), the graph's is (4, 64, 32)"),
    (CudaArray([4, 64]), "shape (4, 64)"),
    (CudaArray([4, 64, 32], strides=(2 * 64 * 32, 2, 128)), "strides"),
    (CudaArray([4, 64, 32], "<c8"), "typestr '<c8' is no dtype Kiln binds"),
])
def test_a_wrong_tensor_is_refused_naming_it(graph, arr, needle):
    with pytest.raises(kiln.BadInput) as e:
        _kiln._check_tensor(arr, graph, "a")
    assert e.value.message.startswith("tensor 'a'") and needle in e.value.message


def test_extent_one_dims_may_have_any_stride(graph):
    # bias [1, 1, 48]: its leading strides do not matter, as torch's own expand/views produce
    assert _kiln._check_tensor(CudaArray([1, 1, 48], strides=(0, 0, 2)), graph, "bias") == 48 * 2


def test_host_arrays_are_refused(graph):
    np = pytest.importorskip("numpy")
    a = np.zeros((4, 64, 32), dtype=np.float16)
    d = _kiln._describe_tensor(a, "a")
    assert d["kind"] == "DLPack" and not d["on_cuda"] and d["shape"] == (4, 64, 32)
    with pytest.raises(kiln.BadInput, match="on the host; a plan runs on CUDA tensors"):
        _kiln._check_tensor(a, graph, "a")


@pytest.mark.parametrize("obj", [None, 3, "x", [1, 2]])
def test_what_is_not_a_tensor(obj, graph):
    with pytest.raises(kiln.BadInput) as e:
        _kiln._check_tensor(obj, graph, "a")
    assert "tensor 'a'" in e.value.message


def test_unknown_tensor_name(graph):
    with pytest.raises(kiln.NotFound):
        _kiln._check_tensor(CudaArray([4, 64, 32]), graph, "q")


def test_streams_without_torch():
    assert _kiln._stream_of(0) == 0
    assert _kiln._stream_of(1234) == 1234

    class TorchLike:
        cuda_stream = 77

    class Protocol:
        def __cuda_stream__(self):
            return (0, 99)

    class CupyLike:
        ptr = 55

    assert _kiln._stream_of(TorchLike()) == 77
    assert _kiln._stream_of(Protocol()) == 99
    assert _kiln._stream_of(CupyLike()) == 55
    with pytest.raises(kiln.BadInput, match="is not a stream"):
        _kiln._stream_of(object())


# Exporters that lie (found by a hostile trial): each is BadInput naming the tensor, never a crash or a cast error.
@pytest.mark.parametrize("cai,needle", [
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": "<f2", "strides": ()}, "0 strides for 3 dims"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": "<f2", "strides": (1024,)}, "1 strides for 3 dims"),
    ({"data": (), "shape": (4, 64, 32), "typestr": "<f2"}, "'data' is an empty tuple"),
    ({"shape": (4, 64, 32), "typestr": "<f2"}, "has no 'data'"),
    ({"data": [4096, False], "shape": (4, 64, 32), "typestr": "<f2"}, "wrong type"),
    ({"data": (-1, False), "shape": (4, 64, 32), "typestr": "<f2"}, "wrong type"),
    ({"data": (4096, False), "shape": (4.5, 64, 32), "typestr": "<f2"}, "wrong type"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": 5}, "wrong type"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": ""}, "typestr ''"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": "f"}, "typestr 'f'"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": ">f2"}, "big-endian"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": "<f2xyz"}, "typestr '<f2xyz'"),
    ({"data": (4096, False), "shape": (4, 64, 32), "typestr": "<u2"}, "no dtype Kiln binds"),
])
def test_lying_exporters_are_bad_input(graph, cai, needle):
    class Liar:
        __cuda_array_interface__ = cai

    with pytest.raises(kiln.BadInput) as e:
        _kiln._check_tensor(Liar(), graph, "a")
    assert e.value.message.startswith("tensor 'a'") and needle in e.value.message, e.value.message


def test_an_interface_property_that_raises_is_named():
    class Raises:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("device lost")

    with pytest.raises(kiln.BadInput, match="tensor 'x'"):
        _kiln._describe_tensor(Raises(), "x")


@pytest.mark.parametrize("stream,needle", [
    (-1, "not a stream handle"),
    (type("S", (), {"__cuda_stream__": lambda self: (0,)})(), "a tuple of 1"),
    (type("S", (), {"__cuda_stream__": lambda self: 7})(), "not a stream handle"),
    (type("S", (), {"ptr": -5})(), "not a stream handle"),
])
def test_bad_streams_are_bad_input(stream, needle):
    with pytest.raises(kiln.BadInput) as e:
        _kiln._stream_of(stream)
    assert needle in e.value.message, e.value.message
