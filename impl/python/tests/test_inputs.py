"""What push and pull accept from Python before anything is sent: data is
cast to the tensor's dtype only where every value fits, ids are 1-D
integers (an empty list too), names have no NUL byte, out is an array.
Refusals are rkv.Error, and also Python's own OverflowError, ValueError or
TypeError where one fits."""
import os

import numpy as np
import pytest
import torch

import rkv


def refused(kind, fn, *a, **kw):
    with pytest.raises(rkv.Error) as e:
        fn(*a, **kw)
    assert isinstance(e.value, kind), type(e.value).__mro__
    return e.value


def test_integers_that_do_not_fit_are_refused(client):
    client.init_data("i64", (10, 2), "int64")
    client.init_data("i32", (10, 1), "int32")
    client.push("i64", [1], np.array([[7, 8]], dtype=np.int64), op="assign")
    client.push("i32", [0], np.array([5], dtype=np.int32), op="assign")
    e = refused(OverflowError, client.push, "i64", [1],
                np.array([[2**64 - 1, 0]], dtype=np.uint64), op="assign")
    assert "'i64'" in e.message and "int64" in e.message and e.code == -rkv.ERANGE
    e = refused(OverflowError, client.push, "i32", [0], np.array([[2**40]]), op="assign")
    assert "'i32'" in e.message and "int32" in e.message
    refused(OverflowError, client.push, "i32", [0], [[2**40]], op="assign")
    refused(OverflowError, client.push, "i32", [0], [[-2**31 - 1]], op="assign")
    refused(OverflowError, client.push, "i32", [0], torch.tensor([[2**31]]), op="assign")
    # Nothing was stored.
    np.testing.assert_array_equal(client.pull("i64", [1]).numpy(), [[7, 8]])
    np.testing.assert_array_equal(client.pull("i32", [0]).numpy(), [5])
    # Integers that fit convert, whatever their type; floats into integers do not.
    client.push("i64", [1], np.array([[2**63 - 1, 3]], dtype=np.uint64), op="assign")
    client.push("i32", [0, 1], [[-2**31], [2**31 - 1]], op="assign")
    client.push("i32", [2], np.array([9], dtype=np.uint8), op="assign")
    np.testing.assert_array_equal(client.pull("i64", [1]).numpy(), [[2**63 - 1, 3]])
    np.testing.assert_array_equal(client.pull("i32", [0, 1, 2]).numpy(),
                                  [-2**31, 2**31 - 1, 9])
    assert refused(rkv.Error, client.push, "i64", [1], np.ones((1, 2))).code == -rkv.EDTYPE


def test_floats_that_overflow_are_refused(client):
    client.init_data("f32", (10, 2), "float32")
    e = refused(OverflowError, client.push, "f32", [0], [[1e300, 0]], op="assign")
    assert "'f32'" in e.message and "float32" in e.message
    # Rounding is a float's nature; inf and nan stay what they are.
    client.push("f32", [0], np.array([[0.1, np.inf]]), op="assign")
    np.testing.assert_array_equal(client.pull("f32", [0]).numpy(),
                                  [[np.float32(0.1), np.inf]])


def test_empty_ids(client):
    client.init_data("emb", (10, 4), "float32")
    client.init_data("one", (10,), "int32")
    for ids in ([], (), np.array([]), np.array([], dtype=np.int64), torch.tensor([])):
        got = client.pull("emb", ids)
        assert tuple(got.shape) == (0, 4) and got.dtype == torch.float32
        client.push("emb", ids, [])
        client.push("emb", ids, np.zeros((0, 4), dtype=np.float32))
        client.push("one", ids, [], op="assign")
    assert tuple(client.pull("one", []).shape) == (0,)
    assert refused(rkv.Error, client.push, "emb", [], np.zeros((2, 4))).code == -rkv.EDTYPE


def test_ids_must_be_one_dimensional(client):
    client.init_data("emb", (10, 4), "float32")
    for ids in (np.array([[1, 2], [3, 4]]), [[1, 2]], torch.tensor([[1]]), 5, np.int64(5)):
        e = refused(ValueError, client.pull, "emb", ids)
        assert "1-D" in e.message and e.code == -rkv.EINVAL
        refused(ValueError, client.push, "emb", ids, np.zeros((4, 4), dtype=np.float32))
    # A set or a generator became one 0-d object: "got shape ()" named no culprit.
    for ids, kind in (({1, 2}, "a set"), ((i for i in range(2)), "a generator"),
                      ({1: 2}, "a dict")):
        e = refused(ValueError, client.pull, "emb", ids)
        assert e.message.endswith("got %s" % kind), e.message


def test_list_of_tensors_says_stack(client):
    # numpy read each tensor as an object: "inhomogeneous shape" for rows
    # of one shape, and a FutureWarning.
    client.init_data("emb", (10, 3), "float32")
    e = refused(TypeError, client.push, "emb", [0, 1], [torch.ones(3), torch.ones(3)])
    assert "torch.stack" in e.message and e.code == -rkv.EINVAL
    e = refused(TypeError, client.pull, "emb", [torch.tensor([1]), torch.tensor([9])])
    assert "torch.cat" in e.message
    # 0-d tensors in a list are numbers, as before.
    assert client.pull("emb", [torch.tensor(1), torch.tensor(2)]).shape == (2, 3)


def test_ids_mixing_numpy_and_python_integers(client):
    """numpy makes [np.uint64(1), 2] float64 (refused as floats, and ids past
    2^53 would round); such a list is read element by element."""
    client.init_data("emb", (10, 2), "float32")
    client.push("emb", [np.uint64(1), 2, np.int32(3)], np.ones((3, 2)), op="assign")
    got = client.pull("emb", [np.uint64(1), 4, torch.tensor(2)]).numpy()
    np.testing.assert_array_equal(got, [[1, 1], [0, 0], [1, 1]])
    big = 2**53 + 1
    np.testing.assert_array_equal(rkv._ids_array([np.uint64(big), 2]), [big, 2])
    np.testing.assert_array_equal(rkv._ids_array((2**64 - 1, np.uint64(0))), [2**64 - 1, 0])
    e = refused(rkv.Error, client.pull, "emb", [np.uint64(1), 1.5])
    assert e.code == -rkv.EINVAL and "got 1.5 (float) at index 1" in e.message
    e = refused(rkv.Error, client.pull, "emb", [1.0, 2])  # a float, even a whole one
    assert e.code == -rkv.EINVAL
    e = refused(rkv.Error, client.pull, "emb", [np.uint64(1), -1])
    assert e.code == -rkv.ERANGE and "row id -1 is negative" in e.message
    e = refused(OverflowError, client.pull, "emb", [2**64, 1])
    assert e.code == -rkv.ERANGE and "does not fit in 64 bits" in e.message
    e = refused(rkv.Error, client.pull, "emb", [np.uint64(12), 1])
    assert e.code == -rkv.ERANGE  # past the tensor's rows, said by the store


