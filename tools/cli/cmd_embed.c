/* cmd_embed.c -- `plume embed`: an image or a video's sampled frames through the vision tower,
 * or an audio file through the audio tower; its soft tokens as .npy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "npy.h"

static const char embed_usage[] =
    "usage: plume embed -m BUNDLE (--image FILE [--image-tokens N] | --audio FILE | --video FILE |\n"
    "                   --video-frames FRAMES.npy [--fps F]) -o OUT.npy [--isa scalar|avx2|avx512|neon]\n"
    "                   [-t THREADS]\n"
    "  Decode the image, resize it for the token budget, run the vision tower and embed_vision;\n"
    "  or decode the audio (16 kHz mono), take its log-mel features, run the audio tower and\n"
    "  embed_audio (30 s clips one after the other); and write the embeddings that replace its\n"
    "  placeholders in a prompt: float32 [N, hidden].\n"
    "  --image-tokens N   the budget: 70, 140, 280 (default: the model's), 560 or 1120\n"
    "  --video FILE       an MP4/MOV/MKV/WebM video: its 32 sampled frames (fewer for a short clip),\n"
    "                     each resized to 70 tokens and through the tower, stacked: [frames x n, hidden]\n"
    "  --video-frames F   the same from decoded frames, uint8 [N, H, W, 3] in a .npy (sampled as a\n"
    "                     file's N frames; --fps F for the timestamps, default 24)\n";

/* A video from a .npy of decoded frames, uint8 [N, H, W, 3]. */
static int frames_video(const char *path, double fps, plume_video **v, char **err) {
    plume_map mp;
    npy_view nv;
    int rc = npy_open(path, &mp, &nv, err);
    if (rc) return rc;
    if (nv.kind != 'u' || nv.ndim != 4 || nv.shape[3] != 3 || nv.shape[0] > INT32_MAX || nv.shape[1] > INT32_MAX ||
        nv.shape[2] > INT32_MAX)
        rc = plume_fail(err, PLUME_EINVAL, "%s: the frames must be uint8 [N, H, W, 3]", path);
    else
        rc = plume_video_from_frames(v, nv.data, (int32_t)nv.shape[0], (int32_t)nv.shape[2], (int32_t)nv.shape[1], fps, err);
    plume_map_free(&mp);
    return rc;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *image = NULL, *audio = NULL, *video = NULL, *frames = NULL, *outp = NULL, *isa = NULL;
    int64_t threads = 0, tokens = 0;
    float fps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(embed_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") && more) model = argv[++i];
        else if (!strcmp(a, "--image") && more) image = argv[++i];
        else if (!strcmp(a, "--audio") && more) audio = argv[++i];
        else if (!strcmp(a, "--video") && more) video = argv[++i];
        else if (!strcmp(a, "--video-frames") && more) frames = argv[++i];
        else if (!strcmp(a, "--fps") && more) {
            if (cli_float(argv[++i], &fps) || !(fps > 0)) return cli_error("embed: --fps wants a number > 0");
        }
        else if (!strcmp(a, "-o") && more) outp = argv[++i];
        else if (!strcmp(a, "--isa") && more) isa = argv[++i];
        else if (!strcmp(a, "-t") && more) {
            if (cli_int(argv[++i], 1, 1024, &threads)) return cli_error("embed: -t wants 1..1024");
        } else if (!strcmp(a, "--image-tokens") && more) {
            if (cli_int(argv[++i], 1, 1120, &tokens)) return cli_error("embed: --image-tokens wants 70..1120");
        } else return cli_error("embed: unknown option '%s' (see plume embed --help)", a);
    }
    if ((image != NULL) + (audio != NULL) + (video != NULL) + (frames != NULL) != 1 || !outp) {
        fputs(embed_usage, stderr);
        return 2;
    }
    if (cli_mkdir_parent(outp)) return 1;
    model = cli_model_path(model);
    if (!model) return 1;
    char *err = NULL;
    plume_model *m = NULL;
    plume_image *img = NULL;
    plume_audio *snd = NULL;
    plume_video *vid = NULL;
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
    if (!rc && video) rc = plume_video_load(&vid, video, NULL, &err);
    if (!rc && frames) rc = frames_video(frames, fps, &vid, &err);
    if (!rc && vid) rc = plume_video_encode(&e, m, vid, &err);
    if (!rc) {
        int64_t shape[2] = {plume_embd_n_tokens(e), plume_embd_dim(e)};
        rc = npy_write(outp, "<f4", shape, 2, plume_embd_data(e), &err);
    }
    plume_embd_free(e);
    plume_image_free(img);
    plume_audio_free(snd);
    plume_video_free(vid);
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}
