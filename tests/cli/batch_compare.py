# Compare the runs of datasets against a base dataset of the same prompts, prompt by prompt:
# tokens equal, and the largest |difference| of full logits, f32 maps and head statistics.
# Usage: batch_compare.py DB BASE DATASET... (one line per dataset). Used by cli_dataset.sh.
import sqlite3, struct, sys
db = sqlite3.connect(sys.argv[1])
def runs(ds): return dict(db.execute("select prompt_index, id from runs where dataset=?", (ds,)).fetchall())
base = runs(sys.argv[2])
for ds in sys.argv[3:]:
    other = runs(ds); dl = dp = ds_ = 0.0; tok_ok = True
    for pi, a in base.items():
        b = other[pi]
        ta = db.execute("select token_id from tokens where run_id=? order by pos", (a,)).fetchall()
        tb = db.execute("select token_id from tokens where run_id=? order by pos", (b,)).fetchall()
        tok_ok &= ta == tb
        for (pa, x), (pb, y) in zip(db.execute("select pos, data from logits where run_id=? order by pos", (a,)).fetchall(),
                                    db.execute("select pos, data from logits where run_id=? order by pos", (b,)).fetchall()):
            xs = struct.unpack('<%df' % (len(x)//4), x); ys = struct.unpack('<%df' % (len(y)//4), y)
            dl = max(dl, max(abs(u-v) for u, v in zip(xs, ys)))
        for (x,), (y,) in zip(db.execute("select probs from attention where run_id=? order by layer, head", (a,)).fetchall(),
                              db.execute("select probs from attention where run_id=? order by layer, head", (b,)).fetchall()):
            xs = struct.unpack('<%df' % (len(x)//4), x); ys = struct.unpack('<%df' % (len(y)//4), y)
            assert len(xs) == len(ys)
            dp = max(dp, max(abs(u-v) for u, v in zip(xs, ys)))
        for ra, rb in zip(db.execute("select entropy, max_prob, sink, prev_token, self, distance, local_frac, output_norm from head_stats where run_id=? order by layer, head", (a,)).fetchall(),
                          db.execute("select entropy, max_prob, sink, prev_token, self, distance, local_frac, output_norm from head_stats where run_id=? order by layer, head", (b,)).fetchall()):
            ds_ = max(ds_, max(abs(u-v) for u, v in zip(ra, rb)))
    print(ds, "tokens", tok_ok, "logits %.2e maps %.2e stats %.2e" % (dl, dp, ds_))
