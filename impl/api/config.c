/* Settings: one table says every setting's flag, env var, aliases for
 * ps-lite/DGL users, default and meaning; `rkv config --dump` prints it
 * with the source each value came from. */
#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/config.h"
#include "store/store_int.h"
#include "util/util.h"

struct cmd_opt {
    /* "--name": the flag, and from its third character the setting's name
     * in messages (one string, so the launcher, the bench and the node
     * name a flag as the parser reads it); env RKV_NAME. */
    const char *flag;
    const char *env;
    const char *aliases; /* space-separated env vars accepted too */
    const char *def;
    const char *help;
};

static const struct cmd_opt cmd_opts[CMD_KEY_COUNT_] = {
    [CMD_ROLE] = {"--role", "RKV_ROLE", "DMLC_ROLE DGL_ROLE", "",
                  "server, worker (DGL: client) or scheduler (`rkv node`; DMLC_ROLE: ps-lite's "
                  "launch, ids from the scheduler)"},
    [CMD_CLUSTER] =
        {"--cluster", "RKV_CLUSTER", "DGL_IP_CONFIG", "",
         "cluster file (DGL's ip_config.txt): 'host [base_port [servers]]' per machine"},
    [CMD_HOST] = {"--host", "RKV_HOST", "DMLC_PS_ROOT_URI", "127.0.0.1",
                  "host of the machines without a cluster file; A,B,...: machine m on the "
                  "(m mod n)-th (the launcher gives each process its machine's as RKV_HOST)"},
    [CMD_BASE_PORT] = {"--base-port", "RKV_BASE_PORT", "DMLC_PS_ROOT_PORT", "29500",
                       "first server port of a one-machine cluster"},
    [CMD_MACHINES] = {"--machines", "RKV_MACHINES", "", "1",
                      "machines simulated on this host by `rkv demo`"},
    [CMD_SERVERS_PER_MACHINE] = {"--servers-per-machine", "RKV_SERVERS_PER_MACHINE",
                                 "DGL_NUM_SERVER", "1", "servers sharing each machine's shard"},
    [CMD_NUM_SERVERS] =
        {"--num-servers", "RKV_NUM_SERVERS", "DMLC_NUM_SERVER", "",
         "total servers, every machine's (without a cluster file: machines must divide it, "
         "and each machine gets num-servers / machines)"},
    [CMD_NUM_WORKERS] = {"--num-workers", "RKV_NUM_WORKERS", "DMLC_NUM_WORKER DGL_NUM_CLIENT", "1",
                         "workers (clients) that will join"},
    [CMD_MACHINE_ID] = {"--machine-id", "RKV_MACHINE_ID", "", "0",
                        "machine this process runs on (index in the cluster file)"},
    [CMD_SERVER_ID] = {"--server-id", "RKV_SERVER_ID", "DGL_SERVER_ID", "",
                       "global server id (sets machine-id and the local index)"},
    [CMD_BACKEND] = {"--backend", "RKV_BACKEND", "", "tcp", "NIC backend: tcp, verbs, sim"},
    [CMD_TIMEOUT_MS] = {"--timeout-ms", "RKV_TIMEOUT_MS", "", "30000",
                        "per-request timeout (not a barrier's: it waits for the slowest worker)"},
    [CMD_CONNECT_RETRY_MS] = {"--connect-retry-ms", "RKV_CONNECT_RETRY_MS", "", "30000",
                              "how long clients retry connecting to servers that are not up yet"},
    [CMD_RX_DEPTH] = {"--rx-depth", "RKV_RX_DEPTH", "BYTEPS_RDMA_RX_DEPTH", "64",
                      "posted receive buffers per connection (same on every node)"},
    [CMD_CTRL_BUF_BYTES] = {"--ctrl-buf-bytes", "RKV_CTRL_BUF_BYTES", "", "8192",
                            "largest message sent inline; larger ones use the rendezvous"},
    [CMD_SLOTS] = {"--slots", "RKV_SLOTS", "", "64", "rendezvous/reply slots per connection"},
    [CMD_MAX_SLOT_BYTES] = {"--max-slot-bytes", "RKV_MAX_SLOT_BYTES", "", "1073741824",
                            "largest single message"},
    [CMD_SLOT_MEM_BYTES] = {"--slot-mem-bytes", "RKV_SLOT_MEM_BYTES", "", "0",
                            "most bytes of rendezvous slots a node grants its peers, all together "
                            "(0: a quarter of the host's memory, or of its memory cgroup's limit "
                            "where lower, at most 4 GiB, at least max-slot-bytes)"},
    [CMD_SHM_PREFIX] = {"--shm-prefix", "RKV_SHM_PREFIX", "", "",
                        "shared-memory name prefix (default rkv-<base port>)"},
    [CMD_SEED] = {"--seed", "RKV_SEED", "", "1", "seed of every random choice"},
    [CMD_LOG_LEVEL] = {"--log-level", "RKV_LOG_LEVEL", "PS_VERBOSE", "1",
                       "0 error, 1 warn, 2 info, 3 debug"},
    [CMD_ROWS] = {"--rows", "RKV_ROWS", "", "4096", "workload: rows per tensor"},
    [CMD_VALUE_BYTES] = {"--value-bytes", "RKV_VALUE_BYTES", "", "65536",
                         "workload: bytes per row in the timed phase"},
    [CMD_ROUNDS] = {"--rounds", "RKV_ROUNDS", "", "3", "workload: rounds of each checked phase"},
    [CMD_SCENARIO] = {"--scenario", "RKV_SCENARIO", "", "",
                      "workers run this scenario file's workload"},
    [CMD_DISCOVER] = {"--discover", "RKV_DISCOVER", "", "0",
                      "1: only machine 0's host is known; the other servers announce their "
                      "address to server 0"},
    [CMD_DURABLE_DIR] = {"--durable-dir", "RKV_DURABLE_DIR", "", "",
                         "durable mode: a push is acknowledged once it is synced in its machine's "
                         "write-ahead log here; a restarted server loads its machine's snapshot "
                         "and replays its logs"},
    [CMD_DURABLE_LOG_PREWRITE] = {"--durable-log-prewrite", "RKV_DURABLE_LOG_PREWRITE", "", "0",
                                  "durable mode: bytes of zeros a new log file is written with "
                                  "(and one spare kept) so that commits overwrite disk blocks "
                                  "instead of growing the file; 0: logs grow, reused after a "
                                  "checkpoint"},
    [CMD_RETRY_MS] = {"--retry-ms", "RKV_RETRY_MS", "", "0",
                      "clients retry requests to a dead server this long (it may restart); "
                      "0: fail at once with a dead-peer error"},
    [CMD_ZERO_COPY_BYTES] = {"--zero-copy-bytes", "RKV_ZERO_COPY_BYTES", "", "65536",
                             "a push or pull part for one remote server of at least this many "
                             "row bytes moves from/to the caller's buffer without a copy; 0: "
                             "never"},
    [CMD_BUSY_POLL] = {"--busy-poll", "RKV_BUSY_POLL", "", "0",
                       "1: a client call polls the NIC itself while it waits, and a node "
                       "spins for 20 ms after each completion before it sleeps (lowest "
                       "latency, a core per spinning thread); 0: threads sleep until woken"},
    /* The secret itself only from a file or RKV_TOKEN: a flag's value is
     * visible to every user of the host (ps). */
    [CMD_SECRET_FILE] = {"--secret-file", "RKV_SECRET_FILE", "", "",
                         "file holding the cluster's shared secret (any text; one trailing "
                         "newline ignored); else RKV_TOKEN's text; none: anyone who reaches a "
                         "server's port can join"},
    [CMD_HELLO_TIMEOUT_MS] = {"--hello-timeout-ms", "RKV_HELLO_TIMEOUT_MS", "", "5000",
                              "a connection that has not proved the secret by then is dropped"},
    [CMD_IDLE_TIMEOUT_MS] = {"--idle-timeout-ms", "RKV_IDLE_TIMEOUT_MS", "", "0",
                             "tcp: a connection to a server that sends no message this long "
                             "is dropped (clients send keepalives at a third of the timeout "
                             "the server announces); 0: never, else at least 1000"},
    [CMD_NODE_HOST] = {"--node-host", "RKV_NODE_HOST", "DMLC_NODE_HOST", "",
                       "under DMLC_ROLE: the address this node gives the scheduler (default: "
                       "--interface's, else the one it reached the scheduler from)"},
    [CMD_INTERFACE] = {"--interface", "RKV_INTERFACE", "DMLC_INTERFACE", "",
                       "under DMLC_ROLE: the network interface whose IPv4 address this node "
                       "gives the scheduler"},
    /* The verbs NIC's own knobs; their env vars are the ones it read before
     * they were settings. Empty: the NIC's default. */
    [CMD_VERBS_DEV] = {"--verbs-dev", "RKV_VERBS_DEV", "", "",
                       "verbs: the RDMA device, NAME or NAME:PORT (default: the port that owns "
                       "this node's host address, else the first active one)"},
    [CMD_VERBS_TOS] = {"--verbs-tos", "RKV_VERBS_TOS", "", "",
                       "verbs: IP traffic class of RoCE v2 packets, 0..255 (a PFC fabric's "
                       "lossless class; default rdma_cm's)"},
    [CMD_VERBS_SL] = {"--verbs-sl", "RKV_VERBS_SL", "", "",
                      "verbs: InfiniBand service level, 0..15 (default the path's)"},
    [CMD_VERBS_GID_INDEX] = {"--verbs-gid-index", "RKV_VERBS_GID_INDEX", "", "",
                             "verbs: source GID index on RoCE, 0..65535 (default rdma_cm's)"},
    [CMD_VERBS_MTU] = {"--verbs-mtu", "RKV_VERBS_MTU", "", "",
                       "verbs: the largest path MTU this node announces and uses: 256, 512, "
                       "1024, 2048 or 4096 (default the port's; a connection takes the smaller "
                       "end's)"},
    [CMD_VERBS_SRQ_DEPTH] = {"--verbs-srq-depth", "RKV_VERBS_SRQ_DEPTH", "", "",
                             "verbs: most buffers of the NIC's shared receive pool, 0..1048576 "
                             "(0: a receive queue per peer; default 16384)"},
};
/* The help of idle-timeout-ms says its floor in a literal. */
_Static_assert(RKV_MIN_IDLE_TIMEOUT_MS == 1000, "idle-timeout-ms's help names 1000");
/* Every setting has a row: a missing one would be a NULL name at run time. */
_Static_assert(sizeof(cmd_opts) / sizeof(cmd_opts[0]) == CMD_KEY_COUNT_, "settings table");
#define CMD_NAME(k) (cmd_opts[k].flag + 2)

