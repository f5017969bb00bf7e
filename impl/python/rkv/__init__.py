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
and ``.message``. Calls release the GIL while they wait on the network.

Not here yet: ``data_name_list()`` (the C API has no call listing tensors)
and custom push handlers written in Python.
"""
import os
import sys
import threading

import numpy as np

from ._rkv import ffi, lib

__all__ = ["Config", "Server", "Client", "PushHandle", "Error", "strerror"]

# Error codes, as enum rkv_err in rkv.h (an Error's .code is the negation).
(EINVAL, ENOMEM, ETIMEDOUT, EPEERDEAD, EPROTO, ENOTENSOR, ERANGE, EDTYPE, EEXIST, EIO, EACCESS,
 ENOHANDLER, ECONFIG, ESHUTDOWN, ELIMIT, EINUSE) = range(1, 17)
_ERR_NAMES = ["OK", "EINVAL", "ENOMEM", "ETIMEDOUT", "EPEERDEAD", "EPROTO", "ENOTENSOR", "ERANGE",
              "EDTYPE", "EEXIST", "EIO", "EACCESS", "ENOHANDLER", "ECONFIG", "ESHUTDOWN",
              "ELIMIT", "EINUSE"]
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


class Error(Exception):
    """A failed rkv call: code is the negative -RKV_E* code, message says what."""

    def __init__(self, code, message):
        self.code = code
        self.message = message
        super().__init__("%s [%s]" % (message, self.name))

    @property
    def name(self):
        n = -self.code
        return "RKV_" + _ERR_NAMES[n] if 0 < n < len(_ERR_NAMES) else "RKV_E?"


def strerror(code):
    return ffi.string(lib.rkv_strerror(code)).decode()


def _fail(code, message):
    raise Error(code, message)


def _errbuf():
    return ffi.new("char[]", _ERR_LEN)


def _raise_err(rc, err):
    _fail(rc, ffi.string(err).decode(errors="replace") or strerror(rc))


def _torch():
    """torch when the program uses it or it is installed, else None (imported lazily:
    servers and numpy-only programs never pay for it)."""
    t = sys.modules.get("torch")
    if t is None:
        try:
            import torch as t
        except ImportError:
            return None
    return t


def _is_torch(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _np_dtype(dtype):
    """A numpy dtype from a numpy/torch dtype or its name ("float32", "f32")."""
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
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.dtype)


def _as_numpy(x):
    """An ndarray over x's memory where it can (torch CPU tensors share theirs)."""
    if type(x) is np.ndarray:
        return x
    if _is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        try:
            return x.numpy()
        except TypeError as e:  # bfloat16 and the like have no numpy dtype
            _fail(-EDTYPE, "tensor of %s: %s" % (x.dtype, e))
    return np.asarray(x)


def _ids_array(ids):
    """ids as contiguous uint64, without a copy when they are so already (or int64 >= 0)."""
    a = _as_numpy(ids)
    if a.dtype == np.uint64 and a.ndim == 1 and a.flags.c_contiguous:
        return a  # the common case, as cheap as it can be
    a = a.reshape(-1)
    if a.dtype.kind not in "iu":
        _fail(-EINVAL, "ids: expected integers, got %s" % a.dtype)
    if a.dtype.kind == "i" and a.size and a.min() < 0:
        _fail(-ERANGE, "ids: row id %d is negative" % a.min())
    if a.dtype == np.int64 and a.flags.c_contiguous:
        return a.view(np.uint64)
    return np.ascontiguousarray(a, dtype=np.uint64)


class Config:
    """The store's settings by the rkv binary's names (`rkv config --dump`):
    Config(cluster="ip.txt", num_workers=4, rx_depth=128); '_' stands for '-'.
    Settings given here override the environment, which overrides the defaults."""

    def __init__(self, settings=None, **kw):
        self._values = {}
        for k, v in dict(settings or {}, **kw).items():
            self.set(k, v)

    def set(self, key, value):
        key = key.replace("_", "-")
        if isinstance(value, bool):
            value = int(value)
        value = str(value)
        with _Settings() as s:  # the C parser says whether the key exists
            s.set(key, value)
        self._values[key] = value
        return self

    def get(self, key):
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
        rc = lib.rkv_settings_set(self.ptr, key.encode(), value.encode(), err, _ERR_LEN)
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
    if isinstance(config, str):
        return Config(cluster=config)
    _fail(-EINVAL, "config: expected rkv.Config, a dict of settings or a cluster file path")


