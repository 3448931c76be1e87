/* store.h -- plume's model store over the Hub client (hub.h): where bundles live
 * (~/.cache/plume), which one is used without -m, what a model name ORG/NAME[@REV] means, and
 * the pull: fetch what the converter reads into the Hugging Face cache, then convert it into a
 * bundle, recording where it came from in BUNDLE/pull.json (docs/PULL.md).
 *
 * Part of the hub room (tools/hub/): it may call hub.c and libplume's public API; it knows
 * nothing of the CLI (which calls it) or the server. Errors come back as messages in *err
 * (malloc'd, as the library's); progress lines go to stderr unless quiet. */
#ifndef PLUME_STORE_H
#define PLUME_STORE_H

#include <stdint.h>

/* The model a pull fetches when given none, and the bundles used without -m. */
#define STORE_DEFAULT_REPO "google/gemma-4-E2B-it"
#define STORE_CONVERTED_NAME "gemma-4-e2b"             /* a checkpoint converted by hand */
#define STORE_PULLED_NAME "google--gemma-4-E2B-it-q8"  /* what `plume pull` makes by default */

#define STORE_PULL_QUIET 1 /* no progress */
#define STORE_PULL_REUSE 2 /* an existing bundle is used as it is (no network) */
#define STORE_PULL_DRAFTER 4 /* also the model's MTP drafter, ORG/NAME-assistant, into BUNDLE/drafter */
#define STORE_DRAFTER_SUFFIX "-assistant" /* ORG/NAME's drafter is ORG/NAME-assistant */

/* Where bundles live: $HOME/.cache/plume (static storage). */
const char *store_dir(void);
/* The bundle used without -m: $PLUME_MODEL, else STORE_CONVERTED_NAME, else
 * STORE_PULLED_NAME under store_dir(); NULL when none of them exists (static storage). */
const char *store_default_bundle(void);
/* Whether dir is a bundle (holds model_config.json). */
int store_is_bundle(const char *dir);
/* Split SPEC = ORG/NAME[:QUANT][@REV] into repo, rev (default "main") and quant ("" if none;
 * NULL: a spec with one is refused); 0, or -1 if it is not one. */
int store_spec_split(const char *spec, char *repo, size_t rcap, char *rev, size_t vcap, char *quant, size_t qcap);
/* Whether s reads as ORG/NAME[:QUANT][@REV]. */
int store_is_repo_spec(const char *s);
/* A string field of BUNDLE/pull.json (malloc'd), or NULL when there is none. */
char *store_recorded(const char *bundle, const char *key);

/* Pull ORG/NAME[@REV] with layer weights f32|bf16|q8|q4 (NULL: q8) and convert it; of a GGUF
 * repo, ORG/NAME:QUANT[@REV] fetches only the GGUF of that quant (Q4_K_M, or the file's name)
 * and converts it at its own precision (weights NULL or "auto") or at the weights asked for;
 * *bundle (malloc'd) is where it went. With STORE_PULL_DRAFTER its drafter too, into
 * BUNDLE/drafter. A drafter's name, ORG/NAME-assistant, pulls that drafter into ORG/NAME's
 * bundle (which must be there; *bundle is then BUNDLE/drafter). 0, or non-zero with *err. */
int store_pull(const char *spec, const char *weights, int flags, char **bundle, char **err);

/* The bytes of the regular files under path, links not followed (a blob counts once). */
uint64_t store_tree_bytes(const char *path);

#endif