const char *rkv_cmd_key_flag(enum cmd_key k)
{
    assert(k >= 0 && k < CMD_KEY_COUNT_ && !strncmp(cmd_opts[k].flag, "--", 2));
    return cmd_opts[k].flag;
}

int rkv_cmd_first_flag(const struct cmd_settings *s, const enum cmd_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s->src[keys[i]], "flag"))
            return (int)i;
    return -1;
}

static int cmd_find_flag(const char *name, size_t len)
{
    for (int k = 0; k < CMD_KEY_COUNT_; k++)
        if (strlen(CMD_NAME(k)) == len && strncmp(CMD_NAME(k), name, len) == 0)
            return k;
    return -1;
}

/* Whether a word is one of the settings' flags (--name or --name=...). */
static int cmd_names_flag(const char *a)
{
    if (strncmp(a, "--", 2) != 0)
        return 0;
    const char *eq = strchr(a + 2, '=');
    return cmd_find_flag(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2)) >= 0;
}

int rkv_cmd_find_setting(const char *name, size_t len)
{
    return cmd_find_flag(name, len);
}

/* The settings whose value is a number (rkv_cmd_get_u64 reads each;
 * discover is 0 or 1). */
static const enum cmd_key cmd_numbers[] = {CMD_BASE_PORT,
                                           CMD_MACHINES,
                                           CMD_SERVERS_PER_MACHINE,
                                           CMD_NUM_SERVERS,
                                           CMD_NUM_WORKERS,
                                           CMD_MACHINE_ID,
                                           CMD_SERVER_ID,
                                           CMD_TIMEOUT_MS,
                                           CMD_CONNECT_RETRY_MS,
                                           CMD_RX_DEPTH,
                                           CMD_CTRL_BUF_BYTES,
                                           CMD_SLOTS,
                                           CMD_MAX_SLOT_BYTES,
                                           CMD_SLOT_MEM_BYTES,
                                           CMD_SEED,
                                           CMD_LOG_LEVEL,
                                           CMD_ROWS,
                                           CMD_VALUE_BYTES,
                                           CMD_ROUNDS,
                                           CMD_DURABLE_LOG_PREWRITE,
                                           CMD_RETRY_MS,
                                           CMD_ZERO_COPY_BYTES,
                                           CMD_BUSY_POLL,
                                           CMD_HELLO_TIMEOUT_MS,
                                           CMD_IDLE_TIMEOUT_MS,
                                           CMD_VERBS_TOS,
                                           CMD_VERBS_SL,
                                           CMD_VERBS_GID_INDEX,
                                           CMD_VERBS_MTU,
                                           CMD_VERBS_SRQ_DEPTH};

int rkv_cmd_check_form(int k, const char *value, char *err, size_t err_len)
{
    assert(k >= 0 && k < CMD_KEY_COUNT_);
    uint64_t x;
    if (k == CMD_DISCOVER && strcmp(value, "0") && strcmp(value, "1"))
        return rkv_errf(err, err_len, -RKV_ECONFIG, "discover: expected 0 or 1, got \"%s\"", value);
    for (size_t i = 0; i < sizeof(cmd_numbers) / sizeof(cmd_numbers[0]); i++) {
        if (cmd_numbers[i] != (enum cmd_key)k)
            continue;
        /* Empty is "unset" only where that is the default (num-servers,
         * server-id, the verbs knobs). */
        if ((!*value && !*cmd_opts[k].def) || rkv_parse_u64(value, &x) == 0)
            return 0;
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "%s: expected a non-negative integer, got \"%s\"", CMD_NAME(k), value);
    }
    return 0;
}

int rkv_cmd_flag_takes_next(int argc, char **argv, int i)
{
    const char *a = argv[i];
    return strncmp(a, "--", 2) == 0 && !strchr(a + 2, '=') &&
           cmd_find_flag(a + 2, strlen(a + 2)) >= 0 && i + 1 < argc &&
           strncmp(argv[i + 1], "--", 2) != 0;
}

/* Two values of one setting are the same: the same text, the same number
 * ("4" and "04"), or DGL's "client" and "worker". */
static int cmd_same_value(enum cmd_key k, const char *a, const char *b)
{
    uint64_t x, y;
    if (!strcmp(a, b) || (rkv_parse_u64(a, &x) == 0 && rkv_parse_u64(b, &y) == 0 && x == y))
        return 1;
    int wa = !strcmp(a, "worker") || !strcmp(a, "client");
    int wb = !strcmp(b, "worker") || !strcmp(b, "client");
    return k == CMD_ROLE && wa && wb;
}

/* A setting taken from an alias (RKV_NAME unset), whose other aliases in
 * the environment say otherwise: the first in the table won without a word
 * (DMLC_NUM_WORKER=3 beside DGL_NUM_CLIENT=4 was 3 workers; DMLC_ROLE=server
 * beside DGL_ROLE=client a server). Which launcher's value was meant is not
 * ours to guess: refused, naming both. RKV_NAME, set, is the user's own
 * choice over every alias; a flag settles it too. */