def test_names_with_nul_are_refused(client):
    e = refused(ValueError, client.init_data, "a\0b", (10, 4), "float32")
    assert e.code == -rkv.EINVAL and "NUL" in e.message
    assert client.data_name_list() == []
    client.init_data("a", (10, 4), "float32")
    refused(ValueError, client.pull, "a\0zzz", [1])
    refused(ValueError, client.push, "a\0zzz", [1], np.zeros((1, 4), dtype=np.float32))
    refused(ValueError, client.get_data_meta, "a\0")
    refused(TypeError, client.pull, b"a", [1])
    assert client.data_name_list() == ["a"]


def test_names_that_are_not_hashable_are_rkv_errors(client):
    # pull(["emb"], ids) raised a bare "unhashable type: 'list'" from the
    # binding's cache of metas, where a name of another type is rkv.Error.
    client.init_data("emb", (10, 4), "float32")
    rows = np.zeros((1, 4), np.float32)
    for name in (["emb"], {"emb": 1}, np.array(["emb"])):
        for call in (lambda: client.pull(name, [1]), lambda: client.push(name, [1], rows),
                     lambda: client.pull_len(name, "rows"), lambda: client.get_data_meta(name)):
            e = refused(TypeError, call)
            assert e.code == -rkv.EINVAL and "expected a str" in e.message


def test_names_that_are_not_utf8_are_refused(client):
    # A lone surrogate raised a bare UnicodeEncodeError from every call
    # taking a name. U+DC80..U+DCFF stand for the bytes 0x80..0xff (as
    # os.fsencode takes them, see the next test); any other is refused.
    bad = "emb\ud800"
    e = refused(ValueError, client.init_data, bad, (10, 4), "float32")
    assert e.code == -rkv.EINVAL and "not valid UTF-8" in e.message
    refused(ValueError, client.pull, bad, [1])
    refused(ValueError, client.push, bad, [1], np.zeros((1, 4), dtype=np.float32))
    refused(ValueError, client.get_data_meta, bad)
    assert client.data_name_list() == []
    client.init_data("émb😀", (10, 2), "float64")  # any other Unicode is a name
    client.push("émb😀", [7], [[1.5, -2.0]], op="assign")
    np.testing.assert_array_equal(client.pull("émb😀", [7]).numpy(), [[1.5, -2.0]])
    assert client.data_name_list() == ["émb😀"]


def _init_from_c(client, raw, rows, row_len):
    d = rkv.ffi.new("struct rkv_tensor_desc *")
    d.name = raw
    d.dtype = rkv.lib.RKV_F32
    d.rows = rows
    d.row_len = row_len
    d.policy = rkv.lib.RKV_PART_RANGE
    assert rkv.lib.rkv_client_init_data(client._cli, d) == 0


def test_a_name_made_in_c_that_is_not_utf8_round_trips(client):
    # list() showed b"emb\xff" (a Latin-1 name made from C) as "emb\ufffd",
    # and that name reached no tensor: ENOTENSOR from push and pull. Names
    # are decoded as os.fsdecode decodes file names (surrogateescape) and
    # encoded back to the same bytes.
    _init_from_c(client, b"emb\xff", 10, 2)
    _init_from_c(client, "caf\xe9".encode("latin-1"), 10, 2)
    names = client.data_name_list()
    assert names == ["emb\udcff", "caf\udce9"]
    assert names[1].encode("utf-8", "surrogateescape") == b"caf\xe9"
    for name in names:
        client.push(name, [3], [[1.0, 2.0]], op="assign")
        np.testing.assert_array_equal(client.pull(name, [3]).numpy(), [[1.0, 2.0]])
        assert client.get_data_meta(name)[1] == (10, 2)
        client.init_data(name, (10, 2), "float32")  # the same tensor: idempotent
    assert [m.name for m in client.list()] == names
    # A name Python makes so is the bytes C sees.
    client.init_data("x\udc80", (4,), "float32")
    cm = rkv.ffi.new("struct rkv_tensor_meta *")
    assert rkv.lib.rkv_client_meta(client._cli, b"x\x80", cm) == 0 and cm.rows == 4
    assert client.data_name_list() == names + ["x\udc80"]


def test_python_ints_out_of_range_say_so(client):
    # [2**64] into an int64 tensor said "cannot take object data" (numpy
    # makes such a list an object array), which named neither the value
    # nor its range.
    client.init_data("i", (10,), "int64")
    client.init_data("f", (10, 2), "float32")
    # [-1, 2**63], which numpy reads as float64, said "cannot take float64
    # data" (an outside tester).
    e = refused(OverflowError, client.push, "i", [1, 2], [-1, 2**63], op="assign")
    assert "value %d is out of range for int64" % 2**63 in e.message, e.message
    for bad in ([2**64], [-2**63 - 1], np.array([2**64], dtype=object)):
        e = refused(OverflowError, client.push, "i", [1], bad, op="assign")
        assert e.code == -rkv.ERANGE and e.message.startswith("data: tensor 'i'")
        assert "value %d is out of range for int64" % int(bad[0]) in e.message, e.message
    e = refused(OverflowError, client.push, "f", [1], [[2**1024, 0]], op="assign")
    assert "data: tensor 'f'" in e.message
    assert "value 2**1024 or more is out of range for float32" in e.message, e.message
    e = refused(OverflowError, client.push, "f", [1], [[1.5, 2**200]], op="assign")
    assert "out of range for float32" in e.message
    e = refused(OverflowError, client.push, "i", [2**64], [1], op="assign")
    assert "ids" in e.message and "does not fit in 64 bits" in e.message
    # What is no number is said as such, at its index.
    e = refused(rkv.Error, client.push, "i", [1, 2], [7, None], op="assign")
    assert e.code == -rkv.EDTYPE and "NoneType data (None at index 1)" in e.message
    e = refused(rkv.Error, client.push, "i", [1, 2], [1.5, 2**64], op="assign")
    assert e.code == -rkv.EDTYPE and "float data (1.5 at index 0)" in e.message
    # Within range they are taken, past 64 bits of numpy's reading included.
    client.push("i", [1, 2], np.array([2**63 - 1, -2**63], dtype=object), op="assign")
    client.push("f", [1], [[2**70, 0.5]], op="assign")
    np.testing.assert_array_equal(client.pull("i", [1, 2]).numpy(), [2**63 - 1, -2**63])
    np.testing.assert_array_equal(client.pull("f", [1]).numpy(), [[2.0**70, 0.5]])


