#!/usr/bin/env python3
"""Write small valid GGUF v3 files for the CLI tests: mkgguf.py KIND OUT.gguf.

KIND: arch_only (general.architecture = llama, llama.block_count only, one tensor), no_arch (no
general.architecture, one tensor), vocab_only (a SentencePiece llama vocabulary, no
hyperparameters, no tensors), vocab_bpe (a byte-level gpt2 vocabulary, no tensors)."""
import struct
import sys

STR, ARR, U32, F32, I32 = 8, 9, 4, 6, 5


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    out = s(key) + struct.pack("<I", typ)
    if typ == STR:
        return out + s(val)
    if typ == U32:
        return out + struct.pack("<I", val)
    etyp, items = val
    out += struct.pack("<IQ", etyp, len(items))
    for it in items:
        out += s(it) if etyp == STR else struct.pack("<f" if etyp == F32 else "<i", it)
    return out


def spm_vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    toks += ["\u2581", "h", "i", "\u2581h", "hi", "\u2581hi"]
    scores = [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -0.5]
    types = [2, 3, 3] + [6] * 256 + [1] * 6
    return [kv("general.architecture", STR, "llama"), kv("tokenizer.ggml.model", STR, "llama"),
            kv("tokenizer.ggml.tokens", ARR, (STR, toks)),
            kv("tokenizer.ggml.scores", ARR, (F32, scores)),
            kv("tokenizer.ggml.token_type", ARR, (I32, types)),
            kv("tokenizer.ggml.bos_token_id", U32, 1), kv("tokenizer.ggml.eos_token_id", U32, 2)]


def bpe_vocab():
    """Byte-level BPE; then a user-defined token (type 4) 'À' as DeepSeek-Coder has (ids
    32000-32012), whose text is not byte-level, and a control token."""
    alphabet = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["\u0120"]
    toks = alphabet + ["\u0120h", "hi", "\u0120hi", "\u00c0", "<|EOT|>"]
    types = [1] * (len(toks) - 2) + [4, 3]
    merges = ["\u0120 h", "h i", "\u0120h i"]
    return [kv("general.architecture", STR, "gpt2"), kv("tokenizer.ggml.model", STR, "gpt2"),
            kv("tokenizer.ggml.pre", STR, "gpt-2"),
            kv("tokenizer.ggml.tokens", ARR, (STR, toks)),
            kv("tokenizer.ggml.token_type", ARR, (I32, types)),
            kv("tokenizer.ggml.merges", ARR, (STR, merges))]


def write(path, kvs, tensors):
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    data = b""
    for name, n in tensors:
        head += s(name) + struct.pack("<IQIQ", 1, n, 0, len(data))
        data += struct.pack("<%df" % n, *[0.5 * i for i in range(n)])
        data += b"\0" * (-len(data) % 32)
    head += b"\0" * (-len(head) % 32)
    with open(path, "wb") as f:
        f.write(head + data)


kind, out = sys.argv[1], sys.argv[2]
if kind == "arch_only":
    write(out, [kv("general.architecture", STR, "llama"), kv("llama.block_count", U32, 2)],
          [("token_embd.weight", 8)])
elif kind == "no_arch":
    write(out, [kv("general.name", STR, "bare")], [("token_embd.weight", 8)])
elif kind == "vocab_only":
    write(out, spm_vocab(), [])
elif kind == "vocab_bpe":
    write(out, bpe_vocab(), [])
else:
    sys.exit("unknown kind " + kind)
