/* Workers' reports carried to worker 0 in a reserved tensor (the why is in
 * report_gather.h).
 *
 * Block of worker w: rows w*K .. w*K+K-1 of RKV_REPORT_TENSOR (K rows of
 * RKV_REPORT_ROW_BYTES), host byte order as the snapshot's:
 *   0 magic u64 | 8 worker u32 | 12 status i32 | 16 text_bytes u32 |
 *   20 pins_dropped u32 | 24 wanted_bytes u32 | 28 flags u32 |
 *   32 check u64 (of bytes 0..31 and the text) | 40..63 zero | text. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/report_gather.h"
#include "harness/workload.h"
#include "port/port.h"
#include "store/server_int.h"
#include "util/util.h"

#define RG_MAGIC 0x3130504552564b52ull /* "RKVREP01" */
#define RG_PHASE_BYTES (8192u + 512u)  /* a PHASE line (hist included) and its FIRSTERR */
#define RG_PIN_LINE_BYTES 64u
#define RG_PIN_BUDGET (1u << 20)
#define RG_CHUNK_ROWS 64u      /* rows per push or pull: 64 KiB messages */
#define RG_POLL_NS 20000000ull /* between two looks at the missing blocks */

_Static_assert(RKV_REPORT_ROW_BYTES % 8 == 0 && RKV_REPORT_HDR_BYTES <= RKV_REPORT_ROW_BYTES,
               "the header fits in a block's first row of i64 elements");

uint64_t rkv_report_block_bytes(const struct rkv_scenario *sc)
{
    uint64_t pins = 0;
    for (uint32_t p = 0; p < sc->n_phases; p++)
        if (sc->phases[p].push_op == RKV_OP_ASSIGN && sc->phases[p].push_fraction > 0)
            pins += sc->tensors[sc->phases[p].tensor].desc.rows * RG_PIN_LINE_BYTES;
    uint64_t b = RKV_REPORT_HDR_BYTES + (uint64_t)sc->n_phases * RG_PHASE_BYTES +
                 (pins < RG_PIN_BUDGET ? pins : RG_PIN_BUDGET);
    return (b + RKV_REPORT_ROW_BYTES - 1) / RKV_REPORT_ROW_BYTES * RKV_REPORT_ROW_BYTES;
}

/* FNV-1a over the header's first 32 bytes and the text, then mixed. */
static uint64_t rg_check(const uint8_t *hdr, const uint8_t *text, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < 32; i++)
        h = (h ^ hdr[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ text[i]) * 0x100000001b3ull;
    return rkv_mix64(h);
}

/* Copies the lines of text for which keep(line) is want into dst (room
 * bytes at most, whole lines only); returns the bytes written and counts
 * the lines that did not fit in *dropped_p. */
static size_t rg_copy_lines(uint8_t *dst, size_t room, const char *text, size_t len, int pins,
                            uint32_t *dropped_p)
{
    size_t used = 0;
    for (size_t at = 0; at < len;) {
        const char *line = text + at;
        const char *eol = memchr(line, '\n', len - at);
        size_t n = eol ? (size_t)(eol - line) : len - at;
        at += n + (eol != NULL);
        if (n == 0 || (n >= 4 && !memcmp(line, "PIN ", 4)) != pins)
            continue;
        if (used + n + 1 > room) {
            (*dropped_p)++;
            continue;
        }
        memcpy(dst + used, line, n);
        dst[used + n] = '\n';
        used += n + 1;
    }
    return used;
}

size_t rkv_report_block_encode(uint8_t *buf, uint64_t block_bytes, uint32_t worker, int status,
                               const char *text, size_t len)
{
    assert(block_bytes >= RKV_REPORT_HDR_BYTES && block_bytes <= UINT32_MAX);
    memset(buf, 0, RKV_REPORT_HDR_BYTES);
    uint8_t *t = buf + RKV_REPORT_HDR_BYTES;
    size_t room = block_bytes - RKV_REPORT_HDR_BYTES;
    uint32_t not_fit = 0, pins_dropped = 0, flags = 0;
    size_t used = rg_copy_lines(t, room, text, len, 0, &not_fit);
    if (not_fit) { /* a phase line missing would read as a phase never run */
        flags |= RKV_REPORT_TOO_LARGE;
        used = 0;
    } else {
        used += rg_copy_lines(t + used, room - used, text, len, 1, &pins_dropped);
    }
    rkv_put64(buf, RG_MAGIC);
    rkv_put32(buf + 8, worker);
    rkv_put32(buf + 12, (uint32_t)status);
    rkv_put32(buf + 16, (uint32_t)used);
    rkv_put32(buf + 20, pins_dropped);
    rkv_put32(buf + 24, (uint32_t)(len < UINT32_MAX ? len : UINT32_MAX));
    rkv_put32(buf + 28, flags);
    rkv_put64(buf + 32, rg_check(buf, t, used));
    return RKV_REPORT_HDR_BYTES + used;
}

