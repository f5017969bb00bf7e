/* Configuration by name for programs and bindings (rkv.h, "configuration by
 * name"): the settings are kept as the CLI's flags ("--key=value") and built
 * by the CLI's own parser, so a key, an env var, an alias or a check means
 * the same here as on the rkv command line, and there is one table of
 * settings (impl/cli/config.c), not two. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "store/node.h"
#include "util/util.h"

struct rkv_settings {
    uint32_t n_flags;
    /* "--key=value" per key set, at most one per key: a key is checked
     * against the CLI's table before it is stored, so CMD_KEY_COUNT_ bounds
     * them. */
    char *flags[CMD_KEY_COUNT_];
};

int rkv_settings_create(struct rkv_settings **set_p, char *err, size_t err_len)
{
    if (!set_p)
        return rkv_errf(err, err_len, -RKV_EINVAL, "settings: set_p is NULL");
    struct rkv_settings *set = calloc(1, sizeof(*set));
    if (!set)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    *set_p = set;
    return 0;
}

/* Length of "--key" in a stored flag. */
static size_t set_key_len(const char *flag)
{
    return strcspn(flag, "=");
}

int rkv_settings_set(struct rkv_settings *set, const char *key, const char *value, char *err,
                     size_t err_len)
{
    if (!set || !key || !value)
        return rkv_errf(err, err_len, -RKV_EINVAL, "settings, key and value must not be NULL");
    size_t klen = strlen(key), vlen = strlen(value);
    if (klen == 0 || strchr(key, '=') || klen > 64)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "setting \"%s\": not a setting name", key);
    char *flag = malloc(2 + klen + 1 + vlen + 1);
    if (!flag)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    memcpy(flag, "--", 2);
    for (size_t i = 0; i < klen; i++) /* Python keyword arguments spell '-' as '_' */
        flag[2 + i] = key[i] == '_' ? '-' : key[i];
    flag[2 + klen] = '=';
    memcpy(flag + 3 + klen, value, vlen + 1);
    /* The CLI's table says whether the key exists (asked by name: loading
     * the settings would also read the environment, and a conflict there is
     * rkv_settings_build's to report, not an unknown key). */
    int k = rkv_cmd_find_setting(flag + 2, klen);
    if (k < 0) {
        free(flag);
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "setting \"%s\": unknown (rkv config --dump "
                        "lists them)",
                        key);
    }
    /* A number's form is checked here, where the program set it: "two"
     * workers was refused only by the create that built the config. */
    int rc = rkv_cmd_check_form(k, value, err, err_len);
    if (rc < 0) {
        free(flag);
        return rc;
    }
    for (uint32_t i = 0; i < set->n_flags; i++) {
        if (set_key_len(set->flags[i]) == 2 + klen && memcmp(set->flags[i], flag, 2 + klen) == 0) {
            free(set->flags[i]);
            set->flags[i] = flag;
            return 0;
        }
    }
    assert(set->n_flags < CMD_KEY_COUNT_);
    set->flags[set->n_flags++] = flag;
    return 0;
}

/* A global server id as the CLI's `rkv server --server-id` reads it: the
 * servers of machine 0 first, then machine 1's... */
static int set_server_local(const struct cmd_settings *s, struct rkv_config *cfg, uint32_t *local_p,
                            char *err, size_t err_len)
{
    *local_p = 0;
    if (!*s->val[CMD_SERVER_ID])
        return 0;
    /* A machine set here beats a server id from the environment: with
     * DGL_SERVER_ID=3 left in a trainer's environment, machine-id 0 given
     * by the program built machine 1. */
    int sid_set = !strcmp(s->src[CMD_SERVER_ID], CMD_SRC_SET);
    int mid_set = !strcmp(s->src[CMD_MACHINE_ID], CMD_SRC_SET);
    if (mid_set && !sid_set)
        return 0;
    uint32_t m = 0, local = 0;
    if (rkv_cmd_server_locate(s, cfg, &m, &local, err, err_len) < 0)
        return -RKV_ECONFIG;
    if (mid_set && m != cfg->machine_id)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "server-id %s is a server of machine %u, but machine-id says %u",
                        s->val[CMD_SERVER_ID], m, cfg->machine_id);
    cfg->machine_id = m;
    *local_p = local;
    return 0;
}

