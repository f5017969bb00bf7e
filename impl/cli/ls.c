/* rkv ls: the tensors of a running store (DGL's get_data_name_list), as
 * server 0 lists them, one line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "store/node.h"

/* Tensors a LIST reply can hold (the store's limit). */
#define LS_MAX_TENSORS 1024u
/* How long ls waits for server 0 unless connect-retry-ms is set: it asks a
 * store that runs, and waited the workers' 30 s for one that did not. */
#define LS_CONNECT_RETRY_MS 2000u

static const char *ls_policy_name(enum rkv_policy p)
{
    switch (p) {
    case RKV_PART_RANGE:
        return "range";
    case RKV_PART_HASH:
        return "hash";
    case RKV_PART_EXPLICIT:
        return "explicit";
    }
    return "?";
}

static void ls_usage(FILE *out)
{
    fprintf(out,
            "usage: rkv ls --cluster FILE [settings]\n"
            "Lists every tensor of the running store (asked of server 0, without taking a\n"
            "worker slot): id, name, dtype, rows, row length, partition policy and whether\n"
            "it has optimizer state. It waits %u ms for server 0 unless --connect-retry-ms\n"
            "says otherwise.\n\n",
            LS_CONNECT_RETRY_MS);
    rkv_cmd_settings_help(out);
}

/* A tensor's name as ls prints it: any bytes a client gave, so a newline
 * made a row of its own and an escape sequence reached the terminal. Bytes
 * outside printable ASCII are written \xNN, and a backslash \\, so that
 * the printed name tells every name apart. */
static const char *ls_name(const char *name, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    const unsigned char *c = (const unsigned char *)name;
    for (const unsigned char *end = c + len; c < end && *c && n + 5 <= cap; c++) {
        if (*c == '\\') {
            buf[n++] = '\\';
            buf[n++] = '\\';
        } else if (*c < 0x20 || *c >= 0x7f) {
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", *c);
        } else {
            buf[n++] = (char)*c;
        }
    }
    buf[n] = 0;
    return buf;
}

static void ls_print(FILE *out, const struct rkv_tensor_meta *m, size_t n)
{
    char name[4 * sizeof(m->name) + 1]; /* every byte as \xNN */
    fprintf(out, "%-4s %-24s %-5s %12s %8s %-8s %s\n", "id", "name", "dtype", "rows", "row_len",
            "policy", "state");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%-4u %-24s %-5s %12llu %8u %-8s %s\n", m[i].id,
                ls_name(m[i].name, sizeof(m[i].name), name, sizeof(name)),
                rkv_dtype_name(m[i].dtype), (unsigned long long)m[i].rows, m[i].row_len,
                ls_policy_name(m[i].policy), m[i].with_state ? "yes" : "no");
    fprintf(out, "%zu tensor%s\n", n, n == 1 ? "" : "s");
}

int cmd_ls(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            ls_usage(stdout);
            return RKV_EXIT_OK;
        }
    }
    struct cmd_settings s;
    struct rkv_config cfg;
    char err[512];
    if (rkv_cmd_settings_load(&s, argc, argv, err, sizeof(err)) < 0 ||
        rkv_cmd_build_config(&s, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv ls: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    if (!strcmp(s.src[CMD_CONNECT_RETRY_MS], "default"))
        cfg.connect_retry_ms = LS_CONNECT_RETRY_MS;
    struct rkv_tensor_meta *metas = calloc(LS_MAX_TENSORS, sizeof(*metas));
    struct rkv_client *cli = NULL;
    struct cmd_node nd;
    int code = RKV_EXIT_STORE, rc = metas ? 0 : -RKV_ENOMEM;
    if (rc == 0)
        rc = cmd_node_open(&s, &cfg, "ls", cfg.seed ^ (uint64_t)(uintptr_t)&nd, &nd, err,
                           sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "rkv ls: %s\n", metas ? err : "out of memory");
        goto free_metas;
    }
    if ((rc = rkv_client_create_observer_on(nd.port, nd.nic, &cfg, &cli, err, sizeof(err))) < 0) {
        fprintf(stderr, "rkv ls: %s%s\n", err,
                rc == -RKV_EPEERDEAD ? " (is the store running? ls asks server 0 where --cluster, "
                                       "or --host and --base-port, say; --connect-retry-ms MS "
                                       "waits longer for one that is starting)"
                                     : "");
        code = rc == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
        goto close_node;
    }
    size_t n = 0;
    if ((rc = rkv_client_list(cli, metas, LS_MAX_TENSORS, &n)) < 0) {
        fprintf(stderr, "rkv ls: %s\n", rkv_client_errmsg(cli));
        goto destroy_client;
    }
    ls_print(stdout, metas, n < LS_MAX_TENSORS ? n : LS_MAX_TENSORS);
    code = RKV_EXIT_OK;
destroy_client:
    rkv_client_destroy(cli);
close_node:
    cmd_node_close(&nd);
free_metas:
    free(metas);
    free(cfg.machines);
    return code;
}