static int cmd_check_env_agrees(const struct cmd_settings *s, int k, char *err, size_t err_len)
{
    if (strncmp(s->src[k], "env ", 4) != 0 || !strcmp(s->src[k] + 4, cmd_opts[k].env))
        return 0;
    char names[128];
    snprintf(names, sizeof(names), "%s", cmd_opts[k].aliases);
    for (char *save = NULL, *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save)) {
        const char *v = getenv(n);
        if (v && *v && !cmd_same_value((enum cmd_key)k, s->val[k], v))
            return rkv_errf(err, err_len, -1,
                            "%s: %s=%s but %s=%s: two launchers' names for this setting with two "
                            "values; unset one, or give %s or --%s",
                            CMD_NAME(k), s->src[k] + 4, s->val[k], n, v, cmd_opts[k].env,
                            CMD_NAME(k));
    }
    return 0;
}

static void cmd_load_env(struct cmd_settings *s, int k)
{
    char names[128];
    snprintf(names, sizeof(names), "%s %s", cmd_opts[k].env, cmd_opts[k].aliases);
    for (char *save = NULL, *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save)) {
        const char *v = getenv(n);
        if (v && *v) {
            s->val[k] = v;
            snprintf(s->srcbuf[k], sizeof(s->srcbuf[k]), "env %s", n);
            s->src[k] = s->srcbuf[k];
            return;
        }
    }
}

int rkv_cmd_settings_load(struct cmd_settings *s, int argc, char **argv, char *err, size_t err_len)
{
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < CMD_KEY_COUNT_; k++) {
        s->val[k] = cmd_opts[k].def;
        s->src[k] = "default";
        cmd_load_env(s, k);
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return rkv_errf(err, err_len, -1, "unexpected argument '%s' (see --help)", a);
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        int k = cmd_find_flag(a + 2, len);
        if (k < 0)
            return rkv_errf(err, err_len, -1, "unknown flag '%s' (see --help)", a);
        if (eq) {
            s->val[k] = eq + 1;
        } else if (i + 1 < argc && cmd_names_flag(argv[i + 1])) {
            /* "--durable-dir --seed 5" made a directory named --seed and
             * then refused "5"; at the end of the line it was taken. */
            return rkv_errf(err, err_len, -1,
                            "flag '%s' needs a value, got the flag '%s' (a value that is a "
                            "flag's name goes as %s=VALUE)",
                            a, argv[i + 1], a);
        } else if (i + 1 < argc) {
            s->val[k] = argv[++i];
        } else {
            return rkv_errf(err, err_len, -1, "flag '%s' needs a value", a);
        }
        s->src[k] = "flag";
    }
    for (int k = 0; k < CMD_KEY_COUNT_; k++)
        if (cmd_check_env_agrees(s, k, err, err_len) < 0)
            return -1;
    return 0;
}

int rkv_cmd_get_u64(const struct cmd_settings *s, enum cmd_key k, uint64_t *v, char *err,
                    size_t err_len)
{
    const char *str = s->val[k];
    uint64_t x = 0;
    if (rkv_parse_u64(str, &x) < 0) {
        rkv_errf(err, err_len, -1, "%s: expected a non-negative integer, got \"%s\" (%s)",
                 CMD_NAME(k), str, s->src[k]);
        return -1; /* a constant: -O3's callers see *v set whenever 0 is returned */
    }
    *v = x;
    return 0;
}

void rkv_cmd_settings_dump(const struct cmd_settings *s, FILE *out)
{
    fprintf(out, "%-20s %-12s %-12s %-24s %-32s %s\n", "setting", "value", "default", "env var",
            "aliases", "source");
    for (int k = 0; k < CMD_KEY_COUNT_; k++)
        fprintf(out, "%-20s %-12s %-12s %-24s %-32s %s\n", CMD_NAME(k),
                *s->val[k] ? s->val[k] : "-", *cmd_opts[k].def ? cmd_opts[k].def : "-",
                cmd_opts[k].env, *cmd_opts[k].aliases ? cmd_opts[k].aliases : "-", s->src[k]);
}

void rkv_cmd_settings_help(FILE *out)
{
    fprintf(out, "settings (flag --name VALUE, env var, or alias; flags win over env):\n");
    for (int k = 0; k < CMD_KEY_COUNT_; k++)
        fprintf(out, "  --%-20s %-24s %s [default: %s]\n", CMD_NAME(k), cmd_opts[k].env,
                cmd_opts[k].help, *cmd_opts[k].def ? cmd_opts[k].def : "none");
}

/* ---- cluster file ---- */

/* A number field of a cluster file, 1..max, read as a flag's value is
 * (rkv_parse_u64): strtoul took a sign and wrapped, so "+31800" and
 * "-18446744073709519816" were port 31800 and "-18446744073709551615" one
 * server. A refused value is quoted with its unprintable bytes as \xNN:
 * printed as they were, "1\x01" read as "got \"1\"". */
static int cmd_line_number(const char *path, int ln, const char *name, const char *field,
                           uint64_t max, uint64_t *v, char *err, size_t err_len)
{
    uint64_t x = 0;
    /* Decimal only: DGL reads ip_config.txt with int(), which refuses
     * "0x7000"; taken as hex here, one file named two clusters. */
    int hex = field[0] == '0' && (field[1] == 'x' || field[1] == 'X');
    if (!hex && rkv_parse_u64(field, &x) == 0 && x >= 1 && x <= max) {
        *v = x;
        return 0;
    }
    char shown[4 * 512 + 1]; /* a field is shorter than a line */
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)field; *c && n + 5 <= sizeof(shown); c++) {
        if (*c < 0x20 || *c >= 0x7f)
            n += (size_t)snprintf(shown + n, sizeof(shown) - n, "\\x%02x", *c);
        else
            shown[n++] = (char)*c;
    }
    shown[n] = 0;
    return rkv_errf(err, err_len, -1, "%s:%d: %s: expected 1..%llu%s, got \"%s\"", path, ln, name,
                    (unsigned long long)max, hex ? " in decimal" : "", shown);
}

/* DGL's ip_config.txt: "IP", "IP PORT" or the older "IP PORT SERVERS". */
static int cmd_parse_line(const char *path, int ln, char *line, uint32_t default_servers,
                          struct rkv_machine *m, char *err, size_t err_len)
{
    /* Fields are separated by any white space, as the line's leading white
     * space is skipped (isspace): a \v or \f after the count made
     * 'servers: expected 1..256, got "1"', the byte invisible. */
    static const char ws[] = " \t\n\v\f\r";
    char *save = NULL;
    char *host = strtok_r(line, ws, &save);
    char *port = strtok_r(NULL, ws, &save);
    char *servers = strtok_r(NULL, ws, &save);
    char *extra = strtok_r(NULL, ws, &save);
    if (strlen(host) > RKV_HOST_MAX)
        return rkv_errf(err, err_len, -1, "%s:%d: host name longer than %d characters", path, ln,
                        RKV_HOST_MAX);
    /* Taken as a name, these failed only when a server listened, with
     * "is the port in use?". An IPv6 address has more than one colon, and
     * may be in brackets ("[::1]"), but not with a port after them. */
    const char *colon = strchr(host, ':'), *bracket = strstr(host, "]:");
    if (host[0] == '[' && bracket)
        return rkv_errf(err, err_len, -1,
                        "%s:%d: host \"%s\": write the port after a space (\"%.*s %s\"), not a "
                        "colon",
                        path, ln, host, (int)(bracket + 1 - host), host, bracket + 2);
    if (colon && !strchr(colon + 1, ':'))
        return rkv_errf(err, err_len, -1,
                        "%s:%d: host \"%s\": write the port after a space (\"%.*s %s\"), not a "
                        "colon",
                        path, ln, host, (int)(colon - host), host, colon + 1);
    /* "host,port" (a CSV habit) was taken as one host name and failed only
     * when a server listened or a client dialled. */
    const char *comma = strchr(host, ',');
    if (comma)
        return rkv_errf(err, err_len, -1,
                        "%s:%d: host \"%s\": a comma; separate the fields with spaces "
                        "(\"host base_port servers\")",
                        path, ln, host);
    for (const char *c = host; *c; c++)
        if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
            return rkv_errf(err, err_len, -1,
                            "%s:%d: host \"%s\": byte 0x%02x at %d is no part of a host name or "
                            "address",
                            path, ln, host, (unsigned char)*c, (int)(c - host) + 1);
    uint64_t p = CMD_DGL_DEFAULT_PORT, n = default_servers;
    if ((port && cmd_line_number(path, ln, "base_port", port, 65535, &p, err, err_len) < 0) ||
        (servers && cmd_line_number(path, ln, "servers", servers, 256, &n, err, err_len) < 0))
        return -1;
    if (extra)
        return rkv_errf(err, err_len, -1, "%s:%d: unexpected \"%s\" after the server count", path,
                        ln, extra);
    if (p + n - 1 > 65535)
        return rkv_errf(err, err_len, -1,
                        "%s:%d: %llu servers from port %llu run past port 65535 (server i of a "
                        "machine listens on base_port + i)",
                        path, ln, (unsigned long long)n, (unsigned long long)p);
    snprintf(m->host, sizeof(m->host), "%s", host);
    m->base_port = (uint16_t)p;
    m->servers = (uint32_t)n;
    return 0;
}

