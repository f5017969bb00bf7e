/* rkv doctor: checks, for this host, what a verbs run needs (RDMA devices
 * and ports, soft-RoCE, an address rdma_cm can use, locked memory, /dev/shm,
 * free ports) and prints one line per problem with its fix. Exit 0 when a
 * verbs run can work here, 2 otherwise (also in a build without verbs). */
#include <arpa/inet.h>
#include <errno.h>
#include <glob.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#if RKV_WITH_VERBS
#include <infiniband/verbs.h>
#include <net/if.h>
#include <rdma/rdma_cma.h>
#endif

#include "harness/doctor.h"
#include "harness/launch.h"

#define DOC_MEMLOCK_MIN_BYTES (64ull << 20) /* below it, registrations soon fail */
#define DOC_SHM_MIN_BYTES (256ull << 20)
#define DOC_MAX_ADDRS 16
#define DOC_CAP_IPC_LOCK 14 /* capability bit: pinning ignores RLIMIT_MEMLOCK */

struct doc {
    int problems;
    int devices;                                 /* RDMA devices found */
    int active_ports;                            /* ports in state ACTIVE */
    char addrs[DOC_MAX_ADDRS][INET6_ADDRSTRLEN]; /* IPv4 addresses rdma_cm can use */
    int n_addrs;
};

static void doc_line(const char *tag, const char *fmt, va_list ap)
{
    printf("  %-5s ", tag);
    vprintf(fmt, ap);
    printf("\n");
}

static void doc_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void doc_ok(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    doc_line("ok", fmt, ap);
    va_end(ap);
}

static void doc_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void doc_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    doc_line("", fmt, ap);
    va_end(ap);
}

/* One line: what is wrong, then how to fix it. */
static void doc_problem(struct doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void doc_problem(struct doc *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    doc_line("FIX", fmt, ap);
    va_end(ap);
    d->problems++;
}

static void doc_bytes(unsigned long long b, char *buf, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ull << 30));
    else
        snprintf(buf, len, "%llu MiB", b >> 20);
}

/* ---- soft-RoCE ---- */

static int doc_rxe_module_file(const char *release)
{
    char pattern[256];
    snprintf(pattern, sizeof(pattern),
             "/lib/modules/%s/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*", release);
    glob_t g;
    int found = glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}

static void doc_check_rxe(struct doc *d)
{
    printf("soft-RoCE (rdma_rxe):\n");
    struct utsname u;
    const char *release = uname(&u) == 0 ? u.release : "?";
    struct stat st;
    if (stat("/sys/module/rdma_rxe", &st) == 0) {
        doc_ok("rdma_rxe is loaded (add a device: rdma link add rxe0 type rxe netdev IFACE)");
    } else if (doc_rxe_module_file(release)) {
        if (d->devices == 0)
            doc_problem(d, "rdma_rxe is available but not loaded: modprobe rdma_rxe rdma_ucm && "
                           "rdma link add rxe0 type rxe netdev IFACE (IFACE: a netdev that is up)");
        else
            doc_info("rdma_rxe is available (not loaded; not needed with the devices above)");
    } else if (d->devices == 0) {
        doc_problem(d,
                    "kernel %s has no rdma_rxe module (built without CONFIG_RDMA_RXE) and no "
                    "RDMA device: run verbs tests under ci/softroce, which boots a kernel "
                    "with it in qemu",
                    release);
    } else {
        doc_info("kernel %s has no rdma_rxe (not needed with the devices above)", release);
    }
}

/* ---- devices, ports, GIDs ---- */

#if RKV_WITH_VERBS
static void doc_add_addr(struct doc *d, const char *a)
{
    for (int i = 0; i < d->n_addrs; i++)
        if (strcmp(d->addrs[i], a) == 0)
            return;
    if (d->n_addrs < DOC_MAX_ADDRS)
        snprintf(d->addrs[d->n_addrs++], sizeof(d->addrs[0]), "%s", a);
}

