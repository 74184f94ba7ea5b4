/* loupe's attention viewer: the script of the page `loupe render --html` writes (render/viewer.c).
 *
 * Data (all inside the page; nothing is fetched):
 *   #loupe-data   JSON: run, title, tokens [{text, id}], options (colormaps as 256 "rrggbb"
 *                 entries, masked colours, scale), maps {heads: [{layer, head, n_q, n_k, block,
 *                 rows, cols, vmax, x, id, n_leak_cells, n_bad_cells, thumb?}]}, sections {...}
 *   #m{id}        a head's cells, base64, one byte each, rows x cols, row-major:
 *                 0..254 an allowed cell of value vmax * (code / 254)^2, 255 a masked cell
 *   #x{id}        (when x) 0 nothing, 1..254 a masked cell leaking that value, 255 NaN/negative
 *   #t{id}        (when thumb) the same map max-pooled to at most 48 cells a side, for the overview
 * Maps are decoded when first shown (a few are kept), drawn through max-pooled tiles whose level
 * follows the zoom, so a 2048-token map draws as fast as a small one and a bright cell never
 * disappears. Every text from the database goes in with textContent, never as HTML.
 * Optional sections: PANELS below; a section the page does not know is shown as its JSON. */
(function () {
  'use strict';

  const DATA = JSON.parse(document.getElementById('loupe-data').textContent);
  const RUN = DATA.run;
  const OPT = DATA.options;
  const TOKENS = DATA.tokens || [];
  const SECTIONS = DATA.sections || {};
  const HEADS = DATA.maps.heads;
  const HEAD_BY_KEY = new Map(HEADS.map((h) => [h.layer + '/' + h.head, h]));
  // The first generated position (`loupe trace --generate`), or null: tokens from it on are marked
  // on both axes, in the text view, and a line on the maps separates them from the prompt.
  const FIRST_GEN = Number.isInteger(DATA.first_generated) ? DATA.first_generated : null;
  const GEN_RGB = '#e69f00'; // Okabe-Ito orange: the prompt/generated boundary on the maps
  // Okabe & Ito's colour-blind-safe palette, for heads drawn together in the text view.
  const HEAD_COLOURS = ['#0072b2', '#e69f00', '#009e73', '#cc79a7', '#56b4e9', '#d55e00',
    '#f0e442', '#000000'];
  const MARGIN = { left: 150, top: 12, right: 16, bottom: 150 };
  const TILE = 256;            // cells per tile side
  const LABEL_PITCH = 14;      // px between axis labels
  const MAX_CELL_PX = 40;      // largest cell at zoom 1
  const MAX_ZOOM_CELL_PX = 96; // largest cell when zoomed in
  const TEXT_WINDOW = 48;      // tokens in the text view at once
  const KEPT_HEADS = 6;        // decoded heads kept in memory

  const state = {
    view: 'head', layer: 0, head: 0, scale: OPT.scale, colormap: OPT.colormap,
    zoom: 1, panX: 0, panY: 0, textMode: 'head', textStart: 0, selected: null,
    statSort: { key: 'layer', dir: 1 }, stat: null, hover: null, diffHead: null,
  };

  /* ---- small helpers ------------------------------------------------------------------------ */

  function $(id) { return document.getElementById(id); }
  function make(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    if (v === 0) return '0';
    if (Math.abs(v) < 1e-3) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }
  function tokenText(pos) { const t = TOKENS[pos]; return t ? t.text : '?'; }
  function isGenerated(pos) { return FIRST_GEN !== null && pos >= FIRST_GEN; }
  function cut(text, n) {
    const chars = Array.from(text);
    return chars.length > n ? chars.slice(0, n).join('') + '…' : text;
  }
  function tok(pos) { return make('span', tokenText(pos), isGenerated(pos) ? 'tok generated' : 'tok'); }
  function niceStep(min) {
    for (let p = 1; ; p *= 10) for (const m of [1, 2, 5]) if (m * p >= min) return m * p;
  }
  function headOf(layer, head) { return HEAD_BY_KEY.get(layer + '/' + head) || null; }
  function row(cells) {
    const tr = make('tr');
    for (const c of cells) { const td = make('td'); td.append(c); tr.append(td); }
    return tr;
  }

  /* ---- colours: the same tables and scales as the static pictures (render/colormap.c) -------- */

  function parseTable(hex) {
    const t = new Uint8Array(768);
    for (let i = 0; i < 768; i++) t[i] = parseInt(hex.substr(2 * i, 2), 16);
    return t;
  }
  const TABLES = {};
  for (const name of Object.keys(OPT.colormaps)) TABLES[name] = parseTable(OPT.colormaps[name]);
  function hexRgb(hex) { return [1, 3, 5].map((i) => parseInt(hex.substr(i, 2), 16)); }
  function scaleT(v, vmax, scale) {
    if (!(v > 0) || !(vmax > 0)) return 0;
    let t;
    if (scale === 'log') {
      const floor = OPT.log_floor > 0 ? OPT.log_floor : 1e-4;
      if (vmax <= floor) return v >= vmax ? 1 : 0;
      t = Math.log(Math.max(v, floor) / floor) / Math.log(vmax / floor);
    } else if (scale === 'power') {
      t = Math.pow(v / vmax, OPT.gamma > 0 ? OPT.gamma : 0.5);
    } else {
      t = v / vmax;
    }
    return t < 0 ? 0 : t > 1 ? 1 : t;
  }
  function inverseT(t, vmax, scale) {
    const floor = OPT.log_floor > 0 ? OPT.log_floor : 1e-4;
    if (scale === 'log') return vmax <= floor ? vmax * t : floor * Math.pow(vmax / floor, t);
    if (scale === 'power') return vmax * Math.pow(t, 1 / (OPT.gamma > 0 ? OPT.gamma : 0.5));
    return vmax * t;
  }
  function colourOf(v, vmax) {
    const t = scaleT(v, vmax, state.scale);
    const i = Math.min(255, Math.floor(t * 256));
    const tab = TABLES[state.colormap];
    return [tab[3 * i], tab[3 * i + 1], tab[3 * i + 2]];
  }
  function packRgb(c) { return (255 << 24 | c[2] << 16 | c[1] << 8 | c[0]) >>> 0; }
  function cssRgb(c) { return 'rgb(' + c[0] + ',' + c[1] + ',' + c[2] + ')'; }
  function maskedRgb() { return hexRgb(OPT.masked[state.colormap]); }
  function decodeValue(h, code) { const r = code / 254; return h.vmax * r * r; }

  /* ---- maps: decoded lazily, pooled into levels, painted into cached tiles ------------------- */

  const decoded = new Map(); // head id -> {levels, tiles}; insertion order = least recently used

  function decodeBlock(id) {
    const node = document.getElementById(id);
    if (!node) return null;
    const bin = atob(node.textContent); // the forgiving decoder skips the line breaks
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function headData(h) {
    let d = decoded.get(h.id);
    if (d) { decoded.delete(h.id); decoded.set(h.id, d); return d; }
    const cells = decodeBlock('m' + h.id);
    const x = h.x ? decodeBlock('x' + h.id) : null;
    d = { levels: [{ rows: h.rows, cols: h.cols, cells: cells, x: x }], tiles: new Map() };
    decoded.set(h.id, d);
    while (decoded.size > KEPT_HEADS) decoded.delete(decoded.keys().next().value);
    return d;
  }

  // One level coarser: each cell the max of a 2 x 2 square (masked only if all four are).
  function pool2(lv) {
    const rows = Math.ceil(lv.rows / 2), cols = Math.ceil(lv.cols / 2);
    const cells = new Uint8Array(rows * cols), x = lv.x ? new Uint8Array(rows * cols) : null;
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        let best = -1, bx = 0;
        for (let dr = 0; dr < 2; dr++) {
          for (let dc = 0; dc < 2; dc++) {
            const rr = 2 * r + dr, cc = 2 * c + dc;
            if (rr >= lv.rows || cc >= lv.cols) continue;
            const v = lv.cells[rr * lv.cols + cc];
            if (v !== 255 && v > best) best = v;
            if (x && lv.x[rr * lv.cols + cc] > bx) bx = lv.x[rr * lv.cols + cc];
          }
        }
        cells[r * cols + c] = best < 0 ? 255 : best;
        if (x) x[r * cols + c] = bx;
      }
    }
    return { rows: rows, cols: cols, cells: cells, x: x };
  }

  function level(d, n) {
    while (d.levels.length <= n) d.levels.push(pool2(d.levels[d.levels.length - 1]));
    return d.levels[n];
  }

  // Packed RGBA for codes 0..254 and 255 (masked), on the current scale and colours.
  function lutFor(h, vmax) {
    const lut = new Uint32Array(256);
    for (let c = 0; c < 255; c++) lut[c] = packRgb(colourOf(decodeValue(h, c), vmax));
    lut[255] = packRgb(maskedRgb());
    return lut;
  }

  // The pixel of one cell: bad data, a leak (the larger of its values), or its code's colour.
  function cellPixel(h, lut, vmax, code, xcode) {
    if (xcode === 255) return packRgb(hexRgb(OPT.bad_rgb));
    if (xcode > 0) {
      const v = Math.max(decodeValue(h, xcode), code === 255 ? 0 : decodeValue(h, code));
      return packRgb(colourOf(v, vmax));
    }
    return lut[code];
  }

  // A grid (or part of one) as a canvas, one pixel per cell.
  function paintGrid(h, lv, r0, c0, rows, cols, vmax) {
    const canvas = document.createElement('canvas');
    canvas.width = cols;
    canvas.height = rows;
    const ctx = canvas.getContext('2d');
    const img = ctx.createImageData(cols, rows);
    const px = new Uint32Array(img.data.buffer);
    const lut = lutFor(h, vmax);
    for (let r = 0; r < rows; r++) {
      const src = (r0 + r) * lv.cols + c0;
      for (let c = 0; c < cols; c++) {
        const xcode = lv.x ? lv.x[src + c] : 0;
        px[r * cols + c] = xcode ? cellPixel(h, lut, vmax, lv.cells[src + c], xcode) : lut[lv.cells[src + c]];
      }
    }
    ctx.putImageData(img, 0, 0);
    return canvas;
  }

  function tile(h, d, n, ty, tx) {
    const key = n + '/' + ty + '/' + tx + '/' + state.colormap + '/' + state.scale;
    let t = d.tiles.get(key);
    if (t) return t;
    const lv = level(d, n);
    const rows = Math.min(TILE, lv.rows - ty * TILE), cols = Math.min(TILE, lv.cols - tx * TILE);
    t = paintGrid(h, lv, ty * TILE, tx * TILE, rows, cols, h.vmax);
    d.tiles.set(key, t);
    while (d.tiles.size > 64) d.tiles.delete(d.tiles.keys().next().value);
    return t;
  }

  /* ---- head view ------------------------------------------------------------------------------ */

  const headCanvas = $('head-canvas');
  const overlay = document.createElement('canvas');
  overlay.style.cssText = 'position:absolute;left:0;top:0;pointer-events:none';
  $('head-wrap').append(overlay);

  // Geometry of the current head: cell px at zoom 1 (base), now (s), the map's frame and origin.
  function geometry(h) {
    const avail = Math.max(240, Math.min(800, window.innerWidth - 640));
    const longest = Math.max(h.rows, h.cols);
    const fit = avail / longest;
    // whole pixels per cell keep cells crisp; below 4 px the frame is filled instead
    const base = fit >= 4 ? Math.min(MAX_CELL_PX, Math.floor(fit)) : fit;
    const s = base * state.zoom;
    const w = Math.ceil(h.cols * base), hgt = Math.ceil(h.rows * base);
    return { base: base, s: s, w: w, h: hgt, ox: MARGIN.left + state.panX, oy: MARGIN.top + state.panY };
  }

  function sizeCanvases(g) {
    const width = MARGIN.left + g.w + MARGIN.right, height = MARGIN.top + g.h + MARGIN.bottom;
    for (const c of [headCanvas, overlay]) {
      if (c.width !== width || c.height !== height) { c.width = width; c.height = height; }
    }
    return headCanvas.getContext('2d');
  }

  function drawTiles(ctx, h, d, g) {
    let n = 0;
    while (g.s * (1 << n) < 1 && (h.rows >> n) > 1) n++;
    const cell = g.s * (1 << n), lv = level(d, n);
    const c0 = Math.max(0, Math.floor(-(g.ox - MARGIN.left) / cell / TILE));
    const r0 = Math.max(0, Math.floor(-(g.oy - MARGIN.top) / cell / TILE));
    for (let ty = r0; ty * TILE < lv.rows; ty++) {
      const y = g.oy + ty * TILE * cell;
      if (y > MARGIN.top + g.h) break;
      for (let tx = c0; tx * TILE < lv.cols; tx++) {
        const x = g.ox + tx * TILE * cell;
        if (x > MARGIN.left + g.w) break;
        const t = tile(h, d, n, ty, tx);
        ctx.drawImage(t, x, y, t.width * cell, t.height * cell);
      }
    }
  }

  function outlineLeaks(ctx, h, d, g) {
    const lv = d.levels[0];
    if (!lv.x || g.s < 3) return;
    ctx.strokeStyle = OPT.leak_rgb;
    ctx.lineWidth = 1;
    const rA = Math.max(0, Math.floor((MARGIN.top - g.oy) / g.s)), rB = Math.min(lv.rows, Math.ceil((MARGIN.top + g.h - g.oy) / g.s));
    const cA = Math.max(0, Math.floor((MARGIN.left - g.ox) / g.s)), cB = Math.min(lv.cols, Math.ceil((MARGIN.left + g.w - g.ox) / g.s));
    for (let r = rA; r < rB; r++) {
      for (let c = cA; c < cB; c++) {
        const x = lv.x[r * lv.cols + c];
        if (x > 0 && x < 255) ctx.strokeRect(g.ox + c * g.s + 0.5, g.oy + r * g.s + 0.5, g.s - 1, g.s - 1);
      }
    }
  }

  // Where the generated tokens start, as a cell edge of map h (fractional inside a pooled block):
  // {r, c}, each null when that axis holds no prompt/generated boundary.
  function genEdge(h) {
    if (FIRST_GEN === null) return null;
    const q0 = h.n_k - h.n_q;
    const r = FIRST_GEN > q0 && FIRST_GEN < h.n_k ? (FIRST_GEN - q0) / h.block : null;
    const c = FIRST_GEN > 0 && FIRST_GEN < h.n_k ? FIRST_GEN / h.block : null;
    return r === null && c === null ? null : { r: r, c: c };
  }

  // The boundary as two lines `width` px wide across the map drawn at (ox, oy), s px per cell: a
  // row line above the first generated query, a column line left of the first generated key.
  function drawGenBoundary(ctx, h, ox, oy, s, width) {
    const e = genEdge(h);
    if (!e) return;
    ctx.fillStyle = GEN_RGB;
    if (e.r !== null) ctx.fillRect(ox, Math.round(oy + e.r * s) - width / 2, h.cols * s, width);
    if (e.c !== null) ctx.fillRect(Math.round(ox + e.c * s) - width / 2, oy, width, h.rows * s);
  }

  // Axis labels as text (selectable), one per LABEL_PITCH px at round positions when thinned.
  function drawLabels(h, g) {
    const ql = $('query-labels'), kl = $('key-labels');
    clear(ql);
    clear(kl);
    const step = niceStep(Math.ceil(LABEL_PITCH / g.s));
    const withPos = step > 1 || h.block > 1;
    const q0 = h.n_k - h.n_q;
    for (let r = 0; r < h.rows; r += step) {
      const y = g.oy + (r + 0.5) * g.s;
      if (y < MARGIN.top || y > MARGIN.top + g.h) continue;
      const pos = q0 + r * h.block;
      const span = make('span', (withPos ? pos + ' ' : '') + cut(tokenText(pos), 20), isGenerated(pos) ? 'generated' : '');
      span.style.left = (MARGIN.left - 2) + 'px';
      span.style.top = y + 'px';
      ql.append(span);
    }
    for (let c = 0; c < h.cols; c += step) {
      const x = g.ox + (c + 0.5) * g.s;
      if (x < MARGIN.left || x > MARGIN.left + g.w) continue;
      const pos = c * h.block;
      const span = make('span', (withPos ? pos + ' ' : '') + cut(tokenText(pos), 20), isGenerated(pos) ? 'generated' : '');
      span.style.left = x + 'px';
      span.style.top = (MARGIN.top + g.h + 2) + 'px';
      kl.append(span);
    }
  }

  function drawColorbar(vmax) {
    const c = $('colorbar-canvas'), ctx = c.getContext('2d'), tab = TABLES[state.colormap];
    for (let i = 0; i < 256; i++) {
      ctx.fillStyle = 'rgb(' + tab[3 * i] + ',' + tab[3 * i + 1] + ',' + tab[3 * i + 2] + ')';
      ctx.fillRect(0, 255 - i, 16, 1);
    }
    const ticks = $('colorbar-ticks');
    clear(ticks);
    for (const t of [0, 0.25, 0.5, 0.75, 1]) {
      const span = make('span', fmt(inverseT(t, vmax, state.scale)));
      span.style.top = (255 * (1 - t)) + 'px';
      ticks.append(span);
    }
  }

  function drawHead() {
    const h = headOf(state.layer, state.head);
    const note = $('head-note');
    updateStatus(h);
    if (!h) {
      const ctx = sizeCanvases({ w: 240, h: 240 });
      ctx.clearRect(0, 0, headCanvas.width, headCanvas.height);
      clear($('query-labels'));
      clear($('key-labels'));
      note.textContent = 'layer ' + state.layer + ' head ' + state.head + ': map not stored in this run';
      return;
    }
    note.textContent = '';
    const d = headData(h), g = geometry(h), ctx = sizeCanvases(g);
    ctx.clearRect(0, 0, headCanvas.width, headCanvas.height);
    ctx.save();
    ctx.beginPath();
    ctx.rect(MARGIN.left, MARGIN.top, g.w, g.h);
    ctx.clip();
    ctx.imageSmoothingEnabled = false;
    drawTiles(ctx, h, d, g);
    outlineLeaks(ctx, h, d, g);
    drawGenBoundary(ctx, h, g.ox, g.oy, g.s, 2);
    ctx.restore();
    ctx.strokeStyle = '#888';
    ctx.strokeRect(MARGIN.left - 0.5, MARGIN.top - 0.5, g.w + 1, g.h + 1);
    drawLabels(h, g);
    drawColorbar(h.vmax);
    drawHover();
  }

  function updateStatus(h) {
    const parts = ['layer ' + state.layer, 'head ' + state.head];
    if (h) {
      parts.push(h.n_q + ' × ' + h.n_k);
      if (h.block > 1) parts.push('embedded in blocks of ' + h.block + ' tokens');
      if (h.n_leak_cells > 0) parts.push(h.n_leak_cells + ' leaking cells');
      if (h.n_bad_cells > 0) parts.push(h.n_bad_cells + ' NaN/negative cells');
      parts.push('zoom ' + state.zoom.toFixed(2) + '×');
    }
    $('status').textContent = parts.join(' · ');
  }

  // The cell under a point of the canvas, or null.
  function cellAt(h, g, x, y) {
    if (x < MARGIN.left || y < MARGIN.top || x >= MARGIN.left + g.w || y >= MARGIN.top + g.h) return null;
    const r = Math.floor((y - g.oy) / g.s), c = Math.floor((x - g.ox) / g.s);
    return r >= 0 && c >= 0 && r < h.rows && c < h.cols ? { r: r, c: c } : null;
  }

  function cellValue(h, lv, r, c) {
    const code = lv.cells[r * lv.cols + c], x = lv.x ? lv.x[r * lv.cols + c] : 0;
    if (x === 255) return { kind: 'NaN or negative', v: NaN };
    if (x > 0) return { kind: 'masked, LEAK', v: Math.max(decodeValue(h, x), code === 255 ? 0 : decodeValue(h, code)) };
    if (code === 255) return { kind: 'masked', v: 0 };
    return { kind: 'allowed', v: decodeValue(h, code) };
  }

  function span(a, b) { return b - a > 1 ? a + '–' + (b - 1) : String(a); }
  // "generated" or "prompt" for positions [a, b) of a generated run ("prompt + generated" when a
  // pooled block straddles the boundary); nothing for a run without generated tokens.
  function genNote(a, b) {
    if (FIRST_GEN === null) return make('span', '');
    const text = isGenerated(a) ? 'generated' : isGenerated(b - 1) ? 'prompt + generated' : 'prompt';
    return make('span', text, isGenerated(b - 1) ? 'generated' : '');
  }

  // Hover panel: the cell's tokens, positions and probability, the row's top keys, predictions.
  function showHover(h, r, c) {
    const info = $('hover-info'), lv = headData(h).levels[0];
    clear(info);
    const q0 = h.n_k - h.n_q + r * h.block, q1 = Math.min(h.n_k, q0 + h.block);
    const k0 = c * h.block, k1 = Math.min(h.n_k, k0 + h.block);
    const cv = cellValue(h, lv, r, c);
    const t = make('table');
    t.append(row([make('span', 'query'), make('span', span(q0, q1)), tok(q0), genNote(q0, q1)]));
    t.append(row([make('span', 'key'), make('span', span(k0, k1)), tok(k0), genNote(k0, k1)]));
    t.append(row([make('span', h.block > 1 ? 'max p' : 'p'), make('span', fmt(cv.v), 'prob'), make('span', cv.kind)]));
    info.append(t);
    info.append(make('h2', 'Top keys of this row'));
    const top = [];
    for (let j = 0; j < lv.cols; j++) {
      const v = cellValue(h, lv, r, j);
      if (v.v > 0) top.push([v.v, j]);
    }
    top.sort((a, b) => b[0] - a[0]);
    const tt = make('table');
    for (const [v, j] of top.slice(0, 5)) tt.append(row([make('span', span(j * h.block, Math.min(h.n_k, (j + 1) * h.block))), tok(j * h.block), make('span', fmt(v))]));
    info.append(tt);
    if (h.block === 1) appendPredictions(info, q0);
  }

  function appendPredictions(parent, pos) {
    const p = SECTIONS.predictions;
    if (!p || pos >= RUN.n_tokens) return;
    parent.append(make('h2', 'Predicted next token at position ' + pos));
    const t = make('table');
    for (let i = 0; i < p.k; i++) {
      const piece = p.piece[pos * p.k + i];
      if (piece === null) continue;
      t.append(row([make('span', piece, 'tok'), make('span', fmt(p.prob[pos * p.k + i]))]));
    }
    parent.append(t);
  }

  function drawHover() {
    const ctx = overlay.getContext('2d');
    ctx.clearRect(0, 0, overlay.width, overlay.height);
    const h = headOf(state.layer, state.head);
    if (!h || !state.hover) return;
    const g = geometry(h);
    ctx.strokeStyle = '#fff';
    ctx.lineWidth = 2;
    ctx.strokeRect(g.ox + state.hover.c * g.s, g.oy + state.hover.r * g.s, Math.max(g.s, 2), Math.max(g.s, 2));
  }

  function zoomAt(factor, x, y) {
    const h = headOf(state.layer, state.head);
    if (!h) return;
    const g = geometry(h);
    const maxZoom = Math.max(1, MAX_ZOOM_CELL_PX / g.base);
    const zoom = Math.min(maxZoom, Math.max(1, state.zoom * factor));
    const k = zoom / state.zoom;
    state.panX = x - MARGIN.left - (x - g.ox) * k;
    state.panY = y - MARGIN.top - (y - g.oy) * k;
    state.zoom = zoom;
    clampPan(h);
    drawHead();
  }

  function clampPan(h) {
    const g = geometry(h);
    const mapW = h.cols * g.s, mapH = h.rows * g.s;
    state.panX = Math.min(0, Math.max(state.panX, Math.min(0, g.w - mapW)));
    state.panY = Math.min(0, Math.max(state.panY, Math.min(0, g.h - mapH)));
  }

  function canvasPoint(ev) {
    const rect = headCanvas.getBoundingClientRect();
    return { x: ev.clientX - rect.left, y: ev.clientY - rect.top };
  }

  function wireHeadView() {
    let drag = null;
    headCanvas.addEventListener('mousemove', (ev) => {
      const h = headOf(state.layer, state.head);
      if (!h) return;
      const p = canvasPoint(ev);
      if (drag) {
        state.panX = drag.panX + p.x - drag.x;
        state.panY = drag.panY + p.y - drag.y;
        clampPan(h);
        drawHead();
        return;
      }
      const cell = cellAt(h, geometry(h), p.x, p.y);
      if (cell && (!state.hover || cell.r !== state.hover.r || cell.c !== state.hover.c)) {
        state.hover = cell;
        showHover(h, cell.r, cell.c);
        drawHover();
      }
    });
    headCanvas.addEventListener('mousedown', (ev) => {
      const p = canvasPoint(ev);
      drag = { x: p.x, y: p.y, panX: state.panX, panY: state.panY };
    });
    window.addEventListener('mouseup', () => { drag = null; });
    headCanvas.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const p = canvasPoint(ev);
      zoomAt(ev.deltaY < 0 ? 1.25 : 0.8, p.x, p.y);
    }, { passive: false });
    $('zoom-reset').addEventListener('click', () => { state.zoom = 1; state.panX = state.panY = 0; drawHead(); });
  }

  /* ---- text view: tokens in two columns, one line per pair, opacity = weight ---------------- */

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const ROW_PX = 20, LINES_W = 260;

  function textHeads() {
    if (state.textMode === 'head') return [headOf(state.layer, state.head)].filter(Boolean);
    return HEADS.filter((h) => h.layer === state.layer);
  }

  function tokenColumn(box, first, count, side) {
    clear(box);
    for (let i = 0; i < count; i++) {
      const pos = first + i;
      const div = make('div', cut(tokenText(pos), 32));
      div.title = 'position ' + pos;
      div.dataset.pos = pos;
      if (isGenerated(pos)) div.classList.add('generated');
      if (pos === FIRST_GEN) div.classList.add('first-generated');
      if (state.selected && state.selected.side === side && state.selected.pos === pos) div.classList.add('selected');
      div.addEventListener('click', () => {
        const same = state.selected && state.selected.side === side && state.selected.pos === pos;
        state.selected = same ? null : { side: side, pos: pos };
        drawText();
      });
      box.append(div);
    }
  }

  // The pairs (query pos, key pos, weight) of one head inside the window, selection applied.
  function pairs(h, first, count) {
    const lv = headData(h).levels[0], out = [], q0 = h.n_k - h.n_q, sel = state.selected;
    for (let qp = Math.max(first, q0); qp < first + count; qp++) {
      if (sel && sel.side === 'q' && sel.pos !== qp) continue;
      for (let kp = first; kp < first + count && kp < h.n_k; kp++) {
        if (sel && sel.side === 'k' && sel.pos !== kp) continue;
        const v = cellValue(h, lv, qp - q0, kp);
        if (v.v > 0) out.push({ q: qp, k: kp, w: v.v, leak: v.kind !== 'allowed' });
      }
    }
    return out;
  }

  function drawText() {
    const heads = textHeads(), svg = $('text-lines'), info = $('text-info');
    const n = RUN.n_tokens, first = Math.min(Math.max(0, state.textStart), Math.max(0, n - 1));
    const count = Math.min(TEXT_WINDOW, n - first);
    $('text-range').textContent = 'positions ' + first + '–' + (first + count - 1) + ' of ' + n;
    tokenColumn($('text-queries'), first, count, 'q');
    tokenColumn($('text-keys'), first, count, 'k');
    clear(svg);
    svg.setAttribute('width', LINES_W);
    svg.setAttribute('height', count * ROW_PX);
    clear(info);
    const pooled = heads.filter((h) => h.block > 1);
    if (!heads.length || pooled.length) {
      info.append(make('p', heads.length ? 'The text view needs full maps; this one is embedded in blocks of ' + pooled[0].block + ' tokens (raise --max-map-bytes or pick --layer).' : 'No map stored for this head.', 'hint'));
      return;
    }
    const all = [];
    heads.forEach((h, i) => {
      for (const p of pairs(h, first, count)) { p.head = h.head; p.colour = HEAD_COLOURS[i % HEAD_COLOURS.length]; all.push(p); }
    });
    for (const p of all) {
      const line = document.createElementNS(SVG_NS, 'line');
      line.setAttribute('x1', 2);
      line.setAttribute('y1', (p.q - first + 0.5) * ROW_PX);
      line.setAttribute('x2', LINES_W - 2);
      line.setAttribute('y2', (p.k - first + 0.5) * ROW_PX);
      line.setAttribute('stroke', p.leak ? OPT.leak_rgb : state.textMode === 'head' ? HEAD_COLOURS[0] : p.colour);
      line.setAttribute('stroke-opacity', Math.min(1, p.w));
      line.setAttribute('stroke-width', 2);
      line.dataset.q = p.q;
      line.dataset.k = p.k;
      line.dataset.head = p.head;
      svg.append(line);
    }
    describeSelection(info, all);
  }

  function describeSelection(info, all) {
    const sel = state.selected;
    if (!sel) {
      info.append(make('p', 'Click a token on the left to see what it attends to, on the right to see what attends to it.', 'hint'));
      return;
    }
    info.append(make('h2', (sel.side === 'q' ? 'Position ' + sel.pos + ' attends to' : 'What attends to position ' + sel.pos)));
    info.firstChild.append(' ', tok(sel.pos));
    const t = make('table');
    all.sort((a, b) => b.w - a.w);
    for (const p of all.slice(0, 20)) {
      const other = sel.side === 'q' ? p.k : p.q;
      t.append(row([make('span', state.textMode === 'layer' ? 'h' + p.head : ''), make('span', other), tok(other), make('span', fmt(p.w))]));
    }
    info.append(t);
    if (sel.side === 'q') appendPredictions(info, sel.pos);
  }

  function wireTextView() {
    for (const radio of document.querySelectorAll('input[name="text-mode"]')) {
      radio.addEventListener('change', () => { state.textMode = radio.value; drawText(); });
    }
    const start = $('text-start');
    start.max = Math.max(0, RUN.n_tokens - 1);
    start.addEventListener('change', () => { state.textStart = Number(start.value) || 0; state.selected = null; drawText(); });
  }

  /* ---- overview: every layer x head on one canvas, one shared scale ------------------------- */

  const OV = { left: 44, top: 22, gap: 4 };

  function overviewThumb() {
    return Math.max(20, Math.min(64, Math.floor((window.innerWidth - 80 - OV.left) / RUN.n_heads) - OV.gap));
  }

  function thumbGrid(h) {
    if (h.thumb) {
      if (!h.thumbCells) h.thumbCells = decodeBlock('t' + h.id);
      return { rows: h.thumb.rows, cols: h.thumb.cols, cells: h.thumbCells, x: null, vmax: h.thumb.vmax };
    }
    const lv = headData(h).levels[0];
    return { rows: lv.rows, cols: lv.cols, cells: lv.cells, x: lv.x, vmax: h.vmax };
  }

  function drawOverview() {
    const canvas = $('overview-canvas'), size = overviewThumb();
    canvas.width = OV.left + RUN.n_heads * (size + OV.gap);
    canvas.height = OV.top + RUN.n_layers * (size + OV.gap);
    const ctx = canvas.getContext('2d');
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = '11px monospace';
    ctx.fillStyle = '#222';
    const shared = HEADS.reduce((m, h) => Math.max(m, h.vmax), 0) || 1;
    for (let hd = 0; hd < RUN.n_heads; hd++) ctx.fillText('H' + hd, OV.left + hd * (size + OV.gap), 14);
    for (let l = 0; l < RUN.n_layers; l++) {
      const y = OV.top + l * (size + OV.gap);
      ctx.fillStyle = '#222';
      ctx.fillText('L' + l, 4, y + size / 2 + 4);
      for (let hd = 0; hd < RUN.n_heads; hd++) drawThumb(ctx, headOf(l, hd), OV.left + hd * (size + OV.gap), y, size, shared);
    }
  }

  function drawThumb(ctx, h, x, y, size, shared) {
    if (!h) {
      ctx.fillStyle = '#eee';
      ctx.fillRect(x, y, size, size);
      return;
    }
    const g = thumbGrid(h);
    const grid = paintGrid({ vmax: g.vmax }, g, 0, 0, g.rows, g.cols, shared);
    const cell = size / Math.max(g.rows, g.cols);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(grid, x, y, g.cols * cell, g.rows * cell);
    drawGenBoundary(ctx, h, x, y, size / Math.max(h.rows, h.cols), 1);
    if (h.n_leak_cells > 0) {
      ctx.strokeStyle = OPT.leak_rgb;
      ctx.lineWidth = 2;
      ctx.strokeRect(x + 1, y + 1, size - 2, size - 2);
    }
  }

  function wireOverview() {
    $('overview-canvas').addEventListener('click', (ev) => {
      const rect = ev.target.getBoundingClientRect(), size = overviewThumb();
      const hd = Math.floor((ev.clientX - rect.left - OV.left) / (size + OV.gap));
      const l = Math.floor((ev.clientY - rect.top - OV.top) / (size + OV.gap));
      if (l >= 0 && hd >= 0 && l < RUN.n_layers && hd < RUN.n_heads) openHead(l, hd);
    });
  }

  /* ---- statistics: a sortable table and a layers x heads matrix per statistic --------------- */

  // Fractions of mass sit on a fixed [0, 1]; the others run from 0 to their largest value.
  const FRACTIONS = ['max_prob', 'sink', 'prev_token', 'self', 'local_frac'];

  // A layers x heads table of values[layer * n_heads + head], each cell coloured by paint(v) (an
  // [r, g, b]; null values grey), written with `digits` decimals; a click opens the head.
  function headMatrix(values, name, digits, paint, onClick) {
    const table = make('table', null, 'head-matrix'), head = make('tr');
    head.append(make('th', 'L \\ H'));
    for (let h = 0; h < RUN.n_heads; h++) head.append(make('th', h));
    table.append(head);
    for (let l = 0; l < RUN.n_layers; l++) {
      const tr = make('tr');
      tr.append(make('th', l));
      for (let h = 0; h < RUN.n_heads; h++) {
        const v = values[l * RUN.n_heads + h];
        const td = make('td', v === null ? '–' : v.toFixed(digits));
        const rgb = v === null ? [238, 238, 238] : paint(v);
        td.style.background = cssRgb(rgb);
        td.style.color = inkOn(rgb);
        td.title = 'layer ' + l + ' head ' + h + ': ' + name + ' ' + fmt(v);
        td.dataset.layer = l;
        td.dataset.head = h;
        td.addEventListener('click', () => (onClick || openHead)(l, h));
        tr.append(td);
      }
      table.append(tr);
    }
    return table;
  }
  function largest(values) { return values.reduce((m, v) => (v !== null && v > m ? v : m), 0); }
  // Text on a background: dark on light, white on dark (Rec. 601 luma).
  function inkOn(rgb) { return 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140 ? '#111' : '#fff'; }
  // The colormap at t in [0, 1].
  function mapRgb(t) {
    const i = Math.min(255, Math.floor(Math.max(0, Math.min(1, t || 0)) * 256)), tab = TABLES[state.colormap];
    return [tab[3 * i], tab[3 * i + 1], tab[3 * i + 2]];
  }
  // The diverging map of the static pictures (render/importance.c) at t in [-1, 1]: blue, white, red.
  const DIVERGING = parseTable(OPT.diverging);
  function divergingRgb(t) {
    const i = Math.min(255, Math.floor((Math.max(-1, Math.min(1, t || 0)) + 1) * 128));
    return [DIVERGING[3 * i], DIVERGING[3 * i + 1], DIVERGING[3 * i + 2]];
  }

  function drawStatsMatrix(stats) {
    const name = state.stat, values = stats.values[name], box = $('stats-matrix');
    clear(box);
    const top = FRACTIONS.includes(name) ? 1 : largest(values) || 1;
    box.append(headMatrix(values, name, 2, (v) => mapRgb(v / top)));
  }

  function drawStatsTable(stats) {
    const box = $('stats-table'), keys = ['layer', 'head'].concat(stats.names);
    clear(box);
    const rows = [];
    for (let l = 0; l < RUN.n_layers; l++) {
      for (let h = 0; h < RUN.n_heads; h++) {
        const r = { layer: l, head: h };
        for (const n of stats.names) r[n] = stats.values[n][l * RUN.n_heads + h];
        rows.push(r);
      }
    }
    const { key, dir } = state.statSort;
    rows.sort((a, b) => ((a[key] ?? -Infinity) - (b[key] ?? -Infinity)) * dir || a.layer - b.layer || a.head - b.head);
    const table = make('table'), thead = make('tr');
    for (const k of keys) {
      const th = make('th', k + (k === key ? (dir > 0 ? ' ▲' : ' ▼') : ''));
      th.addEventListener('click', () => {
        state.statSort = { key: k, dir: k === key ? -dir : (k === 'layer' || k === 'head' ? 1 : -1) };
        drawStatsTable(stats);
      });
      thead.append(th);
    }
    table.append(thead);
    const body = make('tbody');
    for (const r of rows) {
      const tr = make('tr');
      for (const k of keys) tr.append(make('td', k === 'layer' || k === 'head' ? r[k] : fmt(r[k])));
      tr.addEventListener('click', () => openHead(r.layer, r.head));
      body.append(tr);
    }
    table.append(body);
    box.append(table);
  }

  function drawStats() {
    const stats = SECTIONS.stats;
    if (!stats) return;
    drawStatsMatrix(stats);
    drawStatsTable(stats);
  }

  function wireStats() {
    const stats = SECTIONS.stats, select = $('stat-select');
    if (!stats) return;
    for (const n of stats.names) { const o = make('option', n); o.value = n; select.append(o); }
    state.stat = stats.names.includes('prev_token') ? 'prev_token' : stats.names[0];
    select.value = state.stat;
    select.addEventListener('change', () => { state.stat = select.value; drawStats(); });
  }

  /* ---- what the run has beyond maps: one panel per section ---------------------------------- */

  function checksTable(checks) {
    const t = make('table'), head = make('tr');
    for (const k of ['check', 'result', 'layer', 'position', 'max |diff|', 'detail']) head.append(make('th', k, k === 'detail' || k === 'check' ? 'text' : ''));
    t.append(head);
    for (const c of checks) {
      const tr = make('tr');
      tr.append(make('td', c.name, 'text'));
      tr.append(make('td', c.passed ? 'passed' : 'FAILED', c.passed ? '' : 'bad'));
      tr.append(make('td', c.layer < 0 ? (c.name === 'perturbation' ? 'logits' : '–') : c.layer));
      tr.append(make('td', c.position < 0 ? '–' : c.position));
      tr.append(make('td', fmt(c.max_abs_diff)));
      tr.append(make('td', c.detail, 'text'));
      t.append(tr);
    }
    return t;
  }

  // Head importance (`loupe ablate`): the NLL rise when each head is ablated, as a layers x heads
  // matrix (a head whose removal does not raise it in the masked colour) and the heads that matter
  // most; a click on either opens the head.
  function renderImportance(box, s) {
    const where = s.own ? 'this run' : 'ablate run ' + s.run_id;
    const vmax = s.delta.reduce((m, v) => (v !== null && Math.abs(v) > m ? Math.abs(v) : m), 0) || 1;
    box.append(make('p', 'Each cell: how much the mean next-token NLL (nats) rises when that head is ablated (' + s.method + ', ' + where + '): red, removing the head hurts; blue, it helps; white, no change (scale ±' + fmt(vmax) + '). Click a head to open it.', 'hint'));
    box.append(headMatrix(s.delta, 'NLL rise', 3, (v) => divergingRgb(v / vmax)));
    box.append(make('h2', 'Heads that matter most'));
    const order = s.delta.map((d, i) => [d, i]).filter(([d]) => d !== null).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
    const t = make('table', null, 'importance-top'), head = make('tr');
    for (const k of ['layer', 'head', 'NLL rise']) head.append(make('th', k));
    t.append(head);
    for (const [d, i] of order.slice(0, 10)) {
      const l = Math.floor(i / RUN.n_heads), h = i % RUN.n_heads, tr = make('tr');
      for (const v of [l, h, fmt(d)]) tr.append(make('td', v));
      tr.addEventListener('click', () => openHead(l, h));
      t.append(tr);
    }
    box.append(t);
  }

  // Logit lens (`loupe trace --logit-lens`): layers x positions, each cell the top token the
  // residual after that layer reads out as (its probability the cell's colour), the input tokens
  // above, the layer's mean next-token NLL at the right; LENS_WINDOW positions at a time.
  const LENS_WINDOW = 32;
  function renderLogitLens(box, s) {
    const controls = make('p'), grid = make('div');
    const start = make('input');
    start.type = 'number';
    start.min = 0;
    start.max = Math.max(0, s.n_pos - 1);
    start.value = 0;
    start.id = 'lens-start';
    const label = make('label', 'from position ');
    label.append(start);
    controls.append(label);
    const draw = () => {
      clear(grid);
      const first = Math.min(Math.max(0, Number(start.value) || 0), Math.max(0, s.n_pos - 1));
      const count = Math.min(LENS_WINDOW, s.n_pos - first);
      const table = make('table', null, 'lens-grid'), head = make('tr');
      head.append(make('th', 'layer \\ pos'));
      for (let p = first; p < first + count; p++) {
        const th = make('th');
        th.append(make('span', p), make('br'), tok(p));
        head.append(th);
      }
      head.append(make('th', 'NLL'));
      table.append(head);
      for (let l = 0; l < s.n_layers; l++) {
        const tr = make('tr');
        tr.append(make('th', l));
        for (let p = first; p < first + count; p++) {
          const piece = s.piece[l * s.n_pos + p], prob = s.prob[l * s.n_pos + p];
          const td = make('td', piece === null ? '–' : cut(piece, 12));
          td.dataset.layer = l;
          td.dataset.pos = p;
          if (piece !== null) {
            const rgb = mapRgb(prob);
            td.style.background = cssRgb(rgb);
            td.style.color = inkOn(rgb);
            td.title = 'after layer ' + l + ', position ' + p + ': ' + piece + ' p ' + fmt(prob);
          }
          tr.append(td);
        }
        tr.append(make('td', fmt(s.layer_nll[l]), 'lens-nll'));
        table.append(tr);
      }
      grid.append(table);
    };
    start.addEventListener('change', draw);
    box.append(make('p', 'Each cell: the most likely next token when the residual stream after that layer goes through the final norm and the LM head, coloured by its probability; the last layer is the model\'s own prediction. NLL: the layer\'s mean next-token NLL (nats).', 'hint'));
    box.append(controls, grid);
    draw();
  }

  // Diffs (`loupe diff` stored in this database): the layers x heads matrix of each head's mean
  // Jensen-Shannon divergence (white at 0 to red at the largest, as render --diff draws it), the
  // per-position strip of KL(A||B) with the positions where the argmax differs marked, and the
  // clicked head's difference map B - A on the diverging colours (when both runs are here).
  function renderDiffs(box, list) {
    const pick = make('select'), body = make('div');
    pick.id = 'diff-select';
    for (const d of list) {
      const o = make('option', 'diff ' + d.id + ': ' + d.a_db + ' run ' + d.a_run + ' vs ' + d.b_db + ' run ' + d.b_run);
      o.value = d.id;
      pick.append(o);
    }
    pick.value = list[list.length - 1].id;
    const drawMap = (d, l, h, where) => {
      clear(where);
      state.diffHead = [l, h];
      where.append(make('h2', 'Layer ' + l + ', head ' + h + ': B - A (mean JS ' + fmt(d.js[l * RUN.n_heads + h]) + ', max |diff| ' + fmt(d.max_abs[l * RUN.n_heads + h]) + ')'));
      const m = d.maps ? d.maps[l * RUN.n_heads + h] : null;
      if (!m) { where.append(make('p', d.maps ? 'One of the runs stored no map for this head.' : 'No difference map in this page: ' + d.maps_absent + '.', 'hint')); return; }
      const vmax = m.diff.reduce((x, v) => (v !== null && Math.abs(v) > x ? Math.abs(v) : x), 0) || 1;
      const cell = Math.max(3, Math.min(16, Math.floor(512 / m.n_k))), canvas = make('canvas');
      canvas.id = 'diff-canvas';
      canvas.width = m.n_k * cell;
      canvas.height = m.n_q * cell;
      canvas.dataset.cell = cell;
      const g = canvas.getContext('2d'), masked = maskedRgb();
      for (let q = 0; q < m.n_q; q++) {
        for (let k = 0; k < m.n_k; k++) {
          const v = m.diff[q * m.n_k + k], allowed = k <= m.n_k - m.n_q + q;
          g.fillStyle = cssRgb(allowed && v !== null ? divergingRgb(v / vmax) : masked);
          g.fillRect(k * cell, q * cell, cell, cell);
        }
      }
      canvas.title = 'queries down, keys across; red: B attends more, blue: less (scale ±' + fmt(vmax) + ')';
      where.append(make('p', 'Queries down, keys across; red: B attends more, blue: less, white: the same (scale ±' + fmt(vmax) + '); grey: masked.', 'hint'), canvas);
    };
    const draw = () => {
      clear(body);
      const d = list.find((x) => x.id === Number(pick.value));
      const kl = d.kl.filter((v) => v !== null), agree = d.argmax_agree.filter((v) => v !== null);
      const meanJs = d.js.filter((v) => v !== null), mean = (a) => a.reduce((x, v) => x + v, 0) / (a.length || 1);
      body.append(make('p', 'A: ' + d.a_db + ' run ' + d.a_run + ', B: ' + d.b_db + ' run ' + d.b_run + ', ' + d.n_tokens + ' tokens. Mean JS ' + fmt(mean(meanJs)) + ' nats; next token: ' + (kl.length ? 'mean KL(A||B) ' + fmt(mean(kl)) + ' nats, ' : '') + 'argmax agrees at ' + (100 * mean(agree)).toFixed(1) + '% of positions. Click a head for its difference map.', 'hint'));
      const top = largest(d.js) || 1, map = make('div');
      map.id = 'diff-map';
      body.append(headMatrix(d.js, 'mean JS', 4, (v) => divergingRgb(v / top), (l, h) => drawMap(d, l, h, map)));
      body.append(make('h2', 'Per position: KL(A||B) of the next token; outlined where the argmax differs'));
      const strip = make('table', null, 'diff-strip'), row = make('tr'), klTop = largest(d.kl) || 1;
      for (let p = 0; p < d.n_tokens; p++) {
        const td = make('td');
        td.append(tok(p));
        td.dataset.pos = p;
        const v = d.kl[p];
        if (v !== null) td.style.background = cssRgb(divergingRgb(v / klTop));
        if (d.argmax_agree[p] === 0) td.className = 'disagree';
        td.title = 'position ' + p + ': KL ' + fmt(v) + (d.argmax_agree[p] === 0 ? ', the argmax differs' : d.argmax_agree[p] === 1 ? ', the argmax agrees' : '');
        row.append(td);
      }
      strip.append(row);
      body.append(strip, map);
      let best = 0;
      for (let i = 1; i < d.js.length; i++) if (d.js[i] !== null && (d.js[best] === null || d.js[i] > d.js[best])) best = i;
      drawMap(d, Math.floor(best / RUN.n_heads), best % RUN.n_heads, map);
    };
    pick.addEventListener('change', draw);
    if (list.length > 1) box.append(pick);
    box.append(body);
    draw();
  }

  const PANELS = [
    { name: 'importance', title: 'Importance', render: renderImportance },
    { name: 'logit_lens', title: 'Logit lens', render: renderLogitLens },
    { name: 'diffs', title: 'Diffs', render: renderDiffs },
    {
      name: 'leak', title: 'Leak check',
      banner: (s) => {
        const failed = s.checks.filter((c) => !c.passed).length;
        const where = s.own ? 'this run' : 'leak run ' + s.run_id;
        return failed ? ['LEAK: ' + failed + ' of ' + s.checks.length + ' checks failed (' + where + ')', true]
          : ['leak check passed: ' + s.checks.length + ' checks (' + where + ')', false];
      },
      render: (box, s) => {
        box.append(make('p', (s.passed ? 'Every check passed' : 'Some checks FAILED') + ' in ' + (s.own ? 'this run' : 'run ' + s.run_id + ' (the latest leak run)') + '.'));
        box.append(checksTable(s.checks));
      },
    },
    {
      name: 'predictions', title: 'Predictions',
      render: (box, s) => {
        const t = make('table'), head = make('tr');
        head.append(make('th', 'pos'), make('th', 'token', 'text'));
        for (let i = 0; i < s.k; i++) head.append(make('th', 'top ' + (i + 1), 'text'));
        t.append(head);
        for (let pos = 0; pos < RUN.n_tokens; pos++) {
          const tr = make('tr');
          tr.append(make('td', pos));
          const td = make('td', '', 'text');
          td.append(tok(pos));
          tr.append(td);
          for (let i = 0; i < s.k; i++) {
            const j = pos * s.k + i, cell = make('td', '', 'text');
            if (s.piece[j] !== null) cell.append(make('span', s.piece[j], 'tok'), ' ' + fmt(s.prob[j]));
            tr.append(cell);
          }
          t.append(tr);
        }
        box.append(t);
      },
    },
  ];

  function panelFor(name) {
    return PANELS.find((p) => p.name === name) || {
      name: name, title: name,
      render: (box, s) => box.append(make('pre', JSON.stringify(s, null, 1))),
    };
  }

  /* ---- page: tabs, selects, keys, banners ----------------------------------------------------- */

  const VIEWS = [
    { name: 'head', title: 'Head', key: 'h', draw: drawHead },
    { name: 'text', title: 'Text', key: 't', draw: drawText },
    { name: 'overview', title: 'Overview', key: 'o', draw: drawOverview },
  ];

  function setView(name) {
    state.view = name;
    for (const b of document.querySelectorAll('#tabs button')) b.setAttribute('aria-selected', String(b.dataset.view === name));
    for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + name;
    const v = VIEWS.find((x) => x.name === name);
    if (v) v.draw();
  }

  function openHead(layer, head) {
    state.layer = layer;
    state.head = head;
    state.zoom = 1;
    state.panX = state.panY = 0;
    state.hover = null;
    state.selected = null;
    $('layer-select').value = String(layer);
    $('head-select').value = String(head);
    setView('head');
  }

  function redraw() {
    const v = VIEWS.find((x) => x.name === state.view);
    if (v) v.draw();
  }

  function step(dLayer, dHead) {
    state.layer = Math.min(RUN.n_layers - 1, Math.max(0, state.layer + dLayer));
    state.head = Math.min(RUN.n_heads - 1, Math.max(0, state.head + dHead));
    $('layer-select').value = String(state.layer);
    $('head-select').value = String(state.head);
    state.hover = null;
    state.selected = null;
    redraw();
  }

  function buildTabs() {
    const nav = $('tabs');
    if (SECTIONS.stats) VIEWS.push({ name: 'stats', title: 'Statistics', key: 's', draw: drawStats });
    for (const name of Object.keys(SECTIONS)) {
      if (name === 'stats') continue;
      const panel = panelFor(name), box = make('section', null, 'view section-view');
      box.id = 'view-' + name;
      box.hidden = true;
      box.append(make('h2', panel.title));
      panel.render(box, SECTIONS[name]);
      $('section-views').append(box);
      VIEWS.push({ name: name, title: panel.title, draw: () => {} });
    }
    for (const v of VIEWS) {
      const b = make('button', v.title);
      b.type = 'button';
      b.dataset.view = v.name;
      b.addEventListener('click', () => setView(v.name));
      nav.append(b);
    }
  }

  function buildBanners() {
    const box = $('banners');
    for (const name of Object.keys(SECTIONS)) {
      const panel = panelFor(name);
      if (!panel.banner) continue;
      const [text, bad] = panel.banner(SECTIONS[name]);
      box.append(make('span', text, bad ? 'banner bad' : 'banner'));
    }
    const leaking = HEADS.filter((h) => h.n_leak_cells > 0);
    if (leaking.length) {
      const cells = leaking.reduce((s, h) => s + h.n_leak_cells, 0);
      box.append(make('span', 'LEAK: ' + cells + ' masked cells in ' + leaking.length + ' maps hold probability > ' + OPT.leak_threshold, 'banner bad'));
    }
    if (FIRST_GEN !== null) {
      const b = make('span', 'generated: positions ' + FIRST_GEN + '–' + (RUN.n_tokens - 1) + ' (' + (RUN.n_tokens - FIRST_GEN) + ' tokens after a ' + FIRST_GEN + '-token prompt), in ', 'banner');
      b.append(make('span', 'this colour', 'generated'), ' and past the orange line on the maps');
      b.id = 'generated-banner';
      box.append(b);
    }
    if (!HEADS.length) box.append(make('span', 'this run stored no attention maps (maps_dtype ' + RUN.maps_dtype + '): statistics and predictions only', 'banner'));
    if (DATA.maps.max_block > 1) box.append(make('span', 'maps embedded in blocks of up to ' + DATA.maps.max_block + ' tokens (--max-map-bytes ' + DATA.maps.budget_bytes + ')', 'banner'));
  }

  function fillSelect(select, n, onChange) {
    for (let i = 0; i < n; i++) { const o = make('option', i); o.value = String(i); select.append(o); }
    select.addEventListener('change', () => { onChange(Number(select.value)); state.hover = null; state.selected = null; redraw(); });
  }

  function onKey(ev) {
    const t = ev.target || {}, tag = t.tagName;
    // Fields keep their own keys; radio buttons keep only the arrows.
    const toggle = tag === 'INPUT' && (t.type === 'radio' || t.type === 'checkbox');
    if ((tag === 'INPUT' && !toggle) || tag === 'SELECT' || tag === 'TEXTAREA' || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    if (moves[ev.key]) {
      if (toggle) return;
      ev.preventDefault();
      step(moves[ev.key][0], moves[ev.key][1]);
      return;
    }
    if (ev.key === '+' || ev.key === '=') zoomAt(1.25, MARGIN.left + 200, MARGIN.top + 200);
    else if (ev.key === '-') zoomAt(0.8, MARGIN.left + 200, MARGIN.top + 200);
    else if (ev.key === '0') $('zoom-reset').click();
    else if (ev.key === 'l') { state.scale = state.scale === 'log' ? 'linear' : 'log'; $('scale-select').value = state.scale; redraw(); }
    else {
      const v = VIEWS.find((x) => x.key === ev.key);
      if (v) setView(v.name);
    }
  }

  function init() {
    document.title = DATA.title;
    $('title').textContent = DATA.title;
    const tokens = FIRST_GEN === null ? RUN.n_tokens + ' tokens' : RUN.n_tokens + ' tokens (' + FIRST_GEN + ' prompt + ' + (RUN.n_tokens - FIRST_GEN) + ' generated)';
    $('subtitle').textContent = RUN.n_layers + ' layers × ' + RUN.n_heads + ' heads, ' + tokens + ', status ' + RUN.status + (RUN.prompt ? ' · prompt: ' + RUN.prompt : '');
    fillSelect($('layer-select'), RUN.n_layers, (v) => { state.layer = v; });
    fillSelect($('head-select'), RUN.n_heads, (v) => { state.head = v; });
    const scale = $('scale-select'), cmap = $('colormap-select');
    scale.value = state.scale;
    cmap.value = state.colormap;
    scale.addEventListener('change', () => { state.scale = scale.value; redraw(); });
    cmap.addEventListener('change', () => { state.colormap = cmap.value; redraw(); });
    if (HEADS.length) { state.layer = HEADS[0].layer; state.head = HEADS[0].head; }
    $('layer-select').value = String(state.layer);
    $('head-select').value = String(state.head);
    buildBanners();
    buildTabs();
    wireHeadView();
    wireTextView();
    wireOverview();
    wireStats();
    document.addEventListener('keydown', onKey);
    setView('head');
    document.body.dataset.ready = '1';
  }

  // For tests and the curious: where a cell of the current head is drawn (canvas pixels).
  window.loupeViewer = {
    data: DATA, state: state, openHead: openHead, setView: setView,
    cellCenter: (r, c) => {
      const h = headOf(state.layer, state.head), g = geometry(h);
      return { x: g.ox + (c + 0.5) * g.s, y: g.oy + (r + 0.5) * g.s };
    },
    zoomTo: (r, c, factor) => {
      const h = headOf(state.layer, state.head), g = geometry(h);
      zoomAt(factor, g.ox + (c + 0.5) * g.s, g.oy + (r + 0.5) * g.s);
    },
    overviewCenter: (layer, head) => {
      const size = overviewThumb();
      return { x: OV.left + head * (size + OV.gap) + size / 2, y: OV.top + layer * (size + OV.gap) + size / 2 };
    },
  };
  init();
})();