def test_learning_rate_as_a_0d_tensor_or_array(client):
    # torch.tensor(0.1) (what a scheduler or torch arithmetic gives) and
    # np.array(0.1) were refused: "lr: expected a number".
    client.init_data("w", (10, 2), "float32", with_state=True)
    g = np.ones((1, 2), np.float32)
    for lr in (torch.tensor(0.5), np.array(0.5), torch.tensor(0.5, dtype=torch.float64,
                                                                requires_grad=True),
               np.float16(0.5), torch.tensor(1) / 2):
        client.push("w", [0], np.zeros((1, 2), np.float32), op="assign")
        client.push("w", [0], g, op="sgd", lr=lr)
        np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[-0.5, -0.5]])
    client.push("w", [1], g, op="adagrad", lr=torch.tensor(0.25))
    for bad in (torch.tensor([0.5]), np.array([0.5]), torch.tensor(True), np.array(True),
                torch.tensor(1 + 2j)):
        e = refused(TypeError, client.push, "w", [0], g, op="sgd", lr=bad)
        assert e.code == -rkv.EINVAL and "lr" in e.message
    e = refused(ValueError, client.push, "w", [0], g, op="sgd", lr=torch.tensor(float("nan")))
    assert "finite" in e.message
    # An int past float64's range raised float()'s bare OverflowError.
    e = refused(OverflowError, client.push, "w", [0], g, op="sgd", lr=2**2000)
    assert e.code == -rkv.EINVAL and "lr: expected a finite number" in e.message
    e = refused(OverflowError, client.pull, "w", [0], handler=rkv.PULL_CUSTOM, param=-2**1100)
    assert "param: expected a finite number" in e.message


def _param_of_the_pull(row, state, out, param):
    out[...] = param


def test_learning_rate_and_param_as_any_real_number(make_cluster):
    # lr=Fraction(1, 2) was refused ("expected a number"), though a Fraction
    # is a numbers.Real as float is. A Decimal is not registered as one, but
    # is a real number: taken as float() rounds it. NaN, inf and what float64
    # cannot hold are refused whatever type carries them.
    from decimal import Decimal
    from fractions import Fraction

    def setup(s):
        s.register_pull_handler(rkv.PULL_CUSTOM, _param_of_the_pull, out_mult=0, out_add=1)

    client = make_cluster(setup=setup).client()
    client.register_pull_handler(rkv.PULL_CUSTOM, _param_of_the_pull, out_mult=0, out_add=1)
    client.init_data("w", (10, 2), "float32", with_state=True)
    g = np.ones((1, 2), np.float32)
    for lr in (Fraction(1, 2), Decimal("0.5"), Fraction(np.int64(1), 2)):
        client.push("w", [0], np.zeros((1, 2), np.float32), op="assign")
        client.push("w", [0], g, op="sgd", lr=lr)
        np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[-0.5, -0.5]])
    client.push("w", [1], g, op="adagrad", lr=Fraction(1, 4))
    # A custom handler's param goes through the same check (machine 0's row
    # 0 is the client's own handler's, machine 1's row 9 a server's).
    for param, want in ((Fraction(3, 4), 0.75), (Decimal("-0.25"), -0.25),
                        (Fraction(1, 3), np.float32(1 / 3))):
        got = client.pull("w", [0, 9], handler=rkv.PULL_CUSTOM, param=param).numpy()
        np.testing.assert_array_equal(got, [want, want])
    for bad in (Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity"), Decimal("-1e400"),
                Decimal("1e400")):
        e = refused(ValueError, client.push, "w", [0], g, op="sgd", lr=bad)
        assert e.code == -rkv.EINVAL and "lr: expected a finite number" in e.message, e.message
    e = refused(OverflowError, client.push, "w", [0], g, op="sgd", lr=Fraction(10**400, 3))
    assert "lr: expected a finite number, got a Fraction past float64's range" in e.message
    e = refused(OverflowError, client.pull, "w", [0], handler=rkv.PULL_CUSTOM, param=2**1100)
    assert "param: expected a finite number, got an int of 1101 bits" in e.message
    for op in ("sgd", "adagrad"):
        for lr in (Fraction(-1, 10), Decimal("-0.1")):
            e = refused(ValueError, client.push, "w", [0], g, op=op, lr=lr)
            assert "must not be negative" in e.message
    # Still refused: what is no real number, or a bool taken for one.
    for bad in (True, np.bool_(False), "0.5", 1 + 0j, np.complex64(1), [0.5]):
        e = refused(TypeError, client.push, "w", [0], g, op="sgd", lr=bad)
        assert e.code == -rkv.EINVAL and "lr" in e.message
    np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[-0.5, -0.5]])


def test_negative_learning_rate_is_refused(client):
    # lr=-0.1 climbed the gradient without a word (torch.optim refuses it).
    client.init_data("w", (10, 2), "float32", with_state=True)
    g = np.ones((1, 2), np.float32)
    for op in ("sgd", "adagrad", 2, 3):
        for lr in (-0.1, np.array(-1.0), torch.tensor(-1e-30)):
            e = refused(ValueError, client.push, "w", [0], g, op=op, lr=lr)
            assert e.code == -rkv.EINVAL and "must not be negative" in e.message
    np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[0, 0]])
    client.push("w", [0], g, op="sgd", lr=0.0)  # a schedule's end: nothing changes
    client.push("w", [0], g, op="sgd", lr=-0.0)
    np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[0, 0]])
    # Nor one past float32's largest on a float32 tensor: the step is taken
    # in float32, inf, and a zero gradient made the rows NaN. A ValueError,
    # as the other rates out of range (it was a plain rkv.Error).
    for op in ("sgd", "adagrad"):
        e = refused(ValueError, client.push, "w", [0], g * 0, op=op, lr=1e39)
        assert e.code == -rkv.EINVAL and "past float32's largest" in e.message
    client.push("w", [0], g * 0, op="sgd", lr=float(np.finfo(np.float32).max))
    np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[0, 0]])
    client.init_data("w64", (10, 2), "float64")
    client.push("w64", [0], np.zeros((1, 2)), op="sgd", lr=1e39)  # fits a float64 step
    np.testing.assert_array_equal(client.pull("w64", [0]).numpy(), [[0, 0]])


def test_out_must_be_an_array(client):
    client.init_data("emb", (10, 2), "float32")
    out = [[0.0, 0.0]]
    e = refused(TypeError, client.pull, "emb", [1], out=out)
    assert "out" in e.message and e.code == -rkv.EINVAL
    assert out == [[0.0, 0.0]]


