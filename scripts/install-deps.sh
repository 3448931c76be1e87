#!/bin/sh
# install-deps.sh -- install what plume's build, demo and tests need on Debian or Ubuntu, and
# only what is missing: a root shell without sudo works, and a Node.js installed from elsewhere
# (whose npm conflicts with Debian's npm package) is used as it is.
#
#   make gcc libc6-dev      the compiler
#   libcjson-dev            JSON (configs, safetensors headers, tokenizer.json)
#   libcurl4-openssl-dev    HTTPS for `plume pull` (the CLI only)
#   libmicrohttpd-dev       the HTTP server of `plume serve` (the CLI only)
#   libpng-dev libjpeg62-turbo-dev libwebp-dev   image input (src/media/)
#   libsndfile1-dev         audio input: WAV, FLAC, Ogg Vorbis/Opus, MP3 (src/media/)
#   libsoxr-dev             audio input: resampling to 16 kHz (src/media/)
#   libavformat-dev libavcodec-dev libswscale-dev libavutil-dev   video input: MP4/MOV,
#                           MKV/WebM; H.264, HEVC, VP8/9, AV1 (src/media/, FFmpeg's libraries)
#   curl                    the server tests send their requests with it
#   npm                     fetches the real vocabulary for the demo and the tokenizer tests
#   python3                 the mock Hugging Face Hub of the tests (standard library only)
#   ca-certificates         HTTPS certificates for npm and `plume pull`
set -eu

# Whether the C compiler finds a header.
has_header() {
    command -v cc >/dev/null 2>&1 && printf '#include <%s>\n' "$1" | cc -E -x c - >/dev/null 2>&1
}

missing=""
command -v make >/dev/null 2>&1 || missing="$missing make"
command -v cc >/dev/null 2>&1 || missing="$missing gcc libc6-dev"
has_header cjson/cJSON.h || missing="$missing libcjson-dev"
has_header curl/curl.h || missing="$missing libcurl4-openssl-dev"
has_header microhttpd.h || missing="$missing libmicrohttpd-dev"
has_header png.h || missing="$missing libpng-dev"
has_header jpeglib.h || missing="$missing libjpeg62-turbo-dev"
has_header webp/demux.h || missing="$missing libwebp-dev"
has_header sndfile.h || missing="$missing libsndfile1-dev"
has_header soxr.h || missing="$missing libsoxr-dev"
has_header libavformat/avformat.h || missing="$missing libavformat-dev"
has_header libavcodec/avcodec.h || missing="$missing libavcodec-dev"
has_header libswscale/swscale.h || missing="$missing libswscale-dev"
has_header libavutil/avutil.h || missing="$missing libavutil-dev"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
[ -e /etc/ssl/certs/ca-certificates.crt ] || missing="$missing ca-certificates"

if [ -z "$missing" ]; then
    echo "install-deps: everything is already installed"
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "install-deps: need root to install:$missing (run this as root, or install sudo)" >&2
    exit 1
fi
echo "install-deps: installing$missing"
$sudo apt-get update -qq
# shellcheck disable=SC2086  # one word per package
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