/* Two lines naming one host whose port ranges meet would put two servers on
 * one port: the second fails far from the cause ("address in use", or a
 * client talking to the wrong server). Hosts compare as
 * rkv_machines_overlap says. */
static int cmd_check_duplicates(const char *path, const struct rkv_machine *ms, const int *lns,
                                uint32_t n, char *err, size_t err_len)
{
    uint32_t i, j;
    int found = rkv_machines_overlap(ms, n, &i, &j);
    if (found < 0)
        return rkv_errf(err, err_len, -1, "%s: out of memory checking %u machines", path, n);
    if (!found)
        return 0;
    const struct rkv_machine *a = &ms[i], *b = &ms[j];
    return rkv_errf(err, err_len, -1,
                    "%s:%d: %s ports %u..%u overlap line %d's (%s ports %u..%u): a machine is "
                    "listed once, and machines on one host need distinct ports",
                    path, lns[j], b->host, b->base_port, b->base_port + b->servers - 1, lns[i],
                    a->host, a->base_port, a->base_port + a->servers - 1);
}

/* fgets that says how many bytes it read, NUL bytes included (strlen
 * cannot tell a NUL read from the end): up to cap - 1 bytes, to and
 * with the newline, NUL-terminated; 0 at the end of the file. */
static int cmd_cluster_line(FILE *f, char *line, size_t cap, size_t *len)
{
    size_t n = 0;
    int c = EOF;
    while (n < cap - 1 && (c = getc(f)) != EOF) {
        line[n++] = (char)c;
        if (c == '\n')
            break;
    }
    line[n] = 0;
    *len = n;
    return n > 0;
}

int rkv_cmd_cluster_parse(const char *path, uint32_t default_servers, struct rkv_machine **m_p,
                          uint32_t *n_p, char *err, size_t err_len)
{
    /* A directory opens and reads as empty: "no machines" said of /tmp.
     * (A pipe is read once, and may be one: --cluster <(...).) */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return rkv_errf(err, err_len, -1, "%s: is a directory, not a cluster file", path);
    FILE *f = fopen(path, "r");
    if (!f)
        return rkv_errf(err, err_len, -1, "%s: cannot open: %s", path, strerror(errno));
    struct rkv_machine *ms = calloc(RKV_MAX_MACHINES, sizeof(*ms));
    int *lns = calloc(RKV_MAX_MACHINES, sizeof(*lns)); /* each machine's line */
    uint32_t n = 0;
    char line[512];
    int ln = 0, rc = ms && lns ? 0 : rkv_errf(err, err_len, -1, "out of memory");
    size_t len;
    while (rc == 0 && cmd_cluster_line(f, line, sizeof(line), &len)) {
        ln++;
        /* Before the length check: fgets stopped at no NUL, and a 9-byte
         * file with one was "line longer than 510 bytes". */
        if (memchr(line, 0, len)) {
            rc = rkv_errf(err, err_len, -1, "%s:%d: a NUL byte at line %d (not a text file?)", path,
                          ln, ln);
            break;
        }
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            rc = rkv_errf(err, err_len, -1, "%s:%d: line longer than %zu bytes", path, ln,
                          sizeof(line) - 2);
            break;
        }
        /* A UTF-8 byte order mark (an editor's) before the first line's
         * text: skipped before the '#' check, which took it for a field. */
        if (ln == 1 && len >= 3 && !memcmp(line, "\xef\xbb\xbf", 3))
            memmove(line, line + 3, strlen(line + 3) + 1);
        /* A comment starts the line or follows a space: "10.0.0.1#rack-a
         * 20500 4" was read as 10.0.0.1 with the default port and 1
         * server, the rest dropped without a word (an outside tester). */
        char *hash = strchr(line, '#');
        if (hash && hash > line && !isspace((unsigned char)hash[-1])) {
            char *start = hash;
            while (start > line && !isspace((unsigned char)start[-1]))
                start--;
            int field = (int)strcspn(start, " \t\r\n");
            rc = rkv_errf(err, err_len, -1,
                          "%s:%d: '#' inside '%.*s': a comment starts the line or follows a "
                          "space",
                          path, ln, field > 80 ? 80 : field, start);
            break;
        }
        if (hash)
            *hash = 0;
        /* A file with CR line ends (old Mac editors) is one line here: its
         * first machine was taken and the rest dropped without a word. */
        char *cr = strchr(line, '\r');
        if (cr && cr[1] && cr[1] != '\n') {
            rc = rkv_errf(err, err_len, -1,
                          "%s:%d: a carriage return inside the line (CR line ends?): end each "
                          "machine's line with a newline",
                          path, ln);
            break;
        }
        line[strcspn(line, "\r\n")] = 0;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        if (n == RKV_MAX_MACHINES) {
            rc = rkv_errf(err, err_len, -1, "%s:%d: more than %u machines", path, ln,
                          RKV_MAX_MACHINES);
        } else {
            lns[n] = ln;
            rc = cmd_parse_line(path, ln, p, default_servers, &ms[n++], err, err_len);
        }
    }
    fclose(f);
    if (rc == 0 && n == 0)
        rc = rkv_errf(err, err_len, -1,
                      "%s: no machines (expected 'host [base_port [servers]]' "
                      "lines)",
                      path);
    if (rc == 0)
        rc = cmd_check_duplicates(path, ms, lns, n, err, err_len);
    free(lns);
    if (rc < 0) {
        free(ms);
        return rc;
    }
    *m_p = ms;
    *n_p = n;
    return 0;
}

static int cmd_u32(const struct cmd_settings *s, enum cmd_key k, uint32_t *v, char *err,
                   size_t err_len)
{
    uint64_t x = 0; /* set on success; GCC -O3 warns otherwise */
    if (rkv_cmd_get_u64(s, k, &x, err, err_len) < 0)
        return -1;
    if (x > UINT32_MAX) {
        rkv_errf(err, err_len, -1, "%s: %llu is too large (%s)", CMD_NAME(k), (unsigned long long)x,
                 s->src[k]);
        return -1;
    }
    *v = (uint32_t)x;
    return 0;
}