size_t rkv_report_block_used(const uint8_t *buf, uint64_t block_bytes, uint32_t worker)
{
    if (rkv_get64(buf) != RG_MAGIC || rkv_get32(buf + 8) != worker)
        return 0;
    uint64_t text = rkv_get32(buf + 16);
    return text <= block_bytes - RKV_REPORT_HDR_BYTES ? RKV_REPORT_HDR_BYTES + text : 0;
}

/* One line of worker's text against the report's grammar; seen[] marks
 * the phases that had their PHASE (bit 0), FIRSTERR (bit 1) and STOPPED
 * (bit 2) line. */
static int rg_check_line(const char *line, const struct rkv_scenario *sc, uint32_t worker,
                         uint8_t *seen, char *why, size_t why_len)
{
    unsigned w, p, t, n;
    unsigned long long row;
    int off = -1;
    if (!strncmp(line, "PHASE ", 6)) {
        struct rkv_wl_phase_stats st;
        uint32_t wk, ph;
        if (rkv_wl_parse(line, &wk, &ph, &st) < 0 || wk != worker || ph >= sc->n_phases ||
            !isfinite(st.wall_s) || st.wall_s < 0 || !isfinite(st.max_us) || st.max_us < 0)
            return rkv_errf(why, why_len, -RKV_EPROTO, "a bad PHASE line: %.80s", line);
        if (seen[ph] & 1)
            return rkv_errf(why, why_len, -RKV_EPROTO, "phase %u reported twice", ph);
        seen[ph] |= 1;
        return 0;
    }
    if (!strncmp(line, "FIRSTERR ", 9)) {
        if (sscanf(line, "FIRSTERR w=%u p=%u %n", &w, &p, &off) != 2 || off < 0 || w != worker ||
            p >= sc->n_phases || (seen[p] & 2))
            return rkv_errf(why, why_len, -RKV_EPROTO, "a bad FIRSTERR line: %.80s", line);
        seen[p] |= 2;
        return 0;
    }
    if (!strncmp(line, "STOPPED ", 8)) { /* after its phase's PHASE line, once */
        int rc;
        if (sscanf(line, "STOPPED w=%u p=%u rc=%d %n", &w, &p, &rc, &off) != 3 || off < 0 ||
            rc > 0 || w != worker || p >= sc->n_phases || !(seen[p] & 1) || (seen[p] & 4))
            return rkv_errf(why, why_len, -RKV_EPROTO, "a bad STOPPED line: %.80s", line);
        seen[p] |= 4;
        return 0;
    }
    if (!strncmp(line, "PIN ", 4)) {
        unsigned e;
        if (sscanf(line, "PIN t=%u r=%llu e=%u w=%u p=%u n=%u%n", &t, &row, &e, &w, &p, &n, &off) !=
                6 ||
            line[off] || t >= sc->n_tensors || row >= sc->tensors[t].desc.rows ||
            e >= sc->n_phases || w >= rkv_scenario_workers(sc) || p >= sc->n_phases)
            return rkv_errf(why, why_len, -RKV_EPROTO, "a bad PIN line: %.80s", line);
        return 0;
    }
    return rkv_errf(why, why_len, -RKV_EPROTO, "an unknown line: %.80s", line);
}

/* The text's bytes and lines (NUL-terminated copy in s, modified in place
 * line by line and restored). Control characters other than newline and
 * tab are refused: the text reaches a terminal through the table. */
static int rg_check_text(char *s, size_t len, const struct rkv_scenario *sc, uint32_t worker,
                         char *why, size_t why_len)
{
    if (len && s[len - 1] != '\n')
        return rkv_errf(why, why_len, -RKV_EPROTO, "the text does not end with a newline");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
            return rkv_errf(why, why_len, -RKV_EPROTO, "control character 0x%02x at byte %zu", c,
                            i);
    }
    uint8_t *seen = calloc(sc->n_phases ? sc->n_phases : 1, 1);
    if (!seen)
        return -RKV_ENOMEM;
    int rc = 0;
    for (char *line = s; rc == 0 && *line;) {
        char *eol = strchr(line, '\n');
        assert(eol); /* the text ends with one */
        *eol = 0;
        rc = rg_check_line(line, sc, worker, seen, why, why_len);
        *eol = '\n';
        line = eol + 1;
    }
    free(seen);
    return rc;
}

