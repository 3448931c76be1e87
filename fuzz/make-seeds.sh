#!/bin/sh
# make-seeds.sh -- (re)make the committed seed corpora fuzz/corpus/NAME from the golden data
# of tests/data and the synth'd tiny bundle. Each harness's first byte(s) select a mode (see
# the harness); a seed is that byte followed by a real file.
# usage: fuzz/make-seeds.sh PLUME
set -eu
PLUME=${1:?usage: $0 PLUME}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/fuzz/corpus
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
sh "$ROOT/fuzz/fixture.sh" "$PLUME" "$T/b"
B=$T/b
rm -rf "$C" && mkdir -p "$C"
for d in fuzz_safetensors fuzz_config fuzz_npy fuzz_tokenizer_json fuzz_tokenizer_bin fuzz_tokenize fuzz_bundle \
         fuzz_state fuzz_chat fuzz_chat_parse fuzz_serve_req fuzz_hub fuzz_audio fuzz_image fuzz_video fuzz_gbnf fuzz_schema fuzz_gguf; do mkdir -p "$C/$d"; done

# A file with a one-byte mode prefix.
seed() { { printf "$1"; cat "$2"; } > "$3"; }
# The JSON header of a safetensors file.
header() { n=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +9 "$1" | head -c "$n"; }

# safetensors: two small handmade files and the real chunk 1
hdr='{"__metadata__":{"format":"plume-chunk","version":"1"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}}'
{ printf "$(printf '\\%03o' $((${#hdr} % 256)) $((${#hdr} / 256)) 0 0 0 0 0 0)"; printf '%s' "$hdr"; head -c 32 /dev/zero; } > "$C/fuzz_safetensors/small"
hdr='{"x":{"dtype":"I8","shape":[],"data_offsets":[0,1]},"y":{"dtype":"U8","shape":[0,5],"data_offsets":[1,1]}}'
{ printf "$(printf '\\%03o' $((${#hdr} % 256)) $((${#hdr} / 256)) 0 0 0 0 0 0)"; printf '%s' "$hdr"; printf 'z'; } > "$C/fuzz_safetensors/scalar"
cp "$B/chunk_1.safetensors" "$C/fuzz_safetensors/chunk_1"

# configs: HF (mode 0) and bundle (mode 1)
seed '\000' "$ROOT/tests/data/tiny-a/hf/config.json" "$C/fuzz_config/hf-tiny"
seed '\000' "$ROOT/tests/data/e2b-config.json" "$C/fuzz_config/hf-e2b"
seed '\000' "$ROOT/tests/data/tiny-e4b/hf/config.json" "$C/fuzz_config/hf-tiny-e4b"
seed '\001' "$B/model_config.json" "$C/fuzz_config/bundle-tiny"

# a whole bundle: model_config.json (0) or a chunk header (1-3)
seed '\000' "$B/model_config.json" "$C/fuzz_bundle/model_config"
for i in 1 2 3; do header "$B/chunk_$i.safetensors" > "$T/h$i"; seed "\\00$i" "$T/h$i" "$C/fuzz_bundle/chunk_$i"; done

# images: the small decode variants of tests/data/tiny-mm-a (PNG modes, Adam7, JPEG gray/CMYK,
# EXIF in JPEG, PNG and WebP; made by scripts/make-mm-fixtures.py)
for f in rgb.png interlaced.png palette_trns.png gray16.png gray2.png gray_alpha.png rgba16.png exif6.jpg exif8.png \
         exif5.webp gray.jpg cmyk.jpg lossy.webp alpha.webp; do
    cp "$ROOT/tests/data/tiny-mm-a/decode/$f" "$C/fuzz_image/$f"
done