int rkv_cmd_host_pick(const char *hosts, uint32_t m, char *out, size_t out_len, char *err,
                      size_t err_len)
{
    if (!*hosts) { /* unset: every machine's is empty, as before lists */
        out[0] = 0;
        return 0;
    }
    uint32_t n = 1;
    for (const char *c = hosts; *c; c++)
        n += *c == ',';
    const char *at = hosts;
    for (uint32_t i = 0; i < m % n; i++)
        at = strchr(at, ',') + 1;
    size_t len = strcspn(at, ",");
    /* every element checked, not only the one picked: a typo in another
     * machine's is said by every process the same way */
    for (const char *e = hosts;; e++) {
        size_t l = strcspn(e, ",");
        if (l == 0)
            return rkv_errf(err, err_len, -1, "host: \"%s\": an empty address in the list", hosts);
        if (l > RKV_HOST_MAX)
            return rkv_errf(err, err_len, -1, "host: \"%s\": an address longer than %d characters",
                            hosts, RKV_HOST_MAX);
        /* As the cluster file's hosts (cmd_parse_line): "10.0.0.1:9000"
         * (DMLC_PS_ROOT_URI given a port) or a stray space was taken as a
         * name and failed only when a server listened, with "is the port in
         * use?", or as clients retrying a connection for connect-retry-ms.
         * An IPv6 address has more than one colon. */
        const char *colon = memchr(e, ':', l), *bracket = memchr(e, ']', l);
        if ((e[0] == '[' && bracket && bracket + 1 < e + l) ||
            (colon && !memchr(colon + 1, ':', l - (size_t)(colon + 1 - e))))
            return rkv_errf(err, err_len, -1,
                            "host: \"%s\": \"%.*s\" has a port; give the address alone and the "
                            "port as base-port (RKV_BASE_PORT, DMLC_PS_ROOT_PORT)",
                            hosts, (int)l, e);
        for (size_t i = 0; i < l; i++)
            if ((unsigned char)e[i] <= ' ' || (unsigned char)e[i] >= 0x7f)
                return rkv_errf(err, err_len, -1,
                                "host: \"%s\": byte 0x%02x at %zu is no part of a host name or "
                                "address",
                                hosts, (unsigned char)e[i], (size_t)(e - hosts) + i + 1);
        e += l;
        if (!*e)
            break;
    }
    assert(len < out_len); /* callers give RKV_HOST_MAX + 1 */
    (void)out_len;
    memcpy(out, at, len);
    out[len] = 0;
    return 0;
}

int rkv_cmd_local_shape(const struct cmd_settings *s, uint32_t *nm_p, uint32_t *spm_p, char *err,
                        size_t err_len)
{
    uint32_t nm = 0, spm = 0, total = 0;
    if (cmd_u32(s, CMD_MACHINES, &nm, err, err_len) ||
        cmd_u32(s, CMD_SERVERS_PER_MACHINE, &spm, err, err_len))
        return -1;
    /* Each check names the setting and where its value came from: a
     * DMLC_NUM_SERVER or DGL_NUM_SERVER left in the environment is not
     * something the user typed on this command line. */
    if (nm == 0 || nm > RKV_MAX_MACHINES)
        return rkv_errf(err, err_len, -1, "machines %u (%s): expected 1..%u", nm,
                        s->src[CMD_MACHINES], RKV_MAX_MACHINES);
    enum cmd_key spm_key = CMD_SERVERS_PER_MACHINE;
    if (*s->val[CMD_NUM_SERVERS]) {
        /* num-servers counts every machine's servers (ps-lite's
         * DMLC_NUM_SERVER). It was taken as each machine's: --machines 2
         * --num-servers 4 made 8 servers, and --server-id 7 started. */
        spm_key = CMD_NUM_SERVERS;
        if (cmd_u32(s, CMD_NUM_SERVERS, &total, err, err_len))
            return -1;
        if (total % nm)
            return rkv_errf(err, err_len, -1,
                            "num-servers %u (%s) over machines %u (%s): not a whole number of "
                            "servers per machine (num-servers counts every machine's servers "
                            "together)",
                            total, s->src[CMD_NUM_SERVERS], nm, s->src[CMD_MACHINES]);
        /* One machine: num-servers is its count, whatever
         * servers-per-machine says, as it always was. */
        if (nm > 1 && strcmp(s->src[CMD_SERVERS_PER_MACHINE], "default") != 0 && spm != total / nm)
            return rkv_errf(err, err_len, -1,
                            "num-servers %u (%s) over machines %u (%s) is %u server%s per "
                            "machine, but servers-per-machine is %u (%s): make them agree, or "
                            "drop one",
                            total, s->src[CMD_NUM_SERVERS], nm, s->src[CMD_MACHINES], total / nm,
                            total / nm == 1 ? "" : "s", spm, s->src[CMD_SERVERS_PER_MACHINE]);
        spm = total / nm;
    }
    if (spm == 0 || spm > 256) {
        if (spm_key == CMD_NUM_SERVERS && nm > 1)
            return rkv_errf(err, err_len, -1,
                            "num-servers %u (%s) over machines %u (%s) is %u per machine: "
                            "expected 1..256 servers per machine",
                            total, s->src[CMD_NUM_SERVERS], nm, s->src[CMD_MACHINES], spm);
        return rkv_errf(err, err_len, -1, "%s %u (%s): expected 1..256 servers per machine",
                        CMD_NAME(spm_key), spm, s->src[spm_key]);
    }
    *nm_p = nm;
    *spm_p = spm;
    return 0;
}

/* Without a cluster file: `machines` machines on host's address (or on its
 * list's, round robin), consecutive ports. */
static int cmd_local_machines(const struct cmd_settings *s, struct rkv_config *cfg, char *err,
                              size_t err_len)
{
    uint32_t nm = 0, spm = 0, port = 0;
    if (rkv_cmd_local_shape(s, &nm, &spm, err, err_len) < 0 ||
        cmd_u32(s, CMD_BASE_PORT, &port, err, err_len))
        return -1;
    /* Named with its source: an RKV_BASE_PORT left in the environment. */
    if (port == 0 || port > 65535)
        return rkv_errf(err, err_len, -1, "base-port %u (%s): expected 1..65535", port,
                        s->src[CMD_BASE_PORT]);
    uint64_t last = port + (uint64_t)nm * spm - 1;
    if (last > 65535)
        return rkv_errf(err, err_len, -1,
                        "base-port %u (%s): %u machine%s of %u server%s need%s ports %u..%llu, "
                        "past 65535 (server i of machine m listens on base-port + m * "
                        "servers-per-machine + i)",
                        port, s->src[CMD_BASE_PORT], nm, nm == 1 ? "" : "s", spm,
                        spm == 1 ? "" : "s", nm == 1 ? "s" : "", port, (unsigned long long)last);
    cfg->machines = calloc(nm, sizeof(*cfg->machines));
    if (!cfg->machines)
        return rkv_errf(err, err_len, -1, "out of memory");
    int discover = strcmp(s->val[CMD_DISCOVER], "1") == 0; /* 0 or 1: rkv_cmd_build_config */
    for (uint32_t m = 0; m < nm; m++) {
        if ((m == 0 || !discover) && /* else learned from server 0 at start */
            rkv_cmd_host_pick(s->val[CMD_HOST], m, cfg->machines[m].host,
                              sizeof(cfg->machines[m].host), err, err_len) < 0) {
            /* Named: an RKV_HOST or DMLC_PS_ROOT_URI left in the environment
             * was read as "host: ..." by a command with no --host. */
            size_t k = strlen(err);
            if (k < err_len)
                snprintf(err + k, err_len - k, " (%s)", s->src[CMD_HOST]);
            free(cfg->machines);
            cfg->machines = NULL;
            return -1;
        }
        cfg->machines[m].base_port = (uint16_t)(port + m * spm);
        cfg->machines[m].servers = spm;
    }
    cfg->n_machines = nm;
    return 0;
}

/* Settings whose value sizes memory a node allocates up front: a value far
 * beyond any real cluster is a typo (or a unit mistake), refused here naming
 * the setting and its limit, not met later as "out of memory". */
static const struct cmd_limit {
    enum cmd_key key;
    uint64_t max;
    const char *why;
} cmd_limits[] = {
    {CMD_NUM_WORKERS, RKV_MAX_WORKERS, "servers keep a record per worker"},
    {CMD_RX_DEPTH, RKV_MAX_RX_DEPTH, "each connection posts this many receive buffers"},
    {CMD_SLOTS, RKV_MAX_PUSH_SLOTS, "each connection keeps this many slots"},
    {CMD_CTRL_BUF_BYTES, RKV_MAX_CTRL_BUF_BYTES, "each receive buffer has this size"},
};

/* Bytes of receive buffers one connection may take (rx-depth x
 * ctrl-buf-bytes): a server holds one set per peer. */
#define CMD_RX_BYTES_MAX RKV_MAX_RX_BYTES