def test_out_of_a_narrower_type_is_refused(client):
    """out was cast into silently: int32 2**31-1 read -1 from an int16 out,
    float32 1000.7 read -24 from an int8 one, and a string out took '2147'."""
    client.init_data("i", (10, 2), "int32")
    client.init_data("f", (10, 2), "float32")
    client.push("i", [1], np.array([[2**31 - 1, 7]], np.int32), op="assign")
    client.push("f", [1], np.array([[1000.7, -3.5]], np.float32), op="assign")
    for name, out in (("i", torch.zeros(1, 2, dtype=torch.int16)),
                      ("i", np.zeros((1, 2), np.uint8)),
                      ("i", np.zeros((1, 2), "U4")),
                      ("i", np.zeros((1, 2), np.float32)),
                      ("f", torch.zeros(1, 2, dtype=torch.int8)),
                      ("f", torch.zeros(1, 2, dtype=torch.float16)),
                      ("f", np.zeros((1, 2), bool)),
                      ("f", np.zeros((1, 2), complex)),
                      ("f", np.zeros((1, 2), object))):
        before = out.copy() if isinstance(out, np.ndarray) else out.clone()
        e = refused(TypeError, client.pull, name, [1], out=out)
        assert e.code == -rkv.EDTYPE and "out:" in e.message and repr(name) in e.message
        assert (out == before).all()
    # Wider types hold every value.
    got = client.pull("i", [1], out=np.zeros((1, 2), np.int64))
    np.testing.assert_array_equal(got, [[2**31 - 1, 7]])
    got = client.pull("i", [1], out=torch.zeros(1, 2, dtype=torch.float64))
    assert got.tolist() == [[2**31 - 1, 7]]
    got = client.pull("f", [1], out=np.zeros((1, 2), np.float64))
    np.testing.assert_array_equal(got, [[np.float32(1000.7), -3.5]])
    ro = np.zeros((1, 2), np.float32)
    ro.flags.writeable = False
    e = refused(ValueError, client.pull, "f", [1], out=ro)
    assert e.code == -rkv.EINVAL and "read-only" in e.message


def test_out_that_rounds_integers_is_refused(client):
    """numpy calls int64 into float64 a safe cast, but float64 holds integers
    exactly only up to 2**53: an int64 tensor's 2**53 + 1 pulled into a
    float64 out came back as 2**53, and 2**62 + 3 as 2**62, silently."""
    client.init_data("i", (10, 2), "int64")
    client.push("i", [1], np.array([[2**53 + 1, 2**62 + 3]], np.int64), op="assign")
    for out in (np.zeros((1, 2), np.float64), torch.zeros(1, 2, dtype=torch.float64),
                np.zeros((1, 2), np.float32)):
        before = out.copy() if isinstance(out, np.ndarray) else out.clone()
        e = refused(TypeError, client.pull, "i", [1], out=out)
        assert e.code == -rkv.EDTYPE and "int64" in e.message and "'i'" in e.message
        assert (out == before).all()
    # An int32 tensor's every value is a float64.
    client.init_data("i32", (10, 2), "int32")
    client.push("i32", [1], np.array([[2**31 - 1, -2**31]], np.int32), op="assign")
    got = client.pull("i32", [1], out=np.zeros((1, 2), np.float64))
    assert got.tolist() == [[2**31 - 1, -2**31]]


def test_arguments_that_are_not_what_they_look_like(client):
    """Floats, None and values C cannot hold were turned into other numbers
    (shape 10.9 into 10 rows, op 2.7 into sgd, dtype None into float64, a row
    shape whose product wrapped in numpy into 4 elements) or raised cffi's
    bare errors (seed -1, a shape above 2**64)."""
    e = refused(TypeError, client.init_data, "a", (10.9, 4), "float32")
    assert e.code == -rkv.EINVAL and "shape" in e.message
    e = refused(TypeError, client.init_data, "a", "10", "float32")
    assert "shape '10'" in e.message
    e = refused(rkv.Error, client.init_data, "a", (10, 2**62 + 1, 4), "float32")
    assert e.code == -rkv.EINVAL and "at most 4294967295" in e.message
    refused(OverflowError, client.init_data, "a", (2**64, 4), "float32")
    # Zero rows fit C's type and are refused by rkv: a ValueError.
    e = refused(ValueError, client.init_data, "a", (0, 4), "float32")
    assert not isinstance(e, OverflowError) and "0 is outside 1.." in e.message
    assert refused(rkv.Error, client.init_data, "a", (10, 4), None).code == -rkv.EDTYPE
    e = refused(OverflowError, client.init_data, "a", (10, 4), "float32", seed=-1)
    assert "seed" in e.message
    assert "a" not in client.data_name_list()
    client.init_data("s", (10, 4), "float32", init="uniform", seed=2**64 - 1)
    client.init_data("a", (10, 4), "float32")
    rows = np.ones((1, 4), np.float32)
    e = refused(TypeError, client.push, "a", [0], rows, op=2.7)
    assert "op" in e.message and e.code == -rkv.EINVAL
    refused(OverflowError, client.push, "a", [0], rows, op=2**40)
    refused(TypeError, client.push, "a", [0], rows, op=None)
    e = refused(TypeError, client.push, "a", [0], rows, op="sgd", lr=None)
    assert "lr" in e.message
    for lr in (float("nan"), float("inf")):
        e = refused(ValueError, client.push, "a", [0], rows, op="sgd", lr=lr)
        assert "finite" in e.message
    np.testing.assert_array_equal(client.pull("a", [0]).numpy(), [[0, 0, 0, 0]])
    client.push("a", [0], rows, op="sgd", lr=np.float32(0.5))
    np.testing.assert_array_equal(client.pull("a", [0]).numpy(), [[-0.5] * 4])


def test_shapes_without_elements_or_order_are_refused(client):
    # A 0-d array or tensor raised a bare TypeError ("iteration over a 0-d
    # array"); a set was taken in its iteration order, a dict by its keys.
    for shape in (np.array(10), torch.tensor(10)):
        e = refused(TypeError, client.init_data, "a", shape, "float32")
        assert e.code == -rkv.EINVAL and "0-d" in e.message and "shape" in e.message
    for shape, kind in (({10, 4}, "set"), (frozenset({10, 4}), "frozenset"),
                        ({10: 4}, "dict"), ({10: 1, 4: 1}.keys(), "dict_keys")):
        e = refused(TypeError, client.init_data, "a", shape, "float32")
        assert e.code == -rkv.EINVAL and "got a %s (" % kind in e.message, e.message
    assert client.data_name_list() == []
    # Ordered sequences and integer scalars are read as before.
    client.init_data("a", np.array([10, 4]), "float32")
    client.init_data("b", np.int64(10), "float32")
    assert [m.shape for m in client.list()] == [(10, 4), (10,)]


