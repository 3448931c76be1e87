/* cmd_serve.c -- `plume serve`: its flags, the model to serve, then the server room's
 * serve_run (tools/serve/, docs/SERVER.md). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "serve/serve.h"

static const char serve_help[] =
    "usage: plume serve [-m BUNDLE] [options]\n"
    "  An HTTP server (docs/SERVER.md) speaking OpenAI's API (/v1/chat/completions,\n"
    "  /v1/completions, /v1/responses, /v1/models), Anthropic's (/v1/messages) and Ollama's\n"
    "  (/api/chat, /api/generate, /api/tags, ...), with /health, /metrics, /tokenize,\n"
    "  /detokenize, and a chat page at / (for browsers; other clients get Ollama's banner).\n"
    "  -m BUNDLE            the model (default: $PLUME_MODEL, then ~/.cache/plume/gemma-4-e2b)\n"
    "  --host ADDR          address to bind (default 127.0.0.1; IPv6 addresses too)\n"
    "  --port N             port (default 8080; 0: any free port, printed on stderr)\n"
    "  --parallel N         slots: requests generated at once, batched (default 4)\n"
    "  --context N          context of each slot in tokens (default: the bundle's, at most 8192)\n"
    "  --queue N            requests waiting for a slot before 429 (default 64)\n"
    "  --api-key KEY        require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (all but /\n"
    "                       and /health)\n"
    "  --cors ORIGINS       let pages of these origins call the server from a browser:\n"
    "                       'https://a.example,http://localhost:3000', or '*' for any\n"
    "  --slot-save DIR      save idle slots there at exit and load them at start\n"
    "  --max-body BYTES     largest request body (default 8388608)\n"
    "  --max-request-memory MB  memory for the requests in flight: their bodies and what\n"
    "                       parsing them takes; past it 413 (one too large) or 429 (default 512)\n"
    "  --timeout SECONDS    a request's head, then its body, must arrive within it; idle\n"
    "                       connections are closed after it (default 60)\n"
    "  --drain SECONDS      on SIGTERM/SIGINT: /health answers 503, new requests get 503, running\n"
    "                       ones finish for up to SECONDS (default 30; 0: cut them; a second\n"
    "                       signal cuts them too)\n"
    "  -t N                 threads (default: physical cores)\n"
    "  --encode-threads N   threads of the image and audio towers, which run beside the batch\n"
    "                       steps so that other streams go on (default: half of -t, at least 1)\n"
    "  --kv-bits 8|32       8: int8 K/V for the full-attention layers\n"
    "  --snapshot-every N   keep a copy of a slot's sliding-window caches every N tokens, so a\n"
    "                       prompt reuses a slot's prefix beyond the window from there\n"
    "                       (default: max(1024, context / 8); docs/SESSIONS.md)\n"
    "  --draft N            speculative decoding: up to N tokens guessed, verified in one step\n"
    "                       (default 3; 0: off). With the MTP drafter every request drafts (greedy\n"
    "                       answers are the same, sampled ones keep their distribution); without\n"
    "                       it, greedy requests draft by prompt lookup (docs/SPECULATIVE.md)\n"
    "  --drafter DIR        draft with this MTP drafter (a converted gemma-4-*-assistant; default:\n"
    "                       BUNDLE/drafter when the bundle has one)\n"
    "  --no-drafter         prompt lookup even when the bundle has a drafter\n"
    "  --no-lookup          with the drafter, draft by it alone (default: prompt lookup drafts instead\n"
    "                       where the text repeats itself and lookup guesses as well as the drafter)\n"
    "  --isa NAME           force kernels: scalar, avx2, avx512, neon\n"
    "  --exact              q8/q4: float32 activations, the reference (default: int8 activations)\n"
    "  --allow-remote-media fetch http(s) image URLs of chat requests (else only data: URLs): at most\n"
    "                       --max-body bytes, 10 s, 3 redirects, public addresses only\n"
    "  --allow-remote-media=private   the same, private and loopback addresses too (an intranet)\n";

/* Parse the flags into c (c->bundle holds -m as given); 0, or 2 after printing an error (1:
 * --help printed). */