static int cmd_check_limits(const struct cmd_settings *s, char *err, size_t err_len)
{
    uint64_t v[CMD_KEY_COUNT_] = {0};
    for (size_t i = 0; i < sizeof(cmd_limits) / sizeof(cmd_limits[0]); i++) {
        const struct cmd_limit *l = &cmd_limits[i];
        if (rkv_cmd_get_u64(s, l->key, &v[l->key], err, err_len) < 0)
            return -1;
        if (v[l->key] > l->max)
            return rkv_errf(err, err_len, -1, "%s: %llu is above the limit %llu (%s; %s)",
                            CMD_NAME(l->key), (unsigned long long)v[l->key],
                            (unsigned long long)l->max, l->why, s->src[l->key]);
    }
    uint64_t rx = v[CMD_RX_DEPTH] * v[CMD_CTRL_BUF_BYTES]; /* both bounded: no overflow */
    if (rx > CMD_RX_BYTES_MAX)
        return rkv_errf(err, err_len, -1,
                        "rx-depth x ctrl-buf-bytes: %llu x %llu bytes of receive buffers per "
                        "connection is above the limit %llu MiB",
                        (unsigned long long)v[CMD_RX_DEPTH],
                        (unsigned long long)v[CMD_CTRL_BUF_BYTES], CMD_RX_BYTES_MAX >> 20);
    return 0;
}

/* A verbs number: "" leaves it unset (the NIC's own), else 0..max and bit
 * in *set. */
static int cmd_verbs_int(const struct cmd_settings *s, enum cmd_key k, int max, int *v,
                         uint32_t *set, uint32_t bit, char *err, size_t err_len)
{
    uint64_t x = 0;
    if (!*s->val[k])
        return 0;
    if (rkv_cmd_get_u64(s, k, &x, err, err_len) < 0)
        return -1;
    if (x > (uint64_t)max)
        return rkv_errf(err, err_len, -1, "%s: %llu is out of range 0..%d (%s)", CMD_NAME(k),
                        (unsigned long long)x, max, s->src[k]);
    *v = (int)x;
    *set |= bit;
    return 0;
}

static int cmd_verbs(const struct cmd_settings *s, struct rkv_verbs_config *v, char *err,
                     size_t err_len)
{
    if (strlen(s->val[CMD_VERBS_DEV]) >= sizeof(v->dev))
        return rkv_errf(err, err_len, -1, "verbs-dev: longer than %zu characters (%s)",
                        sizeof(v->dev) - 1, s->src[CMD_VERBS_DEV]);
    strcpy(v->dev, s->val[CMD_VERBS_DEV]);
    uint32_t *set = &v->set;
    if (cmd_verbs_int(s, CMD_VERBS_TOS, 255, &v->tos, set, RKV_VERBS_SET_TOS, err, err_len) < 0 ||
        cmd_verbs_int(s, CMD_VERBS_SL, 15, &v->sl, set, RKV_VERBS_SET_SL, err, err_len) < 0 ||
        cmd_verbs_int(s, CMD_VERBS_GID_INDEX, 65535, &v->gid_index, set, RKV_VERBS_SET_GID_INDEX,
                      err, err_len) < 0 ||
        cmd_verbs_int(s, CMD_VERBS_MTU, 4096, &v->mtu, set, RKV_VERBS_SET_MTU, err, err_len) < 0 ||
        cmd_verbs_int(s, CMD_VERBS_SRQ_DEPTH, 1 << 20, &v->srq_depth, set, RKV_VERBS_SET_SRQ_DEPTH,
                      err, err_len) < 0)
        return -1;
    if ((*set & RKV_VERBS_SET_MTU) && (v->mtu < 256 || (v->mtu & (v->mtu - 1))))
        return rkv_errf(err, err_len, -1,
                        "verbs-mtu: %d is not an RDMA MTU (256, 512, 1024, 2048 or 4096; %s)",
                        v->mtu, s->src[CMD_VERBS_MTU]);
    return 0;
}

int rkv_cmd_server_locate(const struct cmd_settings *s, const struct rkv_config *cfg, uint32_t *m_p,
                          uint32_t *local_p, char *err, size_t err_len)
{
    uint64_t sid = 0;
    if (rkv_cmd_get_u64(s, CMD_SERVER_ID, &sid, err, err_len) < 0)
        return -1;
    uint64_t local = sid, total = 0;
    uint32_t m = 0;
    while (m < cfg->n_machines && local >= cfg->machines[m].servers)
        local -= cfg->machines[m++].servers;
    if (m == cfg->n_machines) {
        for (uint32_t i = 0; i < cfg->n_machines; i++)
            total += cfg->machines[i].servers;
        assert(total > 0); /* every machine has 1..256 servers */
        return rkv_errf(err, err_len, -1,
                        "server-id %llu (%s): expected 0..%llu, the ids of the cluster's %llu "
                        "server%s on %u machine%s",
                        (unsigned long long)sid, s->src[CMD_SERVER_ID],
                        (unsigned long long)(total - 1), (unsigned long long)total,
                        total == 1 ? "" : "s", cfg->n_machines, cfg->n_machines == 1 ? "" : "s");
    }
    *m_p = m;
    *local_p = (uint32_t)local;
    return 0;
}

/* DGL's launch always gives its ip_config.txt (DGL_IP_CONFIG): a role
 * from DGL_ROLE with no cluster given any way built a one-machine cluster
 * on 127.0.0.1:29500 in silence, joining whatever listened there (an
 * outside tester's launcher had lost the variable). For what runs a node
 * (the binding, `rkv node`), not for tools a leftover DGL_ROLE in a shell
 * should not stop. */
int rkv_cmd_dgl_role_without_cluster(const struct cmd_settings *s, char *err, size_t err_len)
{
    if (strcmp(s->src[CMD_ROLE], "env DGL_ROLE") || *s->val[CMD_CLUSTER] ||
        strcmp(s->src[CMD_HOST], "default") || strcmp(s->src[CMD_MACHINES], "default") ||
        strcmp(s->src[CMD_DISCOVER], "default"))
        return 0;
    return rkv_errf(err, err_len, -1,
                    "DGL_ROLE=%s without a cluster: DGL's launch gives its ip_config.txt in "
                    "DGL_IP_CONFIG, which is unset or empty here; set it (or cluster / "
                    "RKV_CLUSTER, or host and machines) rather than run on a default "
                    "one-machine cluster",
                    s->val[CMD_ROLE]);
}

int rkv_cmd_check_role(const struct cmd_settings *s, char *err, size_t err_len)
{
    /* Only `rkv node` dispatches on the role; everything else built with it
     * unread, so DMLC_ROLE=sever started a worker's program as if no role
     * had been given. ps-lite and DGL compare these words exactly. */
    static const char *const roles[] = {"", "server", "worker", "client", "scheduler"};
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
        if (!strcmp(s->val[CMD_ROLE], roles[i]))
            return 0;
    return rkv_errf(err, err_len, -1,
                    "role: unknown \"%s\" (%s); expected server, worker, client (DGL's word for "
                    "a worker) or scheduler",
                    s->val[CMD_ROLE], s->src[CMD_ROLE]);
}

/* DGL_NUM_SERVER is DGL's servers per machine, every machine's (its launch
 * sets it from --num_servers). A cluster file in the older
 * "host port servers" form that says otherwise for a machine left one of
 * the two wrong, silently: the file's count won. servers-per-machine set
 * under rkv's own names keeps its meaning there, the count of the lines
 * that give none. */
static int cmd_check_dgl_servers(const struct cmd_settings *s, const struct rkv_config *cfg,
                                 uint32_t spm, char *err, size_t err_len)
{
    if (strcmp(s->src[CMD_SERVERS_PER_MACHINE], "env DGL_NUM_SERVER") != 0)
        return 0;
    for (uint32_t m = 0; m < cfg->n_machines; m++) {
        const struct rkv_machine *ma = &cfg->machines[m];
        if (ma->servers != spm)
            return rkv_errf(err, err_len, -1,
                            "DGL_NUM_SERVER=%u (servers on each machine) but the cluster file "
                            "%s gives machine %u (%s %u) %u server%s: make them agree, or drop "
                            "one of the two",
                            spm, s->val[CMD_CLUSTER], m, ma->host, ma->base_port, ma->servers,
                            ma->servers == 1 ? "" : "s");
    }
    return 0;
}