class Server:
    """One server of the cluster. server_id is global (machine 0's servers first);
    without it, local_id-th server of the config's machine-id. Listens at once;
    run() serves until a client calls shut_down()."""

    def __init__(self, config=None, server_id=None, local_id=None):
        cfg, local = _as_config(config).copy(server_id=server_id).build()
        if local_id is not None:
            local = local_id
        p = ffi.new("struct rkv_server **")
        err = _errbuf()
        rc = lib.rkv_server_create(cfg, local, p, err, _ERR_LEN)
        if rc < 0:
            _raise_err(rc, err)
        self._srv = p[0]
        self._pid = os.getpid()
        self.machine_id = cfg.machine_id
        self.local_id = local

    def run(self):
        if self._srv is None:
            _fail(-EINVAL, "server is closed")
        self._running = True
        try:
            rc = lib.rkv_server_run(self._srv)
        finally:
            self._running = False
        if rc < 0:
            _fail(rc, ffi.string(lib.rkv_server_errmsg(self._srv)).decode(errors="replace"))

    def close(self):
        if getattr(self, "_running", False):
            _fail(-EINVAL, "server is running: a client's shut_down() stops it first")
        if getattr(self, "_srv", None) is not None:
            if self._pid == os.getpid():  # not in a forked child, which lacks its threads
                lib.rkv_server_destroy(self._srv)
            self._srv = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class _Meta:
    __slots__ = ("name", "bname", "dtype", "rows", "row_len", "row_shape", "policy",
                 "with_state")


class PushHandle:
    """A push in flight (push(..., async_=True)): wait() returns once every server
    acknowledged it, or raises its error. The ids and rows it was given are
    read until then: do not change them."""

    def __init__(self, client, pending, keep):
        self._client = client
        self._pending = pending
        self._keep = keep  # the arrays the NIC reads from

    def wait(self):
        c = self._client
        if self._pending is None:
            _fail(-EINVAL, "push handle: already waited for")
        with c._lock:
            if c._cli is None:
                _fail(-ESHUTDOWN, "client is closed (its pushes in flight were dropped)")
            rc = lib.rkv_client_wait(c._cli, self._pending)
            self._pending = None
            c._inflight.discard(self)
            msg = c._errmsg() if rc < 0 else None
        self._keep = None
        if rc < 0:
            _fail(rc, msg)

    @property
    def done(self):
        return self._pending is None