static int parse_flags(serve_config *o, int argc, char **argv) {
    *o = serve_config_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(serve_help, stdout);
            return 1;
        }
        if (!strcmp(a, "--exact")) {
            o->exact = 1;
            continue;
        }
        if (!strcmp(a, "--no-drafter")) {
            o->no_drafter = 1;
            continue;
        }
        if (!strcmp(a, "--no-lookup")) {
            o->no_lookup = 1;
            continue;
        }
        if (!strcmp(a, "--allow-remote-media") || !strcmp(a, "--allow-remote-media=private")) {
            o->allow_remote_media = a[20] ? 2 : 1;
            continue;
        }
        static const char *const flags[] = {"-m", "--host", "--port", "--parallel", "--context", "--queue", "--api-key",
                                            "--slot-save", "--max-body", "--timeout", "-t", "--kv-bits", "--isa",
                                            "--snapshot-every", "--draft", "--cors", "--max-request-memory", "--drain",
                                            "--encode-threads", "--drafter"};
        int known = 0;
        for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) known |= !strcmp(a, flags[k]);
        if (!known) return cli_error("serve: unknown option '%s' (see plume serve --help)", a), 2;
        if (i + 1 >= argc) return cli_error("serve: %s needs a value", a), 2;
        const char *v = argv[++i];
        int64_t n = 0;
        int bad = 0;
        if (!strcmp(a, "-m")) o->bundle = v;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--api-key")) bad = !*(o->api_key = v);
        else if (!strcmp(a, "--slot-save")) bad = !*(o->slot_dir = v);
        else if (!strcmp(a, "--isa")) o->isa = v;
        else if (!strcmp(a, "--drafter")) bad = !*(o->drafter = v);
        else if (!strcmp(a, "--cors")) bad = !*(o->cors = v) || strchr(v, ' ') != NULL;
        else if (!strcmp(a, "--port")) { bad = cli_int(v, 0, 65535, &n); o->port = (int32_t)n; }
        else if (!strcmp(a, "--parallel")) { bad = cli_int(v, 1, 256, &n); o->parallel = (int32_t)n; }
        else if (!strcmp(a, "--context")) { bad = cli_int(v, 16, 1 << 24, &n); o->n_ctx = (int32_t)n; }
        else if (!strcmp(a, "--queue")) { bad = cli_int(v, 0, 1 << 20, &n); o->queue = (int32_t)n; }
        else if (!strcmp(a, "--timeout")) { bad = cli_int(v, 1, 86400, &n); o->timeout = (int32_t)n; }
        else if (!strcmp(a, "--drain")) { bad = cli_int(v, 0, 86400, &n); o->drain = (int32_t)n; }
        else if (!strcmp(a, "-t")) { bad = cli_int(v, 1, 1024, &n); o->n_threads = (int32_t)n; }
        else if (!strcmp(a, "--encode-threads")) { bad = cli_int(v, 1, 1024, &n); o->encode_threads = (int32_t)n; }
        else if (!strcmp(a, "--kv-bits")) { bad = cli_int(v, 8, 32, &n) || (n != 8 && n != 32); o->kv_bits = (int32_t)n; }
        else if (!strcmp(a, "--snapshot-every")) { bad = cli_int(v, 1, 1 << 24, &n); o->snapshot_every = (int32_t)n; }
        else if (!strcmp(a, "--draft")) { bad = cli_int(v, 0, PLUME_SAMPLER_UNDO - 1, &n); o->draft = (int32_t)n; }
        else if (!strcmp(a, "--max-body")) { bad = cli_int(v, 1, (int64_t)1 << 32, &n); o->max_body = (size_t)n; }
        else if (!strcmp(a, "--max-request-memory")) {
            bad = cli_int(v, 1, (int64_t)1 << 24, &n);
            o->max_request_memory = (size_t)n << 20;
        }
        if (bad) return cli_error("serve: bad value '%s' for %s (see plume serve --help)", v, a), 2;
    }
    return 0;
}

/* `plume serve`: the flags, the model (a bundle, or ORG/NAME pulled on first use), serve_run. */
int cmd_serve(int argc, char **argv) {
    serve_config c;
    int rc = parse_flags(&c, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    if (!(c.bundle = cli_model_path(c.bundle))) return 1;
    return serve_run(&c);
}
