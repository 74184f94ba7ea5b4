// The HTML viewer in headless Chromium (run by run.sh): builds a trace database with planted maps
// and hostile token texts, writes the page with `loupe render --html`, opens it with every network
// request refused, and checks what a person would: pixels at known cells have the colours of the
// stored probabilities, hovering shows the right tokens and probability, the keyboard changes the
// map, the text view draws one line per visible pair, a long map keeps full detail on zoom,
// hostile strings stay text, and the screenshot is not blank. Ends with "N passed, N failed".
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const puppeteer = require('puppeteer-core');

const LOUPE = process.env.LOUPE_BIN;
const SOURCE = process.env.LOUPE_SOURCE;
// Chromium by default; LOUPE_BROWSER=firefox drives Debian's firefox-esr over WebDriver BiDi.
const FIREFOX = process.env.LOUPE_BROWSER === 'firefox';
const BROWSER = FIREFOX ? process.env.LOUPE_FIREFOX || '/usr/bin/firefox-esr'
  : process.env.LOUPE_CHROMIUM || '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let passed = 0, failed = 0;
function check(cond, what) {
  if (cond) passed++;
  else { failed++; console.error('FAIL: ' + what); }
}

/* ---- the database: planted maps, as f16 like `loupe trace` stores them ---------------------- */

// f16 bits of a positive normal number (round to nearest), and back.
function f16bits(v) {
  if (v === 0) return 0;
  let e = Math.floor(Math.log2(v)), m = Math.round((v / Math.pow(2, e) - 1) * 1024);
  if (m === 1024) { m = 0; e++; }
  return ((e + 15) << 10) | m;
}
function f16value(bits) {
  const e = (bits >> 10) & 31, m = bits & 1023;
  return e === 0 ? m * Math.pow(2, -24) : (1 + m / 1024) * Math.pow(2, e - 15);
}

// values[i][j] for j <= i (causal); what the store holds is f16(values).
function causal(n, fn) {
  const rows = [];
  for (let i = 0; i < n; i++) {
    const r = [];
    for (let j = 0; j < n; j++) r.push(j <= i ? f16value(f16bits(fn(i, j))) : 0);
    rows.push(r);
  }
  return rows;
}
function blobHex(rows) {
  const buf = Buffer.alloc(rows.length * rows[0].length * 2);
  let o = 0;
  for (const r of rows) for (const v of r) { buf.writeUInt16LE(f16bits(v), o); o += 2; }
  return buf;
}
const hex = (s) => "CAST(X'" + Buffer.from(s, 'utf8').toString('hex') + "' AS TEXT)";

const PLANTED = [[1], [0.25, 0.75], [0.0625, 0.4375, 0.5], [0.25, 0.25, 0.25, 0.25],
  [0.125, 0.125, 0.25, 0.25, 0.25], [0.5, 0, 0.125, 0.125, 0.125, 0.125]];
const MAPS = {
  '0/0': causal(6, (i, j) => PLANTED[i][j]),
  '0/1': causal(6, (i, j) => (j === Math.max(0, i - 1) ? 1 : 0)),   // previous token
  '0/2': causal(6, (i) => 1 / (i + 1)),                                // uniform
  '1/0': causal(6, (i, j) => (i === j ? 1 : 0)),                       // self
  '1/1': causal(6, (i, j) => (j === 0 ? 1 : 0)),                       // sink
};                                                                     // 1/2: not stored
const TOKENS = ['<s>', '</script><script>window.__pwned=1</script>',
  '<img src=x onerror="window.__pwned=2">', '"q\'&amp;', '\u0001\u001b[31m<!--', 'cat'];
const SHOWN = TOKENS.map((t) => t.replace(/ /g, '\u2423').replace(/[\u0000-\u001f]/g,
  (c) => String.fromCharCode(0x2400 + c.charCodeAt(0))));
const LONG_T = 1500;

function buildDb(dir) {
  const db = path.join(dir, 'viewer.db');
  for (const f of [db, db + '-wal', db + '-shm']) fs.rmSync(f, { force: true });
  let sql = fs.readFileSync(path.join(SOURCE, 'trace/store/schema.sql'), 'utf8');
  sql += "INSERT INTO runs (id, status, kind, model_path, model_format, architecture, n_tokens, " +
    "n_layers, n_heads, n_threads, isa, loupe_version, maps_dtype, started_at) VALUES " +
    "(1, 'complete', 'trace', '/m/" + '<b onmouseover=x>model' + "', 'safetensors', 'llama', 6, 2, 3, 1, " +
    "'ref', '0.1.0', 'f16', 'now'), (2, 'complete', 'trace', '/m/long', 'safetensors', 'llama', " +
    LONG_T + ", 1, 1, 1, 'ref', '0.1.0', 'f16', 'now');\n";
  TOKENS.forEach((t, i) => {
    sql += 'INSERT INTO tokens (run_id, pos, token_id, piece) VALUES (1, ' + i + ', ' + (10 + i) +
      ', ' + hex(t) + ');\n';
  });
  for (const [key, rows] of Object.entries(MAPS)) {
    const [l, h] = key.split('/');
    sql += 'INSERT INTO attention VALUES (1, ' + l + ', ' + h + ', 6, 6, \'f16\', X\'' +
      blobHex(rows).toString('hex') + "');\n";
  }
  for (let l = 0; l < 2; l++) for (let h = 0; h < 3; h++) {
    sql += 'INSERT INTO head_stats (run_id, layer, head, entropy, max_prob, sink, prev_token, self, distance, local_frac, local_window, output_norm) VALUES (1, ' + l + ', ' + h + ', ' + (0.1 * (l * 3 + h)) +
      ', 0.5, ' + (l === 1 && h === 1 ? 1 : 0) + ', 0.25, 0.1, 1.5, 0.9, 8, 2.0);\n';
  }
  sql += "INSERT INTO leak_checks VALUES (1, 'perturbation', 1, 0, 3, 0.0, " +
    hex('<script>window.__pwned=3</script> ok') + ");\n";
  sql += 'INSERT INTO predictions VALUES (1, 2, 0, 7, ' + hex('<i>next</i>') + ', 0.625, 3.5);\n';
  // The long run's map: every query on itself and on position 0, half each.
  const long = Buffer.alloc(LONG_T * LONG_T * 2);
  for (let i = 0; i < LONG_T; i++) {
    long.writeUInt16LE(f16bits(i === 0 ? 1 : 0.5), 2 * (i * LONG_T + i));
    if (i > 0) long.writeUInt16LE(f16bits(0.5), 2 * (i * LONG_T));
  }
  fs.writeFileSync(path.join(dir, 'long.bin'), long);
  sql += "INSERT INTO attention VALUES (2, 0, 0, " + LONG_T + ', ' + LONG_T + ", 'f16', readfile(" +
    "'" + path.join(dir, 'long.bin') + "'));\n";
  execFileSync('sqlite3', [db], { input: sql });
  return db;
}

