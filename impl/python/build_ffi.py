"""Writes the C source of the rkv._rkv extension (cffi, API mode).

Run by CMake: python3 build_ffi.py OUT.c. The C compiler then checks every
declaration below against rkv.h, and sizes and field offsets come from the
header itself (the `...;` in a struct), so nothing here copies a layout.
cffi releases the GIL around every call, so network waits do not block
other Python threads.
"""
import sys

import cffi

# C the binding needs besides librkv, for the Ctrl-C watcher
# (rkv/__init__.py, _sig_watch_loop): when did the SIGINT whose byte it
# read come? A call the main thread began after it must not be cut (Python
# raised that signal's KeyboardInterrupt before the call: a `finally:
# c.shut_down()`), and the watcher may run long after the byte came (it
# needs the GIL, and a core). rkv_py_sigint_hook wraps Python's own C
# handler of SIGINT with one that notes the time (CLOCK_MONOTONIC, as
# time.monotonic_ns) before Python's handler writes the byte;
# rkv_py_read_stamped reads the pipe with the GIL released and gives that
# time, or the time the read returned if Python's handler was installed
# again since (signal.signal replaces the wrapper).
HELPERS = r"""
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct sigaction rkv_py_prev;
static _Atomic uint64_t rkv_py_sigint_ns;

static uint64_t rkv_py_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void rkv_py_sigint(int sig, siginfo_t *si, void *uc)
{
    atomic_store(&rkv_py_sigint_ns, rkv_py_now_ns());
    if (rkv_py_prev.sa_flags & SA_SIGINFO)
        rkv_py_prev.sa_sigaction(sig, si, uc);
    else if (rkv_py_prev.sa_handler != SIG_DFL && rkv_py_prev.sa_handler != SIG_IGN)
        rkv_py_prev.sa_handler(sig);
}

static int rkv_py_hooked(void)
{
    struct sigaction now;
    return sigaction(SIGINT, NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
           now.sa_sigaction == rkv_py_sigint;
}

/* 0 when hooked (or already), -1 when SIGINT is not Python's to wrap. */
static int rkv_py_sigint_hook(void)
{
    if (rkv_py_hooked())
        return 0;
    struct sigaction prev, sa;
    if (sigaction(SIGINT, NULL, &prev) != 0 || (prev.sa_flags & SA_SIGINFO) ||
        prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = rkv_py_sigint;
    sa.sa_mask = prev.sa_mask;
    sa.sa_flags = prev.sa_flags | SA_SIGINFO;
    rkv_py_prev = prev;
    return sigaction(SIGINT, &sa, NULL);
}

static long rkv_py_read_stamped(int fd, unsigned char *buf, size_t len, uint64_t *ns_p)
{
    ssize_t n;
    do
        n = read(fd, buf, len);
    while (n < 0 && errno == EINTR);
    *ns_p = rkv_py_hooked() ? atomic_load(&rkv_py_sigint_ns) : rkv_py_now_ns();
    return (long)n;
}
"""

