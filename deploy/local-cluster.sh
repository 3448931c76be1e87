#!/usr/bin/env bash
# deploy/local-cluster.sh -- plume serve past one machine, tested on this one: three replicas
# on loopback ports behind a real load balancer with the shipped config (deploy/nginx/plume.conf,
# or deploy/haproxy/plume.cfg with `deploy/local-cluster.sh haproxy`), a tiny random model
# with the real vocabulary (plume synth). It checks that
#   (a) turn 2 of a conversation reports cached tokens through the balancer (the session key:
#       the X-Session-Id header, or the OpenAI "user" field), and sessions spread over replicas;
#   (b) SIGKILL of one replica loses no conversation beyond a re-prefill: every request still
#       gets a 200, a moved conversation is cached again on its new replica from the next turn;
#   (c) a replica sent SIGTERM finishes its running stream, /health says 503 "draining", the
#       balancer sends its conversations elsewhere, and it exits 0 with its slots saved;
#   (d) /metrics of every replica is scrapeable Prometheus text with the queue and slot gauges.
# Ends with "N passed, N failed"; exits non-zero when a check failed. Skips (exit 0, saying
# why) when the balancer is not installed. Environment: PLUME (default build/plume), NGINX,
# HAPROXY, KEEP=1 (keep the temporary directory and say where), TALLY (a file: "passed failed"
# appended, for make check).
set -u
LB=${1:-nginx}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
case $LB in
nginx) BIN=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)} ;;
haproxy) BIN=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)} ;;
*) echo "usage: deploy/local-cluster.sh [nginx|haproxy]" >&2; exit 2 ;;
esac
if [ ! -x "$BIN" ]; then
    echo "local-cluster: skipped: $LB is not installed (apt-get install $LB)"
    exit 0
fi
command -v curl >/dev/null || { echo "local-cluster: curl is needed" >&2; exit 1; }
# Debian's python3 (standard library only; -S: no site packages, it starts in a tenth of the
# time of a pyenv shim, and it runs ~80 times)
PY=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)} || { echo "local-cluster: python3 is needed" >&2; exit 1; }
[ -x "$PLUME" ] || { echo "local-cluster: no $PLUME (run make first)" >&2; exit 1; }

D=$(mktemp -d "${TMPDIR:-/tmp}/plume-cluster-XXXXXX") || exit 1
PIDS=""   # every process this script started, killed by pid at exit
cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.2
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done # a second SIGTERM cuts a drain
    for i in $(seq 30); do
        alive=0
        for p in $PIDS; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "${KEEP:-0}" = 1 ]; then echo "local-cluster: kept $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASS=0 FAIL=0
# check NAME COMMAND...: run the command, count and print the result.
check() {
    local name=$1
    shift
    if "$@"; then PASS=$((PASS + 1)); echo "PASS $name"; else FAIL=$((FAIL + 1)); echo "FAIL $name"; fi
}
# the last line, and the tally of make check (TALLY, as tests/run.sh)
finish() {
    echo "$PASS passed, $FAIL failed"
    [ -n "${TALLY:-}" ] && echo "$PASS $FAIL" >>"$TALLY"
    [ "$FAIL" = 0 ]
}
die() {
    echo "FAIL local-cluster ($LB): $*"
    FAIL=$((FAIL + 1))
    finish
    exit 1
}

# ---- the model and the replicas ------------------------------------------------------------
# A tiny random model: with the real vocabulary (tests/vocab, `make vocab`) when there, else
# the committed tiny-a checkpoint and its small vocabulary.
if [ -f "$ROOT/tests/vocab/tokenizer.json" ]; then
    "$PLUME" synth --config tiny --vocab 262144 --seed 1 --bundle "$D/model" --weights q8 \
        --tokenizer "$ROOT/tests/vocab" >"$D/synth.log" 2>&1 || die "plume synth: $(cat "$D/synth.log")"
else
    echo "note: no tests/vocab (make vocab): the tiny-a checkpoint's small vocabulary instead"
    "$PLUME" convert "$ROOT/tests/data/tiny-a/hf" "$D/model" --weights q8 --quiet >"$D/synth.log" 2>&1 \
        || die "plume convert: $(cat "$D/synth.log")"
fi

