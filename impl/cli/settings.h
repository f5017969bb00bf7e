/* The rkv binary's settings (impl/cli/config.c): flags, env vars (RKV_* and
 * the ps-lite/DGL aliases), cluster files. The module is built into the
 * library (rkv_settings_* in impl/api) and read by the launcher
 * (harness/launch.c), which passes every setting on to the nodes it starts. */
#ifndef RKV_CLI_SETTINGS_H
#define RKV_CLI_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rkv.h"

enum cli_key {
    CLI_ROLE,
    CLI_CLUSTER,
    CLI_HOST,
    CLI_BASE_PORT,
    CLI_MACHINES,
    CLI_SERVERS_PER_MACHINE,
    CLI_NUM_SERVERS,
    CLI_NUM_WORKERS,
    CLI_MACHINE_ID,
    CLI_SERVER_ID,
    CLI_BACKEND,
    CLI_TIMEOUT_MS,
    CLI_CONNECT_RETRY_MS,
    CLI_RX_DEPTH,
    CLI_CTRL_BUF_BYTES,
    CLI_SLOTS,
    CLI_MAX_SLOT_BYTES,
    CLI_SHM_PREFIX,
    CLI_SEED,
    CLI_LOG_LEVEL,
    CLI_ROWS,
    CLI_VALUE_BYTES,
    CLI_ROUNDS,
    CLI_SCENARIO,
    CLI_DISCOVER,
    CLI_DURABLE_DIR,
    CLI_RETRY_MS,
    CLI_ZERO_COPY_BYTES,
    CLI_BUSY_POLL,
    CLI_SECRET_FILE,
    CLI_HELLO_TIMEOUT_MS,
    CLI_IDLE_TIMEOUT_MS,
    CLI_NODE_HOST,
    CLI_INTERFACE,
    CLI_KEY_COUNT_
};

struct cli_settings {
    const char *val[CLI_KEY_COUNT_];
    const char *src[CLI_KEY_COUNT_]; /* "default", "env NAME", "flag", ... */
    char srcbuf[CLI_KEY_COUNT_][48];
};

/* Loads defaults, then env vars (RKV_* and aliases), then flags from argv
 * (--name=value or --name value). Unknown flags are errors. Returns 0 or -1
 * with a message in err. */
int cli_settings_load(struct cli_settings *s, int argc, char **argv, char *err, size_t err_len);
void cli_settings_dump(const struct cli_settings *s, FILE *out);
void cli_settings_help(FILE *out);
int cli_get_u64(const struct cli_settings *s, enum cli_key k, uint64_t *v, char *err,
                size_t err_len);

/* Cluster file: one machine per line, "host [base_port [servers]]" (DGL's
 * ip_config.txt: "IP", "IP PORT", and the older "IP PORT SERVERS"; the port
 * defaults to DGL's, the servers to default_servers); '#' comments. Errors
 * name file:line and what was expected; a machine listed twice (one host,
 * overlapping ports) is refused with both lines. */
#define CLI_DGL_DEFAULT_PORT 30050
int cli_cluster_parse(const char *path, uint32_t default_servers, struct rkv_machine **m_p,
                      uint32_t *n_p, char *err, size_t err_len);

/* The first machine of cfg whose host is an address of this host (0, or -1
 * if none is), as DGL's clients find their machine in ip_config.txt. */
int cli_local_machine(const struct rkv_config *cfg, uint32_t *m_p);

/* Builds an rkv_config (machines owned by the caller, free(cfg->machines)). */
int cli_build_config(const struct cli_settings *s, struct rkv_config *cfg, char *err,
                     size_t err_len);

#endif
