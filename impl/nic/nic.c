#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "nic/nic.h"
#include "port/port.h"
#include "util/util.h"

void rkv_nic_set_poll_gap(struct rkv_nic *nic, uint64_t gap_ns)
{
    assert(gap_ns > 0); /* a reader that never parks would spin */
    for (; nic; nic = nic->inner)
        atomic_store(&nic->poll_gap_ns, gap_ns);
}

/* ---- peer authentication ---- */

void rkv_nic_set_secret(struct rkv_nic *nic, const char *text, size_t len)
{
    /* sodium_init is idempotent and thread-safe; it fails only when the
     * OS has no random source, and then randombytes aborts loudly. */
    if (sodium_init() < 0)
        abort();
    /* A fixed-size key of any text: a secret is text, never a number. */
    crypto_generichash(nic->auth_key, sizeof(nic->auth_key), (const unsigned char *)text, len, NULL,
                       0);
    nic->has_secret = len > 0;
}

/* A decorator (fault) neither holds the secret nor changes who can reach
 * the transport: the NIC it wraps decides. */
static const struct rkv_nic *nic_innermost(const struct rkv_nic *nic)
{
    while (nic->inner)
        nic = nic->inner;
    return nic;
}

int rkv_nic_open_to_strangers(const struct rkv_nic *nic)
{
    nic = nic_innermost(nic);
    return !nic->has_secret && !nic->ops->in_process;
}

int rkv_nic_in_process(const struct rkv_nic *nic)
{
    return nic_innermost(nic)->ops->in_process;
}

int rkv_nic_grants(const struct rkv_nic *nic)
{
    return nic_innermost(nic)->ops->mr_grant != NULL;
}

int rkv_nic_read_secret_file(struct rkv_nic *nic, const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "cannot read the secret file %s: %s", path,
                        strerror(errno));
    char buf[RKV_NIC_SECRET_MAX + 1];
    size_t n = fread(buf, 1, sizeof(buf), f);
    /* fopen opens a directory for reading and fread then fails (EISDIR):
     * taken as an empty secret, the node ran with none, open to anyone,
     * while its user had given it one. */
    int rd_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (rd_errno) {
        sodium_memzero(buf, sizeof(buf));
        return rkv_errf(err, err_len, -RKV_ECONFIG, "cannot read the secret file %s: %s", path,
                        strerror(rd_errno));
    }
    if (n > RKV_NIC_SECRET_MAX) {
        sodium_memzero(buf, sizeof(buf));
        return rkv_errf(err, err_len, -RKV_ECONFIG, "the secret file %s is longer than %u bytes",
                        path, RKV_NIC_SECRET_MAX);
    }
    /* Files written by echo end in a newline that is not part of the
     * secret, LF or CRLF. A CR of its own is the secret's (it was dropped
     * too, and such a secret could not be given in a file). */
    if (n > 0 && buf[n - 1] == '\n') {
        n--;
        if (n > 0 && buf[n - 1] == '\r')
            n--;
    }
    if (n == 0) /* no secret at all, the same opening as a directory's */
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "the secret file %s is empty (a secret of no bytes lets anyone in)", path);
    rkv_nic_set_secret(nic, buf, n);
    sodium_memzero(buf, sizeof(buf));
    return 0;
}

int rkv_nic_base_init(struct rkv_nic *nic, const struct rkv_nic_ops *ops, struct rkv_port *port)
{
    *nic = (struct rkv_nic){.ops = ops, .port = port, .hello_timeout_ms = RKV_NIC_HELLO_TIMEOUT_MS};
    atomic_init(&nic->poll_gap_ns, RKV_NIC_POLL_GAP_NS);
    nic->max_msg_bytes = UINT32_MAX; /* the backend lowers it */
    const char *file = getenv("RKV_SECRET_FILE");
    if (file && *file) {
        /* No caller's message buffer here: the reason goes to the log. */
        char err[512];
        int rc = rkv_nic_read_secret_file(nic, file, err, sizeof(err));
        if (rc < 0)
            RKV_LOGE(port, "nic: %s", err);
        return rc;
    }
    const char *tok = getenv("RKV_TOKEN");
    rkv_nic_set_secret(nic, tok ? tok : "", tok ? strlen(tok) : 0);
    return 0;
}

void rkv_nic_auth_mac(const struct rkv_nic *nic, const char *label, const uint8_t *a, size_t a_len,
                      const uint8_t *b, size_t b_len, uint8_t mac[RKV_NIC_AUTH_MAC_BYTES])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, nic->auth_key, sizeof(nic->auth_key));
    /* The label keeps a MAC made for one purpose (the client's proof) from
     * being replayed as another (the server's). */
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_auth_hmacsha256_update(&st, a, a_len);
    crypto_auth_hmacsha256_update(&st, b, b_len);
    crypto_auth_hmacsha256_final(&st, mac);
}

int rkv_nic_auth_check(const struct rkv_nic *nic, const char *label, const uint8_t *a, size_t a_len,
                       const uint8_t *b, size_t b_len, const uint8_t mac[RKV_NIC_AUTH_MAC_BYTES])
{
    uint8_t want[RKV_NIC_AUTH_MAC_BYTES];
    rkv_nic_auth_mac(nic, label, a, a_len, b, b_len, want);
    return sodium_memcmp(want, mac, sizeof(want)) == 0;
}

uint64_t rkv_nic_auth_derive64(const char *label, uint64_t v, uint32_t salt)
{
    if (sodium_init() < 0)
        abort();
    crypto_generichash_state st;
    uint8_t out[crypto_generichash_BYTES_MIN];
    crypto_generichash_init(&st, NULL, 0, sizeof(out));
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_generichash_update(&st, (const unsigned char *)&v, sizeof(v));
    crypto_generichash_update(&st, (const unsigned char *)&salt, sizeof(salt));
    crypto_generichash_final(&st, out, sizeof(out));
    uint64_t r;
    memcpy(&r, out, sizeof(r));
    return r;
}

void rkv_nic_auth_nonce(uint8_t nonce[RKV_NIC_AUTH_NONCE_BYTES])
{
    if (sodium_init() < 0)
        abort();
    randombytes_buf(nonce, RKV_NIC_AUTH_NONCE_BYTES);
}
