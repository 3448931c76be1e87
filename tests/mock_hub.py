#!/usr/bin/env python3
"""mock_hub.py -- a stand-in for the Hugging Face Hub on 127.0.0.1, for tests/test_pull.c.

It answers like the real Hub: GET /api/models/ORG/NAME/revision/REV?blobs=true (the commit
sha and the siblings with blobId, size and lfs.sha256), GET /ORG/NAME/resolve/REV/FILE (small
files directly with ETag = git blob sha1; safetensors with a 302 to the content host, here
"localhost" instead of "127.0.0.1", with X-Linked-Etag, X-Linked-Size, X-Repo-Commit), and
Range requests (206 + Content-Range). Every repo serves the checkpoint in --data, except those
named by --repo NAME=DIR, which serve DIR's (as google/gemma-4-E4B-it serves tiny-e4b); a
name picks a behaviour:

  test/tiny*      normal                  test/gated*     needs "Bearer hf_test_token"
  test/gated-files*  the listing is public, the files need the token (as on the real Hub)
  google/gemma-4-E2B-it   normal (the name `plume pull` uses by default)
  a --repo NAME           normal, with its own checkpoint (or GGUF files: test_pull's test/gguf-tiny)
  test/cut*       the first shard download is cut half-way (once per repo)
  test/flaky*     the first API and the first content request answer 500 (once per repo)
  test/corrupt*   one byte of a shard is flipped (the listing keeps the true hash)
  test/evil*      the listing also has "../evil"
  test/llama*     config.json says model_type "llama"
  test/hugesize*  the listing gives a shard a size of 2e15 bytes
  test/nosize*    the listing gives a shard no size
  test/biglist*   the listing is 65 MB of JSON
  test/long*      the first download of a shard sends 100 bytes more than listed (once per repo)
  test/short*     the first download of a shard is a whole 200 of 100 bytes fewer (once per repo)
  test/escape*    the API answers 400 with terminal escape sequences in X-Error-Message
  anything else   404 RepoNotFound; a revision other than main or the commit: 404 RevisionNotFound

Each request is logged as one line: METHOD PATH host=H range=R auth=yes|no status=S sent=N.
The server writes its port to --port-file, and exits by itself after --timeout seconds.
Standard library only."""
import argparse
import hashlib
import http.server
import json
import os
import socketserver
import sys
import threading
import urllib.parse

ARGS = None
FILES = {}   # name -> bytes: the --data checkpoint
REPOS = {}   # repo -> {name -> bytes}: the --repo checkpoints
LOCK = threading.Lock()
ONCE = set()  # (repo, what) events that already happened
TOKEN = "hf_test_token"


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit_of(repo):
    return hashlib.sha1(repo.encode()).hexdigest()


def is_lfs(name):
    return name.endswith(".safetensors") or name.endswith(".gguf")


def first_time(repo, what):
    """True the first time (repo, what) is asked; False afterwards."""
    with LOCK:
        if (repo, what) in ONCE:
            return False
        ONCE.add((repo, what))
        return True


def files_of(repo):
    """The files a repo serves: its own --repo checkpoint, else --data's."""
    return REPOS.get(repo, FILES)


def content(repo, name):
    data = files_of(repo)[name]
    if repo.startswith("test/llama") and name == "config.json":
        cfg = json.loads(data)
        cfg["model_type"] = "llama"
        cfg.get("text_config", {})["model_type"] = "llama"
        data = json.dumps(cfg).encode()
    return data


