/* manifest.h -- a bundle's manifest.sha256: the SHA-256 of every file in it, in the format
 * of sha256sum ("<64 hex>  <path>\n", paths relative to the bundle, sorted), written by the
 * converter (convert, synth --bundle) as its last step and checked by plume_bundle_verify (plume.h), `plume verify`. */
#ifndef PLUME_MANIFEST_H
#define PLUME_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define MANIFEST_NAME "manifest.sha256"

/* Write dir/manifest.sha256 (temporary file + rename) over every regular file below dir,
 * each dropped from the page cache once hashed (plume_file_uncache).
 * 0 or a PLUME_E* with *err naming the file. */
int plume_manifest_write(const char *dir, char **err);

#endif