int rkv_report_block_decode(const uint8_t *buf, size_t len, const struct rkv_scenario *sc,
                            uint32_t worker, struct rkv_report_block *out, char *why,
                            size_t why_len)
{
    if (len < RKV_REPORT_HDR_BYTES || rkv_get64(buf) != RG_MAGIC || rkv_get32(buf + 8) != worker)
        return snprintf(why, why_len, "no block of worker %u", worker), 1;
    uint32_t text = rkv_get32(buf + 16), flags = rkv_get32(buf + 28);
    if (text > len - RKV_REPORT_HDR_BYTES)
        return snprintf(why, why_len, "its block announces %u bytes of text, %zu arrived", text,
                        len - RKV_REPORT_HDR_BYTES),
               1;
    if (rg_check(buf, buf + RKV_REPORT_HDR_BYTES, text) != rkv_get64(buf + 32))
        return snprintf(why, why_len, "its block does not match its checksum"), 1;
    for (uint32_t i = 40; i < RKV_REPORT_HDR_BYTES; i++)
        if (buf[i])
            return rkv_errf(why, why_len, -RKV_EPROTO, "header byte %u is not zero", i);
    int status = (int32_t)rkv_get32(buf + 12);
    if (status > 0 || status < -1000 || (flags & ~RKV_REPORT_TOO_LARGE) ||
        ((flags & RKV_REPORT_TOO_LARGE) && text))
        return rkv_errf(why, why_len, -RKV_EPROTO, "a bad header (status %d, flags %#x)", status,
                        flags);
    char *s = malloc((size_t)text + 1);
    if (!s)
        return -RKV_ENOMEM;
    memcpy(s, buf + RKV_REPORT_HDR_BYTES, text);
    s[text] = 0;
    int rc = rg_check_text(s, text, sc, worker, why, why_len);
    if (rc < 0) {
        free(s);
        return rc;
    }
    *out = (struct rkv_report_block){.text = s,
                                     .status = status,
                                     .pins_dropped = rkv_get32(buf + 20),
                                     .wanted_bytes = rkv_get32(buf + 24),
                                     .flags = flags};
    return 0;
}

/* The tensor: W blocks of K rows, created by whichever worker comes first
 * (the others' identical desc is then a no-op). */
static int rg_tensor(struct rkv_client *cli, const struct rkv_scenario *sc, uint64_t *k_p,
                     char *err, size_t err_len)
{
    uint64_t k = rkv_report_block_bytes(sc) / RKV_REPORT_ROW_BYTES;
    struct rkv_tensor_desc d = {.name = RKV_REPORT_TENSOR,
                                .dtype = RKV_I64,
                                .rows = (uint64_t)rkv_scenario_workers(sc) * k,
                                .row_len = RKV_REPORT_ROW_BYTES / 8,
                                .policy = RKV_PART_RANGE,
                                .init = RKV_INIT_ZEROS};
    int rc = rkv_client_init_data(cli, &d);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "report tensor %s: %s", RKV_REPORT_TENSOR,
                        rkv_client_errmsg(cli));
    *k_p = k;
    return 0;
}

/* Pulls or pushes rows first..first+n-1 (n <= RG_CHUNK_ROWS) at buf. */
static int rg_move(struct rkv_client *cli, uint64_t first, uint32_t n, uint8_t *buf, int push)
{
    uint64_t ids[RG_CHUNK_ROWS];
    assert(n <= RG_CHUNK_ROWS);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = first + i;
    return push ? rkv_client_push(cli, RKV_REPORT_TENSOR, ids, n, buf, RKV_OP_ASSIGN, 0)
                : rkv_client_pull(cli, RKV_REPORT_TENSOR, ids, n, buf);
}

int rkv_report_send(struct rkv_client *cli, const struct rkv_scenario *sc, uint32_t worker,
                    int status, const char *text, size_t len, char *err, size_t err_len)
{
    uint64_t k;
    int rc = rg_tensor(cli, sc, &k, err, err_len);
    if (rc < 0)
        return rc;
    uint64_t bytes = k * RKV_REPORT_ROW_BYTES;
    uint8_t *blk = calloc(1, bytes);
    if (!blk)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory for the report");
    size_t used = rkv_report_block_encode(blk, bytes, worker, status, text, len);
    uint32_t rows = (uint32_t)((used + RKV_REPORT_ROW_BYTES - 1) / RKV_REPORT_ROW_BYTES);
    /* The last chunk first and the header's last: a pull that meets the
     * push half way sees no header rather than a header without its text. */
    for (uint32_t end = rows; end > 0 && rc == 0;) {
        uint32_t n = end > RG_CHUNK_ROWS ? RG_CHUNK_ROWS : end;
        end -= n;
        rc = rg_move(cli, (uint64_t)worker * k + end, n, blk + (size_t)end * RKV_REPORT_ROW_BYTES,
                     1);
    }
    free(blk);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "pushing the report: %s", rkv_client_errmsg(cli));
    return 0;
}