# .npy
cp "$ROOT/tests/data/tiny-a/ids.npy" "$C/fuzz_npy/ids"
# GGUF: the block formats of tests/data/gguf, and the metadata of a tiny-a GGUF (tests/make_gguf.py)
cp "$ROOT/tests/data/gguf/blocks.gguf" "$C/fuzz_gguf/blocks"
"$ROOT/tests/make_gguf.py" "$ROOT/tests/data/tiny-a/hf" "$T/t.gguf" 2>/dev/null && head -c 24000 "$T/t.gguf" > "$C/fuzz_gguf/tiny-a-meta" || true
head -c 2048 "$ROOT/tests/data/rope_e2b.npy" > "$C/fuzz_npy/rope-cut"
"$PLUME" logits -m "$B" --ids 2,5,9 -o "$T/l.npy" && cp "$T/l.npy" "$C/fuzz_npy/logits"

# tokenizers
cp "$ROOT/tests/data/tiny-a/hf/tokenizer.json" "$C/fuzz_tokenizer_json/tiny-a"
seed '\000' "$B/tokenizer.bin" "$C/fuzz_tokenizer_bin/tiny-as-is"
seed '\001' "$B/tokenizer.bin" "$C/fuzz_tokenizer_bin/tiny-sealed"
i=0
for t in 'Hello world' '<bos><start_of_turn>user
Why is the sky blue?<end_of_turn>' 'Äpfel ½ 😀 naïve   spaces' "$(printf '\303\251\342\226\201x\t\n')"; do
    i=$((i + 1)); { printf '\000'; printf '%s' "$t"; } > "$C/fuzz_tokenize/text$i"
done
printf '\001\002\000\005\000\377\001\020\000\000\002' > "$C/fuzz_tokenize/ids"

# state files of the tiny bundle (mode 0: as saved; 3: resealed with the model's identity)
"$PLUME" logits -m "$B" --ids 2,5,9,11,4,7 --context 16 --save-state "$T/s" -o "$T/x.npy"
seed '\000' "$T/s" "$C/fuzz_state/ctx16"
seed '\003' "$T/s" "$C/fuzz_state/ctx16-sealed"
"$PLUME" logits -m "$B" --ids 2,5,9,11,4,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --context 24 --save-state "$T/s2" -o "$T/x.npy"
seed '\003' "$T/s2" "$C/fuzz_state/ctx24-wrapped"

# chat rendering: flags | tools | messages (fields split by 0xFF; see fuzz_chat.c)
F=$(printf '\377')
tools='[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]},"days":{"type":["integer","null"]}},"required":["city"]}}}]'
{ printf '\011'; printf '%s' "$tools$F";
  printf '\000\000You are terse.%s\000' "$F";
  printf '\002\000What is the weather in Paris?%s\000' "$F";
  printf '\003\040%sLet me check.%s\001' "$F" "$F"; printf 'call_1%sget_weather%s{"city":"Paris","days":2}%s' "$F" "$F" "$F";
  printf '\005\020{"temp": 21}%s\000call_1%s' "$F" "$F"; } > "$C/fuzz_chat/tools"
{ printf '\003%s' "$F"; printf '\002\000Hi%s\000' "$F"; printf '\003\000Hello!%s\000' "$F";
  printf '\002\104\000\001part one%spart two%s' "$F" "$F"; } > "$C/fuzz_chat/plain"

