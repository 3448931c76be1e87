/* t_answer.h -- feeding an answer (tools/serve/serve_answer.c) the way the scheduler does:
 * one token at a time, a special token's text as one special piece. Tests write a generation as
 * text ("<|tool_call>call:f{}<tool_call|>"); each special token in it (Gemma 4's markers, all
 * single ids) becomes a special piece, the text between an ordinary one. */
#ifndef PLUME_T_ANSWER_H
#define PLUME_T_ANSWER_H

#include <string.h>

#include "serve/serve.h"

/* The special tokens a generation may hold (each one id in Gemma 4's vocabulary). */
static const char *const t_answer_specials[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<turn|>",
                                                "<eos>", "<|tool_response>", "<tool_response|>", "<|\"|>", NULL};

/* The length of the special token at s[0, n), or 0. */
static size_t t_answer_special_at(const char *s, size_t n) {
    for (int k = 0; t_answer_specials[k]; k++) {
        size_t l = strlen(t_answer_specials[k]);
        if (l <= n && !memcmp(s, t_answer_specials[k], l)) return l;
    }
    return 0;
}

/* Feed text[0, len) as tokens: special tokens one special piece each, the text between one
 * ordinary piece; lp goes with the last piece. The first non-zero result ends it. */
static int t_answer_put(serve_answer *a, const char *text, size_t len, const serve_logprob *lp) {
    int r = 0;
    for (size_t i = 0; i < len && !r;) {
        size_t k = t_answer_special_at(text + i, len - i), special = k > 0;
        while (!special && i + k < len && !t_answer_special_at(text + i + k, len - i - k)) k++;
        r = serve_answer_put(a, text + i, k, (int32_t)special, i + k == len ? lp : NULL);
        i += k;
    }
    if (!len) r = serve_answer_put(a, text, 0, 0, lp);
    return r;
}

#endif /* PLUME_T_ANSWER_H */