/* Looks at worker w's block once: 0 got it, 1 not yet, -RKV_EPROTO
 * refused (why set either way), another negative: the store failed. */
static int rg_fetch(struct rkv_client *cli, const struct rkv_scenario *sc, uint64_t k, uint32_t w,
                    const uint8_t *first_row, uint8_t *blk, struct rkv_report_gathered *g)
{
    uint64_t bytes = k * RKV_REPORT_ROW_BYTES;
    size_t used = rkv_report_block_used(first_row, bytes, w);
    if (!used)
        return snprintf(g->why[w], sizeof(g->why[w]), "nothing arrived"), 1;
    memcpy(blk, first_row, RKV_REPORT_ROW_BYTES);
    uint32_t rows = (uint32_t)((used + RKV_REPORT_ROW_BYTES - 1) / RKV_REPORT_ROW_BYTES);
    for (uint32_t r = 1; r < rows;) {
        uint32_t n = rows - r > RG_CHUNK_ROWS ? RG_CHUNK_ROWS : rows - r;
        int rc = rg_move(cli, w * k + r, n, blk + (size_t)r * RKV_REPORT_ROW_BYTES, 0);
        if (rc < 0)
            return rc;
        r += n;
    }
    return rkv_report_block_decode(blk, used, sc, w, &g->blk[w], g->why[w], sizeof(g->why[w]));
}

/* One look at every block not settled yet (done[w]: 1 got, 2 refused). */
static int rg_round(struct rkv_client *cli, const struct rkv_scenario *sc, uint64_t k,
                    uint8_t *done, uint8_t *rows, uint8_t *blk, struct rkv_report_gathered *g)
{
    uint64_t ids[RG_CHUNK_ROWS];
    uint32_t who[RG_CHUNK_ROWS];
    for (uint32_t w = 0; w < g->n_workers;) {
        uint32_t n = 0;
        for (; w < g->n_workers && n < RG_CHUNK_ROWS; w++)
            if (!done[w]) {
                who[n] = w;
                ids[n++] = w * k;
            }
        int rc = n ? rkv_client_pull(cli, RKV_REPORT_TENSOR, ids, n, rows) : 0;
        if (rc < 0)
            return rc;
        for (uint32_t i = 0; i < n; i++) {
            rc = rg_fetch(cli, sc, k, who[i], rows + (size_t)i * RKV_REPORT_ROW_BYTES, blk, g);
            if (rc == 0 || rc == -RKV_EPROTO)
                done[who[i]] = rc == 0 ? 1 : 2;
            else if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int rkv_report_gather(struct rkv_client *cli, const struct rkv_scenario *sc, uint64_t wait_ns,
                      struct rkv_report_gathered *g, char *err, size_t err_len)
{
    struct rkv_port *port = rkv_client_port(cli);
    uint32_t W = rkv_scenario_workers(sc);
    memset(g, 0, sizeof(*g));
    g->n_workers = W;
    g->missing = W;
    g->blk = calloc(W, sizeof(*g->blk));
    g->why = calloc(W, sizeof(*g->why));
    uint8_t *done = calloc(W, 1);
    uint8_t *rows = malloc((size_t)RG_CHUNK_ROWS * RKV_REPORT_ROW_BYTES);
    uint8_t *blk = malloc(rkv_report_block_bytes(sc));
    uint64_t k = 0;
    int rc = !g->blk || !g->why || !done || !rows || !blk
                 ? rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory for the reports")
                 : rg_tensor(cli, sc, &k, err, err_len);
    uint64_t deadline = port->ops->now_ns(port) + wait_ns;
    while (rc == 0) {
        if ((rc = rg_round(cli, sc, k, done, rows, blk, g)) < 0) {
            rc = rkv_errf(err, err_len, rc, "pulling the reports: %s", rkv_client_errmsg(cli));
            break;
        }
        uint32_t left = 0;
        for (uint32_t w = 0; w < W; w++)
            left += !done[w];
        if (!left || port->ops->now_ns(port) >= deadline)
            break;
        port->ops->sleep_ns(port, RG_POLL_NS);
    }
    g->missing = done ? 0 : W;
    for (uint32_t w = 0; done && w < W; w++)
        g->missing += done[w] != 1;
    free(done);
    free(rows);
    free(blk);
    return rc;
}

void rkv_report_gathered_free(struct rkv_report_gathered *g)
{
    for (uint32_t w = 0; g->blk && w < g->n_workers; w++)
        free(g->blk[w].text);
    free(g->blk);
    free(g->why);
    memset(g, 0, sizeof(*g));
}