/* ---- what the page should show, from the planted values (render/viewer.c's code) ----------- */

function rint(x) { // C's lrint: halves to even
  const f = Math.floor(x), d = x - f;
  return d > 0.5 ? f + 1 : d < 0.5 ? f : (f % 2 === 0 ? f : f + 1);
}
function decoded(p, vmax) {
  const c = p > 0 ? rint(254 * Math.min(1, Math.sqrt(p / vmax))) : 0;
  return vmax * (c / 254) * (c / 254);
}
function tableRgb(table, i) { return [0, 2, 4].map((k) => parseInt(table.substr(6 * i + k, 2), 16)); }
function linearIndex(v, vmax) { return Math.min(255, Math.floor(Math.min(1, v / vmax) * 256)); }
function logIndex(v, vmax, floor) {
  const t = Math.log(Math.max(v, floor) / floor) / Math.log(vmax / floor);
  return Math.min(255, Math.floor(Math.max(0, Math.min(1, t)) * 256));
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const maxOf = (rows) => rows.reduce((m, r) => Math.max(m, ...r), 0);

/* ---- a PNG reader (8-bit RGB/RGBA, what Chromium writes), to look at the screenshot ---------- */

function readPng(buf) {
  let o = 8, width = 0, height = 0, channels = 0;
  const idat = [];
  while (o < buf.length) {
    const len = buf.readUInt32BE(o), type = buf.toString('ascii', o + 4, o + 8);
    const data = buf.subarray(o + 8, o + 8 + len);
    if (type === 'IHDR') { width = data.readUInt32BE(0); height = data.readUInt32BE(4); channels = data[9] === 6 ? 4 : 3; }
    if (type === 'IDAT') idat.push(data);
    o += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat)), stride = width * channels;
  const px = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)], line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? px[y * stride + x - channels] : 0, b = y > 0 ? px[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? px[(y - 1) * stride + x - channels] : 0;
      const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
      const pred = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][f];
      px[y * stride + x] = (line[x] + pred) & 255;
    }
  }
  return { width, height, channels, px };
}

/* ---- the browser ---------------------------------------------------------------------------- */

async function openPage(browser, file, stray, errors) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000, deviceScaleFactor: 1 });
  const url = 'file://' + file;
  await page.setRequestInterception(true);
  page.on('request', (req) => {
    if (req.url() === url) req.continue();
    else { stray.push(req.url()); req.abort(); }
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  const t0 = Date.now();
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 });
  return { page, ms: Date.now() - t0 };
}

async function launch(dir) {
  const profile = fs.mkdtempSync(path.join(dir, 'profile-'));
  // puppeteer's Firefox profile turns off updates, telemetry and the other background requests
  const browser = FIREFOX
    ? await puppeteer.launch({ browser: 'firefox', executablePath: BROWSER, headless: true, userDataDir: profile })
    : await puppeteer.launch({ executablePath: BROWSER, headless: true,
      args: FLAGS.concat(['--user-data-dir=' + profile]), ignoreDefaultArgs: ['--headless=new'] });
  return { browser, profile };
}

// The page's JavaScript heap (Chromium only: Firefox's BiDi has no metrics).
async function heapMiB(page) {
  return FIREFOX ? NaN : +((await page.metrics()).JSHeapUsedSize / 1048576).toFixed(1);
}

const pixel = (page, r, c) => page.evaluate((r, c) => {
  const p = window.loupeViewer.cellCenter(r, c);
  const d = document.getElementById('head-canvas').getContext('2d').getImageData(Math.floor(p.x), Math.floor(p.y), 1, 1).data;
  return [d[0], d[1], d[2]];
}, r, c);

async function hover(page, r, c) {
  const p = await page.evaluate((r, c) => {
    const q = window.loupeViewer.cellCenter(r, c), rect = document.getElementById('head-canvas').getBoundingClientRect();
    return { x: rect.left + q.x, y: rect.top + q.y };
  }, r, c);
  await page.mouse.move(p.x, p.y);
  return page.evaluate(() => {
    const info = document.getElementById('hover-info');
    return { text: info.textContent, prob: Number(info.querySelector('.prob').textContent),
      toks: Array.from(info.querySelectorAll('.tok')).map((e) => e.textContent) };
  });
}

