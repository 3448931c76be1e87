/* cmd_embed.c -- `plume embed`: an image through the vision tower, or an audio file through the
 * audio tower; its soft tokens as .npy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "npy.h"

static const char embed_usage[] =
    "usage: plume embed -m BUNDLE (--image FILE [--image-tokens N] | --audio FILE) -o OUT.npy\n"
    "                   [--isa scalar|avx2|avx512|neon] [-t THREADS]\n"
    "  Decode the image, resize it for the token budget, run the vision tower and embed_vision;\n"
    "  or decode the audio (16 kHz mono), take its log-mel features, run the audio tower and\n"
    "  embed_audio (30 s clips one after the other); and write the embeddings that replace its\n"
    "  placeholders in a prompt: float32 [N, hidden].\n"
    "  --image-tokens N   the budget: 70, 140, 280 (default: the model's), 560 or 1120\n";

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *image = NULL, *audio = NULL, *outp = NULL, *isa = NULL;
    int64_t threads = 0, tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(embed_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") && more) model = argv[++i];
        else if (!strcmp(a, "--image") && more) image = argv[++i];
        else if (!strcmp(a, "--audio") && more) audio = argv[++i];
        else if (!strcmp(a, "-o") && more) outp = argv[++i];
        else if (!strcmp(a, "--isa") && more) isa = argv[++i];
        else if (!strcmp(a, "-t") && more) {
            if (cli_int(argv[++i], 1, 1024, &threads)) return cli_error("embed: -t wants 1..1024");
        } else if (!strcmp(a, "--image-tokens") && more) {
            if (cli_int(argv[++i], 1, 1120, &tokens)) return cli_error("embed: --image-tokens wants 70..1120");
        } else return cli_error("embed: unknown option '%s' (see plume embed --help)", a);
    }
    if (!image == !audio || !outp) { fputs(embed_usage, stderr); return 2; }
    if (cli_mkdir_parent(outp)) return 1;
    model = cli_model_path(model);
    if (!model) return 1;
    char *err = NULL;
    plume_model *m = NULL;
    plume_image *img = NULL;
    plume_audio *snd = NULL;
    plume_embd *e = NULL;
    plume_model_params mp = plume_model_default_params();
    mp.isa = isa;
    mp.n_threads = (int32_t)threads;
    plume_image_params ip = plume_image_default_params();
    ip.max_tokens = (int32_t)tokens;
    int rc = plume_model_open(&m, model, &mp, &err);
    if (!rc && image) rc = plume_image_load(&img, image, &err);
    if (!rc && image) rc = plume_image_encode(&e, m, img, &ip, &err);
    if (!rc && audio) rc = plume_audio_load(&snd, audio, &err);
    if (!rc && audio) rc = plume_audio_encode(&e, m, snd, &err);
    if (!rc) {
        int64_t shape[2] = {plume_embd_n_tokens(e), plume_embd_dim(e)};
        rc = npy_write(outp, "<f4", shape, 2, plume_embd_data(e), &err);
    }
    plume_embd_free(e);
    plume_image_free(img);
    plume_audio_free(snd);
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}