def test_torch_tensors_of_mixed_precision_and_without_data(client):
    """bfloat16 rows (mixed-precision gradients) were refused with torch's
    "Got unsupported ScalarType BFloat16", though float16 ones pushed; they
    come as float32, exactly. A meta tensor raised torch's bare
    NotImplementedError, a sparse one an EDTYPE; an out= of bfloat16 said
    nothing of out, and one requiring grad was written behind autograd
    (contiguous) or failed in copy_() after the pull (not)."""
    client.init_data("m", (6, 3), "float32")
    client.init_data("m64", (6, 3), "float64")
    g = torch.tensor([[1.5, -2.0, 3.0e38], [0.0078125, 256.0, -1.0]], dtype=torch.bfloat16)
    client.push("m", [1, 4], g, op="assign")
    assert torch.equal(client.pull("m", [1, 4]), g.float())
    client.push("m64", [5], g[1:], op="assign")
    assert torch.equal(client.pull("m64", [5]), g[1:].double())
    client.push("m", [1, 1], g, op="sum")  # duplicates apply once each
    assert torch.equal(client.pull("m", [1]), g[:1].float() * 2 + g[1:].float())
    client.init_data("b", (4, 2), "float32",
                     init=lambda shape, dt: torch.ones(shape, dtype=torch.bfloat16))
    assert client.pull("b", [3]).tolist() == [[1.0, 1.0]]
    # DGL's init function, given the torch dtype it was given (it got numpy's:
    # torch.zeros refused it with a TypeError).
    client.init_data("dglf", (4, 2), torch.float32,
                     init=lambda shape, dt: torch.full(shape, 2.0, dtype=dt))
    assert client.pull("dglf", [0, 3]).tolist() == [[2.0, 2.0], [2.0, 2.0]]
    # A numpy init function given a torch dtype still works (numpy's dtype on retry).
    client.init_data("npf", (4, 2), torch.float32, init=lambda shape, dt: np.full(shape, 0.5, dt))
    assert client.pull("npf", [1]).tolist() == [[0.5, 0.5]]
    # Negated views are values too (numpy() refused them): pushed resolved.
    client.push("m", [2], torch.tensor([[1.0, 2.0, 3.0]])._neg_view(), op="assign")
    assert client.pull("m", [2]).tolist() == [[-1.0, -2.0, -3.0]]
    # Still no floats into integers, bfloat16 ones included; nor bfloat16 ids.
    client.init_data("n", (4, 2), "int64")
    e = refused(rkv.Error, client.push, "n", [0], torch.ones(1, 2, dtype=torch.bfloat16))
    assert e.code == -rkv.EDTYPE
    refused(rkv.Error, client.pull, "m", torch.tensor([1], dtype=torch.bfloat16))

    meta = torch.ones(1, 3, device="meta")
    for call in (lambda: client.push("m", [0], meta),
                 lambda: client.pull("m", torch.tensor([0], device="meta")),
                 lambda: client.pull("m", [0], out=torch.empty(1, 3, device="meta"))):
        e = refused(ValueError, call)
        assert e.code == -rkv.EINVAL and "'meta' device" in e.message
    e = refused(TypeError, client.push, "m", [0], torch.ones(1, 3).to_sparse())
    assert e.code == -rkv.EINVAL and "to_dense" in e.message

    e = refused(TypeError, client.pull, "m", [1], out=torch.zeros(1, 3, dtype=torch.bfloat16))
    assert e.code == -rkv.EDTYPE and "out: bfloat16" in e.message
    for o in (torch.zeros(1, 3, requires_grad=True),
              torch.zeros(3, 1, requires_grad=True).t()):
        e = refused(ValueError, client.pull, "m", [1], out=o)
        assert e.code == -rkv.EINVAL and "requires grad" in e.message
        assert o.abs().sum().item() == 0
    o = torch.zeros(1, 3, requires_grad=True)
    client.pull("m", [1], out=o.detach())
    assert o.detach().tolist() == client.pull("m", [1]).tolist()


def test_out_of_another_row_count_is_refused(client):
    """An out= of the right size but not n rows ((3, 2) for 2 rows of 3, the
    transposed view of an (n, L) array) was filled in its own order, each
    row spread over the wrong rows, without an error. Flat ones still take
    the rows in order."""
    client.init_data("o", (4, 3), "float32")
    want = np.arange(12, dtype=np.float32).reshape(4, 3)
    client.push("o", range(4), want, op="assign")
    for bad in (np.zeros((3, 2), np.float32), np.zeros((2, 3), np.float32).T,
                torch.zeros(3, 2)):
        e = refused(rkv.Error, client.pull, "o", [0, 1], out=bad)
        assert e.code == -rkv.EDTYPE and "for 2 rows of 3" in e.message
        assert not bad.sum()
    flat = np.zeros(6, np.float32)
    client.pull("o", [2, 0], out=flat)
    np.testing.assert_array_equal(flat, want[[2, 0]].reshape(-1))
    rows = np.zeros((2, 3, 1), np.float64)
    client.pull("o", [3, 1], out=rows)
    np.testing.assert_array_equal(rows[..., 0], want[[3, 1]])


def test_seed_without_uniform_init_is_refused(client):
    # init="zeros" (the default) ignored the seed: two calls with different
    # seeds made the same tensor, and neither said so.
    e = refused(ValueError, client.init_data, "z", (10, 4), "float32", seed=5)
    assert e.code == -rkv.EINVAL and "seed 5" in e.message and "uniform" in e.message
    e = refused(ValueError, client.init_data, "z", (10, 4), "float32", init="zeros", seed=0)
    assert "init='zeros'" in e.message
    e = refused(ValueError, client.init_data, "z", (10, 4), "float32",
                init=lambda shape, dt: np.ones(shape, dt), seed=1)
    assert "a function" in e.message
    assert "z" not in client.data_name_list()
    client.init_data("z", (10, 4), "float32")
    client.init_data("u", (10, 4), "float32", init="uniform", seed=5)
    client.init_data("u0", (10, 4), "float32", init="uniform")  # seed 0, as before


def test_learning_rate_where_the_op_reads_one(client):
    # lr defaulted to 0.0: op="sgd" without one applied row -= 0 * grad and
    # returned as if it had trained; an lr given to a sum was ignored.
    client.init_data("w", (10, 2), "float32", with_state=True)
    g = np.ones((1, 2), np.float32)
    for op in ("sgd", "adagrad", 2, 3):
        e = refused(TypeError, client.push, "w", [0], g, op=op)
        assert e.code == -rkv.EINVAL and "needs a learning rate" in e.message
    for op in ("sum", "assign", 0, 1):
        e = refused(ValueError, client.push, "w", [0], g, op=op, lr=0.1)
        assert "takes no learning rate" in e.message
    np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[0, 0]])
    client.push("w", [0], g, op="sgd", lr=0.5)
    client.push("w", [0], g, op="sum")
    np.testing.assert_array_equal(client.pull("w", [0]).numpy(), [[0.5, 0.5]])


def test_with_state_is_a_bool(client):
    # Any truthy object made state: with_state="no" kept some.
    for v in ("no", "False", 2, None, 0.0):
        e = refused(TypeError, client.init_data, "s", (10, 2), "float32", with_state=v)
        assert "with_state" in e.message
    assert "s" not in client.data_name_list()
    client.init_data("s", (10, 2), "float32", with_state=np.bool_(False))
    assert not client.list()[0].with_state