async function checkHeadPixels(page, data) {
  const viridis = data.options.colormaps.viridis, masked = data.options.masked.viridis;
  check(viridis.startsWith('440154') && viridis.endsWith('fde725'), 'the page carries matplotlib\'s viridis');
  const rows = MAPS['0/0'], vmax = maxOf(rows), maskedRgb = [1, 3, 5].map((i) => parseInt(masked.substr(i, 2), 16));
  let bad = 0;
  for (let r = 0; r < 6; r++) for (let c = 0; c < 6; c++) {
    const want = c > r ? maskedRgb : tableRgb(viridis, linearIndex(decoded(rows[r][c], vmax), vmax));
    const got = await pixel(page, r, c);
    if (!same(got, want)) { bad++; console.error('  cell ' + r + ',' + c + ': ' + got + ' want ' + want); }
  }
  check(bad === 0, 'head view: every cell of layer 0 head 0 has the colour of its stored probability (' + bad + ' differ)');
  await page.keyboard.press('l'); // log scale
  const floor = data.options.log_floor, got = await pixel(page, 2, 0);
  check(same(got, tableRgb(viridis, logIndex(decoded(0.0625, vmax), vmax, floor))), 'log scale: cell 2,0 has the log colour of 0.0625 (' + got + ')');
  await page.keyboard.press('l');
}

async function checkHover(page) {
  const vmax = maxOf(MAPS['0/0']);
  const h = await hover(page, 2, 1);
  check(Math.abs(h.prob - decoded(0.4375, vmax)) < 5e-5 && Math.abs(h.prob - 0.4375) < 2 / 254, 'hover 2,1: p ' + h.prob + ' (stored 0.4375)');
  check(h.toks[0] === SHOWN[2] && h.toks[1] === SHOWN[1], 'hover 2,1: query and key tokens shown as text: ' + JSON.stringify(h.toks.slice(0, 2)));
  check(/query\s*2/.test(h.text) && /key\s*1/.test(h.text), 'hover 2,1: positions 2 and 1');
  check(h.text.includes('Top keys') && h.toks[2] === SHOWN[2], 'hover 2,1: the row\'s top key is position 2 (0.5)');
  check(h.text.includes('<i>next</i>'), 'hover 2,1: the predictions at position 2, as text');
}

async function checkKeyboard(page) {
  await page.focus('#head-wrap');
  const before = await pixel(page, 2, 1);
  await page.keyboard.press('ArrowRight');
  let s = await page.evaluate(() => [window.loupeViewer.state.layer, window.loupeViewer.state.head]);
  const after = await pixel(page, 2, 1);
  check(same(s, [0, 1]) && !same(before, after), 'ArrowRight: head 1, and cell 2,1 changed (' + before + ' -> ' + after + ')');
  check(same(after, tableRgb((await page.evaluate(() => window.loupeViewer.data.options.colormaps.viridis)), 255)), 'head 1: its previous-token cell is the top colour');
  await page.keyboard.press('ArrowDown');
  s = await page.evaluate(() => [window.loupeViewer.state.layer, window.loupeViewer.state.head]);
  check(same(s, [1, 1]), 'ArrowDown: layer 1 (' + s + ')');
  await page.keyboard.press('ArrowRight');
  const note = await page.evaluate(() => document.getElementById('head-note').textContent);
  check(note.includes('not stored'), 'layer 1 head 2 says its map was not stored');
}

async function checkText(page) {
  await page.evaluate(() => window.loupeViewer.openHead(0, 0));
  await page.keyboard.press('t');
  const rows = MAPS['0/0'], vmax = maxOf(rows);
  const want = rows.flat().filter((v) => decoded(v, vmax) > 0).length;
  let n = await page.$$eval('#text-lines line', (l) => l.length);
  check(n === want, 'text view: ' + n + ' lines, one per visible pair (' + want + ')');
  const labels = await page.$$eval('#text-queries div', (d) => d.map((e) => e.textContent));
  check(labels[1] === SHOWN[1].slice(0, 32) + '…' && labels[3] === SHOWN[3], 'text view: hostile tokens are text: ' + JSON.stringify(labels.slice(1, 4)));
  await page.click('#text-queries div[data-pos="3"]');
  const lines = await page.$$eval('#text-lines line', (l) => l.map((e) => [Number(e.dataset.k), Number(e.getAttribute('stroke-opacity'))]));
  check(lines.length === 4 && lines.every(([k, o]) => Math.abs(o - decoded(rows[3][k], vmax)) < 1e-9), 'click position 3: its 4 lines, opacity = weight');
  await page.click('#text-queries div[data-pos="3"]');
  await page.click('input[name="text-mode"][value="layer"]');
  n = await page.$$eval('#text-lines line', (l) => l.length);
  const layer0 = ['0/0', '0/1', '0/2'].reduce((s, k) => s + MAPS[k].flat().filter((v) => decoded(v, maxOf(MAPS[k])) > 0).length, 0);
  check(n === layer0, 'text view, all heads of layer 0: ' + n + ' lines (' + layer0 + ')');
  await page.click('input[name="text-mode"][value="head"]');
}