CDEF = r"""
enum rkv_dtype { RKV_F32 = 1, RKV_F64 = 2, RKV_I32 = 3, RKV_I64 = 4 };
enum rkv_policy { RKV_PART_RANGE = 1, RKV_PART_HASH = 2, RKV_PART_EXPLICIT = 3 };
enum rkv_init { RKV_INIT_ZEROS = 0, RKV_INIT_UNIFORM = 1 };
enum rkv_pull_op { RKV_PULL_ROWS = 0, RKV_PULL_WITH_STATE = 1, RKV_PULL_CUSTOM = 16 };
#define RKV_NAME_MAX ...
#define RKV_ERR_MAX_ ...
#define RKV_OP_MAX ...
#define RKV_OP_CUSTOM ...
#define RKV_CLIENT_OBSERVER ...

const char *rkv_strerror(int err);

struct rkv_tensor_desc {
    char name[];
    enum rkv_dtype dtype;
    uint64_t rows;
    uint32_t row_len;
    enum rkv_policy policy;
    const uint32_t *book;
    enum rkv_init init;
    uint64_t init_seed;
    int with_state;
    const uint64_t *local_index;
    ...;
};
struct rkv_tensor_meta {
    char name[];
    uint32_t id;
    enum rkv_dtype dtype;
    uint64_t rows;
    uint32_t row_len;
    enum rkv_policy policy;
    int with_state;
    ...;
};
typedef void (*rkv_handler_fn)(enum rkv_dtype dt, void *row, void *state, const void *in,
                               size_t n_elems, double param, void *user);
typedef void (*rkv_pull_fn)(enum rkv_dtype dt, const void *row, const void *state, size_t row_len,
                            void *out, size_t out_len, double param, void *user);
/* Pull handlers written in Python (rkv.Server/Client.register_pull_handler):
 * cffi takes the GIL around each call, from whichever thread makes it. */
extern "Python" void _rkv_py_pull(enum rkv_dtype dt, const void *row, const void *state,
                                  size_t row_len, void *out, size_t out_len, double param,
                                  void *user);

struct rkv_machine {
    uint32_t servers;
    ...;
};
struct rkv_config {
    uint32_t n_machines;
    struct rkv_machine *machines;
    uint32_t n_workers;
    uint32_t machine_id;
    uint64_t max_slot_bytes;
    uint32_t timeout_ms;
    uint32_t connect_retry_ms;
    ...;
};

struct rkv_settings;
int rkv_settings_create(struct rkv_settings **set_p, char *err, size_t err_len);
int rkv_settings_set(struct rkv_settings *set, const char *key, const char *value, char *err,
                     size_t err_len);
int rkv_settings_build(const struct rkv_settings *set, struct rkv_config *cfg,
                       uint32_t *local_server_p, char *err, size_t err_len);
void rkv_settings_destroy(struct rkv_settings *set);
void rkv_config_release(struct rkv_config *cfg);

struct rkv_server;
int rkv_server_create(const struct rkv_config *cfg, uint32_t local_id, struct rkv_server **srv_p,
                      char *err, size_t err_len);
int rkv_server_register_handler(struct rkv_server *srv, int op, rkv_handler_fn fn, void *user);
int rkv_server_register_pull_handler(struct rkv_server *srv, int id, rkv_pull_fn fn,
                                     uint32_t out_mult, uint32_t out_add, void *user);
int rkv_server_run(struct rkv_server *srv);
void rkv_server_stop(struct rkv_server *srv);
const char *rkv_server_errmsg(const struct rkv_server *srv);
void rkv_server_destroy(struct rkv_server *srv);

struct rkv_client;
struct rkv_pending;
int rkv_client_create(const struct rkv_config *cfg, struct rkv_client **cli_p, char *err,
                      size_t err_len);
int rkv_client_create_observer(const struct rkv_config *cfg, struct rkv_client **cli_p, char *err,
                               size_t err_len);
uint32_t rkv_client_id(const struct rkv_client *cli);
int rkv_client_register_handler(struct rkv_client *cli, int op, rkv_handler_fn fn, void *user);
int rkv_client_register_pull_handler(struct rkv_client *cli, int id, rkv_pull_fn fn,
                                     uint32_t out_mult, uint32_t out_add, void *user);
int rkv_client_list(struct rkv_client *cli, struct rkv_tensor_meta *metas, size_t cap, size_t *n_p);
int rkv_client_init_data(struct rkv_client *cli, const struct rkv_tensor_desc *desc);
int rkv_client_meta(struct rkv_client *cli, const char *name, struct rkv_tensor_meta *meta_p);
int rkv_client_push(struct rkv_client *cli, const char *name, const uint64_t *ids, size_t n,
                    const void *rows, int op, double param);
int rkv_client_push_async(struct rkv_client *cli, const char *name, const uint64_t *ids, size_t n,
                          const void *rows, int op, double param, struct rkv_pending **pending_p);
int rkv_client_wait(struct rkv_client *cli, struct rkv_pending *pending);
int rkv_client_register(struct rkv_client *cli, void *addr, size_t len);
int rkv_client_deregister(struct rkv_client *cli, void *addr);
int rkv_client_pull(struct rkv_client *cli, const char *name, const uint64_t *ids, size_t n,
                    void *rows_out);
int rkv_client_pull_with(struct rkv_client *cli, const char *name, const uint64_t *ids, size_t n,
                         void *rows_out, int handler, double param);
int rkv_client_pull_len(struct rkv_client *cli, const char *name, int handler, uint32_t *len_p);
int rkv_client_barrier(struct rkv_client *cli);
int rkv_client_interrupt(struct rkv_client *cli, int on);
long rkv_py_read_stamped(int fd, unsigned char *buf, size_t len, uint64_t *ns_p);
int rkv_py_sigint_hook(void);
int rkv_py_hooked(void);
int rkv_client_shutdown_servers(struct rkv_client *cli);
const char *rkv_client_errmsg(const struct rkv_client *cli);
void rkv_client_destroy(struct rkv_client *cli);

#define RKV_STATS_OPS ...
#define RKV_STATS_BUCKETS ...
struct rkv_op_stats {
    uint64_t count;
    uint64_t errors;
    uint64_t rows;
    uint64_t bytes;
    uint64_t total_ns;
    uint64_t max_ns;
    uint64_t hist[...];
    uint64_t timed;
    ...;
};
const char *rkv_stats_op_name(int op);
uint64_t rkv_stats_bucket_ns(uint32_t b);
int rkv_client_stats(struct rkv_client *cli, int op, struct rkv_op_stats *st_p);
int rkv_client_peer_stats(struct rkv_client *cli, uint32_t server, int op,
                          struct rkv_op_stats *st_p);
uint32_t rkv_client_n_servers(const struct rkv_client *cli);
void rkv_client_stats_reset(struct rkv_client *cli);
"""


def main():
    out = sys.argv[1]
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("rkv._rkv", "#include <rkv.h>\n" + HELPERS)
    ffi.emit_c_code(out)


if __name__ == "__main__":
    main()