def test_pull_param_only_with_a_custom_handler(client):
    # param without a custom handler was ignored: the rows came back as if
    # it meant nothing.
    client.init_data("p", (10, 2), "float32", with_state=True)
    for handler in (None, "rows", "with_state", rkv.PULL_ROWS):
        e = refused(ValueError, client.pull, "p", [0], handler=handler, param=0.5)
        assert e.code == -rkv.EINVAL and "only a custom pull handler" in e.message
    assert client.pull("p", [0, 1], handler="with_state").shape == (2, 4)
    e = refused(ValueError, client.pull, "p", [0], handler=rkv.PULL_CUSTOM, param=float("nan"))
    assert "finite" in e.message


def test_init_function_checked_before_the_tensor_exists(client):
    # A function giving the wrong count or type (or raising) left a tensor
    # of zeros behind.
    bad = (lambda shape, dt: np.ones(7),
           lambda shape, dt: None,
           lambda shape, dt: np.full(shape, 0.5),  # floats into an int tensor
           lambda shape, dt: np.full(shape, 2**40))  # does not fit int32
    for i, fn in enumerate(bad):
        with pytest.raises(rkv.Error):
            client.init_data("fn%d" % i, (4, 2), "int32", init=fn)

    def boom(shape, dt):
        raise RuntimeError("no data")
    with pytest.raises(RuntimeError):
        client.init_data("fn9", (4, 2), "int32", init=boom)
    assert not any(n.startswith("fn") for n in client.data_name_list())
    client.init_data("fn0", (4, 2), "int32", init=lambda shape, dt: np.arange(8).reshape(shape))
    np.testing.assert_array_equal(client.pull("fn0", [3]).numpy(), [[6, 7]])


def test_init_function_result_of_another_shape_is_refused(client):
    # A (3, 4) result for shape (4, 3) was read in row-major order into the
    # rows, where a push of the same array is refused (an outside tester).
    for i, made in enumerate((torch.arange(12.).reshape(3, 4), torch.arange(12.),
                              np.zeros((4, 3, 1), np.float32))):
        with pytest.raises(rkv.Error) as e:
            client.init_data("sh%d" % i, (4, 3), "float32", init=lambda shape, dt, m=made: m)
        assert isinstance(e.value, ValueError) and e.value.code == -rkv.EDTYPE
        assert "returned values of shape %s for shape (4, 3)" % (tuple(made.shape),) \
            in e.value.message
    # None is said as None, not as "1 values".
    with pytest.raises(rkv.Error) as e:
        client.init_data("shn", (2, 2), "float32", init=lambda shape, dt: None)
    assert "returned None" in e.value.message and isinstance(e.value, TypeError)
    assert not any(n.startswith("sh") for n in client.data_name_list())
    client.init_data("sh9", (4, 3), "float32",
                     init=lambda shape, dt: torch.arange(12.).reshape(shape))
    assert client.pull("sh9", [1]).tolist() == [[3.0, 4.0, 5.0]]


def test_init_function_own_type_error_is_said(client):
    # With a torch dtype, a TypeError is retried with numpy's dtype; one of
    # the function's own was then replaced by torch's refusal of numpy's.
    calls = []

    def buggy(shape, dtype):
        calls.append(dtype)
        return torch.zeros(shape, dtype=dtype) + None
    with pytest.raises(rkv.Error) as e:
        client.init_data("te", (4, 2), torch.float32, init=buggy)
    assert isinstance(e.value, TypeError)
    assert "raised TypeError with dtype torch.float32" in e.value.message
    assert "NoneType" in e.value.message  # the function's own error, named
    assert calls == [torch.float32, np.dtype("float32")]
    assert "te" not in client.data_name_list()


def test_flags_are_bools(client):
    # async_="no" pushed asynchronously (and returned a handle), reset="no"
    # zeroed the counters: any truthy object was True.
    client.init_data("b", (10, 2), "float32")
    g = np.ones((1, 2), np.float32)
    for v in ("no", 2, None, 1.0):
        e = refused(TypeError, client.push, "b", [0], g, async_=v)
        assert "async_" in e.message
        e = refused(TypeError, client.stats, reset=v)
        assert "reset" in e.message
    np.testing.assert_array_equal(client.pull("b", [0]).numpy(), [[0, 0]])
    assert client.push("b", [0], g, async_=np.bool_(False)) is None
    assert client.stats()["ops"]["push"]["count"] >= 1


def test_observer_is_a_bool(cluster):
    # observer="no" made an observer client, observer=[] a worker: any
    # truthy object was True.
    w = cluster.client()  # the one worker (num_workers=1)
    for v in ("no", "False", [], 2, None, 1.0):
        e = refused(TypeError, rkv.Client, cluster.config, observer=v)
        assert e.code == -rkv.EINVAL and "observer" in e.message
    obs = rkv.Client(cluster.config, observer=np.bool_(True))
    try:
        assert obs.observer is True and obs.client_id is None
    finally:
        obs.close()
    assert w.observer is False and w.client_id == 0


def test_ragged_rows_are_an_rkv_error(client):
    # numpy's own ValueError escaped, not an rkv.Error with a code.
    client.init_data("r", (10, 3), "float32")
    e = refused(ValueError, client.push, "r", [1, 2], [[1, 2, 3], [1, 2]])
    assert e.code == -rkv.EINVAL and "cannot read list as an array" in e.message
    e = refused(ValueError, client.pull, "r", [[1], [2, 3]])
    assert e.code == -rkv.EINVAL


def test_optimizers_on_an_integer_tensor_say_they_need_floats(client):
    # The message was "op 2 on i32: dtype or row length mismatch", which
    # reads as the gradients' fault; it now says what sgd/adagrad need.
    client.init_data("counts", (10, 3), "int32", with_state=True)
    for op in ("sgd", "adagrad"):
        e = refused(rkv.Error, client.push, "counts", [1, 2], np.ones((2, 3), np.int32), op=op,
                    lr=0.1)
        assert e.code == -rkv.EDTYPE
        assert "%s needs a floating-point tensor (f32 or f64), and 'counts' holds i32" % op \
            in e.message, e.message
    np.testing.assert_array_equal(client.pull("counts", [1, 2]).numpy(), np.zeros((2, 3)))


