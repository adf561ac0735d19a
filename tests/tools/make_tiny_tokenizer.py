#!/usr/bin/env python3
"""Writes tests/data/chat/tiny_tokenizer: a byte-level BPE tokenizer in HF's tokenizer.json form,
small enough for the tiny test models (512 ids: 256 bytes, 240 merges learnt here from a few
sentences, 8 special tokens from 500 on), with a ChatML chat template of our own. The regex and
the pieces are the ones Llama 3 and Qwen use, so the end-to-end tests exercise the same code
paths as the real tokenizers do. Deterministic: rerunning it gives the same files.

    python3 tests/tools/make_tiny_tokenizer.py tests/data/chat/tiny_tokenizer
"""
import collections, json, os, re, sys

SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>"]
SPECIAL_FLAGS = [True, True, True, True, False, False, False, False]
MERGES = 240
CORPUS = """The quick brown fox jumps over the lazy dog. What is the capital of France? The capital of France is Paris.
You are a helpful assistant. Please answer the question in one sentence. Thank you, that is very helpful!
def add(a, b):\n    return a + b\nprint(add(2, 3))\nHello there, how are you today? I am fine, thanks for asking.
The weather is sunny and warm; it will rain tomorrow. Numbers: 12, 345, 6789 and 2024-07-26."""

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))

def main(out):
    b2u = bytes_to_unicode()
    # Training splits approximate the regex with Python's re (no \p classes): merges learnt from
    # them are still merges of the real tokenizer, which is all that matters here.
    words = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    counts = collections.Counter("".join(b2u[b] for b in w.encode()) for w in words)
    vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u))}
    seqs = {w: list(w) for w in counts}
    merges = []
    while len(merges) < MERGES:
        pairs = collections.Counter()
        for w, c in counts.items():
            s = seqs[w]
            for i in range(len(s) - 1):
                pairs[(s[i], s[i + 1])] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        vocab["".join(best)] = len(vocab)
        for w in seqs:
            s, t, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    t.append(s[i] + s[i + 1])
                    i += 2
                else:
                    t.append(s[i])
                    i += 1
            seqs[w] = t
    assert len(vocab) <= 500, len(vocab)
    added = [{"id": 500 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": SPECIAL_FLAGS[i]} for i, t in enumerate(SPECIALS)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [500],
                                                                    "tokens": ["<|begin_of_text|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    # ChatML turns; the reply's end token right after its content, reasoning in <think> when given.
    template = (
        "{{- bos_token }}"
        "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['role'] == 'assistant' and message.get('reasoning_content') %}"
        "{{- '<think>\\n' + message['reasoning_content'].strip() + '\\n</think>\\n\\n' }}"
        "{%- endif %}"
        "{%- if message['content'] is string %}{{- message['content'] | trim }}{%- endif %}"
        "{%- if message.get('tool_calls') %}{%- for call in message['tool_calls'] %}"
        "{{- '<tool_call>' + (call['function'] | tojson) + '</tool_call>' }}{%- endfor %}{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>", "add_bos_token": True,
              "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/chat/tiny_tokenizer")
