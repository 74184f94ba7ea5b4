#!/usr/bin/env python3
"""Cut a byte-level BPE vocabulary down to what llama.cpp's suite strings can reach, ids kept.

    reduce_vocab.py SOURCE SUITE.inp [SUITE.inp ...] > OUT.json
    reduce_vocab.py --pre NAME FILE.tiktoken SUITE.inp [...] > OUT.json

SOURCE is a GGUF vocabulary (tokenizer.ggml.model "gpt2", as llama.cpp's models/ggml-vocab-*.gguf)
or a Hugging Face tokenizer.json with a byte-level BPE model, or a tiktoken file (base64 token and
rank a line), whose ranks fix byte-level BPE: the token of rank r is made by every split of it
into two tokens, those merges ranked by r, then by the ranks of the two halves (as Hugging Face
converts tiktoken files); NAME is the tokenizer.ggml.pre to write. Kept: every token that is not a
plain one (GGUF types 2-6, tokenizer.json added_tokens), every one-character token (the byte
alphabet), every token whose string occurs in the byte-level form of a suite string (also after
NFC when the tokenizer.json normalizes so), and every merge whose result so occurs, in the
original order.

Why this gives the very ids of the full vocabulary on those strings: BPE pieces never span
pre-tokens, and a pre-token's byte-level form is a substring of its string's, so every merge
that fires there makes such a substring and is kept. With a subset of the merges that holds all
those that fire, the lowest-ranked applicable merge at each step is the same one, so the same
merges fire in the same order. A pre-token taken whole from the vocabulary (ignore_merges) is a
substring too, so it is kept exactly when the full vocabulary has it. test_tokenizer checks the
claim: with LOUPE_VOCAB_FULL naming a folder of the full files it runs each suite on both.

Output: for a tokenizer.json, the same file with model.vocab and model.merges cut (normalizer,
pre_tokenizer, decoder, added_tokens unchanged); for a GGUF, {"source", "n_tokens", "kv": the
scalar tokenizer.ggml.* keys, "tokens": [[id, string, type], ...], "merges": [...]}, which the
test writes back as a GGUF with the missing ids as unused tokens. Python 3 standard library only.
"""
import base64
import json
import struct
import sys
import unicodedata


def byte_alphabet():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest from U+0100."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


BYTE_CHARS = byte_alphabet()


def byte_level(text):
    return "".join(BYTE_CHARS[b] for b in text.encode("utf-8"))


def suite_strings(paths):
    cases = []
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            cases += f.read().split("\n__ggml_vocab_test__\n")[:-1]
    return cases


# ---- GGUF ----
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        (v,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            item_type, n = take("<I"), take("<Q")
            return [value(item_type) for _ in range(n)]
        return take(SCALARS[t])

    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 8
    take("<Q")  # tensors: a vocabulary file has none worth reading
    kv, types = {}, {}
    for _ in range(take("<Q")):
        key = string()
        t = take("<I")
        kv[key], types[key] = value(t), t
    return kv, types


def reduce_gguf(path, texts):
    kv, types = read_gguf(path)
    if kv.get("tokenizer.ggml.model") != "gpt2":
        sys.exit(f"{path}: tokenizer.ggml.model is not gpt2")
    tokens = kv["tokenizer.ggml.tokens"]
    token_types = kv.get("tokenizer.ggml.token_type", [1] * len(tokens))
    hay = "\0".join(texts)
    kept = [[i, s, t] for i, (s, t) in enumerate(zip(tokens, token_types))
            if t != 1 or len(s) == 1 or s in hay]
    merges = [m for m in kv["tokenizer.ggml.merges"] if m.replace(" ", "", 1) in hay]
    scalars = {k: v for k, v in kv.items()
               if k.startswith("tokenizer.ggml.") and types[k] != 9}
    return {"source": path.rsplit("/", 1)[-1], "n_tokens": len(tokens), "kv": scalars,
            "tokens": kept, "merges": merges}


# ---- tiktoken ----
def reduce_tiktoken(path, pre, texts):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)

    def piece(b):
        return "".join(BYTE_CHARS[x] for x in b)

    hay = "\0".join(texts)
    kept = sorted((r, b) for b, r in ranks.items() if len(b) == 1 or piece(b) in hay)
    merges = []
    for r, b in kept:
        splits = [(b[:i], b[i:]) for i in range(1, len(b)) if b[:i] in ranks and b[i:] in ranks]
        splits.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
        merges += [piece(left) + " " + piece(right) for left, right in splits]
    return {"source": path.rsplit("/", 1)[-1], "n_tokens": max(ranks.values()) + 1,
            "kv": {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre},
            "tokens": [[r, piece(b), 1] for r, b in kept], "merges": merges}


# ---- tokenizer.json ----
def normalizes_nfc(node):
    if not node:
        return False
    if node.get("type") == "NFC":
        return True
    return any(normalizes_nfc(n) for n in node.get("normalizers", []))


def reduce_json(path, texts):
    with open(path, encoding="utf-8") as f:
        root = json.load(f)
    model = root["model"]
    if model.get("type", "BPE") != "BPE":
        sys.exit(f"{path}: model is not BPE")
    if normalizes_nfc(root.get("normalizer")):
        texts = texts + [unicodedata.normalize("NFC", t) for t in texts]
    hay = "\0".join(byte_level(t) for t in texts)
    model["vocab"] = {s: i for s, i in model["vocab"].items() if len(s) == 1 or s in hay}

    def joined(m):
        return "".join(m) if isinstance(m, list) else m.replace(" ", "", 1)

    model["merges"] = [m for m in model["merges"] if joined(m) in hay]
    return root


def write_lines(out):
    """The GGUF form with one token or merge a line, so that changes read as diffs."""
    def enc(v):
        return json.dumps(v, ensure_ascii=False)
    w = sys.stdout.write
    w('{"source": %s, "n_tokens": %d,\n "kv": %s,\n "tokens": [\n' %
      (enc(out["source"]), out["n_tokens"], enc(out["kv"])))
    w(",\n".join("  " + enc(t) for t in out["tokens"]))
    w('\n ],\n "merges": [\n')
    w(",\n".join("  " + enc(m) for m in out["merges"]))
    w("\n ]\n}\n")


def main():
    args = sys.argv[1:]
    pre = None
    if args[:1] == ["--pre"] and len(args) > 1:
        pre, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__.split("\n\n")[1])
    source, texts = args[0], suite_strings(args[1:])
    with open(source, "rb") as f:
        is_gguf = f.read(4) == b"GGUF"
    if pre is not None:
        out = reduce_tiktoken(source, pre, [byte_level(t) for t in texts])
        is_gguf = True
    elif is_gguf:
        out = reduce_gguf(source, [byte_level(t) for t in texts])
    else:
        out = reduce_json(source, texts)
    if is_gguf:
        write_lines(out)
    else:
        json.dump(out, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()