def test_out_whose_elements_share_memory_is_refused(client):
    # An out with several elements at one address took the rows over each
    # other: numpy's and torch's as_strided views silently (row 1's values
    # in row 0), torch's expand() with a RuntimeError after the pull.
    client.init_data("ov", (10, 3), "float32")
    client.push("ov", [1, 2], np.arange(6, dtype=np.float32).reshape(2, 3), op="assign")
    base = np.zeros(4, np.float32)
    tbase = torch.zeros(4)
    for out in (np.lib.stride_tricks.as_strided(base, (2, 3), (4, 4)),
                tbase.as_strided((2, 3), (1, 1)), torch.zeros(3).expand(2, 3)):
        e = refused(ValueError, client.pull, "ov", [1, 2], out=out)
        assert e.code == -rkv.EINVAL and "several elements at one address" in e.message
    assert not base.any() and not tbase.any()
    # Views without overlap still take the rows in place: a transpose, a
    # slice, and dims that interleave (offsets 0, 8, 16 and 12, 20, 28 bytes).
    want = client.pull("ov", [1, 2]).numpy()
    buf = np.zeros(8, np.float32)
    inter = np.lib.stride_tricks.as_strided(buf, (2, 3), (12, 8))
    client.pull("ov", [1, 2], out=inter)
    np.testing.assert_array_equal(inter, want)
    assert buf[3] == want[1, 0]
    tr = torch.zeros(3, 2).t()
    client.pull("ov", [1, 2], out=tr)
    np.testing.assert_array_equal(tr.numpy(), want)
    sl = torch.zeros(2, 6)
    client.pull("ov", [1, 2], out=sl[:, ::2])
    np.testing.assert_array_equal(sl[:, ::2].numpy(), want)


def test_masked_arrays_with_masked_entries_are_refused(client):
    # np.asarray dropped the mask: the masked entries' hidden data went out
    # as ids (row 0 here) or as values, silently.
    client.init_data("mk", (10, 2), "float32", init=lambda s, dt: np.ones(s, dt))
    ids = np.ma.array([1, 0], mask=[False, True])
    e = refused(ValueError, client.pull, "mk", ids)
    assert e.code == -rkv.EINVAL and "ids: a masked array with 1 masked entries" in e.message
    refused(ValueError, client.push, "mk", ids, np.zeros((2, 2), np.float32), op="assign")
    data = np.ma.array(np.full((2, 2), 5, np.float32), mask=[[False, False], [True, False]])
    e = refused(ValueError, client.push, "mk", [1, 2], data, op="assign")
    assert "tensor 'mk': data: a masked array" in e.message
    refused(ValueError, client.init_data, "mk2", (2, 2), "float32", init=lambda s, dt: data)
    refused(ValueError, client.init_data, "mk3", (2, 2), "float32",
            part_policy=np.ma.array([0, 1], mask=[True, False]))
    np.testing.assert_array_equal(client.pull("mk", [0, 1, 2]).numpy(), np.ones((3, 2)))
    assert client.data_name_list() == ["mk"]
    # Without masked entries they are arrays as any other, and an out= is
    # written whatever its mask.
    client.push("mk", np.ma.array([1, 2]), np.ma.array(np.full((2, 2), 3, np.float32)),
                op="assign")
    out = np.ma.array(np.zeros((2, 2), np.float32), mask=[[True, False], [False, False]])
    client.pull("mk", [1, 2], out=out)
    np.testing.assert_array_equal(out.data, np.full((2, 2), 3))


def test_bools_are_no_ids(client):
    # numpy read [1, True] as the ids [1, 1] (a bool array was refused), and
    # a book [0, True] as machines 0 and 1.
    client.init_data("bi", (10,), "int64", init=lambda s, dt: np.arange(10))
    for ids in ([1, True], (np.False_, 2), [np.uint64(1), np.True_], [True],
                np.array([1, True], dtype=object)):
        e = refused(TypeError, client.pull, "bi", ids)
        assert e.code == -rkv.EINVAL and "(bool) at index" in e.message, e.message
        refused(TypeError, client.push, "bi", ids, np.zeros(len(ids), np.int64), op="assign")
    np.testing.assert_array_equal(client.pull("bi", [1, 0]).numpy(), [1, 0])
    for book in ([0, True], (0, np.True_)):
        e = refused(rkv.Error, client.init_data, "bb", (2,), "int64", part_policy=book)
        assert e.code == -rkv.EINVAL and "row 1 has True" in e.message, e.message
    assert "bb" not in client.data_name_list()


def test_ids_in_an_object_array_are_read_as_a_list_is(client):
    # np.array of Python ints (an object array: one past int64, or from a
    # pandas column) was refused as "expected integers, got object".
    client.init_data("ob", (10,), "int64", init=lambda s, dt: np.arange(10))
    ids = np.array([3, 7, 3], dtype=object)
    np.testing.assert_array_equal(client.pull("ob", ids).numpy(), [3, 7, 3])
    e = refused(rkv.Error, client.pull, "ob", np.array([3, 1.5], dtype=object))
    assert e.code == -rkv.EINVAL and "got 1.5 (float) at index 1" in e.message
    e = refused(OverflowError, client.pull, "ob", np.array([2 ** 64, 1], dtype=object))
    assert "does not fit in 64 bits" in e.message
    e = refused(rkv.Error, client.pull, "ob", np.array([2 ** 63, 1], dtype=object))
    assert e.code == -rkv.ERANGE  # past the rows, said by the store


def test_pull_with_ids_inside_out(client):
    # One buffer reused in place, ids in its first row: the second id was read
    # after row 1's values had overwritten it (row 3 came back for row 4).
    client.init_data("al", (10, 2), "int64", init=lambda s, dt: np.arange(20).reshape(10, 2))
    buf = np.array([[1, 4], [0, 0]], np.int64)
    client.pull("al", buf.ravel()[:2], out=buf)
    np.testing.assert_array_equal(buf, [[2, 3], [8, 9]])
    t = torch.tensor([[2, 3], [0, 0]])
    client.pull("al", t.view(-1)[:2], out=t)
    np.testing.assert_array_equal(t.numpy(), [[4, 5], [6, 7]])


def test_empty_rows_of_another_width_are_refused(client):
    """A push or pull of no ids took rows of any width ((0, 5) for rows of 3),
    where one id with (1, 5) is refused: the same mistake, said either way."""
    client.init_data("w", (4, 3), "float32")
    for bad in (np.zeros((0, 5), np.float32), torch.zeros(0, 2), np.zeros((0, 3, 2))):
        e = refused(rkv.Error, client.push, "w", [], bad)
        assert e.code == -rkv.EDTYPE and "0 ids need 0 x" in e.message, e.message
        e = refused(rkv.Error, client.pull, "w", [], out=bad)
        assert e.code == -rkv.EDTYPE and "for 0 rows of 3" in e.message, e.message
    client.push("w", [], np.zeros((0, 3), np.float32))
    client.push("w", [], np.zeros((0, 3, 1), np.float32))
    client.pull("w", [], out=np.zeros((0, 3), np.float32))