def listing(repo):
    sib = []
    names = sorted(files_of(repo))
    if repo.startswith("test/evil"):
        names.append("../evil")
    for n in names:
        data = content(repo, n) if n in files_of(repo) else b"evil\n"
        e = {"rfilename": n, "blobId": git_blob_sha1(data), "size": len(data)}
        if is_lfs(n):
            e["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        if n == "model-00002-of-00002.safetensors" and repo.startswith("test/hugesize"):
            e["lfs"]["size"] = e["size"] = 2e15
        if n == "model-00002-of-00002.safetensors" and repo.startswith("test/nosize"):
            del e["lfs"]["size"], e["size"]
        sib.append(e)
    return {"id": repo, "modelId": repo, "sha": commit_of(repo), "private": False, "siblings": sib}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def log(self, status, sent):
        line = "%s %s host=%s range=%s auth=%s status=%s sent=%d\n" % (
            self.command, self.path, self.headers.get("Host", "-"), self.headers.get("Range", "-"),
            "yes" if self.headers.get("Authorization") else "no", status, sent)
        with LOCK:
            with open(ARGS.log, "a") as f:
                f.write(line)

    def answer(self, status, body=b"", headers=None, cut=False):
        sent = 0 if self.command == "HEAD" else len(body) // 2 if cut else len(body)
        self.log(status, sent)  # before answering: the client may be gone right after
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:sent])
        if cut:
            self.wfile.flush()
            self.close_connection = True

    def error(self, status, code, msg):
        self.answer(status, json.dumps({"error": msg}).encode(),
                    {"X-Error-Code": code, "X-Error-Message": msg, "Content-Type": "application/json"})

    def ranged(self, data, headers, cut=False):
        """200 with the whole body, or 206 for "Range: bytes=A-" / "bytes=A-B"."""
        rng = self.headers.get("Range")
        headers = dict(headers, **{"Accept-Ranges": "bytes"})
        if not rng:
            return self.answer(200, data, headers, cut)
        a, _, b = rng.replace("bytes=", "").partition("-")
        a = int(a)
        b = int(b) if b else len(data) - 1
        if a >= len(data):
            return self.answer(416, b"", dict(headers, **{"Content-Range": "bytes */%d" % len(data)}))
        headers["Content-Range"] = "bytes %d-%d/%d" % (a, b, len(data))
        return self.answer(206, data[a:b + 1], headers, cut)

    def authorized(self, repo):
        if not repo.startswith("test/gated"):
            return True
        auth = self.headers.get("Authorization")
        if not auth:
            self.error(401, "GatedRepo", "Access to model %s is restricted. You must be authenticated." % repo)
            return False
        if auth != "Bearer " + TOKEN:
            self.error(403, "GatedRepo", "Access to model %s is restricted: accept the conditions." % repo)
            return False
        return True

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        host = self.headers.get("Host", "")
        if parts == ["__quit"]:
            self.answer(200, b"bye\n")
            threading.Thread(target=self.server.shutdown).start()
            return
        if len(parts) >= 3 and parts[0] == "lfs":  # the content host
            if not host.startswith("localhost:"):
                return self.error(400, "WrongHost", "content is served on localhost")
            repo, name = urllib.parse.unquote(parts[1]), "/".join(parts[2:])
            data = content(repo, name)
            if repo.startswith("test/corrupt") and name == "model-00002-of-00002.safetensors":
                data = bytearray(data)
                data[len(data) // 3] ^= 0x20
                data = bytes(data)
            if repo.startswith("test/flaky") and first_time(repo, "lfs500"):
                return self.error(500, "Internal", "try again")
            if repo.startswith("test/long") and first_time(repo, "long"):
                data = data + b"x" * 100
            if repo.startswith("test/short") and first_time(repo, "short"):
                return self.answer(200, data[:-100], {"ETag": '"%s"' % hashlib.sha256(data).hexdigest()})
            cut = (repo.startswith("test/cut") and name == "model-00001-of-00002.safetensors"
                   and not self.headers.get("Range") and first_time(repo, "cut"))
            return self.ranged(data, {"ETag": '"%s"' % hashlib.sha256(data).hexdigest()}, cut)
        if not host.startswith("127.0.0.1:"):
            return self.error(400, "WrongHost", "the API is served on 127.0.0.1")
        known = lambda r: r == "google/gemma-4-E2B-it" or r in REPOS or any(r.startswith("test/" + k) for k in (
            "tiny", "gated", "cut", "flaky", "corrupt", "evil", "llama", "hugesize", "nosize", "biglist", "long", "short",
            "escape"))
        if len(parts) == 6 and parts[:2] == ["api", "models"] and parts[4] == "revision":
            repo, rev = parts[2] + "/" + parts[3], parts[5]
            if not known(repo):
                return self.error(404, "RepoNotFound", "Repository not found")
            if not repo.startswith("test/gated-files") and not self.authorized(repo):
                return
            if rev not in ("main", commit_of(repo)):
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            if repo.startswith("test/flaky") and first_time(repo, "api500"):
                return self.error(500, "Internal", "try again")
            if repo.startswith("test/escape"):
                return self.error(400, "BadRequest", "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m")
            if repo.startswith("test/biglist"):
                return self.answer(200, b'{"pad": "' + b"x" * (65 << 20) + b'"}', {"Content-Type": "application/json"})
            return self.answer(200, json.dumps(listing(repo)).encode(), {"Content-Type": "application/json"})
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, rev, name = parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:])
            if not known(repo):
                return self.error(404, "RepoNotFound", "Repository not found")
            if not self.authorized(repo):
                return
            if rev not in ("main", commit_of(repo)):
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            if name == "../evil" and repo.startswith("test/evil"):
                data = b"evil\n"
                return self.answer(200, data, {"ETag": '"%s"' % git_blob_sha1(data), "X-Repo-Commit": commit_of(repo)})
            if name not in files_of(repo):
                return self.error(404, "EntryNotFound", "Entry not found")
            data = content(repo, name)
            common = {"X-Repo-Commit": commit_of(repo)}
            if is_lfs(name):
                sha = hashlib.sha256(data).hexdigest()
                loc = "http://localhost:%d/lfs/%s/%s" % (self.server.server_address[1], urllib.parse.quote(repo, safe=""),
                                                         urllib.parse.quote(name))
                return self.answer(302, b"", dict(common, **{"Location": loc, "X-Linked-Etag": '"%s"' % sha,
                                                             "X-Linked-Size": str(len(data)), "ETag": '"%s"' % sha}))
            return self.ranged(data, dict(common, ETag='"%s"' % git_blob_sha1(data)))
        return self.error(404, "NotFound", "no such route")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def read_dir(d):
    """Every file of a checkpoint folder: name -> bytes."""
    out = {}
    for n in os.listdir(d):
        with open(os.path.join(d, n), "rb") as f:
            out[n] = f.read()
    return out


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--repo", action="append", default=[], metavar="NAME=DIR",
                   help="serve DIR's checkpoint under the repo NAME (repeatable)")
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--timeout", type=float, default=300)
    ARGS = p.parse_args()
    FILES.update(read_dir(ARGS.data))
    for spec in ARGS.repo:
        name, _, d = spec.partition("=")
        REPOS[name] = read_dir(d)
    srv = Server(("127.0.0.1", 0), Handler)
    t = threading.Timer(ARGS.timeout, srv.shutdown)
    t.daemon = True
    t.start()
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, ARGS.port_file)
    srv.serve_forever()
    srv.server_close()


if __name__ == "__main__":
    sys.exit(main())
