/* The rkv binary's settings (impl/api/config.c): flags, env vars (RKV_* and
 * the ps-lite/DGL aliases), cluster files. The module is built into the
 * library (rkv_settings_* in impl/api) and read by the launcher
 * (harness/launch.c), which passes every setting on to the nodes it starts. */
#ifndef RKV_API_CONFIG_H
#define RKV_API_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rkv.h"

enum cmd_key {
    CMD_ROLE,
    CMD_CLUSTER,
    CMD_HOST,
    CMD_BASE_PORT,
    CMD_MACHINES,
    CMD_SERVERS_PER_MACHINE,
    CMD_NUM_SERVERS,
    CMD_NUM_WORKERS,
    CMD_MACHINE_ID,
    CMD_SERVER_ID,
    CMD_BACKEND,
    CMD_TIMEOUT_MS,
    CMD_CONNECT_RETRY_MS,
    CMD_RX_DEPTH,
    CMD_CTRL_BUF_BYTES,
    CMD_SLOTS,
    CMD_MAX_SLOT_BYTES,
    CMD_SLOT_MEM_BYTES,
    CMD_SHM_PREFIX,
    CMD_SEED,
    CMD_LOG_LEVEL,
    CMD_ROWS,
    CMD_VALUE_BYTES,
    CMD_ROUNDS,
    CMD_SCENARIO,
    CMD_DISCOVER,
    CMD_DURABLE_DIR,
    CMD_DURABLE_LOG_PREWRITE,
    CMD_RETRY_MS,
    CMD_ZERO_COPY_BYTES,
    CMD_BUSY_POLL,
    CMD_SECRET_FILE,
    CMD_HELLO_TIMEOUT_MS,
    CMD_IDLE_TIMEOUT_MS,
    CMD_NODE_HOST,
    CMD_INTERFACE,
    CMD_VERBS_DEV,
    CMD_VERBS_TOS,
    CMD_VERBS_SL,
    CMD_VERBS_GID_INDEX,
    CMD_VERBS_MTU,
    CMD_VERBS_SRQ_DEPTH,
    CMD_KEY_COUNT_
};

/* The source of a value rkv_settings_set gave (a program, the Python
 * binding's rkv.Config), where the CLI's are "flag". */
#define CMD_SRC_SET "set by name"

struct cmd_settings {
    const char *val[CMD_KEY_COUNT_];
    const char *src[CMD_KEY_COUNT_]; /* "default", "env NAME", "flag", CMD_SRC_SET, ... */
    char srcbuf[CMD_KEY_COUNT_][48];
};

/* Loads defaults, then env vars (RKV_* and aliases), then flags from argv
 * (--name=value or --name value). Unknown flags are errors. Returns 0 or -1
 * with a message in err. */
int rkv_cmd_settings_load(struct cmd_settings *s, int argc, char **argv, char *err, size_t err_len);
void rkv_cmd_settings_dump(const struct cmd_settings *s, FILE *out);

/* The setting named name[0..len) ("machines", no dashes), or -1. */
int rkv_cmd_find_setting(const char *name, size_t len);

/* 0 if value has the form setting k takes (a number's is decimal digits),
 * else -RKV_ECONFIG with a message. Ranges, which may depend on other
 * settings, are rkv_cmd_build_config's. */
int rkv_cmd_check_form(int k, const char *value, char *err, size_t err_len);

/* Whether argv[i] is a setting's flag whose value is the next word
 * ("--backend tcp"), for a command line that also takes a positional word:
 * "rkv run --backend tcp FILE" took "tcp" for the scenario file. A next
 * word that is a flag is left for rkv_cmd_settings_load to refuse. */
int rkv_cmd_flag_takes_next(int argc, char **argv, int i);

/* The flag setting k is given by ("--machines"), as the parser reads it. */
const char *rkv_cmd_key_flag(enum cmd_key k);

/* The index in keys[0..n) of the first setting given as a flag on the
 * command line, or -1. A caller that sets these itself (the launcher per
 * child, the bench per cluster, a scenario for its cluster) refuses them
 * by hand rather than let its own value win without a word. */
int rkv_cmd_first_flag(const struct cmd_settings *s, const enum cmd_key *keys, size_t n);
void rkv_cmd_settings_help(FILE *out);
int rkv_cmd_get_u64(const struct cmd_settings *s, enum cmd_key k, uint64_t *v, char *err,
                    size_t err_len);

/* Cluster file: one machine per line, "host [base_port [servers]]" (DGL's
 * ip_config.txt: "IP", "IP PORT", and the older "IP PORT SERVERS"; the port
 * defaults to DGL's, the servers to default_servers); '#' comments. Errors
 * name file:line and what was expected; a machine listed twice (one host,
 * overlapping ports) is refused with both lines. */
#define CMD_DGL_DEFAULT_PORT 30050
int rkv_cmd_cluster_parse(const char *path, uint32_t default_servers, struct rkv_machine **m_p,
                          uint32_t *n_p, char *err, size_t err_len);

/* The machines and the servers on each of a cluster without a cluster file:
 * machines, and servers-per-machine or, when given, num-servers / machines
 * (num-servers counts every machine's servers; one that machines does not
 * divide, or that disagrees with a servers-per-machine not left at its
 * default, is refused). 0, or -1 with a message naming the settings and
 * where their values came from. rkv_cmd_build_config sizes the cluster so; the
 * launcher, which starts its servers, must too. */
int rkv_cmd_local_shape(const struct cmd_settings *s, uint32_t *nm_p, uint32_t *spm_p, char *err,
                        size_t err_len);

/* Machine m's address from the host setting: "A,B,C" puts machine m on
 * the (m mod 3)-th, a single address is every machine's. 0, or -1 with a
 * message when an element is empty or longer than RKV_HOST_MAX. */
int rkv_cmd_host_pick(const char *hosts, uint32_t m, char *out, size_t out_len, char *err,
                      size_t err_len);

/* The first machine of cfg whose host is an address of this host (0, or -1
 * if none is), as DGL's clients find their machine in ip_config.txt. */
int rkv_cmd_local_machine(const struct rkv_config *cfg, uint32_t *m_p);
/* A client's machine as DGL's are told it: with a cluster file and no
 * machine-id, the first machine whose host is an address of
 * this host; -RKV_ECONFIG, said in err, when none is and the cluster has
 * several machines. */
int rkv_cmd_client_machine(const struct cmd_settings *s, struct rkv_config *cfg, char *err,
                           size_t err_len);

/* The machine and local index of the global server id set by server-id
 * (machine 0's servers first, then machine 1's...). 0, or -1 with a message
 * naming the value, its source and the cluster's ids when it is past them. */
int rkv_cmd_server_locate(const struct cmd_settings *s, const struct rkv_config *cfg, uint32_t *m_p,
                          uint32_t *local_p, char *err, size_t err_len);

/* 0 if the role is one of ps-lite's and DGL's words (server, worker,
 * client, scheduler) or unset; else -1 with a message listing them. */
int rkv_cmd_check_role(const struct cmd_settings *s, char *err, size_t err_len);
/* DGL_ROLE with no cluster given: -1 saying so (the binding and `rkv node`). */
int rkv_cmd_dgl_role_without_cluster(const struct cmd_settings *s, char *err, size_t err_len);

/* Builds an rkv_config (machines owned by the caller, free(cfg->machines)). */
int rkv_cmd_build_config(const struct cmd_settings *s, struct rkv_config *cfg, char *err,
                         size_t err_len);

#endif