# chat output parser: in_thought | piece size | generated text
Q='<|"|>'
printf '\000\003<|channel>thought\nThe user wants weather.<channel|>Sure. <|tool_call>call:get_weather{city:%sParis%s,days:2,opts:{deep:[1,true,null]}}<tool_call|><turn|>' "$Q" "$Q" > "$C/fuzz_chat_parse/call"
printf '\001\001still thinking\n<channel|>Answer with <|tool_call>call:broken{x:<turn|>' > "$C/fuzz_chat_parse/broken"
printf '\000\007plain answer <eos> ignored' > "$C/fuzz_chat_parse/plain"
# server request bodies: mode (0 chat, 1 completion, 2 tokenize, 3 detokenize) | body, and for
# a generation: 0xFF | piece size | generated text (see fuzz_serve_req.c)
S=$C/fuzz_serve_req
msg='{"role":"user","content":"What is the weather in Paris?"}'
{ printf '\000{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\\"city\\":\\"Paris\\"}"}}],"reasoning_content":"hmm"},{"role":"tool","tool_call_id":"c1","content":"21"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,"min_p":0.1,"presence_penalty":0.5,"frequency_penalty":-0.5,"repeat_penalty":1.1,"seed":42,"stop":["x","yz"],"logprobs":true,"top_logprobs":3,"tools":%s,"tool_choice":"required","reasoning_effort":"high","user":"ignored"}' "$tools";
  printf '\377\003<|channel>thought\nThe user wants weather.<channel|>Sure. <|tool_call>call:get_weather{city:%sParis%s}<tool_call|><turn|>' "$Q" "$Q"; } > "$S/chat-all"
{ printf '\000{"messages":[%s],"stop":"\\n","chat_template_kwargs":{"enable_thinking":true},"tool_choice":{"type":"function","function":{"name":"f"}},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}]}' "$msg";
  printf '\377\005It is sunny and 21 degrees.\nMore text'; } > "$S/chat-stop"
{ printf '\000{"messages":[%s,{"role":"assistant","content":"Sunny.","reasoning":"look it up"},{"role":"developer","content":"no tools"},{"role":"user","content":"And Rome?","name":"bob"}],"max_tokens":20,"response_format":{"type":"text"},"ignore_eos":true,"logprobs":true,"tool_choice":"none"}' "$msg";
  printf '\377\002Rome: rainy. yz stop? x'; } > "$S/chat-nostream"
{ printf '\000{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"g","arguments":{"k":[1,2,{"z":null}]}}}]},{"role":"tool","tool_call_id":"c","name":"g","content":[{"type":"text","text":"ok"}]}],"stream":true}';
  printf '\377\001<|tool_call>call:g{k:1}<tool_call|><|tool_call>call:h{}<tool_call|>tail'; } > "$S/chat-calls"
printf '\000{"messages":[{"role":"robot","content":"x"}],"temperature":3}' > "$S/chat-bad"
{ printf '\001{"prompt":"Once upon a time","max_tokens":3,"temperature":0,"stop":["\\n\\n","THE END"],"echo":false,"best_of":1,"stream":true}';
  printf '\377\004 there was a tiny model.\n\nTHE END'; } > "$S/completion"
{ printf '\001{"prompt":["one"],"seed":-5,"top_k":0,"n":1,"suffix":null}'; printf '\377\007, two, three'; } > "$S/completion-list"
printf '\001{"prompt":"a","logprobs":2}' > "$S/completion-bad"
{ printf '\001{"prompt":"list","grammar":"root ::= \\"(\\" [0-9]{1,3} (\\",\\" [0-9]{1,3}){0,3} \\")\\""}'; printf '\377\002(12,345)'; } > "$S/completion-grammar"
# the other dialects: 4 responses, 5 anthropic, 6 count_tokens, 7 ollama chat, 8 ollama generate
{ printf '\004{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"weather?"}]},{"type":"reasoning","summary":[],"encrypted_content":"look it up"},{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\\"city\\":\\"Paris\\"}"},{"type":"function_call_output","call_id":"c1","output":"21"}],"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"stream":true,"store":false,"reasoning":{"effort":"high"},"include":["reasoning.encrypted_content","message.output_text.logprobs"],"top_logprobs":2,"max_output_tokens":30,"temperature":0.7}';
  printf '\377\003<|channel>thought\nhmm<channel|>Sunny. <|tool_call>call:get_weather{city:%sRome%s}<tool_call|>' "$Q" "$Q"; } > "$S/responses"
{ printf '\004{"input":"Hi","max_output_tokens":8,"tool_choice":{"type":"function","name":"f"}}'; printf '\377\002Hello there'; } > "$S/responses-plain"
printf '\004{"input":"Hi","previous_response_id":"resp_1"}' > "$S/responses-bad"
{ printf '\005{"model":"m","max_tokens":40,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":""},{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"21"}]},{"type":"text","text":"and Rome?"}]}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"thinking":{"type":"enabled"},"stop_sequences":["END"],"stream":true,"top_k":5}';
  printf '\377\004<|channel>thought\nhmm<channel|>Rainy. END more'; } > "$S/anthropic"
{ printf '\005{"max_tokens":5,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello,"}]}'; printf '\377\001 friend'; } > "$S/anthropic-prefill"
printf '\006{"messages":[{"role":"user","content":"count me"}],"system":"s"}' > "$S/anthropic-count"
printf '\005{"messages":[{"role":"user","content":[{"type":"image","source":{}}]}],"max_tokens":3}' > "$S/anthropic-bad"
{ printf '\007{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","content":"21","tool_name":"get_weather"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"options":{"temperature":0,"num_predict":9,"seed":3,"stop":["zz"],"num_ctx":2048,"num_gpu":99},"think":true,"keep_alive":"5m","logprobs":true,"top_logprobs":1}';
  printf '\377\002<|channel>thought\nok<channel|>It is 21. zz'; } > "$S/ollama-chat"
