/* plume.c -- the command line: one binary, one subcommand per concern (tools/cli/cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"


typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"convert", cmd_convert, "convert a Hugging Face checkpoint into a bundle"},
    {"synth", cmd_synth, "write a random-weight checkpoint or bundle (tests, benchmarks)"},
    {"run", cmd_run, "answer one prompt, streaming the text"},
    {"chat", cmd_chat, "an interactive conversation"},
    {"bench", cmd_bench, "measure load, prefill, decode, memory and bandwidth"},
    {"verify", cmd_verify, "check every file of a bundle against its SHA-256 manifest"},
    {"logits", cmd_logits, "feed ids (and images, audio), write the logits of every position as .npy"},
    {"embed", cmd_embed, "an image or audio file through its tower: the soft tokens as .npy"},
    {"transcribe", cmd_transcribe, "speech to text (or --translate LANG), 30 s at a time"},
    {"tokenize", cmd_tokenize, "text (JSON lines) to token ids"},
    {"detokenize", cmd_detokenize, "token ids (JSON lines) to text"},
    {"pull", cmd_pull, "download a model from the Hugging Face Hub and convert it"},
    {"list", cmd_list, "the bundles and downloaded checkpoints, with sizes"},
    {"rm", cmd_rm, "remove a bundle, or a downloaded checkpoint and its bundles"},
    {"derive-tokenizer", cmd_derive_tokenizer, "derive Gemma 4's tokenizer from Gemma 3's (scripts/fetch-vocab.sh)"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with continuous batching"},
};

/* Print the list of subcommands. */
static void usage(FILE *f) {
    fprintf(f, "plume %s -- a featherweight runtime for Gemma 4 E2B/E4B\n\nusage: plume COMMAND [ARGS]\n\n",
            PLUME_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'plume COMMAND --help' for the options of one.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("plume %s\n", PLUME_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s' (plume --help lists them)", argv[1]);
    return 2;
}