N=3
PORT=() RPID=()
# start_replica I: plume serve on a free loopback port (--port 0), its own slot directory.
start_replica() {
    local i=$1
    "$PLUME" serve -m "$D/model" --host 127.0.0.1 --port 0 --parallel 10 -t 1 --context 4096 \
        --slot-save "$D/slots$i" --drain 120 >"$D/replica$i.log" 2>&1 &
    RPID[$i]=$!
    PIDS="$PIDS ${RPID[$i]}"
}
for i in $(seq 0 $((N - 1))); do start_replica "$i"; done
for i in $(seq 0 $((N - 1))); do
    PORT[$i]=""
    for t in $(seq 300); do
        PORT[$i]=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$D/replica$i.log" 2>/dev/null)
        [ -n "${PORT[$i]}" ] && break
        kill -0 "${RPID[$i]}" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "${PORT[$i]}" ] || die "replica $i did not start: $(cat "$D/replica$i.log")"
done

# ---- the balancer, with the shipped config ---------------------------------------------------
# A free port for the balancer: random ones are tried until it binds.
LBPORT=""
start_nginx() {
    # the shipped file with the three replicas' and the listening addresses, in a minimal
    # main config: foreground, one process, every path in $D (no root needed)
    sed -e "s|server 10\.0\.0\.11:8080|server 127.0.0.1:${PORT[0]}|" \
        -e "s|server 10\.0\.0\.12:8080|server 127.0.0.1:${PORT[1]}|" \
        -e "s|server 10\.0\.0\.13:8080|server 127.0.0.1:${PORT[2]}|" \
        -e "s|^\( *\)listen 80;|\1listen 127.0.0.1:$LBPORT;|" "$ROOT/deploy/nginx/plume.conf" >"$D/plume.conf"
    [ "$(grep -c "server 127.0.0.1:" "$D/plume.conf")" = 3 ] && grep -q "listen 127.0.0.1:$LBPORT;" "$D/plume.conf" \
        || die "deploy/nginx/plume.conf no longer has the lines this test rewrites"
    mkdir -p "$D/nginx"
    cat >"$D/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $D/nginx/nginx.pid;
error_log $D/nginx/error.log info;
events { worker_connections 256; }
http {
    log_format plume '\$plume_session \$upstream_addr \$status';
    access_log $D/nginx/access.log plume;
    client_body_temp_path $D/nginx/body;
    proxy_temp_path $D/nginx/proxy;
    fastcgi_temp_path $D/nginx/fastcgi;
    uwsgi_temp_path $D/nginx/uwsgi;
    scgi_temp_path $D/nginx/scgi;
    include $D/plume.conf;
}
EOF
    "$BIN" -t -p "$D/nginx" -c "$D/nginx.conf" -e "$D/nginx/error.log" >"$D/lb-t.log" 2>&1 \
        || die "nginx -t: $(cat "$D/lb-t.log")"
    "$BIN" -p "$D/nginx" -c "$D/nginx.conf" -e "$D/nginx/error.log" >"$D/lb.log" 2>&1 &
}
start_haproxy() {
    sed -e "s|server plume0 10\.0\.0\.11:8080|server plume0 127.0.0.1:${PORT[0]}|" \
        -e "s|server plume1 10\.0\.0\.12:8080|server plume1 127.0.0.1:${PORT[1]}|" \
        -e "s|server plume2 10\.0\.0\.13:8080|server plume2 127.0.0.1:${PORT[2]}|" \
        -e "s|^\( *\)bind :80$|\1bind 127.0.0.1:$LBPORT|" "$ROOT/deploy/haproxy/plume.cfg" >"$D/haproxy.cfg"
    [ "$(grep -c "server plume[0-2] 127.0.0.1:" "$D/haproxy.cfg")" = 3 ] && grep -q "bind 127.0.0.1:$LBPORT$" "$D/haproxy.cfg" \
        || die "deploy/haproxy/plume.cfg no longer has the lines this test rewrites"
    "$BIN" -c -f "$D/haproxy.cfg" >"$D/lb-t.log" 2>&1 || die "haproxy -c: $(cat "$D/lb-t.log")"
    "$BIN" -db -f "$D/haproxy.cfg" >"$D/lb.log" 2>&1 &
}
for try in $(seq 10); do
    LBPORT=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 40000))
    start_$LB
    LBPID=$!
    up=0
    for t in $(seq 50); do
        kill -0 $LBPID 2>/dev/null || break
        if curl -s -m 2 -o /dev/null "http://127.0.0.1:$LBPORT/health"; then up=1; break; fi
        sleep 0.1
    done
    [ $up = 1 ] && break
    kill $LBPID 2>/dev/null
    wait $LBPID 2>/dev/null
    grep -qi "address already in use" "$D/lb.log" "$D/nginx/error.log" 2>/dev/null || die "$LB did not start: $(cat "$D/lb.log")"
