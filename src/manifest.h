/* manifest.h -- a bundle's manifest.sha256: the SHA-256 of every file in it, in the format
 * of sha256sum ("<64 hex>  <path>\n", paths relative to the bundle, sorted), written by the
 * converter (convert, synth --bundle) as its last step and checked by plume verify. */
#ifndef PLUME_MANIFEST_H
#define PLUME_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define MANIFEST_NAME "manifest.sha256"

/* Write dir/manifest.sha256 (temporary file + rename) over every regular file below dir,
 * each dropped from the page cache once hashed (plume_file_uncache).
 * 0 or a PLUME_E* with *err naming the file. */
int plume_manifest_write(const char *dir, char **err);

/* Progress of a check: called with bytes hashed so far and the total. */
typedef void (*manifest_progress)(uint64_t done, uint64_t total, void *arg);

/* Check every file the manifest of dir lists. Returns 0 when all match; PLUME_EFORMAT when
 * some do not (each bad file is reported through report, one line each, and *err names the
 * first); PLUME_EIO when there is no readable manifest. */
int plume_manifest_verify(const char *dir, manifest_progress progress, void *arg,
                          void (*report)(const char *line, void *arg), char **err);

#endif