class Client:
    """A worker's connection to the store. Blocks until all num-workers clients
    joined. machine_id overrides the config's (which machine this trainer runs
    on: its rows there move through shared memory). output: "torch" or "numpy"
    for what pull returns; "auto" is torch when it can be imported.
    One thread at a time uses the C client: calls from several threads queue."""

    def __init__(self, config=None, machine_id=None, output="auto"):
        if output not in ("auto", "torch", "numpy"):
            _fail(-EINVAL, "output: expected auto, torch or numpy, got %r" % (output,))
        cfg, _ = _as_config(config).copy(machine_id=machine_id).build()
        p = ffi.new("struct rkv_client **")
        err = _errbuf()
        rc = lib.rkv_client_create(cfg, p, err, _ERR_LEN)
        if rc < 0:
            _raise_err(rc, err)
        self._cli = p[0]
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._meta = {}
        self._inflight = set()
        self._output = output
        self.machine_id = cfg.machine_id
        self.num_workers = cfg.n_workers

    # -- helpers --
    def _errmsg(self):
        return ffi.string(lib.rkv_client_errmsg(self._cli)).decode(errors="replace")

    def _live(self):
        if self._cli is None:
            _fail(-ESHUTDOWN, "client is closed")
        return self._cli

    def _call(self, fn, *args):
        with self._lock:
            rc = fn(self._live(), *args)
            if rc < 0:
                _fail(rc, self._errmsg())
        return rc

    def _wrap(self, arr):
        if self._output == "numpy":
            return arr
        t = _torch()
        if t is None:
            if self._output == "torch":
                _fail(-EINVAL, "output='torch' but torch cannot be imported")
            return arr
        return t.from_numpy(arr)

    def _m(self, name):
        m = self._meta.get(name)
        if m is None:
            cm = ffi.new("struct rkv_tensor_meta *")
            self._call(lib.rkv_client_meta, name.encode(), cm)
            m = _Meta()
            m.name = name
            m.bname = name.encode()
            m.dtype = _NP_OF[cm.dtype]
            m.rows = cm.rows
            m.row_len = cm.row_len
            # The store keeps a row's length, not its shape: every process sees
            # (rows, row_len), or (rows,) for one element per row.
            m.row_shape = (cm.row_len,) if cm.row_len > 1 else ()
            m.policy = _POLICY_NAMES.get(cm.policy, str(cm.policy))
            m.with_state = bool(cm.with_state)
            self._meta[name] = m  # tensors are never dropped or reshaped
        return m

    @property
    def client_id(self):
        return lib.rkv_client_id(self._live())

    # -- the API --
    def init_data(self, name, shape, dtype, part_policy="range", init="zeros", seed=0,
                  with_state=False):
        """Creates tensor `name` of shape (rows, *row_shape) on every machine
        (idempotent for the same arguments). The store keeps the row length:
        pulls return (n, row_len) rows, or (n,) when a row is one element.
        part_policy: "range", "hash", or a sequence giving each row's machine. init: "zeros", "uniform" (seeded, in
        [-1, 1)), or a function (shape, dtype) -> values that this client then
        assigns to every row (call it from one client, then barrier).
        with_state: keep optimizer state per row (adagrad needs it)."""
        encoded = name.encode()
        if len(encoded) > lib.RKV_NAME_MAX or not encoded:
            _fail(-EINVAL, "tensor name %r: 1..%d bytes" % (name, lib.RKV_NAME_MAX))
        shape = tuple(int(s) for s in (shape if hasattr(shape, "__len__") else (shape,)))
        if not shape or any(s <= 0 for s in shape):
            _fail(-EINVAL, "shape %r: expected positive (rows, *row_shape)" % (shape,))
        row_shape = shape[1:] or (1,)
        dt = _np_dtype(dtype)
        d = ffi.new("struct rkv_tensor_desc *")
        d.name = encoded
        d.dtype = _DTYPES[dt]
        d.rows = shape[0]
        d.row_len = int(np.prod(row_shape))
        book = None
        if isinstance(part_policy, str):
            if part_policy not in _POLICIES:
                _fail(-EINVAL, "part_policy %r: expected range, hash or a book" % part_policy)
            d.policy = _POLICIES[part_policy]
        else:
            book = np.ascontiguousarray(_as_numpy(part_policy), dtype=np.uint32).reshape(-1)
            if book.size != shape[0]:
                _fail(-EINVAL, "part_policy: the book has %d entries for %d rows"
                      % (book.size, shape[0]))
            d.policy = lib.RKV_PART_EXPLICIT
            d.book = ffi.from_buffer("uint32_t[]", book)
        fill = None
        if callable(init):
            fill, init = init, "zeros"
        if init not in ("zeros", "uniform"):
            _fail(-EINVAL, "init %r: expected zeros, uniform or a function" % (init,))
        d.init = lib.RKV_INIT_UNIFORM if init == "uniform" else lib.RKV_INIT_ZEROS
        d.init_seed = seed
        d.with_state = 1 if with_state else 0
        self._call(lib.rkv_client_init_data, d)
        self._meta.pop(name, None)
        if fill is not None:
            values = _as_numpy(fill(shape, dt))
            if values.size != shape[0] * d.row_len:
                _fail(-EDTYPE, "init function: %d values for shape %s"
                      % (values.size, shape))
            values = values.reshape(shape[0], d.row_len)
            step = max(1, (64 << 20) // (d.row_len * dt.itemsize))  # 64 MiB per push
            for r in range(0, shape[0], step):
                self.push(name, np.arange(r, min(r + step, shape[0]), dtype=np.uint64),
                          values[r:r + step], op="assign")

    def get_data_meta(self, name):
        """(dtype, shape, part_policy) of tensor `name`, as DGL's: dtype is torch's
        when pull returns torch tensors."""
        m = self._m(name)
        dt = m.dtype
        t = _torch() if self._output != "numpy" else None
        if t is not None:
            dt = getattr(t, str(m.dtype))
        shape = (m.rows,) + m.row_shape
        return dt, shape, m.policy

    def _rows(self, m, data, n):
        a = _as_numpy(data)
        if a.dtype == m.dtype and a.flags.c_contiguous and a.size == n * m.row_len and \
                (a.ndim == 0 or a.shape[0] == n):
            return a
        if a.dtype != m.dtype:
            if a.dtype.kind not in "iuf" or not np.can_cast(a.dtype, m.dtype, "same_kind"):
                _fail(-EDTYPE, "tensor '%s' holds %s; cannot take %s data"
                      % (m.name, m.dtype, a.dtype))
            a = a.astype(m.dtype)
        if a.size != n * m.row_len or (a.ndim > 0 and a.shape[0] != n and n > 0):
            _fail(-EDTYPE, "tensor '%s': %d ids need %d x %s values, got shape %s"
                  % (m.name, n, n, m.row_shape, a.shape))
        return np.ascontiguousarray(a)

    def push(self, name, ids, data, op="sum", lr=0.0, async_=False):
        """Applies data[i] to row ids[i] with op: "assign", "sum", "sgd" (row -= lr *
        data) or "adagrad", or a registered custom op's number. Returns once every
        server acknowledged; with async_=True returns a PushHandle at once."""
        m = self._meta.get(name) or self._m(name)
        code = _OPS.get(op) if isinstance(op, str) else int(op)
        if code is None:
            _fail(-EINVAL, "op %r: expected assign, sum, sgd, adagrad or a custom op number"
                  % op)
        ida = _ids_array(ids)
        n = ida.size
        rows = self._rows(m, data, n)
        pids = ffi.from_buffer("uint64_t[]", ida)
        prows = ffi.from_buffer(rows)
        pp = ffi.new("struct rkv_pending **") if async_ else None
        with self._lock:
            cli = self._live()
            if async_:
                rc = lib.rkv_client_push_async(cli, m.bname, pids, n, prows, code, float(lr), pp)
            else:
                rc = lib.rkv_client_push(cli, m.bname, pids, n, prows, code, float(lr))
            if rc < 0:
                _fail(rc, self._errmsg())
            if not async_:
                return None
            h = PushHandle(self, pp[0], (ida, rows, pids, prows))
            self._inflight.add(h)
        return h

    def pull(self, name, ids, out=None):
        """Rows ids[i] in ids' order, shape (n, row_len) or (n,): a torch tensor (numpy
        without torch). With out (a tensor or array of that many elements), pulls
        into out's memory when it is contiguous and of the tensor's dtype."""
        m = self._meta.get(name) or self._m(name)
        ida = _ids_array(ids)
        n = ida.size
        target = None
        if out is not None:
            o = _as_numpy(out)
            if o.size != n * m.row_len:
                _fail(-EDTYPE, "out: %d elements for %d rows of %d" % (o.size, n, m.row_len))
            shared = o is out or not _is_torch(out) or out.device.type == "cpu"  # else a copy
            if o.dtype == m.dtype and o.flags.c_contiguous and o.flags.writeable and shared:
                target = o
        buf = target if target is not None else np.empty((n,) + m.row_shape, dtype=m.dtype)
        pids = ffi.from_buffer("uint64_t[]", ida)
        pbuf = ffi.from_buffer(buf, require_writable=True)
        with self._lock:
            rc = lib.rkv_client_pull(self._live(), m.bname, pids, n, pbuf)
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

    def barrier(self):
        """Returns when every client entered it (this client's pushes in flight
        are waited for first)."""
        self._call(lib.rkv_client_barrier)

    def register(self, array):
        """Keeps array's memory registered for zero-copy pulls and pushes (see
        rkv_client_register) until deregister(array)."""
        a = _as_numpy(array)
        p = ffi.from_buffer(a, require_writable=True)
        self._call(lib.rkv_client_register, p, a.nbytes)

    def deregister(self, array):
        a = _as_numpy(array)
        self._call(lib.rkv_client_deregister, ffi.from_buffer(a, require_writable=True))

    def shut_down(self):
        """Asks every server to stop (their run() returns)."""
        self._call(lib.rkv_client_shutdown_servers)

    def close(self):
        """Frees the client (pushes in flight never waited for are dropped)."""
        lock = getattr(self, "_lock", None)
        if lock is None or self._cli is None:
            return
        if self._pid != os.getpid():  # a forked child: the client's threads are not here
            self._cli = None
            return
        with lock:
            lib.rkv_client_destroy(self._cli)
            self._cli = None
            for h in self._inflight:
                h._pending = None
                h._keep = None
            self._inflight.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