done
[ $up = 1 ] || die "$LB found no free port"
PIDS="$PIDS $LBPID"
LBURL="http://127.0.0.1:$LBPORT"
# HAProxy's health checks: wait until it sees all three replicas up
if [ "$LB" = haproxy ]; then sleep 1.5; fi
echo "local-cluster: $N replicas (ports ${PORT[*]}) behind $LB on port $LBPORT"

# ---- clients --------------------------------------------------------------------------------
# metric I NAME: the value of a metric of replica I (empty when it does not answer).
metric() {
    curl -s -m 5 "http://127.0.0.1:${PORT[$1]}/metrics" | sed -n "s/^$2 \([0-9.]*\)$/\1/p"
}
# requests_all: plume_requests_total of every replica, one per line (dead ones: -).
requests_all() {
    for i in $(seq 0 $((N - 1))); do v=$(metric "$i" plume_requests_total); echo "${v:--}"; done
}
# served_by BEFORE AFTER: the one replica whose request count grew (-1 when not exactly one).
served_by() {
    local a=($1) b=($2) i who=-1 n=0
    for i in "${!a[@]}"; do
        if [ "${a[$i]}" != - ] && [ "${b[$i]}" != - ] && [ "${b[$i]%.*}" -gt "${a[$i]%.*}" ]; then
            who=$i
            n=$((n + 1))
        fi
    done
    [ $n = 1 ] && echo $who || echo -1
}