/* num-servers (DMLC_NUM_SERVER, ps-lite's count of every server) beside a
 * cluster file, which says how many there are: one that disagrees was
 * ignored, and a launch sized by it waited for servers that never came or
 * started some the cluster has no id for. */
static int cmd_check_total_servers(const struct cmd_settings *s, const struct rkv_config *cfg,
                                   char *err, size_t err_len)
{
    if (!*s->val[CMD_NUM_SERVERS])
        return 0;
    uint64_t want = 0, total = 0;
    if (rkv_cmd_get_u64(s, CMD_NUM_SERVERS, &want, err, err_len) < 0)
        return -1;
    for (uint32_t m = 0; m < cfg->n_machines; m++)
        total += cfg->machines[m].servers;
    if (want != total)
        return rkv_errf(err, err_len, -1,
                        "num-servers %llu (%s) but the cluster file %s has %llu server%s on %u "
                        "machine%s: make them agree, or drop num-servers",
                        (unsigned long long)want, s->src[CMD_NUM_SERVERS], s->val[CMD_CLUSTER],
                        (unsigned long long)total, total == 1 ? "" : "s", cfg->n_machines,
                        cfg->n_machines == 1 ? "" : "s");
    return 0;
}

/* Whether msg names field as a word of its own (timeout_ms is not named
 * by idle_timeout_ms). */
static int cmd_names_field(const char *msg, const char *field)
{
    size_t n = strlen(field);
    for (const char *at = strstr(msg, field); at; at = strstr(at + 1, field)) {
        char before = at > msg ? at[-1] : ' ', after = at[n];
        if (!(isalnum((unsigned char)before) || before == '_') &&
            !(isalnum((unsigned char)after) || after == '_'))
            return 1;
    }
    return 0;
}

/* rkv_cfg_check's refusal names the config's fields: the settings it
 * names that were not left at their defaults are appended, with where each
 * came from. A ps-lite user's BYTEPS_RDMA_RX_DEPTH=2 was refused as
 * "rx_depth out of range" without naming the variable (an outside
 * tester). Only whole items are appended, and only within err. */
static void cmd_name_sources(const struct cmd_settings *s, char *err, size_t err_len)
{
    static const struct {
        enum cmd_key key;
        const char *field; /* as rkv_cfg_check's messages name it */
    } fields[] = {{CMD_TIMEOUT_MS, "timeout_ms"},           {CMD_RX_DEPTH, "rx_depth"},
                  {CMD_CTRL_BUF_BYTES, "ctrl_buf_bytes"},   {CMD_SLOTS, "push_slots"},
                  {CMD_MAX_SLOT_BYTES, "max_slot_bytes"},   {CMD_SLOT_MEM_BYTES, "slot_mem_bytes"},
                  {CMD_IDLE_TIMEOUT_MS, "idle_timeout_ms"}, {CMD_MACHINE_ID, "machine id"}};
    char add[384] = "";
    size_t at = 0;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        enum cmd_key k = fields[i].key;
        if (!strcmp(s->src[k], "default") || !cmd_names_field(err, fields[i].field))
            continue;
        char item[192];
        int w = snprintf(item, sizeof(item), "%s%s %s (%s)", at ? ", " : " [given: ", CMD_NAME(k),
                         s->val[k], s->src[k]);
        if (w < 0 || (size_t)w >= sizeof(item) || at + (size_t)w + 1 >= sizeof(add))
            break;
        memcpy(add + at, item, (size_t)w + 1);
        at += (size_t)w;
    }
    size_t used = strlen(err);
    if (at && used + at + 2 <= err_len) /* the whole list and its ']', or nothing */
        snprintf(err + used, err_len - used, "%s]", add);
}

