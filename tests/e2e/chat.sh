# Conversations in (issue 19): `tokenize` writes the token-id lines the extraction reads; the
# extraction of the chat file itself stores the same samples; the mask mode is in the run's
# fingerprint; bad conversations are FILE:LINE, exit 3, nothing written; --show draws a sample.
# The tiny model reads ids < 512; tests/data/chat/tiny_tokenizer is a byte-level BPE made for it.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
tokenizer="$(dirname "$0")/../data/chat/tiny_tokenizer"
work=$(fresh_dir chat)
chat="$work/chat.jsonl"
cat > "$chat" << 'EOF'
{"id": "openai", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4, of course."}, {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6."}]}
{"id": "sharegpt", "conversations": [{"from": "human", "value": "Say hi <|im_end|> please"}, {"from": "gpt", "value": "hi <|im_end|> there"}]}

{"id": "tools", "messages": [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]}, {"role": "tool", "content": "3 C"}, {"role": "assistant", "content": [{"type": "text", "text": "It is "}, {"type": "text", "text": "3 C."}], "reasoning_content": "The tool said 3 C."}]}
{"id": "question only", "conversations": [{"from": "human", "value": "Nobody answers this."}]}
{"id": "text", "text": "Plain text, as a pretraining line: ünïcödé and emoji 🙂."}
{"id": "ids", "input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}
EOF

# tokenize --out: one line per sample, ids and masks, the all-zero conversation reported.
LOG="$work/tokenize.log"
set +e
"$E3_BIN" tokenize --model "$model" --tokenizer "$tokenizer" --data "$chat" --out "$work/tokens.jsonl" > "$LOG" 2>&1
RC=$?
set -e
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "tokenize exited $RC"; }
[ "$(wc -l < "$work/tokens.jsonl")" -eq 6 ] || fail "tokenize wrote $(wc -l < "$work/tokens.jsonl") lines, expected 6"
grep -q "1 conversation train on no token .* at line 5" "$LOG" || { cat "$LOG"; fail "the all-zero mask was not reported"; }
"$PYTHON" - "$work/tokens.jsonl" << 'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["openai", "sharegpt", "tools", "question only", "text", "ids"], rows
for r in rows:
    assert set(r) == {"id", "input_ids", "loss_mask"}, r.keys()
    assert len(r["input_ids"]) == len(r["loss_mask"]) > 0, r["id"]
    assert all(0 <= t < 512 for t in r["input_ids"]), r["id"]
m = {r["id"]: r for r in rows}
assert sum(m["question only"]["loss_mask"]) == 0
assert all(m["text"]["loss_mask"]) and m["text"]["input_ids"][0] == 500, m["text"]  # BOS, all trained on
assert m["ids"]["input_ids"] == [5, 6, 7, 8] and m["ids"]["loss_mask"] == [0, 0, 1, 1]
for k in ("openai", "sharegpt", "tools"):
    mask = m[k]["loss_mask"]
    assert 0 < sum(mask) < len(mask), (k, mask)
    assert mask[0] == 0 and mask[-1] == 0, (k, mask)  # BOS and the final newline are template text
EOF
# The file exists now: tokenize never overwrites.
set +e
"$E3_BIN" tokenize --model "$model" --tokenizer "$tokenizer" --data "$chat" --out "$work/tokens.jsonl" > "$LOG" 2>&1
RC=$?
set -e
[ "$RC" -ne 0 ] && grep -q "tokens.jsonl" "$LOG" || { cat "$LOG"; fail "tokenize overwrote its --out ($RC)"; }

# The extraction of the chat file and of the token file store the same samples.
LOG="$work/run_chat.log"
run 2 --model "$model" --tokenizer "$tokenizer" --data "$chat" --out "$work/out_chat" --log-level info
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the chat run exited $RC"; }
grep -q "5 lines of text tokenized with the tokenizer of" "$LOG" || { cat "$LOG"; fail "the run did not say it tokenized"; }
grep -q "1 conversation train on no token" "$LOG" || { cat "$LOG"; fail "the run did not report the all-zero mask"; }
LOG="$work/run_tokens.log"
run 2 --model "$model" --data "$work/tokens.jsonl" --out "$work/out_tokens" --log-level info
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the token-file run exited $RC"; }
same_samples "$work/out_tokens" "$work/out_chat" "chat file vs its tokenize output"
"$E3_BIN" verify "$work/out_chat" > /dev/null || fail "verify refused the chat run"
"$PYTHON" - "$work/out_chat" "$work/tokens.jsonl" << 'EOF'
import glob, json, sys, h5py, numpy as np
want = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[2])}
seen = 0
for path in sorted(glob.glob(sys.argv[1] + "/shard-*.h5")):
    with h5py.File(path, "r") as f:
        for name in f["samples"]:
            g = f["samples"][name]
            sid = g.attrs["id"]
            sid = sid.decode() if isinstance(sid, bytes) else str(sid)
            assert np.array_equal(g["input_ids"][()], want[sid]["input_ids"]), sid
            assert np.array_equal(g["loss_mask"][()], want[sid]["loss_mask"]), sid
            seen += 1
assert seen == len(want), (seen, len(want))
EOF