# turn SESSION HOW: the next turn of the conversation of SESSION (its messages kept in
# $D/conv-SESSION.json), sent through the balancer with the key as HOW says: "header"
# (X-Session-Id) or "user" (the body's user field) or "none". Sets STATUS, PROMPT, CACHED and SERVED
# (the replica that answered, by the metrics; -1 when unknown); the assistant's answer joins
# the conversation.
turn() {
    local s=$1 how=$2 conv="$D/conv-$1.json" hdr=()
    "$PY" -S - "$conv" "$s" "$how" >"$D/req.json" <<'EOF'
import json, os, sys
conv, session, how = sys.argv[1:4]
msgs = json.load(open(conv)) if os.path.exists(conv) else [
    {"role": "system", "content": "You are a careful assistant of the conversation " + session +
     ". Answer in short sentences, and keep to the facts the user gives you in this conversation."}]
n = sum(m["role"] == "user" for m in msgs)
msgs.append({"role": "user", "content": "Turn %d of %s: tell me something new about load balancers." % (n + 1, session)})
body = {"messages": msgs, "max_tokens": 8, "temperature": 0, "seed": 1}
if how == "user":
    body["user"] = session
print(json.dumps(body))
EOF
    [ "$how" = header ] && hdr=(-H "X-Session-Id: $s")
    local before after
    before=$(requests_all)
    STATUS=$(curl -s -m 30 -o "$D/resp.json" -w '%{http_code}' "${hdr[@]}" -H 'Content-Type: application/json' \
        --data-binary @"$D/req.json" "$LBURL/v1/chat/completions")
    after=$(requests_all)
    SERVED=$(served_by "$(echo $before)" "$(echo $after)")
    read -r PROMPT CACHED < <("$PY" -S - "$D/req.json" "$D/resp.json" "$conv" <<'EOF'
import json, sys
req, resp, conv = sys.argv[1:4]
try:
    r = json.load(open(resp))
    u = r["usage"]
    msgs = json.load(open(req))["messages"]
    msgs.append({"role": "assistant", "content": r["choices"][0]["message"].get("content") or ""})
    json.dump(msgs, open(conv, "w"))
    print(u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"])
except Exception:
    print(-1, -1)
EOF
)
}

# ---- (d) every replica's /metrics -------------------------------------------------------------
# metrics_ok I: replica I's /metrics is Prometheus text with the gauges an autoscaler reads.
metrics_ok() {
    local out
    out=$(curl -s -m 5 -w '\n%{http_code}' "http://127.0.0.1:${PORT[$1]}/metrics") || return 1
    [ "$(echo "$out" | tail -n 1)" = 200 ] || return 1
    out=$(echo "$out" | sed '$d')
    for m in plume_queue_length plume_slots_busy plume_slots_total plume_requests_total; do
        echo "$out" | grep -q "^$m [0-9]" || return 1
    done
    # every line a comment or "name[{labels}] number"
    ! echo "$out" | grep -v '^#' | grep -v '^$' | grep -Ev '^[a-z_:][a-z0-9_:]*(\{[^}]*\})? -?[0-9.eE+-]+$' | grep -q .
}
for i in $(seq 0 $((N - 1))); do check "(d) replica $i: /metrics scrapeable" metrics_ok "$i"; done

# ---- (a) turn 2 is cached through the balancer -------------------------------------------------
declare -A HOME_OF # session -> replica
turn alice header
p1=$PROMPT
HOME_OF[alice]=$SERVED
check "(a) alice turn 1: 200 ($STATUS), served by replica $SERVED" test "$STATUS" = 200 -a "$SERVED" -ge 0
turn alice header
check "(a) alice turn 2 (X-Session-Id): cached $CACHED of $PROMPT prompt tokens (turn 1 had $p1), same replica ($SERVED)" \
    test "$STATUS" = 200 -a "$CACHED" -ge $((p1 - 1)) -a "$SERVED" = "${HOME_OF[alice]}"
turn bob user
p1=$PROMPT
HOME_OF[bob]=$SERVED
turn bob user
check "(a) bob turn 2 (\"user\" field): cached $CACHED of $PROMPT (turn 1 had $p1), same replica ($SERVED)" \
    test "$STATUS" = 200 -a "$CACHED" -ge $((p1 - 1)) -a "$SERVED" = "${HOME_OF[bob]}"
# the balancer read the key from the body: its log names the session
keyed_by_user() {
    case $LB in
    nginx) [ "$(grep -c '^bob ' "$D/nginx/access.log")" = 2 ] ;;
    haproxy) [ "$(grep -c '{bob}' "$D/lb.log")" = 2 ] ;;
    esac
}
check "(a) $LB keyed bob's two requests by their \"user\" field" keyed_by_user
# more sessions (10 in all: each replica has 10 slots, so none is evicted): they spread
MORE="s1 s2 s3 s4 s5 s6 s7 s8"
used=""
for s in $MORE; do
    turn $s header
    HOME_OF[$s]=$SERVED
    [ "$STATUS" = 200 ] && used="$used $SERVED"
done
spread=$(echo $used | tr ' ' '\n' | sort -u | grep -c .)
check "(a) 8 more sessions: all 200, spread over $spread replicas ($used)" test "$(echo $used | wc -w)" = 8 -a "$spread" -ge 2

# requests without a key: round robin, not all to one replica
used=""
for n in 1 2 3 4 5 6; do
    turn "nokey$n" none
    [ "$STATUS" = 200 ] && used="$used $SERVED"
done
spread=$(echo $used | tr ' ' '\n' | sort -u | grep -c .)
check "(a) 6 requests without a session key: all 200, spread over $spread replicas ($used)" \
    test "$(echo $used | wc -w)" = 6 -a "$spread" -ge 2

# ---- (b) SIGKILL of one replica ----------------------------------------------------------------
K=${HOME_OF[alice]}
[ "$K" -ge 0 ] 2>/dev/null || die "alice's replica is unknown"
{ kill -KILL "${RPID[$K]}"; wait "${RPID[$K]}"; } 2>/dev/null # (no "Killed" line from bash)
turn alice header
p3=$PROMPT
moved=$SERVED
check "(b) replica $K killed: alice turn 3 is a 200 ($STATUS) from replica $moved, re-prefilled (cached $CACHED of $PROMPT)" \
    test "$STATUS" = 200 -a "$moved" -ge 0 -a "$moved" != "$K" -a "$CACHED" -lt "$PROMPT" -a "$CACHED" -ge 0
