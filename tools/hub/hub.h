/* hub.h -- a client for the Hugging Face Hub, as `plume pull` needs it: the official client's
 * cache layout and settings (so caches are shared with huggingface-cli and transformers), the
 * revision API, and downloads that resume, retry and are verified before they appear under
 * snapshots/ (docs/PULL.md). Knows nothing of models or bundles; only the CLI links libcurl.
 * The hub room (tools/hub/) is this client (hub.c) and the model store over it (store.c,
 * store.h); it may call libplume's public API and utility headers (common.h, digest.h) and
 * knows nothing of the CLI or the server.
 *
 *   $HF_HUB_CACHE | $HF_HOME/hub | ~/.cache/huggingface/hub
 *     models--ORG--NAME/
 *       blobs/BLOB              content, named by its hash (sha256 for LFS, git sha1 otherwise)
 *       blobs/BLOB.incomplete   a download in progress (resumed with Range)
 *       snapshots/COMMIT/FILE   relative link to ../../blobs/BLOB, made only once verified
 *       refs/REVISION           the commit a branch or tag resolved to, written when complete */
#ifndef PLUME_HUB_H
#define PLUME_HUB_H

#include <stdint.h>

#define HUB_REPO_MAX 127 /* bytes of a repo id ORG/NAME */

/* One file of a revision, as the API lists it. */
typedef struct {
    char *name;       /* path in the repo, checked: relative, no "." or ".." components */
    char blob[65];    /* the hash that names the blob: 64 hex (LFS sha256) or 40 (git sha1); "" unknown */
    uint64_t size;    /* bytes */
    int lfs;          /* stored in LFS: verified by sha256 (else by git blob sha1) */
} hub_file;

typedef struct {
    char repo[HUB_REPO_MAX + 1]; /* ORG/NAME */
    char rev[128];    /* branch, tag or commit */
    char commit[41];  /* what rev resolved to */
    char *endpoint;   /* $HF_ENDPOINT or https://huggingface.co, no trailing '/' */
    char *token;      /* $HF_TOKEN or the token file, or NULL */
    char *cache;      /* the hub cache root */
    char *dir;        /* cache/models--ORG--NAME */
    int offline;      /* $HF_HUB_OFFLINE: no network at all */
    int progress;     /* a progress bar (a terminal), else plain lines; -1 silent */
    int retries;      /* transient failures retried per request ($PLUME_HUB_RETRIES, default 5) */
    long backoff_ms;  /* first wait before a retry, doubled each time ($PLUME_HUB_BACKOFF_MS) */
    hub_file *files;  /* the listing (empty offline) */
    int32_t n_files;
    void *curl;       /* CURL *, created on first use */
} hub;

/* What the client reads from the headers of a response (and of the redirects before it: the
 * Hub sends X-Linked-* on the redirect to the content host). */
typedef struct {
    long status;                       /* of the latest response */
    char etag[80], linked_etag[80];    /* ETag (git blob sha1), X-Linked-Etag (LFS sha256) */
    char repo_commit[48];              /* X-Repo-Commit */
    char error_code[48], error_message[200]; /* X-Error-Code, X-Error-Message */
    uint64_t linked_size;              /* X-Linked-Size */
    uint64_t range_start, range_total; /* Content-Range: bytes START-END/TOTAL */
    int has_range;
} hub_headers;

/* Whether s is a Hub model id ORG/NAME (letters, digits, '-', '_', '.'; no "..", no leading '.';
 * at most HUB_REPO_MAX bytes). */
int hub_repo_valid(const char *s);
/* Whether a file name from the server is safe to create under a directory: relative, no empty,
 * "." or ".." components, no backslash or control characters. */
int hub_name_safe(const char *name);
/* A byte count as "12.3 MB" (decimal units) into buf; returns buf. */
const char *hub_human(char *buf, size_t cap, double b);
/* The hub cache root ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub), malloc'd. */
char *hub_cache_root(void);

/* Read the settings from the environment for repo at rev; no network. hub_close frees. */
int hub_open(hub *h, const char *repo, const char *rev, char **err);
void hub_close(hub *h);

/* Resolve the revision to a commit and list its files: the API, or offline the refs/ file. */
int hub_resolve(hub *h, char **err);
/* Fill h->commit and h->files from a body of the revision API (len bytes, need not end in
 * NUL): the commit "sha" and the "siblings" with rfilename, blobId, size and lfs.{sha256, size}.
 * Refuses the whole listing on one unsafe name or malformed hash. 0 or PLUME_EFORMAT. */
int hub_parse_revision(hub *h, const char *body, size_t len, const char *url, char **err);
/* Read one header line buf[0..n) as curl hands it (need not end in NUL): a status line, which
 * resets the per-response fields, or "Name: value". */
void hub_header_line(hub_headers *hd, const char *buf, size_t n);
/* Check what a response's headers say about f (its hash, size, the commit) against the
 * listing; 0 or PLUME_EFORMAT naming the disagreement. */
int hub_check_headers(const hub *h, const hub_file *f, const hub_headers *hd, const char *url, char **err);
/* The listed file of that name, or NULL. */
const hub_file *hub_find(const hub *h, const char *name);
/* Bytes still to download for f (0 when its blob is already in the cache). */
uint64_t hub_missing_bytes(const hub *h, const hub_file *f);

/* Make snapshots/COMMIT/name present and verified, downloading it if needed. Offline, or when
 * the file is already in the snapshot, nothing is requested. Returns 0, or 1 when the file does
 * not exist and optional is set; *path (malloc'd, may be NULL) is the snapshot path. */
int hub_get(hub *h, const char *name, int optional, char **path, char **err);
/* The snapshot directory of the resolved commit, malloc'd. */
char *hub_snapshot_dir(const hub *h);
/* Record refs/REV -> COMMIT (once everything needed is there), as the official client does. */
int hub_write_ref(hub *h, char **err);

#endif
