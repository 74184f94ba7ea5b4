#!/usr/bin/env bash
# CLI: `loupe export` on runs of loupe synth's model traced here: one-line errors, then the npz
# checked independently (Python's zipfile and a hand parse of every .npy header, values against
# the database's own blobs; numpy.load too when numpy is there) and the safetensors read back by
# loupe's own reader (`loupe inspect`).
source "$(dirname "$0")/cli_lib.sh"

SYN="$TMP/synth"
DB="$TMP/t.db"
PROMPT="the cat sat on the mat . the cat sat on the mat ."
if ! "$LOUPE" synth "$SYN/model" >/dev/null 2>"$TMP/synth.err" ||
   ! "$LOUPE" trace "$SYN/model" --prompt "$PROMPT" --db "$DB" --layers 0 --heads 1,3 >/dev/null 2>"$TMP/t1.err" ||
   ! "$LOUPE" trace "$SYN/model" --prompt "$PROMPT" --db "$DB" --logits full >/dev/null 2>"$TMP/t2.err"; then
  echo "FAIL: loupe synth + trace: $(head -c 300 "$TMP/synth.err" "$TMP/t1.err" "$TMP/t2.err")" >&2
  exit 1
fi

# bad usage or input: exit 2, one line, no file left
expect_one_line_error "$LOUPE" export
expect_one_line_error "$LOUPE" export "$DB"
expect_one_line_error "$LOUPE" export "$DB" -o "$TMP/x.txt"
expect_one_line_error "$LOUPE" export "$TMP/none.db" -o "$TMP/x.npz"
expect_one_line_error "$LOUPE" export "$DB" --run 99 -o "$TMP/x.npz"
expect_one_line_error "$LOUPE" export "$DB" -o "$TMP/no/such/dir/x.npz"
if [ ! -e "$TMP/x.npz" ] && [ ! -e "$TMP/x.txt" ]; then ok; else bad "a failed export left a file"; fi
expect_stdout_contains "-o, --output FILE" "$LOUPE" help export

# the default run is the latest trace (run 2, every head, 15 tokens): attention as one tensor,
# 12 statistics, tokens, 3 prediction tables, logits
expect_stdout_contains "run 2, 18 tensors (attention as one tensor)" "$LOUPE" export "$DB" -o "$TMP/r2.safetensors"
expect_status 0 "$LOUPE" export "$DB" -o "$TMP/r2.npz"
expect_status 0 "$LOUPE" export "$DB" --run 1 -o "$TMP/r1.npz"
expect_stdout_contains "[2, 8, 15, 15]" "$LOUPE" inspect "$TMP/r2.safetensors"
expect_stdout_contains "logits" "$LOUPE" inspect "$TMP/r2.safetensors"

if ! command -v python3 >/dev/null 2>&1; then
  echo "note: python3 not found: the independent npz check is skipped"
  finish
  exit $?
fi
python3 - "$TMP/r2.npz" "$TMP/r1.npz" "$DB" <<'EOF' >"$TMP/py.out" 2>&1
import ast, json, sqlite3, struct, sys, zipfile
r2, r1, db_path = sys.argv[1:4]
db = sqlite3.connect(db_path)
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)

def members(path):
    z = zipfile.ZipFile(path)
    check(z.testzip() is None, path + ": a member's CRC is wrong")
    out = {}
    for info in z.infolist():
        check(info.compress_type == zipfile.ZIP_STORED, info.filename + " is not stored")
        data = z.read(info)
        if not info.filename.endswith(".npy"):
            out[info.filename] = data
            continue
        check(data[:8] == b"\x93NUMPY\x01\x00", info.filename + ": not npy 1.0")
        hlen = struct.unpack("<H", data[8:10])[0]
        check((10 + hlen) % 64 == 0, info.filename + ": data not 64-aligned")
        header = ast.literal_eval(data[10:10 + hlen].decode("latin1"))
        size = {"<f2": 2, "<f4": 4, "<f8": 8, "<i4": 4}[header["descr"]]
        n = 1
        for d in header["shape"]:
            n *= d
        check(len(data) == 10 + hlen + n * size, info.filename + ": data length")
        out[info.filename[:-4]] = (header, data[10 + hlen:])
    return out

m2 = members(r2)
T = db.execute("SELECT n_tokens FROM runs WHERE id = 2").fetchone()[0]
h, data = m2["attention"]
check(h["shape"] == (2, 8, T, T) and h["descr"] == "<f2", "attention header %r" % (h,))
blob = db.execute("SELECT probs FROM attention WHERE run_id = 2 AND layer = 1 AND head = 5").fetchone()[0]
map_bytes = T * T * 2
check(data[(1 * 8 + 5) * map_bytes:(1 * 8 + 6) * map_bytes] == blob, "attention[1, 5] is not the stored map")
ids = [r[0] for r in db.execute("SELECT token_id FROM tokens WHERE run_id = 2 ORDER BY pos")]
check(list(struct.unpack("<%di" % len(ids), m2["tokens"][1])) == ids, "tokens are not the run's ids")
logit0 = db.execute("SELECT data FROM logits WHERE run_id = 2 AND pos = 0").fetchone()[0]
check(m2["logits"][0]["shape"] == (T, len(logit0) // 4) and m2["logits"][1][:len(logit0)] == logit0, "logits row 0")
meta = json.loads(m2["metadata.json"])
check(meta["id"] == "2" and meta["maps_dtype"] == "f16" and len(json.loads(meta["tokens"])) == T, "metadata %r" % list(meta)[:5])
m1 = members(r1)
check(sorted(k for k in m1 if k.startswith("attention")) == ["attention.layer_0.head_1", "attention.layer_0.head_3"], "run 1's per-head names: %r" % sorted(m1))
try:
    import numpy as np
    z = np.load(r2)
    check(z["attention"].shape == (2, 8, T, T) and bytes(z["attention"][1, 5].tobytes()) == blob, "numpy.load: attention")
    check(z["head_stats.entropy"].shape == (2, 8) and z["predictions.prob"].shape[0] == T, "numpy.load: tables")
    print("numpy", np.__version__, "read it")
except ImportError:
    print("numpy not installed: numpy.load not tried")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
EOF
status=$?
cat "$TMP/py.out"
if [ "$status" -eq 0 ]; then ok; else bad "the npz check failed"; fi
finish