static const char *doc_gid_type(uint32_t t)
{
    switch (t) {
    case IBV_GID_TYPE_IB:
        return "IB";
    case IBV_GID_TYPE_ROCE_V1:
        return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
        return "RoCE v2";
    default:
        return "?";
    }
}

static void doc_port_gids(struct doc *d, struct ibv_context *ctx, uint8_t port, int tbl_len)
{
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    for (int i = 0; i < tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) != 0)
            continue; /* an empty slot */
        char text[INET6_ADDRSTRLEN], ifname[IF_NAMESIZE] = "-";
        const uint8_t *raw = e.gid.raw;
        int v4 = memcmp(raw, v4_prefix, sizeof(v4_prefix)) == 0;
        if (v4)
            inet_ntop(AF_INET, raw + 12, text, sizeof(text));
        else
            inet_ntop(AF_INET6, raw, text, sizeof(text));
        if (e.ndev_ifindex)
            if_indextoname(e.ndev_ifindex, ifname);
        doc_info("    gid[%d] %s (%s, netdev %s)", i, text, doc_gid_type(e.gid_type), ifname);
        if (v4)
            doc_add_addr(d, text);
    }
}

static void doc_device(struct doc *d, struct ibv_device *dev)
{
    const char *name = ibv_get_device_name(dev);
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_device_attr da;
    if (!ctx || ibv_query_device(ctx, &da) != 0) {
        doc_problem(d,
                    "%s: cannot open or query it (%s): check the permissions of "
                    "/dev/infiniband/uverbs*",
                    name, strerror(errno));
        if (ctx)
            ibv_close_device(ctx);
        return;
    }
    doc_info("%s: %s, %u port(s), max_mr_size %llu, max_cqe %d", name,
             ibv_node_type_str(dev->node_type), da.phys_port_cnt,
             (unsigned long long)da.max_mr_size, da.max_cqe);
    for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, p, &pa) != 0)
            continue;
        int active = pa.state == IBV_PORT_ACTIVE;
        d->active_ports += active;
        doc_info("  port %u: %s, %s, active MTU %d, max MTU %d", p, ibv_port_state_str(pa.state),
                 pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand",
                 128 << pa.active_mtu, 128 << pa.max_mtu);
        doc_port_gids(d, ctx, p, pa.gid_tbl_len);
    }
    ibv_close_device(ctx);
}

static void doc_check_devices(struct doc *d)
{
    printf("RDMA devices:\n");
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    d->devices = n;
    for (int i = 0; i < n; i++)
        doc_device(d, list[i]);
    if (list)
        ibv_free_device_list(list);
    if (n == 0) {
        doc_problem(d, "no RDMA device: load soft-RoCE (see below) or run under ci/softroce");
        return;
    }
    if (d->active_ports == 0)
        doc_problem(d, "no port is ACTIVE: bring its netdev up (ip link set IFACE up)");
    struct stat st;
    if (stat("/dev/infiniband/rdma_cm", &st) != 0)
        doc_problem(d, "/dev/infiniband/rdma_cm is missing: modprobe rdma_ucm");
    for (int i = 0; i < d->n_addrs; i++)
        doc_ok("rdma_cm can use %s", d->addrs[i]);
}