async function checkOverviewStats(page) {
  await page.keyboard.press('o');
  const p = await page.evaluate(() => {
    const q = window.loupeViewer.overviewCenter(1, 0), r = document.getElementById('overview-canvas').getBoundingClientRect();
    return { x: r.left + q.x, y: r.top + q.y };
  });
  await page.mouse.click(p.x, p.y);
  let s = await page.evaluate(() => [window.loupeViewer.state.view, window.loupeViewer.state.layer, window.loupeViewer.state.head]);
  check(same(s, ['head', 1, 0]), 'overview: a click opens layer 1 head 0 (' + s + ')');
  await page.keyboard.press('s');
  await page.click('#stats-matrix tr:nth-child(3) td:nth-of-type(2)'); // layer 1, head 1
  s = await page.evaluate(() => [window.loupeViewer.state.view, window.loupeViewer.state.layer, window.loupeViewer.state.head]);
  check(same(s, ['head', 1, 1]), 'statistics matrix: a click opens layer 1 head 1 (' + s + ')');
  await page.keyboard.press('s');
  const headers = await page.$$('#stats-table th');
  await headers[2].click(); // entropy, largest first
  const first = await page.$eval('#stats-table tbody tr', (r) => Array.from(r.children).slice(0, 3).map((c) => c.textContent));
  check(same(first, ['1', '2', '0.5']), 'statistics table sorted by entropy: layer 1 head 2 first (' + first + ')');
}