class _CSpy:
    """rkv's cffi lib as rkv calls it, recording the address of each array
    push, pull and init_data hand C: (what, address, alignment C needs).
    itemsize: that of the tensor the test pushes and pulls."""

    def __init__(self, lib, ffi):
        self._lib, self._ffi, self.seen, self.itemsize = lib, ffi, [], 8

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def _note(self, what, p, align):
        if p != self._ffi.NULL:
            self.seen.append((what, int(self._ffi.cast("uintptr_t", p)), align))

    def rkv_client_push(self, cli, name, ids, n, rows, *rest):
        self._note("push ids", ids, 8)
        self._note("push rows", rows, self.itemsize)
        return self._lib.rkv_client_push(cli, name, ids, n, rows, *rest)

    def rkv_client_push_async(self, cli, name, ids, n, rows, *rest):
        self._note("async push ids", ids, 8)
        self._note("async push rows", rows, self.itemsize)
        return self._lib.rkv_client_push_async(cli, name, ids, n, rows, *rest)

    def rkv_client_pull(self, cli, name, ids, n, out):
        self._note("pull ids", ids, 8)
        self._note("pull out", out, self.itemsize)
        return self._lib.rkv_client_pull(cli, name, ids, n, out)

    def rkv_client_init_data(self, cli, d):
        self._note("book", d.book, 4)
        self._note("local_index", d.local_index, 8)
        return self._lib.rkv_client_init_data(cli, d)


def _unaligned(values, dtype, offset=1):
    """values as dtype in a writable buffer, offset bytes in: what
    np.frombuffer gives for rows read from a packed file or message."""
    v = np.asarray(values, dtype=dtype)
    a = np.frombuffer(bytearray(offset + v.nbytes), dtype=dtype, offset=offset,
                      count=v.size).reshape(v.shape)
    a[...] = v
    assert not a.flags.aligned and a.flags.c_contiguous and a.flags.writeable
    return a


def test_unaligned_arrays_reach_c_aligned(client, monkeypatch):
    # Arrays np.frombuffer made at an offset no multiple of their itemsize
    # (numpy calls them unaligned) were handed to C as they were: ids, rows,
    # out= and an init's book and local index, which C reads through
    # uint64_t *, float *... (undefined behaviour, even where x86 tolerates
    # it). C gets aligned memory (a copy where need be), the values are
    # exact, and an unaligned out= receives the rows all the same.
    spy = _CSpy(rkv.lib, rkv.ffi)
    monkeypatch.setattr(rkv, "lib", spy)

    def c_got_aligned():
        assert spy.seen, "nothing was handed to C"
        for what, addr, align in spy.seen:
            assert addr % align == 0, "%s at %#x, not aligned to %d" % (what, addr, align)
        del spy.seen[:]

    ids = [3, 15, 0, 19]  # machine 0's rows (the client's shared memory) and machine 1's
    for name, dtype, shape in (("f", np.float32, (4, 3)), ("d", np.float64, (4,)),
                               ("i", np.int64, (4, 2))):
        client.init_data(name, (20,) + shape[1:], np.dtype(dtype).name)
        spy.itemsize = np.dtype(dtype).itemsize
        del spy.seen[:]
        want = (np.arange(np.prod(shape)) * 3 + 1).reshape(shape).astype(dtype)
        for idx in (_unaligned(ids, np.uint64), _unaligned(ids, np.int64, 3)):
            client.push(name, idx, _unaligned(want, dtype, 2), op="assign")
            c_got_aligned()
            np.testing.assert_array_equal(client.pull(name, idx).numpy(), want)
            c_got_aligned()
        client.push(name, _unaligned(ids, np.uint64, 5), _unaligned(want, dtype, 1),
                    async_=True).wait()  # a sum: every row now twice what it was
        c_got_aligned()
        out = _unaligned(np.zeros(shape), dtype, 4 if spy.itemsize == 8 else 2)
        assert client.pull(name, ids, out=out) is out
        c_got_aligned()
        np.testing.assert_array_equal(out, 2 * want)
        t = torch.frombuffer(bytearray(1 + out.nbytes), dtype=getattr(torch, str(out.dtype)),
                             offset=1, count=out.size).view(shape)
        assert client.pull(name, ids, out=t) is t
        c_got_aligned()
        np.testing.assert_array_equal(t.numpy(), 2 * want)

    # A partition book and local index read from bytes, as the rows above.
    book = _unaligned([1, 0, 1, 0, 1, 0], np.uint32)
    local = _unaligned([0, 2, 2, 0, 1, 1], np.uint64, 3)
    client.init_data("b", (6, 2), "int64", part_policy=book, local_index=local)
    c_got_aligned()
    spy.itemsize = 8
    rows = np.arange(12, dtype=np.int64).reshape(6, 2) - 6
    client.push("b", np.arange(6), rows, op="assign")
    np.testing.assert_array_equal(client.pull("b", np.arange(6)[::-1]).numpy(), rows[::-1])
    c_got_aligned()

    # Registered memory must stay where it is: an unaligned array is refused
    # (push and pull would only ever use an aligned copy of it).
    e = refused(ValueError, client.register, _unaligned(np.zeros(8), np.float32))
    assert e.code == -rkv.EINVAL and "not aligned for its float32 elements" in e.message
    client.register(np.zeros(8, np.float32))


def test_with_on_a_closed_client(cluster):
    """`with` on a closed client went in, and failed only at its first call."""
    c = cluster.client()
    assert c.__enter__() is c  # a live one goes in
    c.shut_down()
    c.close()
    assert refused(rkv.Error, c.__enter__).code == -rkv.ESHUTDOWN


def test_a_path_given_as_bytes_is_the_path(tmp_path):
    """Config(cluster=b"ip.txt") read a file named "b'ip.txt'"."""
    f = tmp_path / "ip.txt"
    f.write_text("127.0.0.1 7700\n")
    assert rkv.Config(cluster=os.fsencode(str(f))).get("cluster") == str(f)
    assert rkv.Config(cluster=bytearray(os.fsencode(str(f)))).get("cluster") == str(f)


def test_argument_errors_are_the_builtin_kinds(client):
    # Rows of another count were a bare rkv.Error, float ids too; op 5 was
    # sent and refused as "not registered", which no registration mends
    # (an outside tester).
    client.init_data("kd", (10, 4), "float32")
    e = refused(ValueError, client.push, "kd", [0, 1, 2], np.ones((2, 4), np.float32))
    assert e.code == -rkv.EDTYPE and "3 ids need 3 x (4,) values, got shape (2, 4)" in e.message
    e = refused(TypeError, client.pull, "kd", torch.tensor([1.0, 2.0]))
    assert "ids: expected integers, got float32" in e.message
    client.init_data("kd1", (10, 1), "float32")
    e = refused(ValueError, client.push, "kd1", [0, 1], torch.ones(1, 2))
    assert "2 ids need 2 values (one a row), got shape (1, 2)" in e.message, e.message
    for op in (4, 5, 15, 64):
        e = refused(ValueError, client.push, "kd", [0], np.ones((1, 4), np.float32), op=op)
        assert "custom op number 16..63" in e.message, e.message
    # A custom number in range still goes to its handler check.
    e = refused(rkv.Error, client.push, "kd", [0], np.ones((1, 4), np.float32), op=16)
    assert e.code == -rkv.ENOHANDLER