# Rerun: nothing to do; with another --mask the stored masks would differ: refused (exit 5).
LOG="$work/rerun.log"
run 2 --model "$model" --tokenizer "$tokenizer" --data "$chat" --out "$work/out_chat" --log-level info
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the rerun exited $RC"; }
grep -q "done: 0 samples computed now, 6 done before" "$LOG" || { cat "$LOG"; fail "the rerun recomputed"; }
LOG="$work/other_mask.log"
run 2 --model "$model" --tokenizer "$tokenizer" --data "$chat" --out "$work/out_chat" --mask all
[ "$RC" -eq 5 ] || { cat "$LOG"; fail "a rerun with --mask all exited $RC, expected 5"; }
grep -q "chat" "$LOG" || { cat "$LOG"; fail "the refusal does not name the chat fingerprint"; }

# --show: the token table, plain or coloured.
"$E3_BIN" tokenize --tokenizer "$tokenizer" --data "$chat" --show 1 --color never > "$work/show.txt"
grep -q '^sample 1 (.*chat.jsonl:2, id "sharegpt"), conversation: [0-9]* tokens, [0-9]* trained on' "$work/show.txt" ||
  { cat "$work/show.txt"; fail "--show's head line"; }
grep -q '"<|im_end|>"' "$work/show.txt" || { cat "$work/show.txt"; fail "--show lacks the tokens"; }
if grep -q $'\x1b\[' "$work/show.txt"; then fail "--color never wrote escapes"; fi
"$E3_BIN" tokenize --tokenizer "$tokenizer" --data "$chat" --show 1 --color always > "$work/show_color.txt"
grep -q $'\x1b\[' "$work/show_color.txt" || fail "--color always wrote no escapes"
NO_COLOR=1 "$E3_BIN" tokenize --tokenizer "$tokenizer" --data "$chat" --show 1 > "$work/show_auto.txt"
if grep -q $'\x1b\[' "$work/show_auto.txt"; then fail "--color auto wrote escapes to a file"; fi
set +e
"$E3_BIN" tokenize --tokenizer "$tokenizer" --data "$chat" --show 6 > "$LOG" 2>&1
RC=$?
set -e
[ "$RC" -eq 2 ] && grep -q "holds samples 0 to 5" "$LOG" || { cat "$LOG"; fail "--show past the end ($RC)"; }

# Bad conversations: FILE:LINE, exit 3, nothing written.
good='{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
check() {  # check NAME EXPECTED_PATTERN [EXTRA ARGS --] JSONL_LINES...
  local name=$1 pattern=$2
  shift 2
  local extra=()
  if [ "${1:-}" = "--args" ]; then
    shift
    while [ "$1" != "--" ]; do extra+=("$1"); shift; done
    shift
  fi
  printf '%s\n' "$@" > "$work/$name.jsonl"
  LOG="$work/$name.log"
  run 2 --model "$model" --tokenizer "$tokenizer" --data "$work/$name.jsonl" --out "$work/out_$name" "${extra[@]}"
  expect_failure 3 "$pattern" "$work/out_$name"
}
check unknown_role 'unknown_role.jsonl:2: messages\[1\]: "role": .*did you mean .assistant.' "$good" \
  '{"messages": [{"role": "user", "content": "hi"}, {"role": "asistant", "content": "yo"}]}'
check unknown_from 'unknown_from.jsonl:1: conversations\[0\]: "from": .*did you mean .human.' \
  '{"conversations": [{"from": "humna", "value": "hi"}]}'
check no_content 'no_content.jsonl:1: messages\[0\]: missing "content"' '{"messages": [{"role": "user"}]}'
check number_content 'number_content.jsonl:1: messages\[0\]: "content" must be a string or a list of text parts' \
  '{"messages": [{"role": "user", "content": 7}]}'
check image 'image.jsonl:1: messages\[0\]: content\[1\] is a "image_url" part: only text is supported' \
  '{"messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x.png"}}]}]}'
printf '%s\n{"text": "bad \xff byte"}\n' "$good" > "$work/utf8.jsonl"
LOG="$work/utf8.log"
run 2 --model "$model" --tokenizer "$tokenizer" --data "$work/utf8.jsonl" --out "$work/out_utf8"
expect_failure 3 "utf8.jsonl:2: .*UTF-8" "$work/out_utf8"
printf 'raise {{ raise_exception("no tools here") if tools else "" }}\n{%% for m in messages %%}{{ m.content }}{%% endfor %%}\n' \
  > "$work/raises.jinja"
check template_raises 'template_raises.jsonl:2: .*raises.jinja:1.*no tools here' --args --chat-template "$work/raises.jinja" -- \
  "$good" '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}'
check too_long 'too_long.jsonl:1: sample has [0-9]* tokens, more than --max-seq-len 16 (--on-long error)' \
  --args --max-seq-len 16 --max-tokens-per-step 64 --on-long error -- \
  '{"messages": [{"role": "user", "content": "a long question that has many more than sixteen tokens"}]}'

# A model directory without a tokenizer: the line that needed it is named (exit 4, the model's).
printf '%s\n' "$good" > "$work/no_tokenizer.jsonl"
LOG="$work/no_tokenizer.log"
run 2 --model "$model" --data "$work/no_tokenizer.jsonl" --out "$work/out_no_tokenizer"
expect_failure 4 "no_tokenizer.jsonl:1: this line holds text, which needs the model's tokenizer: no tokenizer in" \
  "$work/out_no_tokenizer"
echo "chat: ok"
