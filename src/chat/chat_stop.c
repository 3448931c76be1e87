/* chat_stop.c -- the stop-string matcher (chat.h): generation holds back text that may be the
 * start of a user stop string, and stops at the first one to complete. */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"

/* Copy the stop strings; on failure the matcher is left freed. */
int plume_stop_matcher_init(plume_stop_matcher *m, const char *const *stops, int32_t n_stops,
                            char **err) {
    if (!m) return plume_fail(err, PLUME_EINVAL, "stop: matcher is NULL");
    memset(m, 0, sizeof *m);
    m->matched = -1;
    if (n_stops < 0 || (n_stops > 0 && !stops))
        return plume_fail(err, PLUME_EINVAL, "stop: bad stop list (%d strings)", n_stops);
    for (int32_t i = 0; i < n_stops; i++)
        if (!stops[i] || !stops[i][0])
            return plume_fail(err, PLUME_EINVAL, "stop: stop string %d is empty", i);
    if (n_stops == 0) return 0;
    m->stops = calloc((size_t)n_stops, sizeof *m->stops);
    m->lens = calloc((size_t)n_stops, sizeof *m->lens);
    if (!m->stops || !m->lens) goto oom;
    m->n_stops = n_stops;
    for (int32_t i = 0; i < n_stops; i++) {
        m->lens[i] = strlen(stops[i]);
        m->stops[i] = malloc(m->lens[i] + 1);
        if (!m->stops[i]) goto oom;
        memcpy(m->stops[i], stops[i], m->lens[i] + 1);
        if (m->lens[i] > m->max_len) m->max_len = m->lens[i];
    }
    return 0;
oom:
    plume_stop_matcher_free(m);
    return plume_fail(err, PLUME_ENOMEM, "stop: out of memory");
}

/* Free the copies and the text buffer; the struct is left empty. */
void plume_stop_matcher_free(plume_stop_matcher *m) {
    if (!m) return;
    for (int32_t i = 0; m->stops && i < m->n_stops; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->text);
    memset(m, 0, sizeof *m);
    m->matched = -1;
}

/* Back to the state right after init. */
void plume_stop_matcher_reset(plume_stop_matcher *m) {
    if (!m) return;
    m->len = m->released = m->held = 0;
    m->matched = -1;
}

/* The stop string that ends exactly at text[e] (exclusive), the longest if several do, or -1.
 * The longest starts earliest, so the least text is released. */
static int32_t stop_ending_at(const plume_stop_matcher *m, size_t e) {
    int32_t best = -1;
    for (int32_t k = 0; k < m->n_stops; k++)
        if (m->lens[k] <= e && memcmp(m->text + e - m->lens[k], m->stops[k], m->lens[k]) == 0 &&
            (best < 0 || m->lens[k] > m->lens[best]))
            best = k;
    return best;
}

/* Whether text[i, len) is a proper prefix of some stop string. */
static int stop_prefix_at(const plume_stop_matcher *m, size_t i) {
    size_t rest = m->len - i;
    for (int32_t k = 0; k < m->n_stops; k++)
        if (rest < m->lens[k] && memcmp(m->text + i, m->stops[k], rest) == 0) return 1;
    return 0;
}

/* Append the piece to the held tail, then release up to the first stop string to complete,
 * or up to the longest tail that may still become one. O((held + len) * stops * max_len). */
int plume_stop_matcher_feed(plume_stop_matcher *m, const char *piece, size_t len,
                            const char **emit, size_t *n_emit) {
    *emit = "";
    *n_emit = 0;
    if (m->matched >= 0) return 1;
    /* What the last call released has been printed by now: keep only the held tail. */
    if (m->released) memmove(m->text, m->text + m->released, m->held);
    m->len = m->held;
    m->released = 0;
    if (len > SIZE_MAX - m->len || plume_grow(&m->text, &m->cap, m->len + len, 1))
        return PLUME_ENOMEM;
    if (len) memcpy(m->text + m->len, piece, len);
    m->len += len;

    /* The first stop string to complete, as if the text came one byte at a time, so the
     * result does not depend on how the text was cut into pieces. The held tail holds no
     * complete stop string, so the search starts after it. */
    for (size_t e = m->held + 1; e <= m->len; e++) {
        int32_t k = stop_ending_at(m, e);
        if (k >= 0) {
            m->matched = k;
            m->released = e - m->lens[k];
            m->held = 0;
            *emit = m->text;
            *n_emit = m->released;
            return 1;
        }
    }
    /* Only the last max_len - 1 bytes can be the start of a stop string not yet complete. */
    size_t i = m->max_len > 0 && m->len > m->max_len - 1 ? m->len - (m->max_len - 1) : 0;
    if (m->max_len == 0) i = m->len;
    while (i < m->len && !stop_prefix_at(m, i)) i++;
    m->released = i;
    m->held = m->len - i;
    *emit = m->text ? m->text : "";
    *n_emit = i;
    return 0;
}

/* Release the held tail: at the end of generation it cannot become a stop string any more. */
size_t plume_stop_matcher_flush(plume_stop_matcher *m, const char **emit) {
    *emit = "";
    if (m->matched >= 0 || m->held == 0) return 0;
    *emit = m->text + m->released;
    size_t n = m->held;
    m->released += n;
    m->held = 0;
    return n;
}
