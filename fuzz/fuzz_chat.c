/* fuzz_chat.c -- plume_chat_render_full on arbitrary conversations: roles (known and not),
 * contents, content parts, reasoning, tool calls with arbitrary names and argument JSON,
 * tool responses, and an arbitrary tools JSON. Fields are separated by 0xFF bytes:
 *   flags | tools_json | per message: role byte, flags byte, content, reasoning, n calls byte,
 *   per call: id, name, arguments | tool_call_id | name | n parts byte, parts...
 * A render either succeeds with a prompt starting "<bos>" or fails with a message. */
#include "fuzz.h"

#define MAX_MSGS 12

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Everything one input allocates, freed at the end. */
typedef struct {
    char *s[512];
    int n;
} pool;

/* A field kept in the pool (NULL when the pool is full). */
static char *take(pool *p, fuzz_in *in) {
    if (p->n == 512) return NULL;
    return p->s[p->n++] = fuzz_field(in, NULL);
}

/* Render the conversation the input describes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "model", "tool", "", "User"};
    fuzz_in in = {data, size};
    pool p = {{0}, 0};
    uint8_t flags = fuzz_byte(&in);
    plume_chat_options opt = {flags & 1, (flags >> 1) & 1, (flags >> 2) & 1, NULL};
    char *tools = take(&p, &in);
    if (flags & 8) opt.tools_json = tools;
    plume_chat_message_full msgs[MAX_MSGS];
    plume_chat_tool_call calls[MAX_MSGS][3];
    const char *parts[MAX_MSGS][3];
    int32_t n = 0;
    while (in.n && n < MAX_MSGS) {
        plume_chat_message_full *m = &msgs[n];
        memset(m, 0, sizeof *m);
        uint8_t ri = fuzz_byte(&in), r = fuzz_byte(&in);
        m->role = r & 0x80 ? take(&p, &in) : roles[ri % 8];
        m->content = r & 0x40 ? NULL : take(&p, &in);
        if (r & 0x20) m->reasoning_content = take(&p, &in);
        m->n_tool_calls = fuzz_byte(&in) % 4;
        if (m->n_tool_calls > 0) {
            for (int32_t k = 0; k < m->n_tool_calls; k++) {
                calls[n][k].id = take(&p, &in);
                calls[n][k].name = take(&p, &in);
                calls[n][k].arguments = take(&p, &in);
            }
            m->tool_calls = calls[n];
            if (m->n_tool_calls == 3) m->n_tool_calls = 2; /* 3: two calls, their third read and unused */
        }
        if (r & 0x10) m->tool_call_id = take(&p, &in);
        if (r & 0x08) m->name = take(&p, &in);
        if (!m->content && (r & 0x04)) {
            m->n_parts = 1 + fuzz_byte(&in) % 3;
            for (int32_t k = 0; k < m->n_parts; k++) parts[n][k] = take(&p, &in);
            m->parts = parts[n];
        }
        n++;
    }
    char *out = NULL, *err = NULL;
    int rc = plume_chat_render_full(msgs, n, &opt, &out, &err);
    if (rc == 0 && (!out || strncmp(out, "<bos>", 5))) abort();
    if (rc != 0 && rc != PLUME_ENOMEM && !err) abort();
    fuzz_note(err);
    free(out);
    free(err);
    for (int i = 0; i < p.n; i++) free(p.s[i]);
    return 0;
}
