"""rkv: a distributed tensor key-value store for ML training (Python binding).

DGL KVStore-shaped: start servers with ``rkv.Server(config).run()``, then in
each trainer::

    c = rkv.Client(config)
    c.init_data("emb", (rows, dim), "float32", init="uniform")
    c.barrier()
    rows = c.pull("emb", ids)                      # torch tensor (numpy without torch)
    c.push("emb", ids, grads, op="sgd", lr=0.1)
    h = c.push("emb", ids, grads, op="sum", async_=True); h.wait()
    c.barrier(); c.shut_down()

A config is the rkv binary's settings by name: ``rkv.Config(cluster="ip.txt",
num_workers=4, machine_id=1)``; whatever is not given comes from the
environment (RKV_*, DMLC_*, DGL_* as the CLI reads them), then the defaults.
Every failure raises ``rkv.Error`` with ``.code`` (the negative -RKV_E* code)
and ``.message`` (for bad arguments, one that is also TypeError, ValueError
or OverflowError). Data is cast to a tensor's dtype only where every value
fits, before anything is sent. Calls release the GIL while they wait on the
network. Servers and clients still open when the interpreter exits (once its
non-daemon threads ended) are stopped and closed then.

The rest of DGL's KVStore: ``c.data_name_list()`` / ``c.list()`` (every
tensor, also from ``rkv.Client(config, observer=True)``, a process that joins
a running job without being one of its workers); ``init_data(...,
part_policy=book, local_index=g2l)`` (DGL's set_global2local); pull
handlers: ``c.pull(name, ids, handler="with_state")`` returns each row with
its optimizer state, and ``register_pull_handler(id, fn)`` on every Server
and the pulling clients adds one, written in C or in Python.

Not here yet: custom push handlers written in Python (push takes a custom
op's number, registered in C).
"""
import atexit
import collections
import collections.abc
import decimal
import numbers
import operator
import os
import signal
import sys
import threading
import time
import traceback
import warnings
import weakref

import numpy as np

from ._rkv import ffi, lib

__all__ = ["Config", "Server", "Client", "PushHandle", "TensorMeta", "Error", "strerror",
           "PULL_ROWS", "PULL_WITH_STATE", "PULL_CUSTOM", "PULL_MAX", "OP_CUSTOM"]

# Pull handler ids (enum rkv_pull_op): custom ones are PULL_CUSTOM..PULL_MAX-1.
PULL_ROWS = lib.RKV_PULL_ROWS
PULL_WITH_STATE = lib.RKV_PULL_WITH_STATE
PULL_CUSTOM = lib.RKV_PULL_CUSTOM
PULL_MAX = lib.RKV_OP_MAX
OP_CUSTOM = lib.RKV_OP_CUSTOM  # push ops: 0..3 built in, OP_CUSTOM..PULL_MAX-1 registered
_PULL_NAMES = {"rows": PULL_ROWS, "with_state": PULL_WITH_STATE}

# Error codes, as enum rkv_err in rkv.h (an Error's .code is the negation).
(EINVAL, ENOMEM, ETIMEDOUT, EPEERDEAD, EPROTO, ENOTENSOR, ERANGE, EDTYPE, EEXIST, EIO, EACCESS,
 ENOHANDLER, ECONFIG, ESHUTDOWN, ELIMIT, EINUSE, EINTR) = range(1, 18)
_ERR_NAMES = ["OK", "EINVAL", "ENOMEM", "ETIMEDOUT", "EPEERDEAD", "EPROTO", "ENOTENSOR", "ERANGE",
              "EDTYPE", "EEXIST", "EIO", "EACCESS", "ENOHANDLER", "ECONFIG", "ESHUTDOWN",
              "ELIMIT", "EINUSE", "EINTR"]
# A code added to rkv.h fails the import here rather than misnaming errors.
assert len(_ERR_NAMES) == lib.RKV_ERR_MAX_, "rkv.h has error codes this module does not name"
__all__ += _ERR_NAMES[1:]

_ERR_LEN = 1024
_OPS = {"assign": 0, "sum": 1, "sgd": 2, "adagrad": 3}
_POLICIES = {"range": lib.RKV_PART_RANGE, "hash": lib.RKV_PART_HASH}
_POLICY_NAMES = {lib.RKV_PART_RANGE: "range", lib.RKV_PART_HASH: "hash",
                 lib.RKV_PART_EXPLICIT: "explicit"}
_DTYPES = {np.dtype(np.float32): lib.RKV_F32, np.dtype(np.float64): lib.RKV_F64,
           np.dtype(np.int32): lib.RKV_I32, np.dtype(np.int64): lib.RKV_I64}
_NP_OF = {v: k for k, v in _DTYPES.items()}


# Ctrl-C in a call that waits for servers (pull, push, init_data, ...): the
# C call held the main thread, where Python runs its signal handlers, until
# timeout_ms (30 s by default) when a server did not answer. Python writes
# each signal's number to its wakeup fd (signal.set_wakeup_fd) as the
# signal comes; a watcher thread reading it interrupts the clients whose
# main-thread call is in C (rkv_client_interrupt), the call returns as at a
# timeout, and Python raises KeyboardInterrupt. Nothing per call but a lock
# and a dict entry: a helper thread per call, as barrier() uses, would cost
# every pull a thread hand-off. Only while nobody else owns the wakeup fd
# (asyncio's loop sets it for its signal handlers), and only while SIGINT's
# handler is Python's default (a program's own handler decides itself).
# Re-entrant: a collection in a section under it may close() a client.
_sig_lock = threading.RLock()
_sig_calls = {}  # id(client) -> Client with a main-thread call in C
_sig_watch = None  # None: not tried yet; then True (watching) or False
_MAIN_IDENT = threading.main_thread().ident
_sig_fds = ()  # the pipe's two ends while watching


def _sig_watch_loop(r):
    buf, stamp = ffi.new("unsigned char[]", 512), ffi.new("uint64_t *")
    while True:
        n = lib.rkv_py_read_stamped(r, buf, 512, stamp)
        if n <= 0:
            return
        if signal.SIGINT not in ffi.unpack(buf, n) or \
                signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            continue
        with _sig_lock:  # close() takes a client out under it before freeing it
            for c in list(_sig_calls.values()):
                # Not a call begun after the signal: Python raised its
                # KeyboardInterrupt before that call (a `finally:
                # c.shut_down()` would be cut short).
                if c._cli is not None and c._sig_t0 < stamp[0]:
                    c._sig_cut = True
                    lib.rkv_client_interrupt(c._cli, 1)


def _sig_watch_start():
    global _sig_fds
    try:
        r, w = os.pipe()
    except OSError:
        return False
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main interpreter's main thread
        os.close(r)
        os.close(w)
        return False
    if old != -1:  # someone else's: leave it to them
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return False
    _sig_fds = (r, w)
    lib.rkv_py_sigint_hook()  # else the watcher stamps the bytes as it reads them
    threading.Thread(target=_sig_watch_loop, args=(r,), name="rkv-sigint", daemon=True).start()
    return True


def _sig_watching():
    """True in the main thread once the watcher runs (started here)."""
    global _sig_watch
    if threading.current_thread() is not threading.main_thread():
        return False
    if _sig_watch is None:
        _sig_watch = _sig_watch_start()
    return _sig_watch


def _sig_after_fork():
    # The child has the wakeup fd but not the watcher thread: start again
    # (and a lock the watcher may have held at the fork).
    global _sig_watch, _sig_fds, _MAIN_IDENT, _sig_lock
    _sig_lock = threading.RLock()
    _MAIN_IDENT = threading.main_thread().ident
    if _sig_watch:
        try:
            signal.set_wakeup_fd(-1)
            _sig_watch = None
        except ValueError:  # forked from another thread than the main one
            _sig_watch = False
        else:
            for fd in _sig_fds:
                os.close(fd)
            _sig_fds = ()
    _sig_calls.clear()


os.register_at_fork(after_in_child=_sig_after_fork)


class Error(Exception):
    """A failed rkv call: code is the negative -RKV_E* code, message says what."""

    def __init__(self, code, message):
        self.code = code
        self.message = message
        super().__init__("%s [%s]" % (message, self.name))

    def __reduce__(self):
        # As an exception pickles by default it is rebuilt from args (the
        # formatted text alone), and __init__ wants code and message: a
        # multiprocessing Pool's result thread died on it and get() hung.
        return (type(self), (self.code, self.message))

    @property
    def name(self):
        n = -self.code
        return "RKV_" + _ERR_NAMES[n] if 0 < n < len(_ERR_NAMES) else "RKV_E?"


class _OverflowError(Error, OverflowError):
    """A value that does not fit (ERANGE): also Python's OverflowError."""


class _ValueError(Error, ValueError):
    """An argument of the right type but a bad value: also Python's ValueError."""


class _TypeError(Error, TypeError):
    """An argument of the wrong type: also Python's TypeError."""


_KINDS = {OverflowError: _OverflowError, ValueError: _ValueError, TypeError: _TypeError}


def strerror(code):
    """rkv_strerror: what code (either sign) means; any other int is unknown."""
    code = operator.index(code)
    if not -(1 << 31) < code < 1 << 31:  # past C's int: cffi raised OverflowError
        code = lib.RKV_ERR_MAX_
    return ffi.string(lib.rkv_strerror(code)).decode()


def _fail(code, message, kind=None):
    """Raises rkv.Error; with kind (OverflowError, ValueError, TypeError) one
    that is also that built-in exception, for callers that catch those."""
    raise _KINDS.get(kind, Error)(code, message)


def _errbuf():
    return ffi.new("char[]", _ERR_LEN)