int rkv_settings_build(const struct rkv_settings *set, struct rkv_config *cfg,
                       uint32_t *local_server_p, char *err, size_t err_len)
{
    if (!set || !cfg)
        return rkv_errf(err, err_len, -RKV_EINVAL, "settings and config must not be NULL");
    struct cmd_settings *s = malloc(sizeof(*s));
    if (!s)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    struct rkv_config built;
    uint32_t local;
    int rc = -RKV_ECONFIG;
    if (rkv_cmd_settings_load(s, (int)set->n_flags, (char **)set->flags, err, err_len) < 0)
        goto free_settings;
    /* Given by the program, not on a command line: refusals name them so
     * (rkv.Config(rx_depth=2) read "[given: rx-depth 2 (flag)]"). */
    for (int k = 0; k < CMD_KEY_COUNT_; k++)
        if (!strcmp(s->src[k], "flag"))
            s->src[k] = CMD_SRC_SET;
    /* DMLC_ROLE without a cluster file is ps-lite's launch (`rkv node`,
     * harness/pslite.c): DMLC_PS_ROOT_PORT is the scheduler's port and the
     * scheduler numbers the servers. Nothing here registers with one: a
     * program (the Python binding) under such an environment built a
     * one-machine cluster whose server 0 listened on the scheduler's port,
     * and its workers never reached the servers the scheduler placed. */
    /* A typo first: DMLC_ROLE=sever is no ps-lite launch either. */
    if (rkv_cmd_check_role(s, err, err_len) < 0)
        goto free_settings;
    if (rkv_cmd_dgl_role_without_cluster(s, err, err_len) < 0)
        goto free_settings;
    if (!strcmp(s->src[CMD_ROLE], "env DMLC_ROLE") && !*s->val[CMD_CLUSTER]) {
        rkv_errf(err, err_len, -1,
                 "DMLC_ROLE=%s without a cluster file is ps-lite's launch, where "
                 "DMLC_PS_ROOT_PORT is the scheduler's port and the scheduler numbers the "
                 "servers; a program configured by name does not register with a scheduler: "
                 "run such nodes as `rkv node`, or give a cluster file (cluster, RKV_CLUSTER, "
                 "DGL_IP_CONFIG), or set role / RKV_ROLE (rkv's convention: the root address "
                 "is server 0's)",
                 s->val[CMD_ROLE]);
        goto free_settings;
    }
    if (rkv_cmd_build_config(s, &built, err, err_len) < 0)
        goto free_settings;
    /* Every value checked, as rkv.h says: an unknown backend passed here
     * and was refused only at create (an outside tester). */
    if ((rc = rkv_node_backend_check(built.backend, err, err_len)) < 0) {
        rkv_config_release(&built);
        goto free_settings;
    }
    if ((rc = set_server_local(s, &built, &local, err, err_len)) < 0) {
        rkv_config_release(&built);
        goto free_settings;
    }
    /* DGL's clients are not told their machine: it is the first line of
     * ip_config.txt naming an address of their host, as `rkv worker` finds
     * it (commands.c). Built here, every program and the Python binding
     * under DGL's launch took machine 0 on every host: a trainer on
     * machine 1's host mapped machine 0's shard, which is not there. */
    /* (A server's machine is its server id's, set above.) */
    if (!*s->val[CMD_SERVER_ID] && (rc = rkv_cmd_client_machine(s, &built, err, err_len)) < 0) {
        rkv_config_release(&built);
        goto free_settings;
    }
    *cfg = built;
    if (local_server_p)
        *local_server_p = local;
    rc = 0;
free_settings:
    free(s);
    return rc;
}

void rkv_settings_destroy(struct rkv_settings *set)
{
    if (!set)
        return;
    for (uint32_t i = 0; i < set->n_flags; i++)
        free(set->flags[i]);
    free(set);
}

void rkv_config_release(struct rkv_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->machines);
    cfg->machines = NULL;
    cfg->n_machines = 0;
}