int rkv_cmd_build_config(const struct cmd_settings *s, struct rkv_config *cfg, char *err,
                         size_t err_len)
{
    rkv_config_defaults(cfg);
    if (cmd_check_limits(s, err, err_len) < 0 || rkv_cmd_check_role(s, err, err_len) < 0)
        return -1; /* before the cluster file or anything else is allocated */
    uint32_t spm = 0;
    uint64_t seed = 0, slot = 0; /* set on success; GCC -O3 warns otherwise */
    if (cmd_u32(s, CMD_SERVERS_PER_MACHINE, &spm, err, err_len))
        return -1;
    /* Anything but "0" was on: discover=no or =false left every machine
     * but 0 without a host, waiting for an announcement. */
    if (strcmp(s->val[CMD_DISCOVER], "0") && strcmp(s->val[CMD_DISCOVER], "1"))
        return rkv_errf(err, err_len, -1, "discover: expected 0 or 1, got \"%s\" (%s)",
                        s->val[CMD_DISCOVER], s->src[CMD_DISCOVER]);
    int rc = *s->val[CMD_CLUSTER] ? rkv_cmd_cluster_parse(s->val[CMD_CLUSTER], spm, &cfg->machines,
                                                          &cfg->n_machines, err, err_len)
                                  : cmd_local_machines(s, cfg, err, err_len);
    if (rc < 0)
        return -1;
    if (*s->val[CMD_CLUSTER] && (cmd_check_dgl_servers(s, cfg, spm, err, err_len) < 0 ||
                                 cmd_check_total_servers(s, cfg, err, err_len) < 0))
        goto free_machines;
    uint32_t ll = 0, busy = 0;
    if (cmd_u32(s, CMD_NUM_WORKERS, &cfg->n_workers, err, err_len) ||
        cmd_u32(s, CMD_MACHINE_ID, &cfg->machine_id, err, err_len) ||
        cmd_u32(s, CMD_TIMEOUT_MS, &cfg->timeout_ms, err, err_len) ||
        cmd_u32(s, CMD_CONNECT_RETRY_MS, &cfg->connect_retry_ms, err, err_len) ||
        cmd_u32(s, CMD_RX_DEPTH, &cfg->rx_depth, err, err_len) ||
        cmd_u32(s, CMD_CTRL_BUF_BYTES, &cfg->ctrl_buf_bytes, err, err_len) ||
        cmd_u32(s, CMD_SLOTS, &cfg->push_slots, err, err_len) ||
        rkv_cmd_get_u64(s, CMD_MAX_SLOT_BYTES, &slot, err, err_len) ||
        rkv_cmd_get_u64(s, CMD_SLOT_MEM_BYTES, &cfg->slot_mem_bytes, err, err_len) ||
        rkv_cmd_get_u64(s, CMD_SEED, &seed, err, err_len) ||
        cmd_u32(s, CMD_LOG_LEVEL, &ll, err, err_len) ||
        cmd_u32(s, CMD_RETRY_MS, &cfg->retry_ms, err, err_len) ||
        rkv_cmd_get_u64(s, CMD_ZERO_COPY_BYTES, &cfg->zero_copy_bytes, err, err_len) ||
        rkv_cmd_get_u64(s, CMD_DURABLE_LOG_PREWRITE, &cfg->durable_log_prewrite, err, err_len) ||
        cmd_u32(s, CMD_BUSY_POLL, &busy, err, err_len) ||
        cmd_u32(s, CMD_HELLO_TIMEOUT_MS, &cfg->hello_timeout_ms, err, err_len) ||
        cmd_u32(s, CMD_IDLE_TIMEOUT_MS, &cfg->idle_timeout_ms, err, err_len))
        goto free_machines;
    const char *secret_file = s->val[CMD_SECRET_FILE];
    if (*secret_file) {
        /* The NIC reads it when it opens (so a long secret is not cut to
         * rkv_config.secret's size); said here if it cannot. */
        struct stat st;
        if (access(secret_file, R_OK) != 0 || stat(secret_file, &st) != 0) {
            rkv_errf(err, err_len, -1, "secret-file: cannot read %s: %s", secret_file,
                     strerror(errno));
            goto free_machines;
        }
        /* Either read as a secret of no bytes: a cluster anyone may join,
         * when its user asked for one only they can. */
        if (S_ISDIR(st.st_mode) || (S_ISREG(st.st_mode) && st.st_size == 0)) {
            rkv_errf(err, err_len, -1, "secret-file: %s is %s, not a secret", secret_file,
                     S_ISDIR(st.st_mode) ? "a directory" : "empty");
            goto free_machines;
        }
        if (strlen(secret_file) >= sizeof(cfg->secret_file)) {
            rkv_errf(err, err_len, -1, "secret-file: longer than %zu bytes",
                     sizeof(cfg->secret_file) - 1);
            goto free_machines;
        }
        strcpy(cfg->secret_file, secret_file);
    }
    if (busy > 1) {
        rkv_errf(err, err_len, -1, "busy-poll: expected 0 or 1, got %u", busy);
        goto free_machines;
    }
    /* rkv_cfg_check refuses it too, naming the field: here the setting. */
    if (cfg->idle_timeout_ms && cfg->idle_timeout_ms < RKV_MIN_IDLE_TIMEOUT_MS) {
        rkv_errf(err, err_len, -1,
                 "idle-timeout-ms: %u (%s) is below the minimum %u ms (0: off): " RKV_IDLE_WHY,
                 cfg->idle_timeout_ms, s->src[CMD_IDLE_TIMEOUT_MS], RKV_MIN_IDLE_TIMEOUT_MS);
        goto free_machines;
    }
    /* 99 (or ps-lite's PS_VERBOSE=9) was taken as debug without a word. */
    if (ll > RKV_LOG_DEBUG) {
        rkv_errf(err, err_len, -1,
                 "log-level: expected 0..3 (0 error, 1 warn, 2 info, 3 debug), got %u (%s)", ll,
                 s->src[CMD_LOG_LEVEL]);
        goto free_machines;
    }
    cfg->busy_poll = (int)busy;
    if (cmd_verbs(s, &cfg->verbs, err, err_len) < 0)
        goto free_machines;
    if (strlen(s->val[CMD_DURABLE_DIR]) >= sizeof(cfg->durable_dir)) {
        rkv_errf(err, err_len, -1, "durable-dir: longer than %zu bytes",
                 sizeof(cfg->durable_dir) - 1);
        goto free_machines;
    }
    strcpy(cfg->durable_dir, s->val[CMD_DURABLE_DIR]);
    cfg->max_slot_bytes = slot;
    cfg->seed = seed;
    cfg->log_level = (int)ll;
    if (strlen(s->val[CMD_BACKEND]) >= sizeof(cfg->backend)) {
        rkv_errf(err, err_len, -1, "backend: unknown \"%s\"", s->val[CMD_BACKEND]);
        goto free_machines;
    }
    strcpy(cfg->backend, s->val[CMD_BACKEND]);
    /* Refused, not cut: two clusters whose prefixes differ only past the
     * cut shared one set of segments and wrote into each other's. */
    if (strlen(s->val[CMD_SHM_PREFIX]) >= sizeof(cfg->shm_prefix)) {
        rkv_errf(err, err_len, -1, "shm-prefix: longer than %zu bytes: \"%s\"",
                 sizeof(cfg->shm_prefix) - 1, s->val[CMD_SHM_PREFIX]);
        goto free_machines;
    }
    /* A POSIX shared-memory name is one '/' and a file name: "a/b" failed
     * in shm_open as an I/O error (exit 3), the setting unnamed. A leading
     * '/' is the name's own, which shm_open skips: rkv_cfg_check takes it
     * from the C API, and so does the command line. */
    if (strchr(s->val[CMD_SHM_PREFIX] + (s->val[CMD_SHM_PREFIX][0] == '/'), '/')) {
        rkv_errf(err, err_len, -1,
                 "shm-prefix: \"%s\" (%s): a '/' cannot be in a shared-memory "
                 "name",
                 s->val[CMD_SHM_PREFIX], s->src[CMD_SHM_PREFIX]);
        goto free_machines;
    }
    if (*s->val[CMD_SHM_PREFIX])
        snprintf(cfg->shm_prefix, sizeof(cfg->shm_prefix), "%s", s->val[CMD_SHM_PREFIX]);
    else
        snprintf(cfg->shm_prefix, sizeof(cfg->shm_prefix), "rkv-%u", cfg->machines[0].base_port);
    if (rkv_cfg_check(cfg, err, err_len) < 0) {
        cmd_name_sources(s, err, err_len);
        goto free_machines;
    }
    return 0;
free_machines:
    free(cfg->machines);
    cfg->machines = NULL;
    return -1;
}

/* Whether host names an address of this machine: binding a socket to it
 * succeeds only then (all of 127.0.0.0/8 is this machine's). */
static int cmd_host_is_local(const char *host)
{
    /* IPv6 too: a cluster file of IPv6 addresses ("::1", "[fd00::2]")
     * found no machine and every DGL client took machine 0. */
    char bare[RKV_HOST_MAX + 1];
    host = rkv_host_bare(host, bare, sizeof(bare));
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res;
    if (!host[0] || getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    int local = 0;
    for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
        struct sockaddr_storage sa;
        if (a->ai_addrlen > sizeof(sa) || (a->ai_family != AF_INET && a->ai_family != AF_INET6))
            continue;
        memcpy(&sa, a->ai_addr, a->ai_addrlen);
        int family = a->ai_family;
        socklen_t len = a->ai_addrlen;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
        if (family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            /* ::ffff:a.b.c.d is a.b.c.d (a v6 socket would not bind it
             * with net.ipv6.bindv6only set). */
            struct sockaddr_in s4 = {.sin_family = AF_INET};
            memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
            memcpy(&sa, &s4, sizeof(s4));
            family = AF_INET;
            len = sizeof(s4);
        }
        if (family == AF_INET)
            ((struct sockaddr_in *)&sa)->sin_port = 0;
        else
            s6->sin6_port = 0;
        /* Binding succeeds only to an address of this host. */
        int fd = socket(family, SOCK_DGRAM, 0);
        local = fd >= 0 && bind(fd, (struct sockaddr *)&sa, len) == 0;
        if (fd >= 0)
            close(fd);
    }
    freeaddrinfo(res);
    return local;
}

int rkv_cmd_local_machine(const struct rkv_config *cfg, uint32_t *m_p)
{
    for (uint32_t m = 0; m < cfg->n_machines; m++) {
        if (cmd_host_is_local(cfg->machines[m].host)) {
            *m_p = m;
            return 0;
        }
    }
    return -1;
}

int rkv_cmd_client_machine(const struct cmd_settings *s, struct rkv_config *cfg, char *err,
                           size_t err_len)
{
    if (!*s->val[CMD_CLUSTER] || strcmp(s->src[CMD_MACHINE_ID], "default") != 0)
        return 0;
    uint32_t here;
    if (rkv_cmd_local_machine(cfg, &here) == 0) {
        cfg->machine_id = here;
        return 0;
    }
    if (cfg->n_machines < 2)
        return 0;
    /* Machine 0 by default: on another host a client mapped machine 0's
     * shard name, which is not there, or on one host said nothing while
     * it was not the machine meant (an outside tester). */
    char hosts[160] = "";
    size_t hl = 0;
    for (uint32_t m = 0; m < cfg->n_machines && m < 4 && hl < sizeof(hosts); m++)
        hl += (size_t)snprintf(hosts + hl, sizeof(hosts) - hl, "%s%s", m ? ", " : "",
                               cfg->machines[m].host);
    return rkv_errf(err, err_len, -RKV_ECONFIG,
                    "cluster file %s: no machine's host (%s%s) is an address of this host (or "
                    "resolves to one), so this process cannot tell which machine it is on: run "
                    "it on one of them, or give machine-id (--machine-id, RKV_MACHINE_ID)",
                    s->val[CMD_CLUSTER], hosts, cfg->n_machines > 4 ? ", ..." : "");
}