/* Whether rdma_cm binds host to an RDMA device. */
static int doc_host_on_rdma(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    int ok = 0;
    for (struct addrinfo *ai = res; ai && !ok; ai = ai->ai_next) {
        struct rdma_cm_id *id;
        if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) != 0)
            break;
        /* Loopback binds to some device but rxe cannot carry it: not usable. */
        int loop =
            ai->ai_family == AF_INET &&
            (ntohl(((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        ok = !loop && rdma_bind_addr(id, ai->ai_addr) == 0 && id->verbs;
        rdma_destroy_id(id);
    }
    freeaddrinfo(res);
    return ok;
}

static void doc_check_one_host(struct doc *d, const struct cmd_settings *s, const char *host);

/* Each address of a list (--host A,B: machines on alternate hosts). */
static void doc_check_host(struct doc *d, const struct cmd_settings *s)
{
    if (d->devices == 0)
        return;
    uint32_t n = 1;
    for (const char *c = s->val[CMD_HOST]; *c; c++)
        n += *c == ',';
    for (uint32_t m = 0; m < n; m++) {
        char host[RKV_HOST_MAX + 1], err[160];
        if (rkv_cmd_host_pick(s->val[CMD_HOST], m, host, sizeof(host), err, sizeof(err)) < 0) {
            doc_problem(d, "%s (%s)", err, s->src[CMD_HOST]);
            return;
        }
        doc_check_one_host(d, s, host);
    }
}

static void doc_check_one_host(struct doc *d, const struct cmd_settings *s, const char *host)
{
    if (doc_host_on_rdma(host)) {
        doc_ok("host %s (%s) is on an RDMA netdev", host, s->src[CMD_HOST]);
        return;
    }
    doc_problem(d,
                "host %s (%s) is not on an RDMA netdev, rdma_cm cannot use it: set RKV_HOST=%s "
                "or --host %s",
                host, s->src[CMD_HOST], d->n_addrs ? d->addrs[0] : "ADDR",
                d->n_addrs ? d->addrs[0] : "ADDR");
}
#endif

/* ---- limits and shared memory ---- */

static int doc_has_cap(int bit)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long caps = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    fclose(f);
    return (int)((caps >> bit) & 1);
}

static void doc_check_memlock(struct doc *d)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
        doc_problem(d, "cannot read RLIMIT_MEMLOCK: %s", strerror(errno));
        return;
    }
    char soft[32] = "unlimited", hard[32] = "unlimited";
    if (rl.rlim_cur != RLIM_INFINITY)
        snprintf(soft, sizeof(soft), "%llu KiB", (unsigned long long)rl.rlim_cur >> 10);
    if (rl.rlim_max != RLIM_INFINITY)
        snprintf(hard, sizeof(hard), "%llu KiB", (unsigned long long)rl.rlim_max >> 10);
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= DOC_MEMLOCK_MIN_BYTES)
        doc_ok("RLIMIT_MEMLOCK soft %s, hard %s", soft, hard);
    else if (doc_has_cap(DOC_CAP_IPC_LOCK))
        doc_ok("RLIMIT_MEMLOCK soft %s, hard %s (ignored: this process has CAP_IPC_LOCK)", soft,
               hard);
    else
        doc_problem(d,
                    "RLIMIT_MEMLOCK soft %s, hard %s is too small to pin rkv's buffers: "
                    "`ulimit -l unlimited`, or `* - memlock unlimited` in "
                    "/etc/security/limits.conf, or LimitMEMLOCK=infinity (systemd), "
                    "--ulimit memlock=-1 (docker)",
                    soft, hard);
}

static void doc_check_shm(struct doc *d)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v) != 0) {
        doc_problem(d,
                    "/dev/shm: %s: mount a tmpfs there (mount -t tmpfs -o size=4G tmpfs "
                    "/dev/shm)",
                    strerror(errno));
        return;
    }
    unsigned long long size = (unsigned long long)v.f_blocks * v.f_frsize;
    unsigned long long avail = (unsigned long long)v.f_bavail * v.f_frsize;
    char s1[32], s2[32];
    doc_bytes(size, s1, sizeof(s1));
    doc_bytes(avail, s2, sizeof(s2));
    if (access("/dev/shm", W_OK) != 0)
        doc_problem(d,
                    "/dev/shm is not writable for this user: fix its mode (chmod 1777 /dev/shm)");
    else if (avail < DOC_SHM_MIN_BYTES)
        doc_problem(d,
                    "/dev/shm has %s free of %s; the shards live there: mount -o "
                    "remount,size=4G /dev/shm (docker: --shm-size=4g)",
                    s2, s1);
    else
        doc_ok("/dev/shm: %s, %s free", s1, s2);
}

/* ---- ports ---- */