async function checkHostile(page, html) {
  const state = await page.evaluate(() => ({ pwned: window.__pwned, imgs: document.images.length,
    title: document.title, leak: document.getElementById('view-leak').textContent,
    label: Array.from(document.querySelectorAll('#query-labels span')).map((s) => s.textContent) }));
  check(state.pwned === undefined && state.imgs === 0, 'hostile tokens ran no script and made no element');
  check(state.title.includes('<b onmouseover=x>model'), 'the model name is text in the title: ' + state.title);
  check(state.leak.includes('<script>window.__pwned=3</script> ok'), 'the leak check detail is shown as text');
  const scripts = (html.match(/<script\b/g) || []).length, ends = (html.match(/<\/script/gi) || []).length;
  check(scripts === ends, 'the file: every </script> closes one of ours (' + scripts + ' opened, ' + ends + ' closed)');
  check(!/\b(src|href)\s*=\s*["']?(https?:|\/\/)/i.test(html), 'the file names no remote resource');
  check(await page.evaluate(() => document.querySelectorAll('.generated').length) === 0, 'a run without generated tokens marks none');
}

async function checkLong(browser, file, stray, errors) {
  const { page, ms } = await openPage(browser, file, stray, errors);
  const viridis = await page.evaluate(() => window.loupeViewer.data.options.colormaps.viridis);
  const top = tableRgb(viridis, linearIndex(decoded(0.5, 1), 1)), bottom = tableRgb(viridis, 0);
  const s0 = await page.evaluate(() => window.loupeViewer.state.zoom);
  check((await pixel(page, 1000, 1000)).join() === top.join(), 'long map at zoom 1: the pooled tile keeps the diagonal bright');
  for (let i = 0; i < 12; i++) await page.evaluate(() => window.loupeViewer.zoomTo(1000, 1000, 1.25));
  const z = await page.evaluate(() => window.loupeViewer.state.zoom);
  const on = await pixel(page, 1000, 1000), off = await pixel(page, 1000, 998);
  check(z > s0 * 10 && same(on, top) && same(off, bottom), 'long map zoomed ' + z.toFixed(1) + 'x: cell 1000,1000 is 0.5 and 1000,998 is 0 (' + on + ' / ' + off + ')');
  const heap = await heapMiB(page);
  console.log('long map (' + LONG_T + ' tokens) in ' + path.basename(BROWSER) + ': opened in ' + ms + ' ms' + (isNaN(heap) ? '' : ', JS heap ' + heap + ' MiB'));
  await page.close();
}

async function checkPooled(browser, file, stray, errors) {
  const { page } = await openPage(browser, file, stray, errors);
  const info = await page.evaluate(() => ({ block: window.loupeViewer.data.maps.heads[0].block,
    banners: document.getElementById('banners').textContent }));
  check(info.block > 1 && info.banners.includes('blocks of up to ' + info.block), '--max-map-bytes: the long map embedded in blocks of ' + info.block + ', and the page says so');
  const h = await hover(page, 10, 10);
  check(Math.abs(h.prob - 0.5) < 2 / 254 && /query\s*\d+–\d+/.test(h.text), 'pooled map: hover shows the block\'s positions and its max p ' + h.prob);
  await page.close();
}

// A run of `loupe trace --generate` on loupe synth's model: the generated tokens are marked on
// both axes, in the hover, the text view and the banner, and a line on the map separates them.
function buildGenerated(dir) {
  const model = path.join(dir, 'synth'), db = path.join(dir, 'gen.db');
  for (const f of [db, db + '-wal', db + '-shm']) fs.rmSync(f, { force: true });
  fs.rmSync(model, { recursive: true, force: true });
  execFileSync(LOUPE, ['synth', model], { stdio: 'ignore' });
  execFileSync(LOUPE, ['trace', model, '--prompt', 'the cat sat on the mat .', '--generate', '4', '--db', db], { stdio: 'ignore' });
  const [first, n] = execFileSync('sqlite3', [db, 'SELECT (SELECT min(pos) FROM tokens WHERE run_id = 1 AND generated = 1), n_tokens FROM runs WHERE id = 1'], { encoding: 'utf8' }).trim().split('|').map(Number);
  const html = path.join(dir, 'gen.html');
  execFileSync(LOUPE, ['render', db, '--html', html]);
  return { html, first, n };
}

const pixelAt = (page, x, y) => page.evaluate((x, y) => {
  const d = document.getElementById('head-canvas').getContext('2d').getImageData(x, y, 1, 1).data;
  return [d[0], d[1], d[2]];
}, x, y);

async function checkGenerated(browser, gen, stray, errors) {
  const { first, n } = gen;
  check(first === n - 4, 'generated run: the store marks the last 4 of ' + n + ' tokens generated (first ' + first + ')');
  const { page } = await openPage(browser, gen.html, stray, errors);
  const data = await page.evaluate(() => window.loupeViewer.data);
  const flags = data.tokens.map((t) => t.generated === true);
  check(data.first_generated === first && flags.every((g, i) => g === (i >= first)), 'the page marks exactly positions ' + first + '.. generated');
  const labels = await page.evaluate(() => ['query', 'key'].map((a) => Array.from(document.querySelectorAll('#' + a + '-labels span')).map((s) => s.classList.contains('generated'))));
  for (const [axis, l] of [['query', labels[0]], ['key', labels[1]]]) {
    check(l.length === n && l.every((g, i) => g === (i >= first)), axis + ' axis: the labels of positions ' + first + '.. (and only those) are marked generated');
  }
  // the boundary: a column line left of key `first`, a row line above query `first`
  const geo = await page.evaluate((first, n) => {
    const v = window.loupeViewer, a = v.cellCenter(0, 0), b = v.cellCenter(1, 1), s = b.x - a.x;
    return { s, x: v.cellCenter(n - 1, first).x - s / 2, yRow: v.cellCenter(n - 1, 0).y, y: v.cellCenter(first, 0).y - s / 2, xCol: v.cellCenter(first, 0).x };
  }, first, n);
  const line = hexRgb('#e69f00');
  const onCol = await pixelAt(page, Math.round(geo.x), Math.round(geo.yRow)), onRow = await pixelAt(page, Math.round(geo.xCol), Math.round(geo.y));
  const inside = await pixelAt(page, Math.round(geo.x + geo.s / 2), Math.round(geo.yRow));
  check(same(onCol, line) && same(onRow, line) && !same(inside, line), 'the map: an orange line at key ' + first + ' and at query ' + first + ', cells beside it keep their colours (' + onCol + ' / ' + onRow + ' / ' + inside + ')');
  let h = await hover(page, n - 1, 0);
  check(/query\s*\d+\S*\s*generated/.test(h.text) && /key\s*0\S*\s*prompt/.test(h.text), 'hover on the last row: its query is generated, key 0 is prompt');
  h = await hover(page, 0, 0);
  check(!h.text.includes('generated'), 'hover on row 0: nothing generated');
  const banner = await page.$eval('#generated-banner', (b) => b.textContent);
  check(banner.includes('positions ' + first + '–' + (n - 1)), 'the banner names the generated positions: ' + banner);
  await page.keyboard.press('t');
  const text = await page.evaluate(() => ['queries', 'keys'].map((c) => Array.from(document.querySelectorAll('#text-' + c + ' div.generated')).map((d) => Number(d.dataset.pos))));
  const want = Array.from({ length: n - first }, (_, i) => first + i);
  const firstDiv = await page.$$eval('#text-queries div.first-generated', (d) => d.map((e) => Number(e.dataset.pos)));
  check(same(text[0], want) && same(text[1], want) && same(firstDiv, [first]), 'text view: positions ' + first + '.. marked generated in both columns, the boundary above ' + first);
  await page.close();
}

// `loupe trace --logit-lens` and `loupe ablate` (its own run) on loupe synth's model, read back
// from the database as the page must show them.
function buildAnalysis(dir) {
  const model = path.join(dir, 'synth'), db = path.join(dir, 'heads.db');
  for (const f of [db, db + '-wal', db + '-shm']) fs.rmSync(f, { force: true });
  const prompt = 'the cat sat on the mat . the cat sat on the mat .';
  execFileSync(LOUPE, ['trace', model, '--prompt', prompt, '--logit-lens', '--db', db], { stdio: 'ignore' });
  execFileSync(LOUPE, ['ablate', model, '--prompt', prompt, '--db', db], { stdio: 'ignore' });
  const q = (sql) => JSON.parse(execFileSync('sqlite3', ['-json', db, sql], { encoding: 'utf8' }) || '[]');
  const html = path.join(dir, 'heads.html');
  execFileSync(LOUPE, ['render', db, '--html', html]); // the trace run: the lens, and the ablate run's importance
  return { html,
    runs: q('SELECT id, kind FROM runs ORDER BY id'),
    importance: q("SELECT run_id, layer, head, delta FROM head_importance WHERE method = 'zero'"),
    lens: q('SELECT layer, pos, piece, prob FROM logit_lens WHERE run_id = 1 AND rank = 0'),
    lensNll: q('SELECT layer, nll FROM logit_lens_layers WHERE run_id = 1 ORDER BY layer') };
}

// `loupe diff` of loupe synth's model against its no-prev-write fault (the same tokenizer, so the
// same tokens), both runs in one database with f32 maps and full logits, read back as stored.
function buildDiff(dir) {
  const model = path.join(dir, 'synth'), broken = path.join(dir, 'synth-fault'), db = path.join(dir, 'diff.db');
  for (const f of [db, db + '-wal', db + '-shm']) fs.rmSync(f, { force: true });
  fs.rmSync(broken, { recursive: true, force: true });
  execFileSync(LOUPE, ['synth', broken, '--fault', 'no-prev-write'], { stdio: 'ignore' });
  const prompt = 'the cat sat on the mat . the cat sat on the mat .';
  for (const m of [model, broken]) execFileSync(LOUPE, ['trace', m, '--prompt', prompt, '--maps', 'f32', '--logits', 'full', '--db', db], { stdio: 'ignore' });
  execFileSync(LOUPE, ['diff', db + ':1', db + ':2'], { stdio: 'ignore' });
  const q = (sql) => JSON.parse(execFileSync('sqlite3', ['-json', db, sql], { encoding: 'utf8' }) || '[]');
  const html = path.join(dir, 'diff.html');
  execFileSync(LOUPE, ['render', db, '--run', '1', '--html', html]);
  const f32 = (hexText) => { const b = Buffer.from(hexText, 'hex'), v = []; for (let i = 0; i < b.length; i += 4) v.push(b.readFloatLE(i)); return v; };
  const maps = q('SELECT run_id, layer, head, n_q, n_k, hex(probs) AS probs FROM attention ORDER BY run_id, layer, head').map((r) => ({ ...r, probs: f32(r.probs) }));
  return { html,
    heads: q('SELECT layer, head, js_mean, max_abs FROM diff_heads WHERE diff_id = 1 ORDER BY layer, head'),
    positions: q('SELECT pos, kl, argmax_agree FROM diff_positions WHERE diff_id = 1 ORDER BY pos'),
    map: (run, l, h) => maps.find((m) => m.run_id === run && m.layer === l && m.head === h) };
}

async function checkDiff(browser, d, stray, errors) {
  const { page } = await openPage(browser, d.html, stray, errors);
  await page.evaluate(() => window.loupeViewer.setView('diffs'));
  const data = await page.evaluate(() => window.loupeViewer.data);
  const s = data.sections.diffs, n_heads = data.run.n_heads;
  check(s && s.length === 1 && s[0].maps, 'diffs: the stored diff is in the page, with its maps (both runs are in this database)');
  const cells = await page.$$eval('#view-diffs .head-matrix td', (tds) => tds.map((t) => [Number(t.dataset.layer), Number(t.dataset.head), t.textContent, t.style.background]));
  let bad = 0;
  for (const r of d.heads) {
    const cell = cells.find(([l, h]) => l === r.layer && h === r.head);
    if (!cell || cell[2] !== r.js_mean.toFixed(4)) bad++;
  }
  check(bad === 0 && cells.length === d.heads.length && d.heads.some((r) => r.js_mean > 0), 'diffs: every head\'s mean JS as stored (' + bad + ' differ of ' + d.heads.length + ')');
  const order = d.heads.slice().sort((x, y) => y.js_mean - x.js_mean || x.layer - y.layer || x.head - y.head), top = order[0];
  const diverging = data.options.diverging, red = tableRgb(diverging, 255), blue = tableRgb(diverging, 0);
  const bg = cells.find(([l, h]) => l === top.layer && h === top.head)[3];
  check(bg === 'rgb(' + red.join(', ') + ')', 'diffs: the most changed head (layer ' + top.layer + ' head ' + top.head + ') has the red end (' + bg + ')');
  const strip = await page.$$eval('#view-diffs .diff-strip td', (tds) => tds.map((t) => [Number(t.dataset.pos), t.className, t.style.background]));
  const want = d.positions.filter((p) => !p.argmax_agree).map((p) => p.pos), got = strip.filter((t) => t[1] === 'disagree').map((t) => t[0]);
  const klTop = d.positions.reduce((m, p) => Math.max(m, p.kl), 0), klMax = d.positions.find((p) => p.kl === klTop);
  check(strip.length === d.positions.length && same(got, want) && strip[klMax.pos][2] === 'rgb(' + red.join(', ') + ')', 'diffs: the per-position strip marks the argmax disagreements ' + JSON.stringify(want) + ' (' + JSON.stringify(got) + ') and the largest KL in red');
  // a click on a head draws its difference map: the cell of largest |B - A| is the diverging end
  // of its sign, a masked cell is the masked colour
  const other = order[1]; /* the page opens with the top one drawn */
  await page.click('#view-diffs .head-matrix td[data-layer="' + other.layer + '"][data-head="' + other.head + '"]');
  const a = d.map(1, other.layer, other.head), b = d.map(2, other.layer, other.head);
  let at = 0;
  for (let i = 0; i < a.probs.length; i++) if (Math.abs(b.probs[i] - a.probs[i]) > Math.abs(b.probs[at] - a.probs[at])) at = i;
  const q = Math.floor(at / a.n_k), k = at % a.n_k, sign = b.probs[at] - a.probs[at];
  const px = await page.evaluate((q, k, q0, k0) => {
    const c = document.getElementById('diff-canvas'), cell = Number(c.dataset.cell), g = c.getContext('2d');
    const at = (r, cc) => Array.from(g.getImageData(cc * cell + cell / 2, r * cell + cell / 2, 1, 1).data.slice(0, 3));
    return { hit: at(q, k), masked: at(q0, k0), state: window.loupeViewer.state.diffHead };
  }, q, k, 0, a.n_k - 1);
  const end = sign > 0 ? red : blue, masked = hexRgb(data.options.masked[data.options.colormap]);
  check(Math.abs(sign) > 0 && same(px.state, [other.layer, other.head]) && same(px.hit, end) && same(px.masked, masked), 'diffs: layer ' + other.layer + ' head ' + other.head + '\'s map has B - A = ' + sign.toExponential(2) + ' at (' + q + ', ' + k + ') in ' + px.hit + ' (want ' + end + '), masked ' + px.masked);
  await page.close();
}

// What lp_render_visible_piece shows for a piece.
function visible(piece) {
  return Array.from(piece).map((c) => (c === ' ' || c === '\u2581' ? '\u2423' : c === '\n' ? '\u23ce' : c === '\t' ? '\u21e5'
    : c < ' ' ? String.fromCharCode(0x2400 + c.charCodeAt(0)) : c === '\u007f' ? '\u2421' : c)).join('');
}

async function checkImportance(page, a, n_heads) {
  const ablate = a.runs.find((r) => r.kind === 'ablate');
  check(a.runs[0].kind === 'trace' && ablate && a.importance.length > 0 && a.importance.every((r) => r.run_id === ablate.id), 'loupe ablate stored its importance under run ' + (ablate && ablate.id));
  await page.evaluate(() => window.loupeViewer.setView('importance'));
  const cells = await page.$$eval('#view-importance .head-matrix td', (tds) => tds.map((t) => [Number(t.dataset.layer), Number(t.dataset.head), t.textContent]));
  const data = await page.evaluate(() => window.loupeViewer.data.sections.importance);
  let bad = 0;
  for (const r of a.importance) {
    const got = data.delta[r.layer * n_heads + r.head], cell = cells.find(([l, h]) => l === r.layer && h === r.head);
    if (!(Math.abs(got - r.delta) <= 1e-8 * Math.abs(r.delta) + 1e-15) || !cell || cell[2] !== got.toFixed(3)) bad++;
  }
  check(bad === 0 && cells.length === a.importance.length && data.run_id === ablate.id && !data.own, 'importance matrix: every head\'s NLL rise (9 digits) as stored by ablate run ' + ablate.id + ' (' + bad + ' differ)');
  const best = a.importance.slice().sort((x, y) => y.delta - x.delta || x.layer - y.layer || x.head - y.head)[0];
  const top = await page.$eval('#view-importance .importance-top tr:nth-child(2)', (tr) => Array.from(tr.children).map((c) => c.textContent));
  check(Number(top[0]) === best.layer && Number(top[1]) === best.head, 'the head that matters most is layer ' + best.layer + ' head ' + best.head + ' (' + top + ')');
  const sel = '#view-importance .head-matrix td[data-layer="' + best.layer + '"][data-head="' + best.head + '"]';
  const bg = await page.$eval(sel, (td) => td.style.background), red = tableRgb(await page.evaluate(() => window.loupeViewer.data.options.diverging), 255);
  check(bg === 'rgb(' + red.join(', ') + ')', 'importance matrix: the largest rise has the diverging map\'s red end (' + bg + ')');
  await page.click(sel);
  const s = await page.evaluate(() => [window.loupeViewer.state.view, window.loupeViewer.state.layer, window.loupeViewer.state.head]);
  check(same(s, ['head', best.layer, best.head]), 'importance matrix: a click opens layer ' + best.layer + ' head ' + best.head + ' (' + s + ')');
}

async function checkLogitLens(page, a, n_layers, n_tokens) {
  await page.evaluate(() => window.loupeViewer.setView('logit_lens'));
  const grid = await page.$$eval('#view-logit_lens .lens-grid tr', (trs) => trs.slice(1).map((tr) => Array.from(tr.querySelectorAll('td')).map((td) => td.textContent)));
  const want = Math.min(32, n_tokens);
  check(grid.length === n_layers && grid.every((r) => r.length === want + 1), 'logit lens: ' + grid.length + ' layers x ' + (grid[0] || []).length + ' cells (' + n_layers + ' x ' + want + ' positions + NLL)');
  let bad = 0;
  for (const r of a.lens) {
    if (r.pos >= want) continue;
    const text = visible(r.piece), shown = Array.from(text).length > 12 ? Array.from(text).slice(0, 12).join('') + '…' : text;
    if (grid[r.layer][r.pos] !== shown) { bad++; if (bad < 4) console.error('  lens ' + r.layer + ',' + r.pos + ': ' + grid[r.layer][r.pos] + ' want ' + shown); }
  }
  check(bad === 0 && a.lens.length === n_layers * n_tokens, 'logit lens: every cell shows the stored top token of its layer and position (' + bad + ' differ of ' + a.lens.length + ')');
  const nll = grid.map((r) => Number(r[want]));
  check(a.lensNll.every((r) => Math.abs(nll[r.layer] - r.nll) <= 5e-4 * Math.abs(r.nll)), 'logit lens: each layer\'s NLL as stored (' + nll + ')');
  const last = await page.$eval('#view-logit_lens .lens-grid td[data-layer="' + (n_layers - 1) + '"][data-pos="1"]', (td) => td.style.background);
  check(last.startsWith('rgb('), 'logit lens: cells are coloured by probability (' + last + ')');
  await page.$eval('#lens-start', (e) => { e.value = '5'; e.dispatchEvent(new Event('change')); });
  const first = await page.$eval('#view-logit_lens .lens-grid td[data-pos]', (td) => Number(td.dataset.pos));
  check(first === 5, 'logit lens: "from position 5" starts the grid at 5 (' + first + ')');
}

async function checkAnalysis(browser, a, stray, errors) {
  const { page } = await openPage(browser, a.html, stray, errors);
  const run = await page.evaluate(() => window.loupeViewer.data.run);
  await checkImportance(page, a, run.n_heads);
  await checkLogitLens(page, a, run.n_layers, run.n_tokens);
  await page.close();
}

function hexRgb(hex) { return [1, 3, 5].map((i) => parseInt(hex.substr(i, 2), 16)); }

async function screenshot(page, file) {
  await page.evaluate(() => window.loupeViewer.openHead(0, 0));
  await page.screenshot({ path: file });
  const img = readPng(fs.readFileSync(file)), colours = new Set();
  let ink = 0;
  for (let i = 0; i < img.width * img.height; i++) {
    const o = i * img.channels, r = img.px[o], g = img.px[o + 1], b = img.px[o + 2];
    colours.add((r << 16) | (g << 8) | b);
    if (r + g + b < 600) ink++;
  }
  check(colours.size >= 16 && ink > img.width * img.height * 0.02, 'screenshot ' + file + ': ' + colours.size + ' colours, ' + (100 * ink / (img.width * img.height)).toFixed(1) + '% ink');
}

async function measure(file, shot) {
  const dir = fs.mkdtempSync('/tmp/loupe-measure-');
  const { browser, profile } = await launch(dir);
  const stray = [], errors = [];
  const { page, ms } = await openPage(browser, path.resolve(file), stray, errors);
  const t0 = Date.now();
  for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowRight');
  const stepMs = (Date.now() - t0) / 5;
  const heap = await heapMiB(page);
  const rss = browserRss(browser.process().pid);
  if (shot) { // the head named by LOUPE_SHOT_HEAD=L,H (default the first), its last row's top key hovered
    const [l, h] = (process.env.LOUPE_SHOT_HEAD || '').split(',').map(Number);
    if (isFinite(l) && isFinite(h)) await page.evaluate((l, h) => window.loupeViewer.openHead(l, h), l, h);
    const last = await page.evaluate(() => {
      const v = window.loupeViewer, h = v.data.maps.heads.find((x) => x.layer === v.state.layer && x.head === v.state.head);
      return h ? h.rows - 1 : -1;
    });
    if (last >= 0) {
      await hover(page, last, 0);
      const top = await page.evaluate(() => Number(document.querySelector('#hover-info h2 + table td').textContent));
      await hover(page, last, isFinite(top) ? top : 0);
    }
    await page.screenshot({ path: shot });
  }
  console.log(JSON.stringify({ file, bytes: fs.statSync(file).size, open_ms: ms, head_step_ms: stepMs,
    browser: path.basename(BROWSER), js_heap_mib: heap, browser_pss_mib: +(rss / 1048576).toFixed(1),
    stray_requests: stray.length, errors }));
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
  fs.rmSync(dir, { recursive: true, force: true });
}

// Memory of the browser and every process under it (PSS, from /proc).
function browserRss(pid) {
  const kids = new Map();
  for (const p of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const ppid = Number(fs.readFileSync('/proc/' + p + '/stat', 'utf8').split(') ')[1].split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(p));
    } catch (e) { /* gone */ }
  }
  let total = 0;
  const walk = (p) => {
    try { // proportional set size: shared pages counted once across the processes
      total += Number(/Pss:\s+(\d+)/.exec(fs.readFileSync('/proc/' + p + '/smaps_rollup', 'utf8'))[1]) * 1024;
    } catch (e) { /* gone */ }
    for (const k of kids.get(p) || []) walk(k);
  };
  walk(pid);
  return total;
}

async function main() {
  if (process.argv[2] === '--measure') return measure(process.argv[3], process.argv[4]);
  const dir = path.resolve(process.argv[2]);
  const db = buildDb(dir), html = path.join(dir, 'viewer.html');
  execFileSync(LOUPE, ['render', db, '--run', '1', '--html', html]);
  execFileSync(LOUPE, ['render', db, '--run', '2', '--html', path.join(dir, 'long.html')]);
  execFileSync(LOUPE, ['render', db, '--run', '2', '--html', path.join(dir, 'pooled.html'), '--max-map-bytes', '100000']);
  const gen = buildGenerated(dir), analysis = buildAnalysis(dir), diff = buildDiff(dir);
  const { browser, profile } = await launch(dir);
  check(browser.process().spawnfile === BROWSER, 'the browser is ' + BROWSER + ' (' + await browser.version() + ')');
  const stray = [], errors = [];
  try {
    const { page } = await openPage(browser, html, stray, errors);
    const data = await page.evaluate(() => window.loupeViewer.data);
    await checkHeadPixels(page, data);
    await checkHover(page);
    await checkKeyboard(page);
    await checkText(page);
    await checkOverviewStats(page);
    await checkHostile(page, fs.readFileSync(html, 'utf8'));
    await screenshot(page, path.join(dir, 'viewer.png'));
    await page.close();
    await checkLong(browser, path.join(dir, 'long.html'), stray, errors);
    await checkPooled(browser, path.join(dir, 'pooled.html'), stray, errors);
    await checkGenerated(browser, gen, stray, errors);
    await checkAnalysis(browser, analysis, stray, errors);
    await checkDiff(browser, diff, stray, errors);
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  check(stray.length === 0, 'no request left the page: ' + JSON.stringify(stray));
  check(errors.length === 0, 'no script errors: ' + JSON.stringify(errors));
}

main().then(() => {
  if (process.argv[2] === '--measure') return;
  console.log(passed + ' passed, ' + failed + ' failed');
  process.exit(failed ? 1 : 0);
}, (e) => {
  console.error('FAIL: ' + (e && e.stack || e));
  console.log(passed + ' passed, ' + (failed + 1) + ' failed');
  process.exit(1);
});
