/* t_mm.h -- the image fixtures of tests/data/tiny-mm-a (scripts/make-mm-fixtures.py), shared
 * by test_media_image.c and test_vision.c. */
#ifndef PLUME_T_MM_H
#define PLUME_T_MM_H

#include "t.h"

/* The path of a tiny-mm-a fixture (one of 4 rotating static buffers: up to 4 in one call). */
static const char *fx(const char *name) {
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/tiny-mm-a/%s", t_data(), name);
    return p[k];
}

#endif