printf '\007{"model":"m","messages":[]}' > "$S/ollama-load"
{ printf '\010{"model":"m","prompt":"Why?","system":"s","stream":false,"options":{"top_k":4}}'; printf '\377\003Because.'; } > "$S/ollama-generate"
{ printf '\010{"prompt":"raw text","raw":true}'; printf '\377\001 more'; } > "$S/ollama-raw"
printf '\010{"prompt":"x","format":"json"}' > "$S/ollama-bad"
{ printf '\001{"prompt":[5,6,7],"echo":true,"logprobs":2,"max_tokens":0,"n":3}'; printf '\377\001'; } > "$S/completion-echo"
{ printf '\000{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}],"continue_final_message":true,"add_generation_prompt":false,"n":2,"logit_bias":{"5":-100,"7":3.5},"prompt_logprobs":1,"stream":true}';
  printf '\377\002lo there'; } > "$S/chat-continue"
{ printf '\000{"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"g"}}],"parallel_tool_calls":false}';
  printf '\377\001<|tool_call>call:g{k:1}<tool_call|><|tool_call>call:h{}<tool_call|>tail'; } > "$S/chat-one-call"
{ printf '\005{"max_tokens":9,"messages":[{"role":"user","content":"Hi"}],"tools":[{"name":"g","input_schema":{}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"stream":true}';
  printf '\377\001<|tool_call>call:g{}<tool_call|><|tool_call>call:g{}<tool_call|>'; } > "$S/anthropic-one-call"
printf '\007{"model":"m","keep_alive":"0s"}' > "$S/ollama-unload"
printf '\002{"content":"Hello <start_of_turn>user\\nworld \\u00e9\\ud83d\\ude00","add_special":true}' > "$S/tokenize"
printf '\003{"tokens":[2,5,9,11,4,7,0]}' > "$S/detokenize"
printf '\003{"tokens":[1,-1,1.5,"2"]}' > "$S/detokenize-bad"