def _int_arg(v, what, lo, hi):
    """An integer argument in lo..hi, else rkv.Error (EINVAL), also a TypeError
    or an OverflowError: a float (2.7 taken as op 2, 10.9 as 10 rows), a bool
    or None would be turned into another number, and a value C cannot hold
    raised cffi's bare errors."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        _fail(-EINVAL, "%s: expected an integer in %d..%d, got %r" % (what, lo, hi, v), TypeError)
    v = int(v)
    if not lo <= v <= hi:
        # A value C's type cannot hold (too large, or negative where it is
        # unsigned) is Python's OverflowError; one it holds but rkv refuses
        # (a shape of 0 rows) is a ValueError, as Python's own are.
        kind = ValueError if 0 <= v < lo else OverflowError
        _fail(-EINVAL, "%s: %d is outside %d..%d" % (what, v, lo, hi), kind)
    return v


def _bool_arg(v, what):
    """A flag: True/False (or 0/1 of any integer type). Any truthy object was
    taken as True: with_state="no" made state, async_="no" an async push."""
    if not isinstance(v, (bool, int, np.bool_, np.integer)) or int(v) not in (0, 1):
        _fail(-EINVAL, "%s %r: expected True or False" % (what, v), TypeError)
    return bool(v)


def _real_arg(v, what):
    """A finite float argument (a learning rate, a handler's param): any real
    scalar (numbers.Real: Python's and numpy's, fractions.Fraction too, which
    was refused), a decimal.Decimal (not registered as numbers.Real, yet a
    real number all the same: taken as float() rounds it), or a 0-d numpy
    array or torch tensor holding one (what a scheduler or torch arithmetic
    gives: torch.tensor(0.1) was refused)."""
    if _is_torch(v) or isinstance(v, np.ndarray):
        if tuple(v.shape) != ():
            _fail(-EINVAL, "%s: expected a number or a 0-d array or tensor, got %s of shape %s"
                  % (what, type(v).__name__, tuple(v.shape)), TypeError)
        try:
            v = v.item() if _is_torch(v) else v[()]
        except (RuntimeError, NotImplementedError) as e:  # a meta tensor has no value
            _fail(-EINVAL, "%s: cannot read the tensor's value: %s" % (what, e), ValueError)
    # A bool is an int to Python, but lr=True is a mistake, not 1.0.
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, decimal.Decimal)):
        _fail(-EINVAL, "%s: expected a real number, got %r" % (what, v), TypeError)
    try:
        f = float(v)
    except OverflowError:  # an int or Fraction past float64's range raised it bare
        _fail(-EINVAL, "%s: expected a finite number, got %s" % (
            what, "an int of %d bits" % int(v).bit_length() if isinstance(v, numbers.Integral)
            else "a %s past float64's range" % type(v).__name__), OverflowError)
    except ValueError:  # a signalling Decimal NaN cannot become a float
        _fail(-EINVAL, "%s: expected a finite number, got %r" % (what, v), ValueError)
    if f != f or f in (float("inf"), float("-inf")):
        _fail(-EINVAL, "%s: expected a finite number, got %r" % (what, v), ValueError)
    return f


def _raise_err(rc, err):
    _fail(rc, ffi.string(err).decode(errors="replace") or strerror(rc))


def _torch():
    """torch when the program uses it or it is installed, else None (imported lazily:
    servers and numpy-only programs never pay for it). The import statement,
    not sys.modules: while another thread imports torch (the first pulls of
    a program's trainer threads, which never imported it), sys.modules holds
    the module half made, and its missing attributes raised AttributeError
    ("partially initialized module 'torch' has no attribute 'from_numpy'")
    from every pull but the importing thread's. The statement waits for
    that import to finish."""
    if "torch" not in sys.modules and threading.current_thread() is threading.main_thread():
        return _torch_import_whole()
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_import_whole():
    """The first import of torch, in the main thread, with Ctrl-C held until
    it is done (then raised as KeyboardInterrupt): a Ctrl-C during the
    import (1.3 s here, within a first pull) left torch half made in
    sys.modules, and every later pull of the process raised "NameError:
    name '_C' is not defined"."""
    prev = signal.getsignal(signal.SIGINT)
    held = []
    swapped = False
    if prev is not None:  # None: a handler not installed from Python, left alone
        try:
            signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
            swapped = True
        except ValueError:  # not the main interpreter
            pass
    try:
        try:
            import torch
        except ImportError:
            torch = None
    finally:
        if swapped:
            signal.signal(signal.SIGINT, prev)
            # signal.signal put Python's own C handler back, without the
            # watcher's stamping wrapper (build_ffi.py): again, or every
            # later Ctrl-C is stamped when the watcher reads it, and a call
            # begun in between (a `finally: shut_down()`) is cut.
            if _sig_watch:
                lib.rkv_py_sigint_hook()
            if held and callable(prev):
                prev(signal.SIGINT, None)  # Python's default raises KeyboardInterrupt
            elif held and prev == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
    return torch


def _torch_attr(name):
    """torch.<name> when torch is imported (or being imported by another
    thread and has got that far), else None: never imports it. A module half
    made by another thread's import lacked Tensor or dtype (AttributeError
    from a call given numpy arrays); an object no torch is in place of is
    not torch's."""
    return getattr(sys.modules.get("torch"), name, None)


def _is_torch(x):
    t = _torch_attr("Tensor")
    return t is not None and isinstance(x, t)


def _np_dtype(dtype):
    """A numpy dtype from a numpy/torch dtype or its name ("float32", "f32")."""
    if dtype is None:  # numpy reads None as float64
        _fail(-EDTYPE, "dtype None: the store holds float32, float64, int32, int64")
    if _is_torch_dtype(dtype):
        dtype = str(dtype).replace("torch.", "")
    names = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64"}
    try:
        dt = np.dtype(names.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError:
        _fail(-EDTYPE, "dtype %r: the store holds float32, float64, int32, int64" % (dtype,))
    if dt not in _DTYPES:
        _fail(-EDTYPE, "dtype %s: the store holds float32, float64, int32, int64" % dt)
    return dt


def _is_torch_dtype(x):
    t = _torch_attr("dtype")
    return t is not None and isinstance(x, t)


def _as_numpy(x, values=False, what=None):
    """An ndarray over x's memory where it can (torch CPU tensors share theirs).
    values: x holds values (rows), not ids or an out=: a bfloat16 tensor, which
    numpy has no dtype for, comes as float32 (exactly: every bfloat16 is a
    float32), so mixed-precision gradients push as float16 ones do.
    what: x is read (ids, rows, a book), named so: a masked array with
    masked entries is refused (an out= or a registered buffer is written)."""
    if type(x) is np.ndarray:
        return x
    # np.asarray drops the mask: the masked entries' hidden data was sent as
    # ids or values, silently.
    if what is not None and isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):
        _fail(-EINVAL, "%s: a masked array with %d masked entries (their data would be "
              "taken): fill or compress it first" % (what, np.ma.count_masked(x)), ValueError)
    if _is_torch(x):
        x = x.detach()
        # A meta tensor has a shape and no data (torch raised NotImplementedError
        # from .cpu()); a sparse one raised a TypeError read as a dtype's.
        if x.device.type == "meta":
            _fail(-EINVAL, "a tensor on the 'meta' device has no data to send or receive",
                  ValueError)
        if x.layout != _torch().strided:
            _fail(-EINVAL, "a %s tensor: expected a dense one (use .to_dense())"
                  % str(x.layout).replace("torch.", ""), TypeError)
        if x.device.type != "cpu":
            x = x.cpu()
        if values and x.dtype == _torch().bfloat16:
            x = x.float()
        # Rows or ids, only read: a negated or conjugated view (x._neg_view(),
        # z.conj().imag) is resolved into a copy, which numpy() refused. An
        # out= or a registered buffer (no `what`) must be the memory itself.
        if values or what is not None:
            if hasattr(x, "is_neg") and x.is_neg():
                x = x.resolve_neg()
            if hasattr(x, "is_conj") and x.is_conj():
                x = x.resolve_conj()
        try:
            return x.numpy()
        except (TypeError, RuntimeError) as e:  # complex32 has no numpy dtype; neg/conj views
            _fail(-EDTYPE, "tensor of %s: %s" % (x.dtype, e))
    try:
        if isinstance(x, (list, tuple)):
            # numpy's FutureWarning about tensors in a list comes with the
            # error said below, or not at all where it converts them.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                return np.asarray(x)
        return np.asarray(x)
    except ValueError as e:  # ragged lists: numpy's own error, not an rkv.Error
        # A list of tensors that numpy does not take: it called equal shapes
        # "inhomogeneous" (an outside tester). Said as what to do.
        if isinstance(x, (list, tuple)) and any(_is_torch(v) and v.ndim > 0 for v in x):
            _fail(-EINVAL, "a %s of torch tensors: give one tensor (torch.stack(rows), or "
                  "torch.cat for ids)" % type(x).__name__, TypeError)
        _fail(-EINVAL, "cannot read %s as an array: %s" % (type(x).__name__, e), ValueError)


def _c_array(a, dtype):
    """a as a C-contiguous array of dtype whose memory is aligned for that
    dtype, as the uint64_t * or float * C reads it through must be; a itself
    when it is so already. np.ascontiguousarray kept an array np.frombuffer
    made at an offset that is no multiple of its itemsize, and C read its
    elements at unaligned addresses (undefined behaviour, even where x86
    tolerates it). numpy's flags.aligned is the C compiler's alignment of
    the type (for each dtype the store holds, its itemsize); the copy numpy
    makes is aligned."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.flags.aligned else a.copy()


_BOOLS = frozenset((bool, np.bool_))


def _has_bool(x):
    """Whether list or tuple x holds a bool (Python's or numpy's), which
    np.asarray makes an integer when an integer is next to it."""
    return isinstance(x, (list, tuple)) and not _BOOLS.isdisjoint(map(type, x))


def _ids_from_list(ids):
    """A list or tuple of integer-like objects (Python, numpy or torch
    integers) that numpy made float64 or object: it promotes np.uint64 with a
    Python int to float64 ([np.uint64(1), 2]), which rounds ids past 2^53, and
    makes ints past int64 objects. Read one by one, exactly; an element that
    is no integer (1.5, None, True) is refused by name."""
    vals = []
    for i, v in enumerate(ids):
        # operator.index takes True for 1: a bool is no row id, as a bool
        # array is none.
        if isinstance(v, (bool, np.bool_)):
            _fail(-EINVAL, "ids: expected integers, got %r (bool) at index %d" % (v, i),
                  TypeError)
        try:
            vals.append(operator.index(v))
        except TypeError:
            _fail(-EINVAL, "ids: expected integers, got %r (%s) at index %d"
                  % (v, type(v).__name__, i))
    lo, hi = min(vals), max(vals)
    if lo < 0:
        _fail(-ERANGE, "ids: row id %d is negative" % lo)
    if hi > 0xFFFFFFFFFFFFFFFF:
        _fail(-ERANGE, "ids: row id %d does not fit in 64 bits" % hi, OverflowError)
    return np.array(vals, dtype=np.uint64)


def _ids_array(ids):
    """ids (1-D integers) as contiguous uint64, without a copy when they are so
    already (or int64 >= 0). An empty sequence is no ids, whatever its dtype."""
    a = _as_numpy(ids, what="ids")
    # numpy reads [1, True] as the ids [1, 1] (and [np.uint64(1), np.True_]
    # as uint64): a list or tuple holding a bool is read one by one, which
    # refuses it.
    if _has_bool(ids):
        a = _ids_from_list(ids)
    if a.dtype == np.uint64 and a.ndim == 1 and a.flags.c_contiguous and a.flags.aligned:
        return a  # the common case, as cheap as it can be
    if a.ndim != 1:
        # np.asarray made a set, a dict or a generator one 0-d object: "got
        # shape ()" said nothing of what was passed.
        got = "a %s" % type(ids).__name__ if a.dtype == object and a.ndim == 0 else \
            "shape %s" % (a.shape,)
        _fail(-EINVAL, "ids: expected a 1-D sequence of integers (a list, tuple, range, numpy "
              "array or torch tensor), got %s" % got, ValueError)
    if a.size == 0:
        return np.empty(0, dtype=np.uint64)
    if a.dtype.kind in "fO" and isinstance(ids, (list, tuple)):
        a = _ids_from_list(ids)
    elif a.dtype == object:  # Python ints (past int64 too), as a list's are read
        a = _ids_from_list(a)
    if a.dtype.kind not in "iu":
        _fail(-EINVAL, "ids: expected integers, got %s" % a.dtype, TypeError)
    if a.dtype.kind == "i" and a.size and a.min() < 0:
        _fail(-ERANGE, "ids: row id %d is negative" % a.min())
    if a.dtype == np.int64 and a.flags.c_contiguous and a.flags.aligned:
        return a.view(np.uint64)
    return _c_array(a, np.uint64)


# Per thread: how many Python pull handlers it is in (Client._lock refuses
# client calls there), and the client pull it is in (_rkv_py_pull).
_in_handler = threading.local()


def _no_call_from_a_handler():
    """Refuses a Client call made inside a Python pull handler (rkv.Error
    EINVAL), as rkv.h says the C client refuses a call made from a handler
    it runs. The client's own pull runs the handler for its machine's rows
    in the pulling thread, which holds the client's lock: a call there
    waited for that lock for good (and the handler swallowed Ctrl-C); one on
    a server's thread waited for the pull, which waited for the handler's
    row, until timeout_ms."""
    if getattr(_in_handler, "depth", 0):
        _fail(-EINVAL, "a call of an rkv.Client from inside a pull handler: the store runs "
              "handlers while a pull waits for their rows (it would deadlock); call the "
              "client outside the handler")


class _PyPull:
    """A pull handler written in Python, as the store calls it: fn, the cffi
    handle the C side holds as `user`, and how many of its calls raised."""

    __slots__ = ("fn", "handle", "errors")

    def __init__(self, fn):
        self.fn = fn
        self.errors = 0
        self.handle = ffi.new_handle(self)


def _py_pull_onerror(exc, value, tb):
    """What cffi calls for an exception _rkv_py_pull let out: one raised as
    it starts, before its try, where Python runs the signal handlers that
    became due while the thread was in C (a Ctrl-C during a long pull lands
    there). cffi printed it as ignored and the reply row kept whatever its
    buffer held. The row is poisoned, and a KeyboardInterrupt kept for the
    client's pull to raise, as _rkv_py_pull does for one in the handler."""
    while tb is not None and tb.tb_frame.f_code is not _rkv_py_pull.__code__:
        tb = tb.tb_next
    if tb is None:
        return
    a = tb.tb_frame.f_locals
    dtype = _NP_OF[a["dt"]]
    bad = np.nan if dtype.kind == "f" else np.iinfo(dtype).min
    ffi.memmove(a["out"], np.full(a["out_len"], bad, dtype=dtype), a["out_len"] * dtype.itemsize)
    pull = getattr(_in_handler, "pull", None)
    if pull is not None and not isinstance(value, Exception):
        pull.append(value)


@ffi.def_extern(onerror=_py_pull_onerror)
def _rkv_py_pull(dt, row, state, row_len, out, out_len, param, user):
    """Runs a Python pull handler for one row. cffi took the GIL first (this
    runs on a server's or a co-located client's thread, under the row's
    lock). The handler sees copies, so a view kept past the call never
    reaches the store's memory; a handler that raises gets its reply row
    poisoned (NaN, or the dtype's minimum for integers) rather than left as
    whatever the buffer held, since the C call has no way to fail.
    A KeyboardInterrupt (Ctrl-C) or SystemExit in a handler that a client's
    pull runs in this thread is kept for that pull to raise once its C
    call returns, and the pull's remaining rows are poisoned without
    calling the handler: it was swallowed as one handler error, and the
    pull went on and returned a NaN row as if it were data."""
    h = ffi.from_handle(user)
    dtype = _NP_OF[dt]
    size = dtype.itemsize
    bad = np.nan if dtype.kind == "f" else np.iinfo(dtype).min
    pull = getattr(_in_handler, "pull", None)  # the client pull this thread is in, if any
    if pull:  # interrupted: the pull is given up, its rows are not computed
        ffi.memmove(out, np.full(out_len, bad, dtype=dtype), out_len * size)
        return
    _in_handler.depth = getattr(_in_handler, "depth", 0) + 1
    try:
        r = np.frombuffer(ffi.buffer(row, row_len * size), dtype=dtype).copy()
        st = None
        if state != ffi.NULL:
            st = np.frombuffer(ffi.buffer(state, row_len * size), dtype=dtype).copy()
        o = np.zeros(out_len, dtype=dtype)
        ret = h.fn(r, st, o, param)
        if ret is not None:
            ret = _as_numpy(ret, values=True)
            # What the reply cannot hold (1e300 in float32 became inf, 1.5
            # in int32 became 1) is the handler's error, as a push's would
            # be: the row is poisoned and the message names the value. The
            # usual return, of the reply's own dtype, costs one comparison.
            if ret.dtype != dtype:
                ret = _cast_fit(ret, dtype, "pull handler %r returned a value for a %s reply"
                                % (h.fn, dtype))
            o[...] = ret.reshape(o.shape) if ret.size == o.size else ret
        ffi.memmove(out, o, out_len * size)
    except BaseException as e:  # noqa: B902 - nothing may unwind into C
        if pull is not None and not isinstance(e, Exception):
            pull.append(e)  # the pull raises it (a server's thread has none to raise it)
        else:
            h.errors += 1
            if h.errors <= 3:
                sys.stderr.write("rkv: pull handler %r raised (its reply row is poisoned):\n"
                                 % (h.fn,))
                traceback.print_exc()
        ffi.memmove(out, np.full(out_len, bad, dtype=dtype), out_len * size)
    finally:
        _in_handler.depth -= 1


def _handler_id(handler):
    if handler is None:
        return PULL_ROWS
    if isinstance(handler, str):
        hid = _PULL_NAMES.get(handler)
        if hid is None:
            _fail(-ENOHANDLER, "pull handler %r: expected rows, with_state or a custom id"
                  % handler)
        return hid
    if isinstance(handler, bool) or not isinstance(handler, (int, np.integer)):
        _fail(-EINVAL, "pull handler %r: expected a name or an int id" % (handler,))
    hid = int(handler)
    if not -(1 << 31) <= hid < 1 << 31:
        _fail(-ENOHANDLER, "pull handler %d: out of range" % hid)
    return hid


# Below this no process maps code (vm.mmap_min_addr's default): an int
# under it given as a C handler's address is no function's.
_MIN_CODE_ADDRESS = 1 << 16


def _c_function(what, fn, ctype):
    """fn (a cffi function pointer, or a C function's address as an int)
    as a `ctype` function pointer for handler `what`."""
    if isinstance(fn, (bool, np.bool_)) or \
            (isinstance(fn, (int, np.integer)) and 0 < int(fn) < _MIN_CODE_ADDRESS):
        # A bare 5 was taken as an address, and the next pull through it
        # ended the process with SIGSEGV (an outside tester). No code lives
        # in the first pages (Linux maps nothing below vm.mmap_min_addr, 64
        # KiB by default).
        _fail(-EINVAL, "%s: %r is no function's address (a C function's address comes from "
              "ctypes or cffi)" % (what, fn))
    cfn = ffi.cast(ctype, fn)
    if cfn == ffi.NULL:
        _fail(-EINVAL, "%s: a NULL function (None unregisters)" % what)
    return cfn


def _register_pull(reg, target, keep, hid, fn, out_mult, out_add, user):
    """The shared part of Server/Client.register_pull_handler: reg is the C
    registration function of target; keep holds what the C side points to."""
    if isinstance(hid, bool) or not isinstance(hid, (int, np.integer)):
        _fail(-EINVAL, "pull handler id %r: expected an int in %d..%d"
              % (hid, PULL_CUSTOM, PULL_MAX - 1))
    hid = int(hid)
    if not PULL_CUSTOM <= hid < PULL_MAX:
        _fail(-EINVAL, "pull handler id %d: custom ones are %d..%d (%d and %d are built in)"
              % (hid, PULL_CUSTOM, PULL_MAX - 1, PULL_ROWS, PULL_WITH_STATE))
    for what, v in (("out_mult", out_mult), ("out_add", out_add)):
        # A bool is an int to Python: out_mult=True was taken as 1.
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or \
                not 0 <= v < 1 << 32:
            _fail(-EINVAL, "pull handler %d: %s %r is not a uint32" % (hid, what, v))
    if fn is not None and out_mult == 0 and out_add == 0:
        _fail(-EINVAL, "pull handler %d: out_mult and out_add are both 0 (an empty reply)" % hid)
    py = None
    if fn is None:  # unregisters
        cfn, cuser = ffi.NULL, ffi.NULL
    elif isinstance(fn, ffi.CData) or isinstance(fn, (int, np.integer)):
        cfn = _c_function("pull handler %d" % hid, fn, "rkv_pull_fn")
        if cfn == ffi.cast("rkv_pull_fn", lib._rkv_py_pull):  # needs a handle as user
            _fail(-EINVAL, "pull handler %d: pass the Python function itself" % hid)
        cuser = ffi.cast("void *", user or 0)
    elif callable(fn):
        if user is not None:
            _fail(-EINVAL, "pull handler %d: user is for C handlers (a Python one has its "
                  "closure)" % hid)
        py = _PyPull(fn)
        cfn, cuser = lib._rkv_py_pull, py.handle
    else:
        _fail(-EINVAL, "pull handler %d: expected a callable, a C function pointer or None"
              % hid)
    rc = reg(target, hid, cfn, int(out_mult), int(out_add), cuser)
    if rc < 0:
        _fail(rc, "pull handler %d: refused by the store" % hid)
    # Registration is not synchronised with the store's threads, which may
    # still be in the old handler: what it pointed to stays alive as long as
    # the server or client.
    keep.setdefault("all", []).append(py)
    keep[hid] = py


def _register_push(reg, target, op, fn, user):
    """The shared part of Server/Client.register_handler: a custom push op
    written in C (its address from ctypes or cffi), or None to unregister.
    Python push was refused ENOHANDLER with nothing in Python to register
    one with (an outside tester)."""
    if isinstance(op, bool) or not isinstance(op, (int, np.integer)):
        _fail(-EINVAL, "push op %r: expected an int in %d..%d" % (op, OP_CUSTOM, PULL_MAX - 1))
    op = int(op)
    if not OP_CUSTOM <= op < PULL_MAX:
        _fail(-EINVAL, "push op %d: custom ones are %d..%d (0..3 are built in)"
              % (op, OP_CUSTOM, PULL_MAX - 1))
    if fn is None:
        cfn, cuser = ffi.NULL, ffi.NULL
    elif isinstance(fn, ffi.CData) or isinstance(fn, (int, np.integer)):
        cfn = _c_function("push op %d" % op, fn, "rkv_handler_fn")
        cuser = ffi.cast("void *", user or 0)
    elif callable(fn):
        _fail(-EINVAL, "push op %d: push handlers are C functions (they run under a row's "
              "lock, on servers and in co-located clients); pass one's address from ctypes or "
              "cffi" % op)
    else:
        _fail(-EINVAL, "push op %d: expected a C function pointer, its address, or None" % op)
    rc = reg(target, op, cfn, cuser)
    if rc < 0:
        _fail(rc, "push op %d: refused by the store" % op)


_PUSH_HANDLER_DOC = """Registers custom push op `op` (OP_CUSTOM..PULL_MAX-1):
        push(..., op=op) applies fn to each row. fn is a C function of
        rkv_handler_fn's type (rkv.h: dt, row, state, in, n_elems, param,
        user), given as a cffi function pointer or its address (ctypes:
        ctypes.cast(lib.fn, ctypes.c_void_p).value); user is passed to it
        (an address, or None). Register the same op on every server and on
        every client that pushes it; None unregisters. Push handlers run
        under the row's lock: they must be short and must not call rkv."""


def _handler_errors(keep, hid):
    py = keep.get(hid)
    return py.errors if py is not None else 0


_PULL_HANDLER_DOC = """Registers pull handler `hid` (PULL_CUSTOM..PULL_MAX-1,
        as DGL's _udf_pull_handler): a pull naming it gets, for each row of
        a tensor with row_len elements, out_mult * row_len + out_add elements
        of the tensor's dtype that fn computes from the stored row. Register
        the same on every server and on each client that pulls with it
        (which runs it for its machine's rows, over shared memory), before
        pulls use it; fn None unregisters.

        fn is a C function (a cffi `rkv_pull_fn`, or its address as an int,
        e.g. from ctypes, with `user` its last argument), or a Python callable
        fn(row, state, out, param): row (row_len elements) and state (the
        optimizer state, or None) are copies, out is zeros of the reply
        length to fill in place, or return the values (a scalar fills every
        element). A Python handler runs on the store's threads, one row at a
        time under that row's lock, holding the GIL: keep it short, never
        call rkv from it (the calling client is busy: a Client call there
        is refused, rkv.Error EINVAL),
        and use it only where the servers run in this Python process (a
        server started by the rkv binary cannot run it). A Ctrl-C while
        a pull runs this client's handlers ends the pull with
        KeyboardInterrupt (its rows are not computed). A handler that
        raises gets its rows poisoned (NaN, or the dtype's minimum) and its
        first tracebacks printed; pull_handler_errors(hid) counts them. So
        does one that returns what the tensor's dtype cannot hold, as push
        refuses it (1e300 for float32, 1.5 or 2**40 for int32: rkv.Error
        ERANGE or EDTYPE naming the value, not inf or a truncation). Shut the servers down and close clients before the interpreter
        exits. A Python handler costs some 16 us a row (its threads take
        turns at the GIL) against 0.3 us for a plain pull: write hot ones
        in C."""


def _index_array(x, what, n, dtype=np.uint64):
    """x (a sequence, numpy or torch integers) as n contiguous entries of
    dtype, refused with EINVAL naming the first bad row rather than wrapped
    or truncated by a cast."""
    if isinstance(x, (str, bytes)):
        _fail(-EINVAL, "%s: expected a sequence of integers, got %r" % (what, x))
    a = _as_numpy(x, what=what)
    if _has_bool(x):  # np.asarray made [0, True] the entries [0, 1]
        a = np.array(x, dtype=object)  # refused below, naming the row
    # Flattened, a (2, 2) book was taken for 4 rows in its C order, and a
    # list of pairs [(row, machine), ...] as alternating entries.
    if a.ndim != 1:
        _fail(-EINVAL, "%s: expected one entry per row (1-D), got shape %s" % (what, a.shape),
              ValueError)
    top = np.iinfo(dtype).max
    if a.size and a.dtype == object:
        # What numpy makes of a list holding an int past 64 bits: it was
        # refused as "expected integers, got object". Read one by one.
        vals = []
        for i, v in enumerate(a):
            if isinstance(v, (bool, np.bool_)):
                _fail(-EINVAL, "%s: row %d has %r: expected integers" % (what, i, v))
            try:
                v = operator.index(v)
            except TypeError:
                _fail(-EINVAL, "%s: row %d has %r: expected integers" % (what, i, v))
            if not 0 <= v <= top:
                _fail(-EINVAL, "%s: row %d has %d%s" % (what, i, v,
                                                        " (over %d)" % top if v > 0 else ""))
            vals.append(v)
        a = np.array(vals, dtype=dtype)
    if a.size and a.dtype.kind not in "iu":
        _fail(-EINVAL, "%s: expected integers, got %s" % (what, a.dtype))
    if a.size != n:
        _fail(-EINVAL, "%s: %d entries for %d rows" % (what, a.size, n))
    if a.size and a.dtype.kind == "i":
        bad = np.flatnonzero(a < 0)
        if bad.size:
            _fail(-EINVAL, "%s: row %d has %d" % (what, bad[0], a[bad[0]]))
    if a.size and a.dtype.itemsize > np.dtype(dtype).itemsize:
        bad = np.flatnonzero(a.astype(np.uint64) > top)
        if bad.size:
            _fail(-EINVAL, "%s: row %d has %d (over %d)" % (what, bad[0], a[bad[0]], top))
    return _c_array(a, dtype)


def _overlaps_itself(a):
    """Whether two elements of a share memory (a torch expand() or an
    as_strided view): rows pulled into one overwrote each other, silently
    (torch's copy_ raised for some such views only after the pull)."""
    if a.size <= 1 or a.flags.c_contiguous or a.flags.f_contiguous:
        return False
    # Dims sorted by stride, each past the span of those inside it: the
    # layout of every slice, transpose or permutation of an array.
    span = a.itemsize
    for stride, n in sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1):
        if stride < span:
            break
        span = stride * n
    else:
        return False
    # Another layout: compare every element's byte offset.
    offs = np.zeros(1, dtype=np.int64)
    for s, n in zip(a.strides, a.shape):
        offs = (offs[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    offs.sort()
    return bool(np.any(np.diff(offs) < a.itemsize))


def _holds_every(src, dst):
    """Whether every value of dtype src is one of dtype dst (a pull's out=).
    numpy's "safe" casts take int64 into float64, whose 53-bit significand
    rounds integers past 2**53: an int64 tensor's 2**53 + 1 pulled into a
    float64 out came back as 2**53, silently."""
    if dst.kind not in "iuf" or not np.can_cast(src, dst, "safe"):
        return False
    if src.kind in "iu" and dst.kind == "f":
        bits = 8 * src.itemsize - (src.kind == "i")  # magnitude bits of the integer
        return bits <= np.finfo(dst).nmant + 1
    return True


def _cast_rows(m, a):
    """Values a for tensor m as its dtype, refused before anything is sent
    unless every one fits (_cast_fit)."""
    return _cast_fit(a, m.dtype, "data: tensor '%s' holds %s" % (m.name, m.dtype))


def _out_of_range(what, v, dtype):
    # An int of hundreds of digits is said by its size.
    text = "%r" % v if not isinstance(v, int) or abs(v) < 10**30 else \
        ("-2**%d or less" if v < 0 else "2**%d or more") % (abs(v).bit_length() - 1)
    _fail(-ERANGE, "%s: value %s is out of range for %s" % (what, text, dtype), OverflowError)


def _object_numbers(a, dtype, what):
    """An object array of Python numbers (what numpy makes of a list holding
    an int past 64 bits: [2**64], [-2**63 - 1], [1.5, 2**70]) as int64 or
    float64 values, each checked against dtype: one out of its range is
    refused naming it (it was "cannot take object data", which said nothing
    of the value); an element that is no real number is refused naming it
    and its index."""
    flat = a.reshape(-1)
    floats = dtype.kind == "f" or any(isinstance(v, (float, np.floating)) for v in flat)
    vals = []
    for i, v in enumerate(flat):
        if isinstance(v, (bool, np.bool_)) or \
                not isinstance(v, (int, float, np.integer, np.floating)):
            _fail(-EDTYPE, "%s; cannot take %s data (%r at index %d)"
                  % (what, type(v).__name__, v, i))
        if isinstance(v, (float, np.floating)) and dtype.kind == "i":
            _fail(-EDTYPE, "%s; cannot take float data (%r at index %d)" % (what, v, i))
        if floats:
            try:
                vals.append(float(v))
            except OverflowError:  # an int past float64's range
                _out_of_range(what, v, dtype)
        else:
            info = np.iinfo(dtype)
            if not info.min <= int(v) <= info.max:
                _out_of_range(what, int(v), dtype)
            vals.append(int(v))
    return np.array(vals, dtype=np.float64 if floats else dtype).reshape(a.shape)


def _cast_fit(a, dtype, what):
    """a as dtype if every value fits: integers (of any width and sign, Python's
    past 64 bits too) into integers in range, integers and floats into
    floats that do not overflow to inf (floats round, as any float
    arithmetic does); never floats into integers, nor bools, complex or
    other objects. rkv.Error otherwise, its message starting with what."""
    if a.dtype == object and a.size:
        a = _object_numbers(a, dtype, what)
    if a.dtype.kind not in "iuf" or (dtype.kind == "i" and a.dtype.kind == "f"):
        _fail(-EDTYPE, "%s; cannot take %s data" % (what, a.dtype))
    if np.can_cast(a.dtype, dtype, "safe") or a.size == 0:
        return a.astype(dtype)
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        lo, hi = int(a.min()), int(a.max())
        if lo < info.min or hi > info.max:
            _out_of_range(what, lo if lo < info.min else hi, dtype)
        return a.astype(dtype)
    with np.errstate(over="ignore"):
        b = a.astype(dtype)
    bad = np.flatnonzero(np.isinf(b) & np.isfinite(a))
    if bad.size:
        _out_of_range(what, a.reshape(-1)[bad[0]].item(), dtype)
    return b


# The settings whose value is 0 or 1 (impl/api/config.c checks both): the
# only ones a bool is given to.
_FLAG_SETTINGS = ("discover", "busy-poll")


class Config:
    """The store's settings by the rkv binary's names (`rkv config --dump`):
    Config(cluster="ip.txt", num_workers=4, rx_depth=128); '_' stands for '-'.
    Settings given here override the environment, which overrides the defaults."""

    def __init__(self, settings=None, **kw):
        self._values = {}
        # Config("ip.txt") raised dict()'s bare "dictionary update sequence
        # element #0 has length 1", and a pathlib.Path "not iterable".
        if isinstance(settings, (str, bytes, bytearray, os.PathLike)):
            _fail(-EINVAL, "settings %r: expected a dict of settings (a cluster file is "
                  "Config(cluster=%r))" % (settings, settings), TypeError)
        try:
            base = dict(settings or {})
        except (TypeError, ValueError) as e:
            _fail(-EINVAL, "settings %r: expected a dict of settings (%s)" % (settings, e),
                  TypeError)
        # One setting by two spellings ({"num_workers": 3, "num-workers": 5}),
        # or in the dict and as a keyword: the last one won in silence.
        seen = {}
        for k in list(base) + list(kw):
            n = k.replace("_", "-") if isinstance(k, str) else k
            if n in seen:
                _fail(-EINVAL, "setting %r given twice (as %r and %r): give it once"
                      % (n, seen[n], k), ValueError)
            seen[n] = k
        settings = dict(base, **kw)
        for k, v in settings.items():
            self.set(k, v)

    def set(self, key, value):
        if not isinstance(key, str):
            _fail(-EINVAL, "setting name %r: expected a str" % (key,), TypeError)
        key = key.replace("_", "-")
        # str(None) was the value: cluster=None read a file named "None".
        if value is None:
            _fail(-EINVAL, "setting %r = None: give a value, or leave the setting out (the "
                  "environment or the default then decides)" % key, TypeError)
        if isinstance(value, (bool, np.bool_)):
            # A bool is the value of a 0/1 setting only: as an int it made
            # machine_id=True machine 1 and server_id=True server 1.
            if key not in _FLAG_SETTINGS:
                _fail(-EINVAL, "setting %r = %r: expected a number or a text, not a bool (only "
                      "%s take True/False)" % (key, value, " and ".join(_FLAG_SETTINGS)),
                      TypeError)
            value = int(value)
        # str(b"ip.txt") is "b'ip.txt'": a path given as bytes named a file
        # that does not exist.
        if isinstance(value, (bytes, bytearray)):
            value = os.fsdecode(bytes(value))
        elif isinstance(value, os.PathLike):  # str() of an os.DirEntry is its repr
            value = os.fsdecode(value)
        value = str(value)
        # C reads "ip.txt\0.bak" as "ip.txt": the rest would go unseen.
        if "\0" in key or "\0" in value:
            _fail(-EINVAL, "setting %r = %r: has a NUL byte" % (key, value), ValueError)
        # The C side reads bytes: os.fsencode's, the inverse of the
        # os.fsdecode above (a path of bytes that are not UTF-8 raised a
        # bare UnicodeEncodeError); a lone surrogate it cannot take is refused.
        try:
            os.fsencode(key), os.fsencode(value)
        except UnicodeEncodeError as e:
            _fail(-EINVAL, "setting %r = %r: not valid UTF-8 (%s)" % (key, value, e.reason),
                  ValueError)
        with _Settings() as s:  # the C parser says whether the key exists
            s.set(key, value)
        self._values[key] = value
        return self

    def get(self, key):
        if not isinstance(key, str):
            _fail(-EINVAL, "setting name %r: expected a str" % (key,), TypeError)
        return self._values.get(key.replace("_", "-"))

    def copy(self, **kw):
        c = Config(self._values)
        for k, v in kw.items():
            if v is not None:
                c.set(k, v)
        return c

    def build(self):
        """(cdata struct rkv_config *, local server index): checked as the CLI checks."""
        with _Settings() as s:
            for k, v in self._values.items():
                s.set(k, v)
            cfg = ffi.new("struct rkv_config *")
            local = ffi.new("uint32_t *")
            err = _errbuf()
            rc = lib.rkv_settings_build(s.ptr, cfg, local, err, _ERR_LEN)
            if rc < 0:
                _raise_err(rc, err)
        return ffi.gc(cfg, lib.rkv_config_release), local[0]

    def __repr__(self):
        return "rkv.Config(%r)" % self._values


class _Settings:
    def __enter__(self):
        p = ffi.new("struct rkv_settings **")
        err = _errbuf()
        rc = lib.rkv_settings_create(p, err, _ERR_LEN)
        if rc < 0:
            _raise_err(rc, err)
        self.ptr = p[0]
        return self

    def set(self, key, value):
        err = _errbuf()
        rc = lib.rkv_settings_set(self.ptr, os.fsencode(key), os.fsencode(value), err, _ERR_LEN)
        if rc < 0:
            _raise_err(rc, err)

    def __exit__(self, *exc):
        lib.rkv_settings_destroy(self.ptr)
        self.ptr = ffi.NULL


def _as_config(config):
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if isinstance(config, dict):
        return Config(config)
    # A pathlib.Path (or bytes) was refused as no cluster file path.
    if isinstance(config, (str, bytes, bytearray, os.PathLike)):
        return Config(cluster=os.fsdecode(config) if not isinstance(config, bytearray)
                      else os.fsdecode(bytes(config)))
    _fail(-EINVAL, "config: expected rkv.Config, a dict of settings or a cluster file path, "
          "got %s" % type(config).__name__, TypeError)


class _Join:
    """One rkv_client_create (or _observer) call running in a helper thread:
    what it was given, and once it returns, rc with the client or the error.
    rc and abandoned are read and written under _joins_lock."""

    def __init__(self, create, cfg, key):
        self.create = create
        self.cfg = cfg  # the helper reads it until the call returns
        self.key = key
        self.p = ffi.new("struct rkv_client **")
        self.err = _errbuf()
        self.rc = None  # once the call returned
        self.abandoned = False  # its caller was interrupted and nobody took it over
        self.given_up = 0  # abandonments so far: a grace's timer ends its own only
        # A forked child inherits _joins, not the threads behind its clients:
        # it takes over only its own.
        self.pid = os.getpid()
        self.done = threading.Event()

    def run(self):
        try:
            rc = self.create(self.cfg, self.p, self.err, _ERR_LEN)
            with _joins_lock:
                self.rc = rc
                if self.abandoned and rc < 0:
                    _joins.remove(self)
                keep = self.abandoned and rc >= 0
            if keep:
                self.keep_for_grace()
        finally:  # whatever raised above, its waiter is not left waiting for ever
            self.done.set()

    def grace_s(self):
        """How long a made client nobody took over keeps its place: as long
        as the create would have waited for the others to join."""
        return (self.cfg.connect_retry_ms + self.cfg.timeout_ms) / 1000.0

    def keep_for_grace(self):
        """A made client whose caller was interrupted: kept for a create
        with the same config to take over, then destroyed (it leaves the
        job, as a killed worker does). It was destroyed at once: the others
        joining after the Ctrl-C made it, and the same rkv.Client() run
        again then met ELIMIT ("every one of the n_workers client ids was
        handed out already"), the job broken until its servers restarted
        (an outside tester)."""
        with _joins_lock:
            n = self.given_up
        t = threading.Timer(self.grace_s(), self.expire, (n,))
        t.daemon = True
        t.start()

    def expire(self, n):
        with _joins_lock:
            if not (self.abandoned and self.given_up == n and self in _joins):
                return  # taken over meanwhile
            _joins.remove(self)
            _joins_expired.add(self.key)
        lib.rkv_client_destroy(self.p[0])


# Creates whose caller a Ctrl-C interrupted while they waited for the other
# workers: the C call goes on, its HELLO holding a worker's place at server 0.
_joins = []
_joins_lock = threading.Lock()
# Keys of made clients whose grace ended with nobody taking them over: a
# create of the same key refused ELIMIT says why.
_joins_expired = set()


def _config_key(create, cfg):
    """What a client create is given, as bytes: two creates with equal keys
    join the same cluster as the same kind of client on the same machine."""
    raw = bytearray(ffi.buffer(cfg))
    # The machine table by value, not where this build's copy of it lies.
    at, size = ffi.offsetof("struct rkv_config", "machines"), ffi.sizeof("void *")
    raw[at:at + size] = bytes(size)
    machines = ffi.buffer(cfg.machines, cfg.n_machines * ffi.sizeof("struct rkv_machine"))
    return (create, bytes(raw), bytes(machines))


def _create_interruptibly(create, cfg):
    """create(cfg, ...), which waits for every worker to join (up to
    connect_retry_ms + timeout_ms, a minute by default): in the main thread
    it runs in a helper thread while this one waits in slices, so that Ctrl-C
    raises KeyboardInterrupt at once (it was raised only once the wait timed
    out). Returns (rc, client pointer, error text).

    The interrupted call goes on, its HELLO holding a worker's place at server
    0: a create with the same config in this process takes it over and waits
    for it (one that sent a HELLO of its own took a second place: Ctrl-C,
    then the same rkv.Client() again, as in a notebook, left the last worker
    refused with ELIMIT, and the interrupted client left the job once every
    place was taken). One made that nobody takes over is kept for as long as
    the create would have waited (connect_retry_ms + timeout_ms), then
    destroyed, as a killed worker's connection goes (_Join.keep_for_grace)."""
    key = _config_key(create, cfg)
    with _joins_lock:
        job = next((j for j in _joins if j.key == key and j.pid == os.getpid()), None)
        if job is not None:  # taken over: its client is this call's
            _joins.remove(job)
            job.abandoned = False
    if job is None:
        job = _Join(create, cfg, key)
        if threading.current_thread() is not threading.main_thread():
            job.run()  # signals are the main thread's alone: nothing interrupts it
        else:
            threading.Thread(target=job.run, name="rkv-client-create", daemon=True).start()
    try:
        while not job.done.wait(0.2):
            pass
    except BaseException:
        with _joins_lock:
            keep = job.rc is not None and job.rc >= 0  # made just as the interrupt came
            if job.rc is None or keep:
                job.abandoned = True
                job.given_up += 1
                _joins.append(job)
        if keep:
            job.keep_for_grace()
        raise
    err = ffi.string(job.err).decode(errors="replace")
    with _joins_lock:
        expired = job.rc == -ELIMIT and key in _joins_expired
        if job.rc >= 0:  # joined again (restarted servers): an old grace says nothing more
            _joins_expired.discard(key)
    if expired:
        err += (" (this process's rkv.Client() interrupted earlier was given a place, and gave it "
                "up after %g s with nobody taking it over: that worker left the job; restart the "
                "servers to start it over)" % job.grace_s())
    return job.rc, job.p[0], err


def _no_copy(obj, kind, other):
    """copy.copy, copy.deepcopy and pickle of a Client or Server: refused. A
    shallow copy shared the C object, and whichever of the two was
    collected first destroyed it under the other (a segfault at its next
    call); pickle raised cffi's bare "cannot pickle '_CDataBase' object"."""
    _fail(-EINVAL, "an rkv.%s cannot be copied or pickled: it is this process's own %s (share "
          "the object itself; another process makes %s)"
          % (kind, "connection to the store" if kind == "Client" else "server", other),
          TypeError)


def _run_then_set(fn, args, out, done):
    """A helper thread's body: out gets fn(*args), then done is set."""
    try:
        out.append(fn(*args))
    finally:
        done.set()


def _term_exit(signo, frame):
    raise SystemExit(128 + signo)


def _term_as_exit():
    """SIGTERM as SystemExit(143) while a server runs in the main thread,
    where the default action ends the process without closing anything;
    a handler the program set is left alone. Returns the handler to put
    back, or None."""
    if threading.get_ident() != _MAIN_IDENT:
        return None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None
        return signal.signal(signal.SIGTERM, _term_exit)
    except (ValueError, OSError):
        return None


class Server:
    """One server of the cluster. server_id is global (machine 0's servers first);
    without it, local_id-th server of the config's machine-id. Serves from its
    creation, on threads of its own, until close(); run() blocks until a
    client calls shut_down() (after which the server refuses new requests,
    ESHUTDOWN) or stop() is called (after which it still answers them: close()
    it to stop serving)."""

    def __init__(self, config=None, server_id=None, local_id=None):
        conf = _as_config(config)
        cfg, local = conf.copy(server_id=server_id).build()
        # Told neither which server nor which machine, in a cluster of
        # several servers, it became the host's machine's first (as `rkv
        # server` did): a second one was then refused for a "machine segment
        # in use ... another cluster?" (an outside tester, DGL_SERVER_ID=).
        told = [server_id, local_id, conf.get("server-id"), conf.get("machine-id"),
                os.environ.get("RKV_SERVER_ID"), os.environ.get("DGL_SERVER_ID"),
                os.environ.get("RKV_MACHINE_ID")]
        n_servers = sum(cfg.machines[m].servers for m in range(cfg.n_machines))
        if n_servers > 1 and not any(v is not None and str(v) != "" for v in told):
            _fail(-ECONFIG, "which server is this? the cluster has %d servers: give server_id "
                  "(or RKV_SERVER_ID, DGL_SERVER_ID; 0..%d, machine 0's first), or local_id "
                  "with machine_id" % (n_servers, n_servers - 1), ValueError)
        if local_id is not None:
            lid = _int_arg(local_id, "local_id", 0, 255)
            # local_id replaced the server_id's local index: Server(server_id=1,
            # local_id=0) became machine 0's server 0, not server 1.
            if server_id is not None and lid != local:
                _fail(-EINVAL, "server_id %r is server %d of machine %d, but local_id says %d: "
                      "give one of them" % (server_id, local, cfg.machine_id, lid), ValueError)
            local = lid
        p = ffi.new("struct rkv_server **")
        err = _errbuf()
        rc = lib.rkv_server_create(cfg, local, p, err, _ERR_LEN)
        if rc < 0:
            _raise_err(rc, err)
        self._srv = p[0]
        self._pid = os.getpid()
        self._run_lock = threading.Lock()  # guards _running
        self._pull = {}
        self.machine_id = cfg.machine_id
        self.local_id = local
        self._timeout_ms = cfg.timeout_ms  # run()'s linger once stopped
        _live_servers.add(self)

    def _live(self):
        if self._srv is None:
            _fail(-EINVAL, "server is closed")
        # rkv_server_create started the server's threads, which a forked child
        # (multiprocessing's fork: Process(target=server.run)) lacks: its run()
        # waited for good, while the parent's threads served the connections.
        if self._pid != os.getpid():
            _fail(-EINVAL, "this rkv.Server was made in process %d, and this is process %d (a "
                  "forked child): make the Server in the process that runs it (or use the "
                  "'spawn' start method)" % (self._pid, os.getpid()))
        return self._srv

    def register_handler(self, op, fn, user=None):
        _register_push(lib.rkv_server_register_handler, self._live(), op, fn, user)

    register_handler.__doc__ = _PUSH_HANDLER_DOC

    def register_pull_handler(self, hid, fn, out_mult=1, out_add=0, user=None):
        _register_pull(lib.rkv_server_register_pull_handler, self._live(), self._pull, hid, fn,
                       out_mult, out_add, user)

    register_pull_handler.__doc__ = _PULL_HANDLER_DOC

    def pull_handler_errors(self, hid):
        """How many calls of Python pull handler hid on this server raised."""
        return _handler_errors(self._pull, hid)

    def run(self):
        """Blocks until a client's shut_down() or stop(). Ctrl-C (any exception
        raised in this thread meanwhile, KeyboardInterrupt above all) stops
        it too, and is raised again once run() ended. So does SIGTERM (what
        timeout, Slurm, Kubernetes and launchers send) while run() waits in
        the main thread and the program set no handler of its own: it is
        raised as SystemExit(143), so that the exit closes the server and
        removes its shared memory (the default action killed the process
        and left the segments in /dev/shm). The server answers
        requests until close() (or the process's exit) all the same."""
        self._live()
        # One thread at a time (as rkv_server_run): a second run() set
        # _running again, the first's return cleared it under the second,
        # and close() then freed the server the second still ran.
        with self._run_lock:
            self._live()  # the exit's close (_close_at_exit) may have come meanwhile
            if getattr(self, "_running", False):
                _fail(-EINVAL, "run(): another thread runs this server already")
            self._running = True
        out = []
        # The C call blocks until stopped, where Python never runs its
        # signal handlers: Ctrl-C was ignored and the process had to be
        # killed, leaving its /dev/shm segments. It runs in a helper
        # thread; this one waits in slices, so a signal reaches it.
        # An Event, not Thread.join: a join that KeyboardInterrupt interrupts
        # marks the thread stopped while it still runs (CPython gh-90882,
        # in 3.11), and a later join returned at once: close() in the
        # caller's except then freed the server under rkv_server_run.
        done = threading.Event()
        term = None
        try:
            term = _term_as_exit()  # inside: a SIGTERM right after it is this try's
            threading.Thread(target=_run_then_set, args=(lib.rkv_server_run, (self._srv,), out,
                                                         done),
                             name="rkv-server-run", daemon=True).start()
            try:
                while not done.wait(0.2):
                    pass
            except BaseException:
                lib.rkv_server_stop(self._srv)
                # A second Ctrl-C here ended this wait, and the finally
                # below cleared _running while rkv_server_run still ran:
                # close() then freed the server under it. The stop is
                # asked; its linger is bounded by timeout_ms.
                while True:
                    try:
                        done.wait()
                        break
                    except BaseException:
                        continue
                raise
        finally:
            self._running = False
            if term is not None:
                try:
                    signal.signal(signal.SIGTERM, term)
                except (ValueError, OSError):
                    pass
        rc = out[0] if out else -EINVAL
        if rc < 0:
            _fail(rc, ffi.string(lib.rkv_server_errmsg(self._srv)).decode(errors="replace"))

    def stop(self):
        """Makes run() return, from any thread (rkv_server_stop): for a server
        whose workers are gone without a shut_down(), or the program's own
        stop. The server still answers requests until close() (clients with
        retry_ms in durable mode then redial one restarted in its place,
        where one refused meanwhile would fail)."""
        if self._srv is not None:  # a closed one: nothing to stop
            # A forked child's copy has no threads to stop: it did nothing,
            # silently, while the parent's server went on serving.
            lib.rkv_server_stop(self._live())

    def _close_at_exit(self):
        """Stops and closes the server as the interpreter exits (_at_exit):
        run() in a daemon thread was killed at exit, and the machine's
        shared memory (the size of its shard) stayed in /dev/shm."""
        if getattr(self, "_srv", None) is None or self._pid != os.getpid():
            return
        lib.rkv_server_stop(self._srv)
        # run() returns once it lingered (at most timeout_ms) for replies owed.
        end = time.monotonic() + self._timeout_ms / 1000.0 + 5.0
        while getattr(self, "_running", False) and time.monotonic() < end:
            time.sleep(0.02)
        with self._run_lock:  # against a run() starting now
            if not getattr(self, "_running", False):
                self.close()

    def close(self):
        if getattr(self, "_srv", None) is not None and self._pid != os.getpid():
            # A forked child's copy: the server runs in the parent (its
            # _running came with the fork, and said "server is running"
            # here); the child only lets go of its handle.
            self._srv = None
            return
        if getattr(self, "_running", False):
            _fail(-EINVAL, "server is running: stop() it, or a client's shut_down(), first")
        if getattr(self, "_srv", None) is not None:
            lib.rkv_server_destroy(self._srv)
            self._srv = None

    def __enter__(self):
        # "with" on a closed one went in, and failed only at its first call.
        if self._srv is None:
            _fail(-EINVAL, "server is closed")
        return self

    def __reduce_ex__(self, protocol):
        _no_copy(self, "Server", "a Server of its own")

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class _Meta:
    __slots__ = ("name", "bname", "dtype", "rows", "row_len", "row_shape", "policy",
                 "with_state")


def _name_str(raw):
    """A tensor's name as the store holds it (bytes) as Python shows it: UTF-8,
    with each byte that is no part of valid UTF-8 as a lone surrogate
    U+DC80..U+DCFF (surrogateescape, as os.fsdecode reads a file name), so
    that a name made from C in another encoding comes back to the store as
    the same bytes (_name_bytes), not as U+FFFD, which named no tensor."""
    return raw.decode("utf-8", "surrogateescape")


def _name_bytes(name):
    """A tensor's name as the C side takes it: 1..RKV_NAME_MAX bytes, without
    NUL (C would read "a\\0b" as "a"): the str's UTF-8, with U+DC80..U+DCFF
    standing for the bytes 0x80..0xff (surrogateescape, as os.fsencode and
    _name_str)."""
    if not isinstance(name, str):
        _fail(-EINVAL, "tensor name %r: expected a str" % (name,), TypeError)
    try:
        encoded = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:  # another lone surrogate: raised bare from every call
        _fail(-EINVAL, "tensor name %r: not valid UTF-8 (%s; U+DC80..U+DCFF alone stand for "
              "the bytes 0x80..0xff, as os.fsencode takes them)" % (name, e.reason),
              ValueError)
    if b"\0" in encoded:
        _fail(-EINVAL, "tensor name %r: has a NUL byte" % name, ValueError)
    if len(encoded) > lib.RKV_NAME_MAX or not encoded:
        _fail(-EINVAL, "tensor name %r: 1..%d bytes" % (name, lib.RKV_NAME_MAX), ValueError)
    return encoded


def _meta_of(cm, name):
    m = _Meta()
    m.name = name
    m.bname = _name_bytes(name)
    m.dtype = _NP_OF[cm.dtype]
    m.rows = cm.rows
    m.row_len = cm.row_len
    # The store keeps a row's length, not its shape: every process sees
    # (rows, row_len), or (rows,) for one element per row.
    m.row_shape = (cm.row_len,) if cm.row_len > 1 else ()
    m.policy = _POLICY_NAMES.get(cm.policy, str(cm.policy))
    m.with_state = bool(cm.with_state)
    return m


TensorMeta = collections.namedtuple("TensorMeta", "name dtype shape part_policy with_state")
TensorMeta.__doc__ = """A tensor as Client.list() gives it: dtype as get_data_meta's,
shape (rows, row_len) or (rows,), part_policy "range", "hash" or "explicit"."""


# A push message's header (RKV_PROTO_HDR_BYTES, 64), with room to spare.
_MSG_HDR_BYTES = 256

# Pushes whose handle was dropped that may wait for a barrier; past it,
# the older half is waited for at the next push (bounded memory for a
# fire-and-forget loop that never calls barrier()).
_MAX_ORPHANS = 1024


class _Push:
    """A push in flight as its client keeps it: the C handle and the arrays
    the NIC reads from, until it is waited for."""
    __slots__ = ("pending", "keep", "dropped", "outcome", "waiting")

    def __init__(self, pending, keep):
        self.pending = pending
        self.keep = keep
        self.dropped = False  # close() dropped it unwaited
        self.outcome = None  # (rc, message) once waited for
        self.waiting = False  # a thread is in its C wait


class PushHandle:
    """A push in flight (push(..., async_=True)): wait() returns once every server
    acknowledged it, or raises its error; again, or from several threads at
    once, each returns (or raises) the same once it is known. The ids and
    rows it was given are read until then: do not change them. A handle
    dropped unwaited (DGL's fire-and-forget push) is waited for by the client
    at its next barrier(), which raises the first such push's error, or
    sooner once many are left."""

    def __init__(self, client, rec):
        self._client = client
        self._rec = rec

    def wait(self):
        c, rec = self._client, self._rec
        # Looked at again under the lock, which a thread waiting holds: a
        # second thread that saw it pending before the first took the lock
        # handed C a handle already freed (None: a cffi TypeError), and one
        # that came later was told "already waited for" while the push was
        # still in flight. Its outcome, once known, is everyone's.
        if rec.outcome is None and not rec.dropped:
            with c._lock:
                if rec.outcome is None and not rec.dropped:
                    c._live()
                    c._wait_rec(rec)
        if rec.outcome is None:
            # Not "dropped": the push was sent, and the servers may well
            # have applied it (an outside tester saw all of them applied);
            # a caller who pushed again would have summed twice.
            _fail(-ESHUTDOWN, "client is closed before this push was waited for: its outcome "
                  "is unknown (it was sent, and the servers may have applied it)")
        rc, msg = rec.outcome
        if rc < 0:
            _fail(rc, msg)

    @property
    def done(self):
        """Whether wait() would return (or raise) at once."""
        rec = self._rec
        return rec.outcome is not None or rec.dropped

    def __del__(self):
        # No lock here (a collection may run inside any call, the client's
        # own too): a list append is atomic, and the client waits for it.
        rec = getattr(self, "_rec", None)
        if rec is not None and rec.pending is not None:
            self._client._orphans.append(rec)


def _stats_percentile_us(hist, q, max_ns):
    """The upper edge of the log2 bucket holding quantile q, at most the max."""
    total = sum(hist)
    acc = 0
    for b, n in enumerate(hist):
        acc += n
        if total and acc >= q * total:
            return min(float(2 << b), float(max_ns)) / 1e3
    return 0.0


def _op_stats(st):
    hist = [int(st.hist[b]) for b in range(lib.RKV_STATS_BUCKETS)]
    d = {k: int(getattr(st, k)) for k in ("count", "errors", "rows", "bytes", "timed",
                                           "total_ns", "max_ns")}
    # total_ns and hist hold the timed calls only (rkv.h, rkv_op_stats)
    d["mean_us"] = d["total_ns"] / d["timed"] / 1e3 if d["timed"] else 0.0
    d["p50_us"] = _stats_percentile_us(hist, 0.5, d["max_ns"])
    d["p99_us"] = _stats_percentile_us(hist, 0.99, d["max_ns"])
    d["hist"] = hist
    return d


class Client:
    """A worker's connection to the store. Blocks until all num-workers clients
    joined (Ctrl-C interrupts the wait in the main thread; the same Client()
    again in this process takes over the interrupted one's place, which is
    otherwise given up connect_retry_ms + timeout_ms after the others
    joined, as if that worker had left). machine_id
    overrides the config's (which machine this trainer runs on: its rows
    there move through shared memory). output: "torch" or "numpy" for what
    pull returns; "auto" is torch when it can be imported.
    One thread at a time uses the C client: calls from several threads queue;
    one from inside a pull handler is refused (EINVAL).
    observer=True: a client that reads the catalogue only (list(),
    data_name_list(), get_data_meta()): it joins server 0 without being one
    of the num_workers clients, so it neither waits for them nor can push,
    pull or enter a barrier (those raise EINVAL); for a process that joins a
    running job to see what it holds."""

    def __init__(self, config=None, machine_id=None, output="auto", observer=False):
        if output not in ("auto", "torch", "numpy"):
            _fail(-EINVAL, "output: expected auto, torch or numpy, got %r" % (output,))
        # Any truthy object made an observer (observer="no"), any falsy one a
        # worker (observer=[]): checked before anything joins.
        observer = _bool_arg(observer, "observer")
        # An observer talks to server 0 alone and has no machine: one on a
        # monitoring host none of the cluster's machines is was refused for
        # not finding its machine there.
        if observer and machine_id is None and _as_config(config).get("machine-id") is None:
            machine_id = 0
        cfg, _ = _as_config(config).copy(machine_id=machine_id).build()
        create = lib.rkv_client_create_observer if observer else lib.rkv_client_create
        rc, cli, err = _create_interruptibly(create, cfg)
        if rc < 0:
            _fail(rc, err or strerror(rc))
        self._cli = cli
        self._pid = os.getpid()
        self._call_lock = threading.Lock()
        self._meta = {}
        self._inflight = set()  # _Push records not waited for
        self._orphans = []  # of them, those whose PushHandle was dropped
        self._orphan_error = None  # the first failure among them, for barrier()
        self._pull = {}
        self._registered = {}  # (address, bytes) -> array, for register()
        self._kept = []  # rows of pushes whose wait a KeyboardInterrupt cut, until close()
        self._output = output
        self._stuck = None  # a barrier a Ctrl-C interrupted: an Event set when it ends
        self._sig_cut = False  # _sig_watch_loop interrupted the call in C (_sig_lock)
        self._sig_t0 = 0  # when the main thread's call in C began (time.monotonic_ns)
        self.observer = observer
        self.machine_id = cfg.machine_id
        self.num_workers = cfg.n_workers
        self._max_slot_bytes = cfg.max_slot_bytes  # the largest push message (init's fill)
        # Tensors this client created for an init function whose fill did not
        # finish (a Ctrl-C, a timeout): a retry fills them again.
        self._unfilled = set()
        _live_clients.add(self)

    # -- helpers --
    @property
    def _lock(self):
        """The lock every call holds across its C calls (calls from several
        threads queue): refused inside a pull handler, before it is taken.
        A plain Lock, entered by `with` itself: a wrapper's __enter__ in
        Python could be interrupted (KeyboardInterrupt) between acquiring it
        and returning, and leave it held for good."""
        _no_call_from_a_handler()
        return self._call_lock

    def _errmsg(self):
        return ffi.string(lib.rkv_client_errmsg(self._cli)).decode(errors="replace")

    def _live(self):
        if self._cli is None:
            _fail(-ESHUTDOWN, "client is closed")
        if self._stuck is not None:
            if not self._stuck.is_set():
                _fail(-EINVAL, "this client's barrier() was interrupted (KeyboardInterrupt) and "
                      "still waits for the other workers to enter it: no call can use the "
                      "client until it is done")
            self._stuck = None
        # A forked child (a DataLoader worker, multiprocessing's fork) has
        # the client's memory but not its threads: its requests waited out
        # timeout_ms, and its credits broke the parent's connection.
        if self._pid != os.getpid():
            _fail(-EINVAL, "this rkv.Client was made in process %d, and this is process %d (a "
                  "forked child): make a Client in this process (or use the 'spawn' start "
                  "method)" % (self._pid, os.getpid()))
        # Every call comes here holding the client's lock, so no call of it
        # is in C: an interrupt still on was left by a KeyboardInterrupt in
        # _cut's finally, and would refuse this call (any thread's).
        if self._sig_cut:
            self._sig_clear()
        return self._cli

    def _call(self, fn, *args):
        with self._lock:
            rc = self._cut(fn, self._live(), *args)
            if rc < 0:
                _fail(rc, self._errmsg())
        return rc

    def _cut(self, fn, *args):
        """fn(*args), a C call of this client that may wait for servers:
        in the main thread Ctrl-C interrupts it (_sig_watch_loop). The lock
        held. A KeyboardInterrupt inside the finally below may leave the
        client interrupted: the next call here turns that off first."""
        if threading.get_ident() != _MAIN_IDENT or (_sig_watch is not True and not _sig_watching()):
            return fn(*args)
        if self._sig_cut:
            self._sig_clear()
        key = id(self)
        self._sig_t0 = time.monotonic_ns()
        _sig_calls[key] = self
        try:
            return fn(*args)
        finally:
            with _sig_lock:  # the watcher acts under it: never after this
                _sig_calls.pop(key, None)
                if self._sig_cut:
                    lib.rkv_client_interrupt(self._cli, 0)
                    self._sig_cut = False

    def _sig_clear(self):
        with _sig_lock:
            if self._sig_cut and self._cli is not None:
                lib.rkv_client_interrupt(self._cli, 0)
            self._sig_cut = False

    def _wrap(self, arr):
        if self._output == "numpy":
            return arr
        t = _torch()
        if t is None:
            if self._output == "torch":
                _fail(-EINVAL, "output='torch' but torch cannot be imported")
            return arr
        return t.from_numpy(arr)

    def _m(self, name, ask=False):
        """Tensor name's meta, from this process's cache once looked up.
        ask: for a call that answers from the meta alone (get_data_meta,
        pull_len): the C client is asked even so, and refuses as it refuses
        a name not cached (after shut_down() a cached name was answered
        while any other failed with ESHUTDOWN). It answers a name it looked
        up from its own table, without a request (one that only list() gave
        costs one request, once). push and pull need not ask: their own C
        call refuses them."""
        # Only a str can be a key: a list as the name raised a bare
        # "unhashable type" from the lookup.
        m = self._meta.get(name) if isinstance(name, str) else None
        if m is None or ask:
            cm = ffi.new("struct rkv_tensor_meta *")
            self._call(lib.rkv_client_meta, _name_bytes(name), cm)
            if m is None:
                m = _meta_of(cm, name)
                self._meta[name] = m  # tensors are never dropped or reshaped
        return m

    def _dtype_out(self, dt):
        t = _torch() if self._output != "numpy" else None
        return getattr(t, str(dt)) if t is not None else dt

    @property
    def client_id(self):
        """This client's id (0..num_workers-1), or None for an observer."""
        cid = lib.rkv_client_id(self._live())
        return None if cid == lib.RKV_CLIENT_OBSERVER else cid

    def register_handler(self, op, fn, user=None):
        with self._lock:
            _register_push(lib.rkv_client_register_handler, self._live(), op, fn, user)

    register_handler.__doc__ = _PUSH_HANDLER_DOC

    def register_pull_handler(self, hid, fn, out_mult=1, out_add=0, user=None):
        with self._lock:
            _register_pull(lib.rkv_client_register_pull_handler, self._live(), self._pull, hid,
                           fn, out_mult, out_add, user)

    register_pull_handler.__doc__ = _PULL_HANDLER_DOC

    def pull_handler_errors(self, hid):
        """How many calls of Python pull handler hid in this client raised."""
        return _handler_errors(self._pull, hid)

    def list(self):
        """Every tensor of the store, as server 0 knows them (those whose
        init_data finished), in creation order: a list of TensorMeta."""
        with self._lock:
            cli = self._live()
            n = ffi.new("size_t *")
            cap = 0
            metas = ffi.NULL
            while True:
                rc = self._cut(lib.rkv_client_list, cli, metas, cap, n)
                if rc < 0:
                    _fail(rc, self._errmsg())
                if n[0] <= cap:
                    break
                cap = n[0] + 8  # tensors created meanwhile: room for a few more
                metas = ffi.new("struct rkv_tensor_meta[]", cap)
            out = []
            for i in range(n[0]):
                name = _name_str(ffi.string(metas[i].name))
                m = _meta_of(metas[i], name)
                self._meta.setdefault(name, m)
                out.append(TensorMeta(name, self._dtype_out(m.dtype), (m.rows,) + m.row_shape,
                                      m.policy, m.with_state))
        return out

    def data_name_list(self):
        """The names of every tensor (DGL's get_data_name_list), in creation order."""
        return [m.name for m in self.list()]

    get_data_name_list = data_name_list

    # -- the API --
    def init_data(self, name, shape, dtype, part_policy="range", init="zeros", seed=None,
                  with_state=False, local_index=None):
        """Creates tensor `name` of shape (rows, *row_shape) on every machine
        (idempotent for the same arguments). The store keeps the row length:
        pulls return (n, row_len) rows, or (n,) when a row is one element.
        part_policy: "range", "hash", or a book: a sequence (list, numpy or
        torch integers) giving each row's machine (DGL's set_partition_book).
        local_index (with a book only; DGL's set_global2local): each row's
        index in its machine's shard, which stores the rows in that order;
        on each machine the indices of its rows must be a permutation of
        0..n-1 (EINVAL naming the first bad row otherwise). Without it a
        row's index is the count of earlier rows on its machine.
        init: "zeros", "uniform" (seeded by seed, default 0; floats in
        [-1, 1), integers floor(1000 u) for such a u), or a function
        (shape, dtype) -> values of that shape (dtype as given: a torch dtype
        stays one, as DGL's init functions take it, and the function is
        called again with numpy's if it raises TypeError; else numpy's) that
        this client then assigns to the rows when the call creates the
        tensor (an existing one keeps its rows, as with the others; call it
        from one client, then barrier). A call cut short (Ctrl-C, a timeout) once the tensor was
        made may have filled part of it: the same call again on this client
        fills it all; another process cannot tell, so a trainer that died
        mid-fill leaves rows of zeros behind (restart the servers, or assign
        them). A seed with another init is refused (it would be ignored).
        with_state: keep optimizer state per row (adagrad needs it; pull's
        handler="with_state" returns it)."""
        encoded = _name_bytes(name)
        if isinstance(shape, (str, bytes)):
            _fail(-EINVAL, "shape %r: expected (rows, *row_shape) of integers" % (shape,),
                  TypeError)
        # A set's or a dict's order is not the caller's: shape={10, 4} was
        # taken in the set's iteration order, a dict by its keys.
        if isinstance(shape, (collections.abc.Set, collections.abc.Mapping)):
            _fail(-EINVAL, "shape %r: expected (rows, *row_shape) of integers in order, got "
                  "a %s (%s)" % (shape, type(shape).__name__,
                                 "unordered" if isinstance(shape, collections.abc.Set)
                                 else "a mapping: its keys would be the shape"), TypeError)
        # A 0-d array or tensor has __len__ but no elements: iterating raised
        # a bare TypeError ("iteration over a 0-d array"). Refused as a 0-d
        # one among the dims is (_int_arg), rather than guessed to be the rows.
        if (isinstance(shape, np.ndarray) or _is_torch(shape)) and shape.ndim == 0:
            _fail(-EINVAL, "shape %r: expected (rows, *row_shape) of integers, got a 0-d %s "
                  "(give its .item())" % (shape, type(shape).__name__), TypeError)
        dims = shape if hasattr(shape, "__len__") else (shape,)
        shape = tuple(_int_arg(s, "shape %r" % (tuple(dims),), 1, (1 << 64) - 1) for s in dims)
        if not shape:
            _fail(-EINVAL, "shape (): expected positive (rows, *row_shape)")
        row_shape = shape[1:] or (1,)
        row_len = 1
        for s in row_shape:  # Python ints: numpy's prod wrapped (2**62+1) x 4 to 4
            row_len *= s
        if row_len > 0xFFFFFFFF:
            _fail(-EINVAL, "shape %r: a row of %d elements; at most %d" % (shape, row_len,
                                                                            0xFFFFFFFF))
        dt = _np_dtype(dtype)
        d = ffi.new("struct rkv_tensor_desc *")
        d.name = encoded
        d.dtype = _DTYPES[dt]
        d.rows = shape[0]
        d.row_len = row_len
        book = None
        if isinstance(part_policy, str):
            if part_policy not in _POLICIES:
                _fail(-EINVAL, "part_policy %r: expected range, hash or a book" % part_policy)
            d.policy = _POLICIES[part_policy]
        else:
            book = _index_array(part_policy, "part_policy (the book)", shape[0], np.uint32)
            d.policy = lib.RKV_PART_EXPLICIT
            d.book = ffi.from_buffer("uint32_t[]", book)
        local = None
        if local_index is not None:
            # The C side checks the map (and that the policy is explicit).
            local = _index_array(local_index, "local_index", shape[0])
            d.local_index = ffi.from_buffer("uint64_t[]", local)
        fill = None
        if callable(init):
            fill, init = init, "zeros"
        if init not in ("zeros", "uniform"):
            _fail(-EINVAL, "init %r: expected zeros, uniform or a function" % (init,))
        d.init = lib.RKV_INIT_UNIFORM if init == "uniform" else lib.RKV_INIT_ZEROS
        d.init_seed = 0 if seed is None else _int_arg(seed, "seed", 0, (1 << 64) - 1)
        # The store reads the seed only for uniform rows: seed=S with zeros
        # (or a function) built the same tensor whatever S was.
        if seed is not None and init != "uniform":
            _fail(-EINVAL, "seed %r: only init='uniform' takes a seed, not init=%s"
                  % (seed, "a function" if fill is not None else repr(init)), ValueError)
        d.with_state = int(_bool_arg(with_state, "with_state"))
        values = None
        if fill is not None:
            # Called and checked before the tensor exists: a function that
            # raised or gave the wrong count or type left a tensor of zeros
            # behind, which a corrected retry then met as already there.
            # DGL's init functions take the framework's dtype: one given as a
            # torch dtype reaches the function as that first (torch.zeros(shape,
            # dtype=np.float32) is a TypeError), and as numpy's if the function
            # refuses it with a TypeError (np.full(shape, v, torch.float32) is
            # one: numpy init functions worked with torch dtypes before).
            if _is_torch_dtype(dtype):
                try:
                    made = fill(shape, dtype)
                except TypeError as e:
                    first = e
                else:
                    first = None
                if first is not None:
                    # The function's own bug raised the first TypeError as
                    # often as a torch dtype did: said with the retry's, not
                    # replaced by it (an outside tester).
                    try:
                        made = fill(shape, dt)
                    except Exception as e:
                        _fail(-EINVAL, "init function: raised TypeError with dtype %s (%s), and "
                              "%s with numpy's %s (%s)" % (dtype, first, type(e).__name__, dt, e),
                              TypeError)
            else:
                made = fill(shape, dt)
            if made is None:
                _fail(-EINVAL, "init function: returned None; expected values of shape %s"
                      % (shape,), TypeError)
            values = _as_numpy(made, values=True, what="init function")
            # Its values of any other shape were read in row-major order: a
            # transposed (3, 4) for shape (4, 3) filled the rows silently,
            # where a push of the same array is refused (an outside tester).
            if tuple(values.shape) != shape:
                _fail(-EDTYPE, "init function: returned values of shape %s for shape %s"
                      % (tuple(values.shape), shape), ValueError)
            if values.dtype != dt:
                values = _cast_fit(values, dt, "init function: tensor '%s' holds %s"
                                   % (name, dt))
            values = values.reshape(shape[0], d.row_len)
            # The fill's pushes go in messages of at most max_slot_bytes: one
            # over it failed (ELIMIT) after the tensor was made, left zeros.
            row_bytes = 8 + d.row_len * dt.itemsize  # an id and a row
            step = min((64 << 20) // row_bytes,
                       (self._max_slot_bytes - _MSG_HDR_BYTES) // row_bytes)
            if step < 1:
                _fail(-ELIMIT, "init function: a row of tensor '%s' (%d bytes) does not fit in "
                      "one message of max_slot_bytes %d: raise max_slot_bytes"
                      % (name, row_bytes - 8, self._max_slot_bytes))
        existed = False
        if values is not None:
            # A second init_data (a restarted trainer) assigned the function's
            # values again over every trained row, silently.
            cm = ffi.new("struct rkv_tensor_meta *")
            with self._lock:
                rc = self._cut(lib.rkv_client_meta, self._live(), encoded, cm)
                if rc < 0 and rc != -ENOTENSOR:
                    _fail(rc, self._errmsg())
            # But one this client made and did not finish filling is filled
            # again: a Ctrl-C or a timeout between the tensor's making and
            # the fill's last push, then the same call again, left rows of
            # zeros and said nothing (an outside tester).
            existed = rc == 0 and name not in self._unfilled
            if not existed:
                self._unfilled.add(name)  # before the call: a cut may come after the making
        try:
            self._call(lib.rkv_client_init_data, d)
        except Error as e:
            if e.code == -EEXIST:  # another desc's tensor: not this client's to fill
                self._unfilled.discard(name)
            raise
        self._meta.pop(name, None)
        if values is not None and not existed:
            for r in range(0, shape[0], step):
                self.push(name, np.arange(r, min(r + step, shape[0]), dtype=np.uint64),
                          values[r:r + step], op="assign")
            self._unfilled.discard(name)

    def get_data_meta(self, name):
        """(dtype, shape, part_policy) of tensor `name`, as DGL's: dtype is torch's
        when pull returns torch tensors. Unlike DGL's, shape is (rows, row_len),
        or (rows,) for one element a row, whatever shape init_data was given."""
        self._live()  # before the name's checks, as every call says it is closed
        m = self._m(name, ask=True)
        return self._dtype_out(m.dtype), (m.rows,) + m.row_shape, m.policy

    def _rows(self, m, data, n):
        a = _as_numpy(data, values=True, what="tensor '%s': data" % m.name)
        if isinstance(data, (list, tuple)) and m.dtype.kind == "i" and a.dtype.kind in "fu":
            # numpy read [-1, 2**63] as float64 (rounded): refused as "cannot
            # take float64 data" where the value was out of range. Read one
            # by one, as past 64 bits (_object_numbers).
            try:
                a = np.array(data, dtype=object)
            except ValueError:
                pass
        wide = a.ndim >= 2 and int(np.prod(a.shape[1:])) != m.row_len
        if a.dtype == m.dtype and a.flags.c_contiguous and a.flags.aligned and \
                a.size == n * m.row_len and (a.ndim == 0 or a.shape[0] == n) and not wide:
            return a
        if a.dtype != m.dtype and not (a.size == 0 and n == 0):  # [] is no rows of any dtype
            a = _cast_rows(m, a)
        # An empty push's rows have no elements to count: a (0, 5) for rows
        # of 3 was taken, where (1, 5) is refused.
        if a.size != n * m.row_len or (a.ndim > 0 and a.shape[0] != n and n > 0) or wide:
            # A shape error is a ValueError too ("2 x () values" read as
            # nothing for a tensor of one element a row).
            need = "%d values (one a row)" % n if not m.row_shape else \
                "%d x %s values" % (n, m.row_shape)
            _fail(-EDTYPE, "tensor '%s': %d ids need %s, got shape %s"
                  % (m.name, n, need, a.shape), ValueError)
        return _c_array(a, m.dtype)

    def push(self, name, ids, data, op="sum", lr=None, async_=False):
        """Applies data[i] to row ids[i] with op: "sum" (the default, as
        ps-lite's; DGL's KVClient.push assigns by default: pass op="assign"
        for that), "assign", "sgd" (row -= lr * data) or "adagrad" (both need
        lr; assign and sum take none), or a registered custom op's number (lr
        is its parameter, default 0). A sum into an integer tensor wraps
        around on overflow, as numpy's integers do (int64: 2**62 + 2**62 is
        -2**63); the data itself must fit the dtype (else ERANGE). Returns
        once every server acknowledged; with async_=True returns a PushHandle at once."""
        m = self._m(name)
        code = _OPS.get(op) if isinstance(op, str) else _int_arg(op, "op", 0, (1 << 31) - 1)
        # Op 5 was sent and refused as "handler not registered", where no
        # registration can make it one (an outside tester).
        if code is None or (len(_OPS) <= code < OP_CUSTOM) or code >= lib.RKV_OP_MAX:
            _fail(-EINVAL, "op %r: expected assign, sum, sgd, adagrad (0..%d) or a custom op "
                  "number %d..%d" % (op, len(_OPS) - 1, OP_CUSTOM, lib.RKV_OP_MAX - 1),
                  ValueError)
        # lr defaulted to 0.0: op="sgd" without one pushed row -= 0 * grad,
        # nothing, and said nothing; one given to a sum was ignored.
        if lr is None and code in (_OPS["sgd"], _OPS["adagrad"]):
            _fail(-EINVAL, "lr: op %r needs a learning rate (lr=...)" % (op,), TypeError)
        if lr is not None and code in (_OPS["assign"], _OPS["sum"]):
            _fail(-EINVAL, "lr %r: op %r takes no learning rate" % (lr, op), ValueError)
        lr = 0.0 if lr is None else _real_arg(lr, "lr")
        # As torch.optim refuses one: row -= lr * data with lr < 0 climbs the
        # gradient (a custom op's parameter may be anything).
        if lr < 0 and code in (_OPS["sgd"], _OPS["adagrad"]):
            _fail(-EINVAL, "lr %r: a learning rate must not be negative (op %r applies "
                  "row -= lr * ...)" % (lr, op), ValueError)
        # The C side refuses it too (rkv.Error): raised here as the other
        # rates out of range are, a ValueError.
        if (code in (_OPS["sgd"], _OPS["adagrad"]) and m.dtype == np.float32 and
                lr > float(np.finfo(np.float32).max)):
            _fail(-EINVAL, "lr %r: past float32's largest (%r): a float32 tensor's step is taken "
                  "in float32" % (lr, float(np.finfo(np.float32).max)), ValueError)
        async_ = _bool_arg(async_, "async_")
        ida = _ids_array(ids)
        n = ida.size
        rows = self._rows(m, data, n)
        pids = ffi.from_buffer("uint64_t[]", ida)
        prows = ffi.from_buffer(rows)
        pp = ffi.new("struct rkv_pending **") if async_ else None
        with self._lock:
            cli = self._live()
            if not async_:
                rc = self._cut(lib.rkv_client_push, cli, m.bname, pids, n, prows, code, lr)
                if rc < 0:
                    _fail(rc, self._errmsg())
                return None
            try:
                rc = self._cut(lib.rkv_client_push_async, cli, m.bname, pids, n, prows, code, lr,
                               pp)
            finally:
                # Kept even when a KeyboardInterrupt (Ctrl-C that came
                # during the call) is raised on its way out: the rows stay
                # alive while the NIC may read them, and the push is
                # waited for at the next barrier() as a dropped handle's.
                if pp[0] != ffi.NULL:
                    rec = _Push(pp[0], (ida, rows, pids, prows))
                    self._inflight.add(rec)
                    self._orphans.append(rec)
            if rc < 0:
                _fail(rc, self._errmsg())
            h = PushHandle(self, rec)
            # Its handle waits for it (a collection meanwhile may have
            # appended a dropped handle's after it).
            if self._orphans[-1] is rec:
                self._orphans.pop()
            else:
                self._orphans.remove(rec)
            if len(self._orphans) > _MAX_ORPHANS:
                self._reap_orphans(len(self._orphans) // 2)
        return h

    def pull_len(self, name, handler):
        """Elements per row that pull(name, ids, handler=handler) returns."""
        self._live()
        m = self._m(name, ask=True)
        return self._pull_len(m, _handler_id(handler))

    def _pull_len(self, m, hid):
        if hid == PULL_ROWS:
            return m.row_len
        n = ffi.new("uint32_t *")
        self._call(lib.rkv_client_pull_len, m.bname, hid, n)
        return n[0]

    def pull(self, name, ids, out=None, handler=None, param=None):
        """Rows ids[i] in ids' order, shape (n, row_len) or (n,): a torch tensor (numpy
        without torch). With out (a tensor or array of that many elements, flat
        or of n rows), pulls
        into out's memory when it is contiguous and of the tensor's dtype; an out of
        another type must hold every value (int32 into int64 or float64, not int16,
        nor int64 into float64, which rounds past 2**53: EDTYPE, also a
        TypeError), and a read-only one, or one with several
        elements at one address (an expand()), is refused (EINVAL).
        handler (DGL's _udf_pull_handler) says what each row's reply is:
        None or "rows" the row; "with_state" the row then its optimizer state
        (shape (n, 2 * row_len); tensors created with_state); or a custom
        handler's id (see register_pull_handler), called with param (default 0;
        refused with the others, which take none); replies
        of L = pull_len(name, handler) elements are (n, L), or (n,) for L 1.
        Unknown handlers raise ENOHANDLER before anything is sent."""
        m = self._m(name)
        hid = _handler_id(handler)
        # Only a custom handler reads param: pull(name, ids, param=0.5)
        # without one returned the rows as if param meant nothing.
        if param is not None and hid in (PULL_ROWS, PULL_WITH_STATE):
            _fail(-EINVAL, "param %r: only a custom pull handler takes one (handler=%r)"
                  % (param, handler), ValueError)
        param = 0.0 if param is None else _real_arg(param, "param")
        ida = _ids_array(ids)
        n = ida.size
        # The reply length is the client's registration's, read under the same
        # lock hold as the pull so that a re-registration cannot fall between.
        with self._lock:
            cli = self._live()
            if hid == PULL_ROWS:
                out_len, row_shape = m.row_len, m.row_shape
            else:
                lp = ffi.new("uint32_t *")
                rc = self._cut(lib.rkv_client_pull_len, cli, m.bname, hid, lp)
                if rc < 0:
                    _fail(rc, self._errmsg())
                out_len = lp[0]
                row_shape = (out_len,) if out_len > 1 else ()
            target = None
            if out is not None:
                if not isinstance(out, np.ndarray) and not _is_torch(out):
                    _fail(-EINVAL, "out: expected a numpy array or a torch tensor, got %s"
                          % type(out).__name__, TypeError)
                if _is_torch(out):
                    # bfloat16 holds no store dtype's every value (and numpy has no
                    # bfloat16: torch's "unsupported ScalarType" said nothing of out).
                    if out.dtype == _torch().bfloat16:
                        _fail(-EDTYPE, "out: bfloat16 cannot hold every %s value of tensor %r "
                              "(use %s, or a wider type)" % (m.dtype, name, m.dtype), TypeError)
                    # As torch's own out= functions: a contiguous one was written
                    # behind autograd's back, another one failed in copy_() after
                    # the pull, as "a leaf Variable that requires grad".
                    if out.requires_grad:
                        _fail(-EINVAL, "out: requires grad (torch's out= functions refuse "
                              "those too): pull into out.detach(), or without out=",
                              ValueError)
                o = _as_numpy(out)
                if o.size != n * out_len:
                    _fail(-EDTYPE, "out: %d elements for %d rows of %d" % (o.size, n, out_len))
                # Flat (n x L elements), or n rows as push takes them: an out of
                # (3, 2) for 2 rows of 3, or a transposed (L, n) view, was filled
                # in its own C order, each row spread over its rows, silently.
                if o.ndim >= 2 and (o.shape[0] != n or int(np.prod(o.shape[1:])) != out_len):
                    _fail(-EDTYPE, "out: shape %s for %d rows of %d: expected (%d, ...) or flat"
                          % (tuple(o.shape), n, out_len, n))
                # Only where every value fits: int32 2**31-1 came out as -1 in an
                # int16 out, 1000.7 as -24 in an int8 one, "2147" in a string one.
                if o.dtype != m.dtype and not _holds_every(m.dtype, o.dtype):
                    _fail(-EDTYPE, "out: %s cannot hold every %s value of tensor %r (use %s, or "
                          "a wider type)" % (o.dtype, m.dtype, name, m.dtype), TypeError)
                if not o.flags.writeable:
                    _fail(-EINVAL, "out: read-only", ValueError)
                if _overlaps_itself(o):
                    _fail(-EINVAL, "out: shape %s with strides %s puts several elements at "
                          "one address (an expand() or as_strided view): pull into an array "
                          "of its own memory" % (tuple(o.shape), o.strides), ValueError)
                shared = o is out or not _is_torch(out) or out.device.type == "cpu"  # else copy
                # An out at an address C may not write its dtype's elements at
                # (np.frombuffer with an offset no multiple of the itemsize)
                # gets the rows through an aligned temporary, copied into it.
                if o.dtype == m.dtype and o.flags.c_contiguous and o.flags.aligned and \
                        o.flags.writeable and shared:
                    target = o
            buf = target if target is not None else np.empty((n,) + row_shape, dtype=m.dtype)
            pids = ffi.from_buffer("uint64_t[]", ida)
            pbuf = ffi.from_buffer(buf, require_writable=True)
            if hid == PULL_ROWS:
                rc = self._cut(lib.rkv_client_pull, cli, m.bname, pids, n, pbuf)
            else:
                # The handlers this client runs for its machine's rows run in
                # this thread: a Ctrl-C in one is raised here (_rkv_py_pull).
                interrupted = _in_handler.pull = []
                try:
                    rc = self._cut(lib.rkv_client_pull_with, cli, m.bname, pids, n, pbuf, hid,
                                   param)
                finally:
                    _in_handler.pull = None
                if interrupted:
                    raise interrupted[0]
            if rc < 0:
                _fail(rc, self._errmsg())
        if out is None:
            return self._wrap(buf)
        if target is None:  # out's memory could not take the rows as they come
            if _is_torch(out):
                out.copy_(_torch().from_numpy(buf).reshape(out.shape))
            else:
                out[...] = buf.reshape(out.shape)
        return out

    def _wait_rec(self, rec):
        """Waits for one push (the lock held): (rc, message), also kept as
        rec.outcome, which is set whatever happens here (a KeyboardInterrupt
        too: then -EINTR, the push's fate unknown)."""
        # The handle is the C call's from here (it frees it): forgotten
        # before, in case a KeyboardInterrupt is raised on the call's way
        # out. The rows are kept until close() (which stops the NIC) unless
        # the call said the NIC is done with them: a KeyboardInterrupt
        # before the call began (the push still in flight) or after it
        # returned (its rc lost), or -EINUSE, keeps them.
        pending, keep = rec.pending, rec.keep
        rec.waiting = True
        released = False
        try:
            rec.pending = None
            rec.keep = None
            self._inflight.discard(rec)
            rc = self._cut(lib.rkv_client_wait, self._cli, pending)
            rec.outcome = (rc, self._errmsg() if rc < 0 else None)
            released = rc != -EINUSE  # EINUSE: the NIC may still read the rows (rkv.h)
        finally:
            if not released:
                self._kept.append(keep)
            if rec.outcome is None:
                rec.outcome = (-EINTR, "push handle: its wait was interrupted "
                               "(KeyboardInterrupt): whether the push was applied is unknown")
            rec.waiting = False
        return rec.outcome

    def _reap_orphans(self, n=None):
        """Waits for the oldest n (all) pushes whose handle was dropped; the
        first failure is kept for barrier() to raise. The lock held."""
        k = len(self._orphans) if n is None else n
        batch, self._orphans[:k] = self._orphans[:k], []
        for i, rec in enumerate(batch):
            if rec.pending is None:
                continue
            try:
                rc, msg = self._wait_rec(rec)
            except BaseException:  # Ctrl-C: the rest are waited for later
                self._orphans[:0] = batch[i + 1:]
                raise
            if rc < 0 and self._orphan_error is None:
                self._orphan_error = (rc, msg)

    def _interruptible(self, fn, *args):
        """fn(*args), a C call that may block for good (a barrier waits for the
        slowest worker, however long): in the main thread it runs in a helper
        thread while this one waits in slices, so that Ctrl-C raises
        KeyboardInterrupt (Python runs signal handlers only between bytecodes:
        a worker whose peer never came could only be killed). The call goes
        on after the interrupt; the client refuses calls until it ends
        (_live), and close() leaves it to the process's exit."""
        if threading.current_thread() is not threading.main_thread():
            return fn(*args)  # signals are the main thread's alone
        out, done = [], threading.Event()
        try:
            threading.Thread(target=_run_then_set, args=(fn, args, out, done),
                             name="rkv-barrier", daemon=True).start()
            while not done.wait(0.2):
                pass
        except BaseException:
            if not done.is_set():
                self._stuck = done
            raise
        return out[0] if out else -EINVAL

    def barrier(self):
        """Returns when every client entered it (this client's pushes in flight
        are waited for first). Raises the error of a push whose handle was
        dropped unwaited, if one failed since the last barrier. Ctrl-C
        interrupts it (in the main thread); the barrier then goes on without
        the caller, and the client refuses every call until it is done."""
        with self._lock:
            cli = self._live()
            self._reap_orphans()
            rc = self._interruptible(lib.rkv_client_barrier, cli)
            if rc < 0:
                _fail(rc, self._errmsg())
            err, self._orphan_error = self._orphan_error, None
        if err is not None:
            _fail(err[0], "a push whose handle was dropped failed: %s" % err[1])

    def _region(self, array, what):
        """array's own memory (a numpy array or a CPU torch tensor, C-contiguous
        and writable) as (ndarray, address)."""
        # Anything else is converted into a temporary, freed on return: a list,
        # a GPU tensor. Registered, its address stayed in the cache, and the
        # next buffer malloc put there was taken as registered.
        if not isinstance(array, np.ndarray) and not _is_torch(array):
            _fail(-EINVAL, "%s: expected a numpy array or a CPU torch tensor (its memory is "
                  "what is registered), got %s" % (what, type(array).__name__), TypeError)
        if _is_torch(array) and array.device.type != "cpu":
            _fail(-EINVAL, "%s: a tensor on %s; only CPU memory can be registered"
                  % (what, array.device), ValueError)
        a = _as_numpy(array)
        if not a.flags.c_contiguous or not a.flags.writeable:
            _fail(-EINVAL, "%s: expected a C-contiguous, writable array" % what, ValueError)
        p = ffi.from_buffer(a, require_writable=True)
        return a, p

    def register(self, array):
        """Keeps array's memory registered for zero-copy pulls and pushes (see
        rkv_client_register) until deregister(array). The client holds the
        array until then: memory freed while registered and reused at the same
        address would be taken as registered. An array not aligned for its
        dtype is refused (EINVAL, also a ValueError)."""
        a, p = self._region(array, "register")
        # push and pull hand C an aligned copy of rows at an odd address
        # (_c_array), never this memory: its registration would go unused,
        # and zero-copy with it, silently. The memory must stay where it is,
        # so it is refused rather than copied.
        if not a.flags.aligned:
            _fail(-EINVAL, "register: the array's memory at %#x is not aligned for its %s "
                  "elements (to %d bytes: np.frombuffer with an offset no multiple of it?): push "
                  "and pull would copy it, never use it in place; register an aligned array "
                  "(np.empty's are)" % (int(ffi.cast("uintptr_t", p)), a.dtype,
                                        a.dtype.alignment), ValueError)
        # The C side's "register 0 bytes at 0x...: invalid argument" said
        # nothing of why.
        if a.nbytes == 0:
            _fail(-EINVAL, "register: an empty array (shape %s) has no memory to register"
                  % (a.shape,), ValueError)
        with self._lock:
            rc = lib.rkv_client_register(self._live(), p, a.nbytes)
            if rc < 0:
                _fail(rc, self._errmsg())
            self._registered[(int(ffi.cast("uintptr_t", p)), a.nbytes)] = a

    def deregister(self, array):
        """Ends register(array): array must be the same memory (address and
        size) as an array given to register() and not deregistered since,
        such as that array itself. A view inside a registered array is
        refused (EINVAL, also a ValueError) naming the region it lies in:
        deregistering it would have dropped the whole region's registration
        (a view at its start) or nothing. A registration the store dropped
        meanwhile (past 64 regions or 4 GiB, least recently used first) is
        deregistered without error."""
        a, p = self._region(array, "deregister")
        addr, size = int(ffi.cast("uintptr_t", p)), a.nbytes
        with self._lock:
            cli = self._live()
            key = (addr, size)
            if key not in self._registered:
                self._not_registered(addr, size)
            del self._registered[key]
            # The C side drops every registration that starts at addr, and
            # registers a region inside one it has only once (a view of a
            # registered array was no registration of its own): -EINVAL then,
            # as for one its cache evicted. The arrays still registered that
            # lay inside what was dropped are registered again.
            rc = lib.rkv_client_deregister(cli, p)
            if rc < 0 and rc != -EINVAL:
                _fail(rc, self._errmsg())
            end = addr + max([size] + [n for (b, n) in self._registered if b == addr])
            again = sorted(((n, b) for (b, n) in self._registered if addr <= b < end),
                           reverse=True)
            for n, b in again:
                rc = lib.rkv_client_register(cli, ffi.cast("void *", b), n)
                if rc < 0:
                    del self._registered[(b, n)]
                    _fail(rc, "deregister: done, but the %d registered bytes at %#x it shared "
                          "a registration with could not be registered again (no longer "
                          "registered): %s" % (n, b, self._errmsg()))

    def _not_registered(self, addr, size):
        """Raises the error of a deregister of memory register() was not given."""
        for (b, n) in sorted(self._registered):
            if b <= addr and addr + size <= b + n:
                _fail(-EINVAL, "deregister: the %d bytes at %#x were not registered themselves: "
                      "they lie inside the %d bytes at %#x (offset %d) that register() was "
                      "given: deregister that array" % (size, addr, n, b, addr - b), ValueError)
        _fail(-EINVAL, "deregister: no registration of the %d bytes at %#x: register() was not "
              "given them (or they were deregistered already)" % (size, addr), ValueError)

    def stats(self, reset=False):
        """This client's counters (rkv_client_stats), as a dict:
        ``{"ops": {"push": {...}, "pull": ..., "barrier": ..., "init": ...,
        "other": ...}, "servers": {server_id: {"push": {...}, ...}}}``. Each
        entry has count, errors, rows, bytes, timed, total_ns, max_ns, mean_us,
        p50_us, p99_us and hist (RKV_STATS_BUCKETS counts: hist[b] holds the
        latencies in [2^b, 2^(b+1)) ns; total_ns, max_ns and hist cover the
        ``timed`` calls: of pushes and pulls served from this machine's shard
        without a server, one in 64, see rkv.h). "ops" counts calls (an async push
        from its issue to its wait), "servers" the requests each call sent to
        each server (only servers this client talked to). reset=True zeroes
        the counters after reading them."""
        reset = _bool_arg(reset, "reset")
        with self._lock:
            cli = self._live()
            st = ffi.new("struct rkv_op_stats *")
            ops = {}
            for op in range(lib.RKV_STATS_OPS):
                if lib.rkv_client_stats(cli, op, st) < 0:
                    _fail(-EINVAL, self._errmsg())
                ops[ffi.string(lib.rkv_stats_op_name(op)).decode()] = _op_stats(st)
            servers = {}
            for sid in range(lib.rkv_client_n_servers(cli)):
                one = {}
                for op in range(lib.RKV_STATS_OPS):
                    if lib.rkv_client_peer_stats(cli, sid, op, st) < 0:
                        _fail(-EINVAL, self._errmsg())
                    if st.count:
                        one[ffi.string(lib.rkv_stats_op_name(op)).decode()] = _op_stats(st)
                if one:
                    servers[sid] = one
            if reset:
                lib.rkv_client_stats_reset(cli)
        return {"ops": ops, "servers": servers}

    def shut_down(self):
        """Asks every server to stop (their run() returns)."""
        self._call(lib.rkv_client_shutdown_servers)

    def _close_at_exit(self):
        """Closes the client as the interpreter exits (_at_exit), before the
        servers of this process, unless another thread is in one of its
        calls (a daemon thread's barrier may never end: the process's exit
        takes that client)."""
        lock = getattr(self, "_call_lock", None)
        if lock is None or not self._close_first() or not lock.acquire(False):
            return
        try:
            self._close_held()
        finally:
            lock.release()

    def close(self):
        """Frees the client (pushes in flight never waited for are dropped)."""
        lock = getattr(self, "_lock", None)
        if lock is None or not self._close_first():
            return
        with lock:
            self._close_held()

    def _close_first(self):
        """What close() does before it takes the lock: False when there is
        nothing more to do."""
        if self._cli is None:
            return False
        if self._pid != os.getpid():  # a forked child: the client's threads are not here
            self._cli = None
            return False
        stuck = getattr(self, "_stuck", None)
        if stuck is not None and not stuck.is_set():
            # An interrupted barrier is still in the C client: freeing it under
            # that call would crash; the process's exit takes it.
            self._cli = None
            return False
        return True

    def _close_held(self):
        """The rest of close(), the lock held."""
        if self._cli is None:  # closed by another thread meanwhile
            return
        with _sig_lock:  # the watcher interrupts no freed client
            _sig_calls.pop(id(self), None)
        lib.rkv_client_destroy(self._cli)
        self._cli = None
        for rec in self._inflight:
            rec.pending = None
            rec.keep = None
            rec.dropped = True
        self._inflight.clear()
        self._orphans.clear()
        self._registered.clear()
        self._kept.clear()

    def __enter__(self):
        # "with" on a closed one went in, and failed only at its first call.
        if self._cli is None:
            _fail(-ESHUTDOWN, "client is closed")
        return self

    def __reduce_ex__(self, protocol):
        _no_copy(self, "Client", "a Client of its own")

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


# The Servers and Clients of this process not closed yet.
_live_servers = weakref.WeakSet()
_live_clients = weakref.WeakSet()


@atexit.register
def _at_exit():
    """At the interpreter's exit, once its non-daemon threads ended: closes
    the clients and servers still open. A server whose run() a daemon thread
    ran (as in a test or a notebook, or a trainer that raised before
    shut_down()) was killed with the process, and its machine's shared
    memory, a shard's worth, stayed in /dev/shm until reboot; a Python pull
    handler could be called by its threads while the interpreter was being
    torn down. Registered at import: a program's own atexit functions,
    registered later, run before it."""
    for c in list(_live_clients):
        c._close_at_exit()
    for srv in list(_live_servers):
        srv._close_at_exit()
