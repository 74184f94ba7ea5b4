// A trace database of the size the viewer must open (for the measured figures in the report and
// render's README; no test runs it): T tokens, L layers x H heads, maps stored for the first
// STORED layers as `loupe trace --layers 0-(STORED-1)` would (2048 x 22 x 32 with 11 layers is
// 352 maps, 2.9 GB: what trace's default --max-map-bytes 4GiB allows), head statistics for every
// head. The maps are causal rows mixing a sink, the previous token, a local window and a
// per-head pattern, in f16 as the store keeps them. Built through the sqlite3 shell.
//   node scale_db.js OUT.db SCHEMA.sql [T L H STORED]
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');

const [out, schema] = process.argv.slice(2, 4);
const [T, L, H, STORED] = (process.argv.slice(4, 8).length === 4 ? process.argv.slice(4, 8) : [2048, 22, 32, 11]).map(Number);
if (!out || !schema) {
  console.error('usage: node scale_db.js OUT.db SCHEMA.sql [T L H STORED]');
  process.exit(2);
}

function f16(v) { // positive normal numbers and 0, round to nearest
  if (v === 0) return 0;
  let e = Math.floor(Math.log2(v)), m = Math.round((v / Math.pow(2, e) - 1) * 1024);
  if (m === 1024) { m = 0; e++; }
  return e < -14 ? 0 : ((e + 15) << 10) | m;
}

// Row i of head (l, h): weights on key 0, i - 1, the last `w` keys and every `stride`-th key.
function mapHex(l, h) {
  const buf = Buffer.alloc(T * T * 2), w = 4 + ((l * H + h) % 12), stride = 2 + (h % 7);
  const row = new Float64Array(T);
  for (let i = 0; i < T; i++) {
    row.fill(0, 0, i + 1);
    row[0] += 1 + (h % 3);
    if (i > 0) row[i - 1] += 2 + (l % 4);
    for (let k = Math.max(0, i - w); k <= i; k++) row[k] += 0.5;
    for (let k = i % stride; k <= i; k += stride) row[k] += 0.05;
    let sum = 0;
    for (let k = 0; k <= i; k++) sum += row[k];
    for (let k = 0; k <= i; k++) buf.writeUInt16LE(f16(row[k] / sum), 2 * (i * T + k));
  }
  return buf.toString('hex');
}

async function main() {
  for (const f of [out, out + '-wal', out + '-shm']) fs.rmSync(f, { force: true });
  const sqlite = spawn('sqlite3', [out], { stdio: ['pipe', 'inherit', 'inherit'] });
  const write = (text) => new Promise((ok) => (sqlite.stdin.write(text) ? ok() : sqlite.stdin.once('drain', ok)));
  await write(fs.readFileSync(schema, 'utf8') + 'BEGIN;\n');
  await write("INSERT INTO runs (id, status, kind, model_path, model_format, architecture, n_tokens, n_layers, n_heads, " +
    "n_threads, isa, loupe_version, maps_dtype, started_at) VALUES (1, 'complete', 'trace', '/models/scale-" + T + "x" + L +
    "x" + H + "', 'safetensors', 'llama', " + T + ', ' + L + ', ' + H + ", 2, 'avx2', '0.1.0', 'f16', 'now');\n");
  for (let i = 0; i < T; i++) await write('INSERT INTO tokens (run_id, pos, token_id, piece, label) VALUES (1, ' + i + ', ' + (100 + i) + ", ' tok" + i + "', NULL);\n");
  for (let l = 0; l < L; l++) {
    for (let h = 0; h < H; h++) {
      await write('INSERT INTO head_stats (run_id, layer, head, entropy, max_prob, sink, prev_token, self, distance, local_frac, local_window, output_norm) VALUES (1, ' + l + ', ' + h + ', ' + (1 + (l * H + h) % 5) + ', 0.5, ' +
        ((h % 3) / 3) + ', 0.2, 0.1, ' + (5 + h) + ', 0.4, 8, 1.0);\n');
      if (l < STORED) await write('INSERT INTO attention VALUES (1, ' + l + ', ' + h + ', ' + T + ', ' + T + ", 'f16', X'" + mapHex(l, h) + "');\n");
    }
    process.stderr.write('layer ' + l + ' done\r');
  }
  await write('COMMIT;\n');
  sqlite.stdin.end();
  await new Promise((ok) => sqlite.on('close', ok));
  console.log(out + ': ' + T + ' tokens, ' + L + ' x ' + H + ' heads, ' + STORED * H + ' maps, ' + fs.statSync(out).size + ' bytes');
}

main();