# grammars: flags | GBNF [0xFF text to match] (see fuzz_gbnf.c); schemas: flags (1 Gemma
# dialect, 2 tools) | schema, or tools 0xFF tool_choice (see fuzz_schema.c)
G=$C/fuzz_gbnf
{ printf '\000'; printf 'root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= [0-9]+ | "(" expr ")"\n'; printf '\377(12+3)-4'; } > "$G/arith"
{ printf '\000'; "$PLUME" run --json-schema "$ROOT/tests/data/schemas/person.json" --print-grammar;
  printf '\377{"name": "Ada", "age": 36, "tags": ["dev"]}'; } > "$G/person"
{ printf '\000'; printf '# comment\nroot ::= <|tool_call> "call:" name <[49]> | [^\\x00-\\x1f\\u00e9-\\U0001F600]{2,5} "\\n"?\nname ::= [a-z_]+\n';
  printf '\377abc\n'; } > "$G/tokens"
{ printf '\000'; printf 'root ::= x\nx ::= x "a" | y\ny ::= "b" ( z\n'; } > "$G/broken"
S2=$C/fuzz_schema
for f in "$ROOT"/tests/data/schemas/*.json; do n=$(basename "$f" .json); seed '\000' "$f" "$S2/$n"; done
seed '\001' "$ROOT/tests/data/schemas/nested.json" "$S2/nested-gemma"
printf '\002%s\377required' "$tools" > "$S2/tools-required"
printf '\002%s\377{"type":"function","function":{"name":"get_weather"}}' "$tools" > "$S2/tools-named"

# Hub API answers as tests/mock_hub.py gives them: flags (1: repo and rev follow; 2: put the
# files in a scratch cache; 4: write refs/REV) | [repo 0xFF rev 0xFF] | header lines 0xFF | JSON
H=$C/fuzz_hub
python3 - "$ROOT" "$H" <<'PY'
import hashlib, json, os, sys
root, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "tests"))
import mock_hub
data = os.path.join(root, "tests/data/tiny-a/hf")
for n in os.listdir(data):
    mock_hub.FILES[n] = open(os.path.join(data, n), "rb").read()
def seed(name, flags, body, headers=b"", repo_rev=None):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([flags]))
        if repo_rev:
            f.write(repo_rev[0].encode() + b"\xff" + repo_rev[1].encode() + b"\xff")
        f.write(headers + b"\xff" + (body if isinstance(body, bytes) else json.dumps(body).encode()))
tiny = mock_hub.listing("test/tiny")
cfg = mock_hub.FILES["config.json"]
shard = mock_hub.FILES["model-00001-of-00002.safetensors"]
sha = hashlib.sha256(shard).hexdigest()
hdr = ("HTTP/1.1 302 Found\r\nX-Linked-Etag: \"%s\"\r\nX-Linked-Size: %d\r\nX-Repo-Commit: %s\r\n"
       "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-%d/%d\r\nETag: W/\"%s\"\r\nX-Error-Code: EntryNotFound\r\n"
       % (sha, len(shard), tiny["sha"], len(shard) - 1, len(shard), mock_hub.git_blob_sha1(cfg))).replace("\r\n", "\n")
seed("tiny", 2, tiny, hdr.encode())
seed("tiny-ref", 7, mock_hub.listing("google/gemma-4-E2B-it"), b"HTTP/2 200\nETag: \"x\"", ("google/gemma-4-E2B-it", "refs/pr/1"))
seed("evil", 2, mock_hub.listing("test/evil"))
small = {"sha": "0123456789abcdef0123456789abcdef01234567", "siblings": [
    {"rfilename": "a.txt", "blobId": mock_hub.git_blob_sha1(b"\0" * 5), "size": 5},
    {"rfilename": "sub/dir/b.bin", "blobId": "1" * 40, "size": 300, "lfs": {"sha256": "2" * 64, "size": 7}},
    {"rfilename": "sub/c", "size": 3},
    {"rfilename": "a.txt", "blobId": "3" * 40, "size": 1},
    {"rfilename": "big", "blobId": "4" * 40, "size": 1e12}]}
seed("small", 6, small, b"HTTP/1.1 200 OK\nX-Linked-Size: 7\nX-Repo-Commit: 0123456789abcdef0123456789abcdef01234567")
seed("bad-hash", 2, {"sha": "0" * 40, "siblings": [{"rfilename": "x", "blobId": "../../x" + "0" * 33}]})
PY
# audio: the golden's short WAV and a tone in every format (tests/data/audio/README.md)
cp "$ROOT/tests/data/tiny-mm-a/short.wav" "$C/fuzz_audio/short.wav"
for f in "$ROOT"/tests/data/audio/tone*; do cp "$f" "$C/fuzz_audio/$(basename "$f")"; done

# video: the golden WebM, a short MP4 with a sound track, a refused size, an MP4's first 3000 bytes
V=$ROOT/tests/data/tiny-video-a
cp "$V/clip1.webm" "$V/short_av.mp4" "$V/wide.mp4" "$C/fuzz_video/"
head -c 3000 "$V/clip0.mp4" > "$C/fuzz_video/clip0-head.mp4"

echo "seeds: $(find "$C" -type f | wc -l) files, $(du -sk "$C" | cut -f1) KB"
