#!/usr/bin/env python3
# Chat-length conversations for the GPU runs of issue 19: OpenAI messages and ShareGPT lines
# whose text is cut from the tokenizer corpus (many scripts, code, emoji), with a system prompt
# now and then, 1 to 4 exchanges, and replies longer than questions, as chat datasets have.
#   make_chat_data.py CORPUS.jsonl OUT.jsonl N [SEED]
import json, random, sys

corpus, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 19)
texts = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8") if l.strip()]
texts = [t for t in texts if 0 < len(t) < 2000]  # leave out the 10,000-character stress words
words = [w for t in texts for w in t.split(" ") if w]

def passage(mean_chars):
    target = max(8, int(rng.lognormvariate(0, 0.6) * mean_chars))
    parts, size = [], 0
    while size < target:
        if rng.random() < 0.3:
            t = rng.choice(texts)
        else:
            k = rng.randint(5, 40)
            i = rng.randrange(len(words))
            t = " ".join(words[i:i + k])
        parts.append(t)
        size += len(t) + 1
    return " ".join(parts)

with open(out, "w", encoding="utf-8") as f:
    for i in range(n):
        turns = []
        if rng.random() < 0.4:
            turns.append(("system", passage(100)))
        for _ in range(rng.randint(1, 4)):
            turns.append(("user", passage(150)))
            turns.append(("assistant", passage(400)))
        if i % 2:
            line = {"id": f"conv{i}", "messages": [{"role": r, "content": c} for r, c in turns]}
        else:
            sharegpt = {"system": "system", "user": "human", "assistant": "gpt"}
            line = {"id": f"conv{i}", "conversations": [{"from": sharegpt[r], "value": c} for r, c in turns]}
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