turn alice header
check "(b) alice turn 4: cached again on replica $SERVED ($CACHED of $PROMPT; turn 3 had $p3)" \
    test "$STATUS" = 200 -a "$SERVED" = "$moved" -a "$CACHED" -ge $((p3 - 1))
ok=0 cached_ok=0 total=0
for s in $MORE; do
    turn $s header
    total=$((total + 1))
    [ "$STATUS" = 200 ] && ok=$((ok + 1))
    # a conversation whose replica lives keeps its cache
    if [ "${HOME_OF[$s]}" != "$K" ]; then
        [ "$STATUS" = 200 ] && [ "$SERVED" = "${HOME_OF[$s]}" ] && [ "$CACHED" -gt 0 ] && cached_ok=$((cached_ok + 1))
    else
        cached_ok=$((cached_ok + 1))
    fi
done
check "(b) the 8 sessions' turn 2 after the kill: $ok of $total answered 200" test $ok = $total
check "(b) sessions on live replicas kept their replica and cache: $cached_ok of $total" test $cached_ok = $total

# ---- (c) SIGTERM: the running stream finishes, the replica leaves rotation ---------------------------
T=-1
for s in bob $MORE; do
    if [ "${HOME_OF[$s]}" -ge 0 ] && [ "${HOME_OF[$s]}" != "$K" ]; then T=${HOME_OF[$s]}; TS=$s; break; fi
done
[ "$T" -ge 0 ] || die "no session on a live replica"
body='{"prompt": "a long answer", "max_tokens": 4000, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}'
curl -s -N -m 150 -o "$D/stream.txt" -H "X-Session-Id: $TS" -d "$body" "$LBURL/v1/completions" &
CURL=$!
PIDS="$PIDS $CURL"
for t in $(seq 200); do [ "$(metric "$T" plume_slots_busy)" = 1 ] && break; sleep 0.05; done
check "(c) a stream of session $TS runs on replica $T" test "$(metric "$T" plume_slots_busy)" = 1
kill -TERM "${RPID[$T]}"
draining=0
for t in $(seq 100); do
    curl -s -m 2 "http://127.0.0.1:${PORT[$T]}/health" -w ' %{http_code}' | grep -q '"draining"} 503' && { draining=1; break; }
    sleep 0.05
done
check "(c) replica $T after SIGTERM: /health answers 503 {\"status\":\"draining\"}" test $draining = 1
turn "$TS" header
alive=0
kill -0 $CURL 2>/dev/null && alive=1
# A client as the SDKs are: a 503 with Retry-After is tried again once after it. The
# balancer may not have run its health check since the SIGTERM (HAProxy: every 1 s), and its
# retry of a 503 elsewhere (redispatch on a consistent hash) is not always taken.
again=""
if [ "$STATUS" = 503 ]; then sleep 1.2; turn "$TS" header; again=", after one retry of a 503"; fi
check "(c) session $TS meanwhile: a 200 ($STATUS) from another replica ($SERVED)$again" \
    test "$STATUS" = 200 -a "$SERVED" -ge 0 -a "$SERVED" != "$T"
check "(c) the stream was still running when that was checked" test $alive = 1
check "(c) replica $T: /metrics still scrapeable while draining" metrics_ok "$T"
wait "${RPID[$T]}"
rc=$?
wait $CURL
tailtxt=$(tail -c 1500 "$D/stream.txt")
check "(c) replica $T's stream finished: 4000 tokens, finish_reason length, [DONE], no error" \
    sh -c 'echo "$1" | grep -q "\"completion_tokens\":4000," && echo "$1" | grep -q "\"finish_reason\":\"length\"" &&
           echo "$1" | grep -q "data: \[DONE\]" && ! echo "$1" | grep -q "shutting down"' sh "$tailtxt"
check "(c) replica $T exited 0 ($rc), drained, its slots saved" \
    sh -c '[ "$1" = 0 ] && grep -q "drained" "$2" && ls "$3"/slot-*.state >/dev/null 2>&1' sh "$rc" "$D/replica$T.log" "$D/slots$T"

for i in $(seq 0 $((N - 1))); do
    [ "$i" = "$K" ] || [ "$i" = "$T" ] && continue
    check "(d) replica $i, the last one: /metrics scrapeable, $(metric "$i" plume_requests_total) requests served" metrics_ok "$i"
done
finish