/* 0 free, 1 in use, -1 not an address of this host (or unresolvable). */
static int doc_tcp_port_state(const char *host, uint16_t port)
{
    char serv[8];
    snprintf(serv, sizeof(serv), "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, serv, &hints, &res) != 0)
        return -1;
    int state = -1;
    for (struct addrinfo *ai = res; ai && state < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            state = 0;
        else if (errno == EADDRINUSE)
            state = 1;
        close(fd);
    }
    freeaddrinfo(res);
    return state;
}

#if RKV_WITH_VERBS
/* Whether rdma_cm's port space has host:port taken (1), free (0), or can't tell (-1). */
static int doc_rdma_port_state(const char *host, uint16_t port)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    char serv[8];
    snprintf(serv, sizeof(serv), "%u", port);
    if (getaddrinfo(host, serv, &hints, &res) != 0)
        return -1;
    struct rdma_cm_id *id;
    int state = -1;
    if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0) {
        state = rdma_bind_addr(id, res->ai_addr) == 0 ? 0 : errno == EADDRINUSE ? 1 : -1;
        rdma_destroy_id(id);
    }
    freeaddrinfo(res);
    return state;
}
#endif

static void doc_check_ports(struct doc *d, const struct cmd_settings *s)
{
    char err[512];
    struct rkv_config cfg;
    if (rkv_cmd_build_config(s, &cfg, err, sizeof(err)) < 0) {
        doc_problem(d, "the settings do not form a cluster: %s", err);
        return;
    }
    int checked = 0, busy = 0;
    for (uint32_t m = 0; m < cfg.n_machines; m++) {
        const struct rkv_machine *mc = &cfg.machines[m];
        for (uint32_t i = 0; i < mc->servers && *mc->host; i++) {
            uint16_t p = (uint16_t)(mc->base_port + i);
            int st = doc_tcp_port_state(mc->host, p);
#if RKV_WITH_VERBS
            if (st <= 0 && d->devices > 0 && doc_rdma_port_state(mc->host, p) == 1)
                st = 1;
#endif
            if (st < 0)
                continue; /* another machine's address */
            checked++;
            if (st == 1) {
                busy++;
                doc_problem(d,
                            "port %u on %s is in use: stop what listens there (ss -ltnp "
                            "'sport = :%u') or pick another --base-port / RKV_BASE_PORT",
                            p, mc->host, p);
            }
        }
    }
    if (checked && !busy)
        doc_ok("%d server port(s) from %u on this host are free", checked,
               cfg.machines[0].base_port);
    else if (!checked)
        doc_info("no configured server port belongs to this host");
    free(cfg.machines);
}

int rkv_doctor(const struct cmd_settings *s_in)
{
    const struct cmd_settings *s = s_in;
    struct doc d = {0};
    printf("rkv doctor: can a verbs run work on this host?\n");
    printf("build:\n");
#if RKV_WITH_VERBS
    doc_ok("built with the verbs backend (libibverbs + librdmacm)");
    doc_check_devices(&d);
#else
    glob_t g; /* the devices still say whether soft-RoCE is needed */
    if (glob("/sys/class/infiniband/*", 0, NULL, &g) == 0)
        d.devices = (int)g.gl_pathc;
    globfree(&g);
    doc_problem(&d, "this rkv was built without verbs: rebuild with `ci/build -DRKV_WITH_VERBS=ON` "
                    "(needs libibverbs-dev and librdmacm-dev)");
#endif
    doc_check_rxe(&d);
    printf("this run's settings:\n");
#if RKV_WITH_VERBS
    doc_check_host(&d, s);
#endif
    doc_check_memlock(&d);
    doc_check_shm(&d);
    doc_check_ports(&d, s);
    if (d.problems == 0) {
        printf("verdict: a verbs run can work here (rkv run FILE --backend verbs)\n");
        return RKV_EXIT_OK;
    }
    printf("verdict: %d problem(s), each with its fix above; a verbs run cannot work yet\n",
           d.problems);
    return RKV_EXIT_USAGE;
}
