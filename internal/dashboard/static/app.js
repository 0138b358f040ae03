// The live page of a tapes cluster: renders the snapshots /api/events
// streams (and /api/state answers), sends the buttons' actions to
// /api/action. Plain DOM, no framework. Every field of the snapshot may be
// missing: each renderer reads through arr/obj/num/str and never throws on
// absent data; a renderer that throws anyway is isolated (the others still
// run) and the error is kept in window.__tapesErrors for the browser test.
'use strict';
(function () {
  // ---------- small helpers ----------
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const arr = (v) => (Array.isArray(v) ? v : []);
  const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
  const isNum = (v) => (typeof v === 'number' && isFinite(v)) || (typeof v === 'string' && v.trim() !== '' && isFinite(Number(v)));
  const num = (v, d) => (isNum(v) ? Number(v) : d === undefined ? 0 : d);
  const str = (v, d) => (v === null || v === undefined ? (d === undefined ? '' : d) : String(v));
  const fmt = (n) => (isNum(n) ? Number(n).toLocaleString('en-US', { maximumFractionDigits: 1 }) : '–');

  window.__tapesErrors = [];
  function noteError(where, e) {
    const msg = where + ': ' + (e && e.stack ? e.stack : String(e));
    window.__tapesErrors.push(msg);
    if (window.console) console.error(msg);
  }

  // el('div', {class: 'x', dataset: {a: 1}, text: 'hi', title: 't'}, child...)
  function el(tag, attrs, ...children) {
    const svg = tag.startsWith('svg:');
    const node = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') node.setAttribute('class', v);
      else if (k === 'text') node.textContent = v;
      else if (k === 'dataset') for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = dv;
      else if (k === 'style' && typeof v === 'object') Object.assign(node.style, v);
      else node.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined && c !== false) node.append(c);
    return node;
  }
  function setText(node, text) {
    text = str(text);
    if (node && node.textContent !== text) node.textContent = text;
  }
  function setAttr(node, name, value) {
    if (!node) return;
    if (value === null || value === undefined || value === false) {
      if (node.hasAttribute(name)) node.removeAttribute(name);
      return;
    }
    value = String(value);
    if (node.getAttribute(name) !== value) node.setAttribute(name, value);
  }
  function setData(node, name, value) {
    setAttr(node, 'data-' + name.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase()), value);
  }
  function setStyle(node, prop, value) {
    if (node.style[prop] !== value) node.style[prop] = value;
  }
  function toggle(node, cls, on) {
    if (node.classList.contains(cls) !== !!on) node.classList.toggle(cls, !!on);
  }

  // reconcile keeps container's children in the order of items, keyed by
  // key(item): existing elements are updated in place (a button under the
  // pointer survives an update), new ones created, stale ones removed.
  function reconcile(container, items, key, create, update) {
    const keys = items.map((item, i) => String(key(item, i)));
    const wanted = new Set(keys);
    const existing = new Map();
    // Stale children go first, so that the ones that stay are not moved
    // (a move would also give them new DevTools node ids).
    for (const child of Array.from(container.children)) {
      const k = child.dataset ? child.dataset.key : undefined;
      if (k !== undefined && wanted.has(k) && !existing.has(k)) existing.set(k, child);
      else child.remove(); // stale, or a placeholder ("No topics yet.")
    }
    const seen = new Set();
    let prev = null;
    items.forEach((item, i) => {
      const k = keys[i];
      if (seen.has(k)) return;
      seen.add(k);
      let node = existing.get(k);
      if (!node) {
        node = create(item, i);
        node.dataset.key = k;
      }
      update(node, item, i);
      const want = prev ? prev.nextSibling : container.firstChild;
      if (node !== want) container.insertBefore(node, want);
      prev = node;
    });
  }
  function placeholder(container, items, text) {
    if (items.length === 0 && container.children.length === 0) container.append(el('p', { class: 'empty', text }));
  }

  // A stable colour per key (records and effects of one key look alike).
  function keyHue(key) {
    const s = str(key);
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    // murmur3's finalizer: keys that differ in one character get far-apart hues.
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return (h >>> 0) % 360;
  }
  function keyColor(key, light) {
    if (key === null || key === undefined || key === '') return light ? '#e4e6ea' : '#9aa0a8';
    return 'hsl(' + keyHue(key) + (light ? ', 70%, 86%)' : ', 60%, 48%)');
  }
  function timeOf(at) {
    if (at === undefined || at === null || at === '') return '';
    const d = new Date(isNum(at) ? Number(at) : at);
    if (isNaN(d.getTime())) return str(at);
    return d.toLocaleTimeString('en-GB', { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }
  // What a cell shows of its key: the number it ends with (key-17: 17), else its start.
  function keyLabel(key) {
    if (key === null || key === undefined || key === '') return '∅';
    const k = str(key);
    const m = k.match(/(\d{1,3})$/);
    return m ? m[1] : k.slice(0, 2);
  }
  const byName = (a, b) => str(a).localeCompare(str(b), 'en', { numeric: true });

  // ---------- state ----------
  let snap = {};
  let renderQueued = false;
  let lastRenderAt = 0;
  const timeline = [];
  const timelineSeen = new Set();
  const TIMELINE_MAX = 500;

  function brokerName(id) {
    const b = arr(snap.brokers).find((x) => String(obj(x).id) === String(id));
    return b && b.name ? b.name : 'broker-' + id;
  }
  function brokerState(id) {
    const b = arr(snap.brokers).find((x) => String(obj(x).id) === String(id));
    return b ? str(b.state) : '';
  }

  // ---------- tapes ----------
  const CELL = 22; // px per offset

  function renderTapes(s) {
    const box = $('#tapes');
    const topics = arr(s.topics).map(obj).filter((t) => t.name !== undefined);
    reconcile(box, topics, (t) => str(t.name), createTopic, updateTopic);
    placeholder(box, topics, 'No topics yet.');
  }
  function createTopic(t) {
    return el('div', { class: 'topic', dataset: { topic: str(t.name) } }, el('h3', { class: 'topic-name' }), el('div', { class: 'tape-list' }));
  }
  function updateTopic(node, t) {
    const parts = arr(t.partitions).map(obj).slice().sort((a, b) => num(a.partition) - num(b.partition));
    setText($('.topic-name', node), str(t.name) + ' · ' + parts.length + ' partition' + (parts.length === 1 ? '' : 's'));
    reconcile($('.tape-list', node), parts, (p) => num(p.partition, -1), (p) => createTape(t, p), (n, p) => updateTape(n, t, p));
  }
  function createTape(t, p) {
    const node = el('div', { class: 'tape', dataset: { topic: str(t.name), partition: String(num(p.partition, -1)) } });
    node.append(
      el('div', { class: 'tape-head' },
        el('span', { class: 'pname' }),
        el('span', { class: 'leader' }),
        el('span', { class: 'bounds muted' }),
        el('span', { class: 'lso-lag hidden' }),
        el('span', { class: 'perror bad hidden' })),
      el('div', { class: 'tape-grid' },
        el('div', { class: 'gutter' }, el('div', { class: 'g-cursors' }), el('div', { class: 'g-cells', text: 'log' }), el('div', { class: 'g-ruler' }), el('div', { class: 'g-replicas' })),
        el('div', { class: 'track' },
          el('div', { class: 'cursors' }),
          el('div', { class: 'cells' }),
          el('div', { class: 'ruler' }),
          el('div', { class: 'replicas' }),
          el('div', { class: 'lines' }))));
    return node;
  }

  // Where a tape's window starts and ends (offsets), from what is known.
  function tapeWindow(p, width) {
    const ends = Object.values(obj(p.replicaEnds)).filter(isNum).map(Number);
    const recs = arr(p.records).map(obj).filter((r) => isNum(r.offset));
    // -1 (or absent): unknown.
    const logStart = num(p.logStart, -1) >= 0 ? num(p.logStart) : null;
    const hw = num(p.highWatermark, -1) >= 0 ? num(p.highWatermark) : null;
    const end = Math.max(0, hw || 0, logStart || 0, ...ends, ...recs.map((r) => Number(r.offset) + 1));
    const n = Math.max(8, Math.floor((width - 56) / CELL)); // room on the right for the replicas' "end N"
    const to = end + 1; // one empty slot: where the next record goes
    const from = Math.max(0, to - n);
    return { from, to, end, logStart, hw, recs };
  }

  function updateTape(node, t, p) {
    const topic = str(t.name);
    const part = num(p.partition, -1);
    const track = $('.track', node);
    const width = track.clientWidth || 700;
    const w = tapeWindow(p, width);
    const x = (off) => (off - w.from) * CELL;
    const leader = isNum(p.leader) ? Number(p.leader) : -1;
    const epoch = isNum(p.epoch) ? Number(p.epoch) : -1;
    const replicas = arr(p.replicas).filter(isNum).map(Number);
    const isr = new Set(arr(p.isr).filter(isNum).map(Number));
    const ends = obj(p.replicaEnds);

    setData(node, 'leader', leader);
    setData(node, 'leaderName', leader >= 0 ? brokerName(leader) : '');
    setData(node, 'epoch', epoch);
    setData(node, 'hw', w.hw === null ? '' : w.hw);
    setData(node, 'logStart', w.logStart === null ? '' : w.logStart);
    setData(node, 'isr', Array.from(isr).join(','));
    setData(node, 'replicas', replicas.join(','));
    setText($('.pname', node), topic + '-' + part);
    const lead = $('.leader', node);
    setData(lead, 'epoch', epoch);
    setData(lead, 'broker', leader);
    toggle(lead, 'none', leader < 0);
    setText(lead, leader >= 0 ? '★ leader ' + brokerName(leader) + ' · epoch ' + epoch : 'no leader' + (epoch >= 0 ? ' · epoch ' + epoch : ''));
    setText($('.bounds', node), 'replicas ' + (replicas.join(',') || '–') + ' · ISR ' + (Array.from(isr).join(',') || '–') +
      ' · log start ' + (w.logStart === null ? '?' : w.logStart) + ' · high watermark ' + (w.hw === null ? '?' : w.hw));
    const perr = $('.perror', node);
    setText(perr, p.error ? str(p.error) : '');
    toggle(perr, 'hidden', !p.error);

    // The last stable offset: read_committed readers stop there; its lag
    // behind the high watermark and for how long it has not moved.
    // Both as of the tape's read; with no transaction open the LSO is the
    // high watermark, so it is drawn on the partition's current one.
    const lagN = Math.max(0, num(p.lastStableLag, 0));
    const lso = num(p.lastStable, -1) < 0 ? null : lagN > 0 || w.hw === null ? num(p.lastStable) : w.hw;
    setData(node, 'lso', lso === null ? '' : lso);
    const lag = $('.lso-lag', node);
    setData(lag, 'lag', lagN);
    setData(lag, 'since', lagN > 0 && isNum(p.lastStableSince) ? Number(p.lastStableSince) : '');
    toggle(lag, 'hidden', lagN <= 0);
    lsoLagText(lag);

    // Cells, keyed by offset so that one keeps its element while the window slides.
    const recByOff = new Map(w.recs.map((r) => [Number(r.offset), r]));
    const offs = [];
    for (let o = w.from; o < w.to; o++) offs.push(o);
    const cells = $('.cells', node);
    reconcile(cells, offs, (o) => o,
      (o) => el('div', { class: 'cell', dataset: { offset: String(o), topic, partition: String(part) } }, el('span')),
      (c, o) => {
        const r = recByOff.get(o);
        const gone = w.logStart !== null && o < w.logStart;
        const above = w.hw !== null && o >= w.hw && o < w.end;
        setStyle(c, 'left', x(o) + 'px');
        toggle(c, 'record', !!r && !gone);
        toggle(c, 'unknown', !r && o < w.end && !gone);
        toggle(c, 'gone', gone);
        toggle(c, 'uncommitted', above);
        toggle(c, 'next', o >= w.end);
        const key = r ? r.key : undefined;
        setStyle(c, 'backgroundColor', r ? keyColor(key, true) : '');
        setStyle(c, 'borderColor', r ? keyColor(key, false) : '');
        const control = r ? str(r.control) : '';
        toggle(c, 'marker', control !== '');
        toggle(c, 'commit', control === 'commit');
        toggle(c, 'abort', control === 'abort');
        const txn = r && !control ? str(r.txn) : '';
        toggle(c, 'txn-committed', txn === 'committed');
        toggle(c, 'txn-aborted', txn === 'aborted');
        toggle(c, 'txn-open', txn === 'open');
        if (control) {
          setStyle(c, 'backgroundColor', '');
          setStyle(c, 'borderColor', '');
        }
        setText(c.firstChild, control === 'commit' ? 'C' : control === 'abort' ? 'A' : r ? keyLabel(key) : '');
        let title;
        if (o >= w.end) title = 'offset ' + o + ': the next record goes here';
        else if (gone) title = 'offset ' + o + ': deleted (before the log start ' + w.logStart + ')';
        else if (control) {
          title = 'offset ' + o + ': ' + control + ' marker of producer ' + str(r.producerId, '0') +
            '\na control record: it ends the transaction here; no consumer is given it';
        } else if (r) {
          title = 'offset ' + o + (txn ? ' · transaction of producer ' + str(r.producerId, '0') + ': ' +
            (txn === 'aborted' ? 'aborted (read_committed readers drop it)' : txn === 'open' ? 'open (pending: above the last stable offset)' : 'committed') : '') +
            '\nkey ' + str(r.key, '(none)') + '\nvalue ' + str(r.value) +
            (r.eventId !== undefined ? '\nevent ' + str(r.eventId) : '') + (r.timestamp !== undefined ? '\n' + timeOf(r.timestamp) : '') +
            (above ? '\nabove the high watermark: not committed, invisible to consumers' : '') +
            '\nclick: restart the group from here';
        } else title = 'offset ' + o + (above ? ' (above the high watermark: not committed)' : '');
        setAttr(c, 'title', title);
      });
    setStyle(cells, 'width', x(w.to) + 'px');

    // Ruler: an offset label every 5 offsets, and the high watermark's.
    const ruler = $('.ruler', node);
    const nearHW = (o) => w.hw !== null && o > w.hw - 3 && o < w.hw + 3;
    const marks = offs.filter((o) => o % 5 === 0 && !nearHW(o)).map((o) => ({ o, text: String(o) }));
    if (w.hw !== null && w.hw >= w.from) marks.push({ o: w.hw, text: 'HW ' + w.hw, hw: true });
    reconcile(ruler, marks, (m) => (m.hw ? 'hw' : m.o), (m) => el('span', { class: m.hw ? 'hw-mark' : '' }), (n, m) => {
      setStyle(n, 'left', x(m.o) + 'px');
      setText(n, m.text);
    });

    // One row per replica: its log up to its end, ISR membership, the leader.
    const grows = $('.g-replicas', node);
    const rows = $('.replicas', node);
    const repOf = (id) => ({ id, end: ends[String(id)], inIsr: isr.has(id), leader: id === leader, state: brokerState(id) });
    const reps = replicas.map(repOf);
    for (const k of Object.keys(ends)) if (isNum(k) && !replicas.includes(Number(k))) reps.push(repOf(Number(k)));
    reconcile(grows, reps, (r) => r.id, () => el('div', { class: 'rlabel' }), (lab, r) => {
      setData(lab, 'brokerId', r.id);
      toggle(lab, 'leader', r.leader);
      toggle(lab, 'out', !r.inIsr);
      toggle(lab, 'down', r.state !== '' && r.state !== 'running');
      setText(lab, (r.leader ? '★ ' : '') + brokerName(r.id) + (r.inIsr ? ' ✓ISR' : ' ✗ISR') + (r.state && r.state !== 'running' ? ' ' + r.state : ''));
      setAttr(lab, 'title', brokerName(r.id) + (r.leader ? ', the leader' : '') + (r.inIsr ? ', in the ISR' : ', not in the ISR') + (r.state ? ', ' + r.state : ''));
    });
    reconcile(rows, reps, (r) => r.id, () => el('div', { class: 'replica' }, el('div', { class: 'bar' }), el('span', { class: 'end' })), (row, r) => {
      setData(row, 'brokerId', r.id);
      setData(row, 'end', isNum(r.end) ? Number(r.end) : '');
      setData(row, 'isr', r.inIsr ? 'true' : 'false');
      toggle(row, 'leader', r.leader);
      toggle(row, 'out', !r.inIsr);
      toggle(row, 'down', r.state !== '' && r.state !== 'running');
      const end = isNum(r.end) ? Number(r.end) : null;
      const bw = end === null ? 0 : Math.max(0, Math.min(x(end), x(w.to)));
      setStyle(row.firstChild, 'width', bw + 'px');
      setText(row.lastChild, end === null ? 'end ?' : 'end ' + end);
      setStyle(row.lastChild, 'left', bw + 4 + 'px');
      setAttr(row, 'title', brokerName(r.id) + ': log end ' + (end === null ? 'unknown' : end) + (r.inIsr ? ', in the ISR' : ', not in the ISR') + (r.leader ? ', leader' : ''));
    });

    // Lines: the high watermark and each group's committed offset.
    const lines = w.hw === null ? [] : [{ kind: 'hw', off: w.hw, label: w.hw < w.from ? 'HW ' + w.hw : '' }];
    if (lso !== null) lines.push({ kind: 'lso', off: lso, label: lagN > 0 ? 'LSO ' + lso : '' });
    for (const g of arr(snap.groups).map(obj)) {
      const c = obj(obj(g.committed)[topic])[String(part)];
      if (isNum(c)) lines.push({ kind: 'committed', group: str(g.group), off: Number(c), label: str(g.group) + ' committed ' + c });
    }
    reconcile($('.lines', node), lines, (l) => l.kind + ':' + str(l.group),
      (l) => el('div', { class: l.kind === 'hw' ? 'hw-line' : l.kind === 'lso' ? 'lso-line' : 'committed-line' }, el('span')),
      (ln, l) => {
        const off = l.off < w.from;
        setStyle(ln, 'left', Math.max(0, x(l.off)) + 'px');
        toggle(ln, 'off', off);
        setData(ln, 'offset', l.off);
        if (l.group !== undefined) setData(ln, 'group', l.group);
        setText(ln.firstChild, (off ? '◀ ' : '') + l.label);
        if (l.kind === 'lso') toggle(ln, 'at-hw', lagN === 0);
        setAttr(ln, 'title', l.kind === 'hw' ? 'high watermark ' + l.off + ': records below it are committed (on every ISR replica)' :
          l.kind === 'lso' ? 'last stable offset ' + l.off + ': the first offset of the oldest open transaction (the high watermark when none is open); read_committed readers stop here' :
          'group ' + l.group + ' committed offset ' + l.off);
      });

    // Cursors: each consumer's position on the partitions it owns.
    const cursors = [];
    for (const c of arr(snap.consumers).map(obj)) {
      if (consumerTopic(c) !== topic) continue;
      for (const pp of arr(c.partitions)) {
        const q = obj(pp);
        if (num(q.partition, -1) !== part || !isNum(q.position)) continue;
        cursors.push({ name: str(c.name), pos: Number(q.position), state: str(c.state) });
      }
    }
    cursors.sort((a, b) => byName(a.name, b.name));
    // The page's own two readers of the window: read_uncommitted and read_committed.
    for (const r of arr(p.readers).map(obj)) {
      if (!isNum(r.position)) continue;
      const iso = str(r.isolation);
      const rc = iso === 'read_committed';
      cursors.push({ name: iso, reader: true, pos: Number(r.position), state: 'running',
        label: (rc ? 'RC' : 'RU') + ' @' + Number(r.position) + ' · ' + num(r.records, 0) + ' read' + (num(r.aborted, 0) > 0 ? ', ' + num(r.aborted) + ' aborted' : ''),
        title: 'the page\'s ' + iso + ' reader: next offset ' + Number(r.position) + '; of this window it was given ' + num(r.records, 0) + ' records' +
          (rc ? ' (none of an aborted or open transaction: it stops at the last stable offset)' : ' (' + num(r.aborted, 0) + ' of aborted transactions, and those of open ones)') });
    }
    reconcile($('.cursors', node), cursors, (c) => (c.reader ? 'reader:' : '') + c.name, () => el('div', { class: 'cursor' }, el('b', { text: '▼' }), el('span')), (cu, c, i) => {
      const off = c.pos < w.from;
      toggle(cu, 'reader', !!c.reader);
      if (c.reader) setData(cu, 'isolation', c.name);
      else setData(cu, 'consumer', c.name);
      setData(cu, 'position', c.pos);
      setStyle(cu, 'left', Math.max(0, x(c.pos)) + 'px');
      // Near the right end the label goes left of the mark; the read_committed
      // reader's always does (when there is room), so that it does not cover
      // the read_uncommitted one's to its right.
      toggle(cu, 'flip', x(c.pos) > width - 110 || (c.reader && c.name === 'read_committed' && x(c.pos) > 160));
      setStyle(cu, 'zIndex', String(10 + i));
      toggle(cu, 'off', off);
      toggle(cu, 'dead', c.state === 'crashed' || c.state === 'stopped');
      setText($('span', cu), (off ? '◀ ' : '') + (c.label || c.name + ' @' + c.pos));
      const flipped = cu.classList.contains('flip');
      if (flipped === (cu.firstChild.tagName === 'B')) cu.append(cu.firstChild); // [label ▼] when flipped, else [▼ label]
      setAttr(cu, 'title', c.title || c.name + ' (' + c.state + '): position ' + c.pos + ' (the next offset it reads)');
    });
  }

  // The LSO's lag behind the high watermark, and for how long the LSO has
  // not moved (a hanging transaction), from its data-lag and data-since.
  function lsoLagText(n) {
    const lag = Number(n.dataset.lag || 0);
    const since = Number(n.dataset.since || 0);
    const secs = since > 0 ? Math.max(0, (Date.now() - since) / 1000) : null;
    setText(n, lag > 0 ? 'LSO lag ' + lag + (secs !== null ? ' · not moved for ' + (secs < 60 ? secs.toFixed(0) + ' s' : secs < 3600 ? (secs / 60).toFixed(1) + ' min' : (secs / 3600).toFixed(1) + ' h') : '') : '');
    setAttr(n, 'title', 'high watermark − last stable offset: records of open transactions (and all after them) read_committed readers wait for');
  }
  setInterval(() => document.querySelectorAll('.tape .lso-lag:not(.hidden)').forEach(lsoLagText), 1000);

  // The topic a consumer reads: its own field, else its group's committed
  // topic, else the only (or first) topic.
  function consumerTopic(c) {
    if (c.topic) return str(c.topic);
    const g = arr(snap.groups).map(obj).find((x) => str(x.group) === str(c.group));
    const ks = Object.keys(obj(g && g.committed));
    if (ks.length === 1) return ks[0];
    const ts = arr(snap.topics).map(obj).map((t) => str(t.name)).filter((n) => !n.startsWith('__'));
    return ts.includes('orders') ? 'orders' : ts[0] || '';
  }

  // ---------- producers ----------
  function renderProducers(s) {
    const box = $('#producers');
    const ps = arr(s.producers).map(obj).filter((p) => p.name !== undefined).sort((a, b) => byName(a.name, b.name));
    reconcile(box, ps, (p) => str(p.name), createProducer, updateProducer);
    placeholder(box, ps, 'No producer running. Start one above.');
  }
  function createProducer(p) {
    const name = str(p.name);
    return el('div', { class: 'card producer-card', dataset: { producer: name } },
      el('div', { class: 'card-head' }, el('b', { class: 'name', text: name }), el('span', { class: 'state' })),
      el('div', { class: 'settings muted' }),
      el('div', { class: 'stats' }),
      el('div', { class: 'pp-rates' }),
      el('div', { class: 'buttons' },
        el('button', { type: 'button', dataset: { action: 'producer-pause', name }, text: 'pause' }),
        el('button', { type: 'button', dataset: { action: 'producer-resume', name }, text: 'resume' }),
        el('button', { type: 'button', dataset: { action: 'producer-stop', name }, text: 'stop' }),
        el('label', {}, 'rate ', el('input', { type: 'number', min: '0', title: 'records/s; 0: as fast as it can', step: '1', size: '6', class: 'rate-input', value: isNum(p.rate) ? String(p.rate) : '' })),
        el('button', { type: 'button', dataset: { action: 'producer-rate', name }, text: 'set rate' })));
  }
  function updateProducer(node, p) {
    // The rate field follows the producer's rate until someone types in it.
    const rateInput = $('.rate-input', node);
    if (!rateInput.dataset.edited && document.activeElement !== rateInput && isNum(p.rate)) rateInput.value = String(p.rate);
    const state = str(p.state, 'unknown');
    setData(node, 'state', state);
    const st = $('.state', node);
    setText(st, state);
    setData(st, 'state', state);
    const hot = num(p.hotKeyShare, 0);
    setText($('.settings', node), [
      p.topic ? 'to ' + str(p.topic) : null,
      isNum(p.rate) ? fmt(p.rate) + ' records/s' : null,
      p.acks !== undefined ? 'acks=' + str(p.acks) : null,
      p.idempotent === undefined ? null : p.idempotent ? 'idempotent' : 'not idempotent',
      p.keys === undefined ? null : p.keys ? 'keys' : 'no keys',
      hot > 0 ? 'hot key ' + Math.round(hot <= 1 ? hot * 100 : hot) + '%' : null,
    ].filter(Boolean).join(' · '));
    const failed = obj(p.failed);
    const failedTotal = Object.values(failed).reduce((a, v) => a + num(v), 0);
    const stats = $('.stats', node);
    setText(stats, 'sent ' + fmt(p.sent) + ' · acked ' + fmt(p.acked) + ' · failed ' + fmt(failedTotal) +
      (failedTotal ? ' (' + Object.entries(failed).map(([k, v]) => k + ' ' + v).join(', ') + ')' : '') +
      (num(p.retried) > 0 ? ' · retried ' + fmt(p.retried) : '') + (isNum(p.inFlight) ? ' · in flight ' + fmt(p.inFlight) : '') +
      (p.lastExit ? ' · ' + str(p.lastExit) : ''));
    toggle(stats, 'bad', failedTotal > 0);
    // Per-partition rates, as bars, so that a hot key's skew shows.
    const rates = obj(p.ratePerPartition);
    const acked = obj(p.ackedPerPartition);
    const keys = Array.from(new Set([...Object.keys(rates), ...Object.keys(acked)])).sort(byName);
    const max = Math.max(1, ...keys.map((k) => num(rates[k])));
    reconcile($('.pp-rates', node), keys, (k) => k,
      (k) => el('div', { class: 'pp', dataset: { partition: k } }, el('span', { class: 'pp-name', text: 'P' + k }), el('span', { class: 'pp-bar' }, el('i')), el('span', { class: 'pp-val' })),
      (row, k) => {
        setStyle($('.pp-bar i', row), 'width', (100 * num(rates[k])) / max + '%');
        setText($('.pp-val', row), fmt(num(rates[k])) + '/s' + (acked[k] !== undefined ? ' · ' + fmt(acked[k]) + ' acked' : ''));
        setData(row, 'rate', num(rates[k]));
      });
  }

  // ---------- consumers and groups ----------
  function renderConsumers(s) {
    const gbox = $('#groups');
    const groups = arr(s.groups).map(obj).filter((g) => g.group !== undefined).sort((a, b) => byName(a.group, b.group));
    reconcile(gbox, groups, (g) => str(g.group), (g) => el('div', { class: 'group-card', dataset: { group: str(g.group) } },
      el('div', { class: 'card-head' }, el('b', { text: 'group ' + str(g.group) }), el('span', { class: 'state' })),
      el('div', { class: 'muted info' }), el('ul', { class: 'members' })), (node, g) => {
      const st = $('.state', node);
      setText(st, str(g.state, '?'));
      setData(st, 'state', str(g.state));
      setData(node, 'generation', num(g.generation, -1));
      setText($('.info', node), 'generation ' + str(g.generation, '–') + ' · ' + str(g.assignor, 'assignor ?') + ' · coordinator ' +
        (isNum(g.coordinator) ? brokerName(g.coordinator) : str(g.coordinator, '?')) + ' · total lag ' + fmt(g.totalLag));
      const members = arr(g.members).map(obj);
      reconcile($('.members', node), members, (m, i) => str(m.memberId, String(i)), () => el('li'), (li, m) => {
        setText(li, str(m.clientId, '?') + ' ' + (m.assignment ? str(m.assignment) : partitionsText(m.partitions)) + ' ' + str(m.memberId) + (m.host ? ' ' + str(m.host) : ''));
      });
    });

    const box = $('#consumer-cards');
    const cs = arr(s.consumers).map(obj).filter((c) => c.name !== undefined).sort((a, b) => byName(a.name, b.name));
    reconcile(box, cs, (c) => str(c.name), createConsumer, updateConsumer);
    placeholder(box, cs, 'No consumer yet. Start one above.');

    // Kafka clients: what the launcher knows (no control endpoint to ask).
    const kbox = $('#kafka-client-cards');
    const ks = arr(s.kafkaClients).map(obj).filter((k) => k.name !== undefined).sort((a, b) => byName(a.name, b.name));
    reconcile(kbox, ks, (k) => str(k.name), (k) => el('div', { class: 'card kafka-client-card', dataset: { kafkaClient: str(k.name) } },
      el('div', { class: 'card-head' }, el('b', { class: 'name', text: str(k.name) }), el('span', { class: 'state' })),
      el('div', { class: 'settings muted' }), el('ul', { class: 'links' })), (node, k) => {
      const state = str(k.state, 'unknown');
      setData(node, 'state', state);
      const st = $('.state', node);
      setText(st, state);
      setData(st, 'state', state);
      setText($('.settings', node), [isNum(k.pid) && k.pid > 0 ? 'pid ' + k.pid : null, str(k.command), k.lastExit ? str(k.lastExit) : null].filter(Boolean).join(' · '));
      reconcile($('.links', node), arr(k.links).map(obj), (l) => str(l.broker), () => el('li'), (li, l) => {
        setData(li, 'mode', str(l.mode));
        setText(li, str(l.broker) + ': ' + str(l.mode) + (num(l.delayMs) || num(l.jitterMs) ? ' +' + num(l.delayMs) + '±' + num(l.jitterMs) + ' ms' : '') +
          ' · ' + fmt(l.connections) + ' open · ' + fmt(l.requests) + ' requests, ' + fmt(l.responses) + ' answers delivered');
      });
    });
    placeholder(kbox, ks, 'None. Any Kafka client started with chaos start NAME -- CMD ARGS shows here.');
  }
  function partitionsText(ps) {
    const list = arr(ps).map((p) => (typeof p === 'object' && p !== null ? num(p.partition, -1) : num(p, -1))).filter((p) => p >= 0);
    return '[' + list.sort((a, b) => a - b).join(',') + ']';
  }
  function createConsumer(c) {
    const name = str(c.name);
    return el('div', { class: 'card consumer-card', dataset: { consumer: name } },
      el('div', { class: 'card-head' }, el('b', { class: 'name', text: name }), el('span', { class: 'state' }), el('span', { class: 'generation muted' })),
      el('div', { class: 'settings muted' }),
      el('div', { class: 'partitions' }),
      el('div', { class: 'stats muted' }),
      el('div', { class: 'buttons' },
        el('button', { type: 'button', dataset: { action: 'consumer-pause', name }, text: 'pause' }),
        el('button', { type: 'button', dataset: { action: 'consumer-resume', name }, text: 'resume' }),
        el('button', { type: 'button', class: 'danger', dataset: { action: 'consumer-crash', name }, text: 'crash' }),
        el('button', { type: 'button', dataset: { action: 'consumer-stop', name }, text: 'stop' }),
        el('button', { type: 'button', dataset: { action: 'consumer-start', like: name }, text: 'start another like it' })));
  }
  function updateConsumer(node, c) {
    const state = str(c.state, 'unknown');
    setData(node, 'state', state);
    setData(node, 'group', str(c.group));
    setData(node, 'generation', num(c.generation, -1));
    const st = $('.state', node);
    setText(st, state);
    setData(st, 'state', state);
    setText($('.generation', node), 'generation ' + str(c.generation, '–'));
    setText($('.settings', node), [
      c.group !== undefined ? 'group ' + str(c.group) : null,
      c.topic ? 'topic ' + str(c.topic) : null,
      c.commit !== undefined ? 'commit ' + str(c.commit) : null,
      isNum(c.recordsPerPoll) ? c.recordsPerPoll + ' per poll' : null,
      c.idempotentSink === undefined ? null : c.idempotentSink ? 'idempotent application' : 'plain application',
      c.assignor !== undefined ? str(c.assignor) : null,
    ].filter(Boolean).join(' · '));
    const parts = arr(c.partitions).map((p) => (typeof p === 'object' && p !== null ? obj(p) : { partition: p })).filter((p) => isNum(p.partition))
      .sort((a, b) => num(a.partition) - num(b.partition));
    const pbox = $('.partitions', node);
    setData(pbox, 'partitions', parts.map((p) => num(p.partition)).join(','));
    reconcile(pbox, parts, (p) => num(p.partition), () => el('span', { class: 'chip' }), (chip, p) => {
      setData(chip, 'partition', num(p.partition));
      setText(chip, 'P' + num(p.partition) + (isNum(p.position) ? ' @' + p.position : '') + (isNum(p.committed) ? ' (committed ' + p.committed + ')' : ''));
    });
    if (parts.length === 0 && pbox.children.length === 0) pbox.append(el('span', { class: 'muted', text: 'no partitions' }));
    setText($('.stats', node), 'processed ' + fmt(c.processed) + (c.memberId ? ' · ' + str(c.memberId) : '') + (c.lastExit ? ' · ' + str(c.lastExit) : ''));
  }

  // ---------- the application (sink) ----------
  const COUNTERS = ['delivered', 'duplicates', 'neverProcessed', 'outOfKeyOrder', 'totalLag', 'activeConsumers', 'generation'];
  const BAD = { duplicates: true, neverProcessed: true, outOfKeyOrder: true };
  const EFFECTS_MAX = 600;
  let effectsSig = '';
  function renderApplication(s) {
    const sink = obj(s.sink);
    for (const k of COUNTERS) {
      const node = $('#counters [data-counter="' + k + '"]');
      if (!node) continue;
      setText(node.firstChild, isNum(sink[k]) ? fmt(sink[k]) : '–');
      setData(node, 'value', isNum(sink[k]) ? Number(sink[k]) : '');
      toggle(node, 'bad', !!BAD[k] && num(sink[k]) > 0);
    }
    const effects = arr(s.effects).map(obj).slice(-EFFECTS_MAX);
    const last = effects[effects.length - 1] || {};
    const sig = effects.length + '|' + str(last.eventId) + '|' + str(last.offset) + '|' + str(last.consumer) + '|' + effects.filter((e) => e.duplicate || e.outOfOrder).length;
    if (sig === effectsSig) return;
    effectsSig = sig;
    const box = $('#effects');
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    const frag = document.createDocumentFragment();
    for (const e of effects) {
      const cls = 'effect' + (e.duplicate ? ' dup' : '') + (e.outOfOrder ? ' ooo' : '');
      const node = el('i', {
        class: cls,
        dataset: { eventId: str(e.eventId), partition: str(e.partition), offset: str(e.offset) },
        title: 'event ' + str(e.eventId, '?') + '\nkey ' + str(e.key, '(none)') + '\nP' + str(e.partition, '?') + ' @' + str(e.offset, '?') +
          '\nby ' + str(e.consumer, '?') + (e.duplicate ? '\nDUPLICATE: applied before' : '') + (e.outOfOrder ? '\nOUT OF KEY ORDER' : ''),
      });
      if (!e.outOfOrder) node.style.borderColor = keyColor(e.key, false);
      if (!e.outOfOrder) node.style.backgroundColor = keyColor(e.key, true);
      frag.append(node);
    }
    box.replaceChildren(frag);
    if (effects.length === 0) box.append(el('p', { class: 'empty', text: 'No effects yet.' }));
    if (atEnd) box.scrollTop = box.scrollHeight;
  }

  // ---------- under the hood ----------
  function renderDescribe(s) {
    setText($('#describe-groups'), str(s.describeGroups).trim() || '–');
    setText($('#describe-topics'), str(s.describeTopics).trim() || '–');
  }

  // ---------- faults ----------
  function renderBrokers(s) {
    const rows = $('#broker-rows');
    const bs = arr(s.brokers).map(obj).filter((b) => b.name !== undefined || b.id !== undefined).sort((a, b) => byName(a.name || 'broker-' + a.id, b.name || 'broker-' + b.id));
    reconcile(rows, bs, (b) => str(b.name, 'broker-' + b.id), (b) => {
      const name = str(b.name, 'broker-' + b.id);
      return el('tr', { dataset: { broker: name } },
        el('td', {}, el('b', { class: 'name', text: name }), el('span', { class: 'controller', text: ' controller' }), el('div', { class: 'where' })),
        el('td', {}, el('span', { class: 'state' })),
        el('td', {}, el('div', { class: 'buttons' },
          el('button', { type: 'button', class: 'danger', dataset: { action: 'kill', name }, title: 'SIGKILL', text: 'kill' }),
          el('button', { type: 'button', dataset: { action: 'pause', name }, title: 'SIGSTOP', text: 'pause' }),
          el('button', { type: 'button', dataset: { action: 'resume', name }, title: 'SIGCONT', text: 'resume' }),
          el('button', { type: 'button', dataset: { action: 'restart', name }, title: 'start it again on its data', text: 'restart' }))));
    }, (tr, b) => {
      const state = str(b.state, 'unknown');
      setData(tr, 'brokerId', str(b.id));
      setData(tr, 'state', state);
      toggle(tr, 'is-controller', !!b.controller);
      const st = $('.state', tr);
      setText(st, state);
      setData(st, 'state', state);
      setText($('.where', tr), [num(b.pid) > 0 ? 'pid ' + b.pid : '', str(b.address), b.lastExit && state !== 'running' ? str(b.lastExit) : ''].filter(Boolean).join(' · '));
    });
    if (bs.length === 0 && rows.children.length === 0) rows.append(el('tr', {}, el('td', { colspan: '3', class: 'empty', text: 'No brokers known yet.' })));
  }

  function processNames(s) {
    const names = [];
    for (const b of arr(s.brokers).map(obj)) names.push(str(b.name, 'broker-' + b.id));
    for (const p of arr(s.producers).map(obj)) if (p.name) names.push(str(p.name));
    for (const c of arr(s.consumers).map(obj)) if (c.name) names.push(str(c.name));
    for (const l of arr(s.links).map(obj)) for (const n of [l.from, l.to]) if (n) names.push(str(n));
    return Array.from(new Set(names)).sort(byName);
  }
  function fillSelect(sel, values, labels) {
    const cur = sel.value;
    const have = Array.from(sel.options).map((o) => o.value);
    if (have.length === values.length && have.every((v, i) => v === values[i])) return;
    sel.replaceChildren(...values.map((v, i) => el('option', { value: v, text: labels ? labels[i] : v })));
    if (values.includes(cur)) sel.value = cur;
  }

  function renderLinks(s) {
    const names = processNames(s);
    $$('.process-select').forEach((sel, i) => {
      fillSelect(sel, names);
      // A useful default for "cut": two different processes.
      if (sel.name === 'to' && sel.value === $('#cut-form select[name=from]').value && names.length > 1) sel.value = names[1];
    });
    const links = arr(s.links).map(obj);
    const faulty = links.filter((l) => (l.mode && l.mode !== 'pass') || num(l.delayMs) > 0 || num(l.jitterMs) > 0);
    const box = $('#links');
    const summary = links.length === 0 ? 'no links known' : links.length + ' links, ' + (faulty.length === 0 ? 'all healthy' : faulty.length + ' with faults');
    reconcile(box, [{ summary: true }].concat(faulty), (l) => (l.summary ? 'summary' : str(l.from) + '>' + str(l.to)),
      (l) => el('div', { class: l.summary ? 'links-summary muted' : 'link-row' }), (row, l) => {
        if (l.summary) return setText(row, summary);
        setData(row, 'from', str(l.from));
        setData(row, 'to', str(l.to));
        setData(row, 'mode', str(l.mode));
        setText(row, str(l.from) + ' → ' + str(l.to) + ': ' + linkText(l));
      });
    drawLinkMap(s, names, links);
  }
  function linkText(l) {
    const parts = [];
    if (l.mode === 'blackhole') parts.push('cut');
    else if (l.mode === 'drop-back') parts.push('answers cut');
    else if (l.mode === 'drop-forward') parts.push('requests cut');
    else if (l.mode && l.mode !== 'pass') parts.push(str(l.mode));
    if (num(l.delayMs) > 0 || num(l.jitterMs) > 0) parts.push('delay ' + num(l.delayMs) + ' ms ± ' + num(l.jitterMs));
    return parts.join(', ') || 'healthy';
  }

  // The processes on a circle (brokers above, clients below), the links
  // between them: grey healthy, red cut, orange delayed.
  let linkMapSig = '';
  function drawLinkMap(s, names, links) {
    const svg = $('#link-map');
    const states = {};
    for (const b of arr(s.brokers).map(obj)) states[str(b.name, 'broker-' + b.id)] = str(b.state);
    for (const c of arr(s.consumers).map(obj)) states[str(c.name)] = str(c.state);
    for (const p of arr(s.producers).map(obj)) states[str(p.name)] = str(p.state);
    const sig = JSON.stringify([names, links, states]);
    if (sig === linkMapSig) return;
    linkMapSig = sig;
    const W = 320, H = 200, cx = W / 2, cy = H / 2, R = 72;
    const pos = {};
    names.forEach((n, i) => {
      const a = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, names.length);
      pos[n] = [cx + 1.6 * R * Math.cos(a), cy + R * Math.sin(a)];
    });
    const kids = [];
    const pairs = new Map();
    for (const l of links) {
      if (!pos[l.from] || !pos[l.to]) continue;
      const k = [l.from, l.to].sort().join('|');
      if (!pairs.has(k)) pairs.set(k, []);
      pairs.get(k).push(l);
    }
    for (const [, ls] of pairs) {
      for (const l of ls) {
        const [x1, y1] = pos[l.from], [x2, y2] = pos[l.to];
        // Offset the two directions slightly so that one-way cuts show.
        const dx = x2 - x1, dy = y2 - y1, len = Math.hypot(dx, dy) || 1;
        const ox = (-dy / len) * 2.5, oy = (dx / len) * 2.5;
        const cut = l.mode && l.mode !== 'pass';
        const slow = num(l.delayMs) > 0 || num(l.jitterMs) > 0;
        kids.push(el('svg:line', {
          x1: x1 + ox, y1: y1 + oy, x2: x2 + ox, y2: y2 + oy,
          class: 'lk' + (cut ? ' cut' : '') + (slow ? ' slow' : ''),
          'data-from': str(l.from), 'data-to': str(l.to),
        }, el('svg:title', { text: str(l.from) + ' → ' + str(l.to) + ': ' + linkText(l) })));
      }
    }
    for (const n of names) {
      const [x, y] = pos[n];
      const st = states[n] || '';
      const short = n.replace(/^broker-/, 'b').replace(/^producer-/, 'p').replace(/^consumer-/, 'c');
      kids.push(el('svg:g', { class: 'node ' + (n.startsWith('broker') ? 'broker' : 'client') + (st && st !== 'running' ? ' down' : ''), 'data-name': n },
        el('svg:circle', { cx: x, cy: y, r: 13 }),
        el('svg:text', { x, y: y + 4, 'text-anchor': 'middle', text: short }),
        el('svg:title', { text: n + (st ? ' (' + st + ')' : '') })));
    }
    svg.replaceChildren(...kids);
  }

  // ---------- timeline ----------
  function addTimeline(entries) {
    let added = false;
    for (const raw of arr(entries)) {
      const e = obj(raw);
      if (e.text === undefined && e.kind === undefined) continue;
      const k = str(e.at) + '|' + str(e.kind) + '|' + str(e.text);
      if (timelineSeen.has(k)) continue;
      timelineSeen.add(k);
      timeline.push(e);
      added = true;
    }
    if (!added) return;
    timeline.sort((a, b) => {
      const ta = new Date(isNum(a.at) ? Number(a.at) : a.at).getTime(), tb = new Date(isNum(b.at) ? Number(b.at) : b.at).getTime();
      return (isNaN(ta) || isNaN(tb)) ? 0 : ta - tb;
    });
    while (timeline.length > TIMELINE_MAX) {
      const e = timeline.shift();
      timelineSeen.delete(str(e.at) + '|' + str(e.kind) + '|' + str(e.text));
    }
    renderTimeline();
  }
  function renderTimeline() {
    const box = $('#timeline');
    const hidden = new Set($$('#timeline-filter input:not(:checked)').map((i) => i.dataset.kind));
    const shown = timeline.filter((e) => !hidden.has(str(e.kind))).slice().reverse(); // newest first
    reconcile(box, shown, (e) => str(e.at) + '|' + str(e.kind) + '|' + str(e.text), (e) =>
      el('li', { class: 'tl', dataset: { kind: str(e.kind) } },
        el('time', { text: timeOf(e.at) }), el('span', { class: 'kind', text: str(e.kind, 'event') }), el('span', { class: 'text', text: str(e.text) })), () => {});
    if (shown.length === 0 && box.children.length === 0) box.append(el('li', { class: 'empty', text: 'Nothing happened yet: leader elections, ISR changes, rebalances, rejected commits, lost records and faults appear here.' }));
  }

  // ---------- experiments ----------
  function renderExperiments(s) {
    const list = $('#experiment-list');
    const xs = arr(s.experiments).map(obj).filter((x) => x.name !== undefined);
    reconcile(list, xs, (x) => str(x.name), (x) => el('div', { class: 'experiment', dataset: { experiment: str(x.name) } },
      el('div', { class: 'card-head' }, el('b', { text: str(x.name) }), el('span', { class: 'muted dur' }),
        el('button', { type: 'button', dataset: { action: 'experiment-run', name: str(x.name) }, text: 'run' })),
      el('div', { class: 'about muted', title: 'click to read it all' })), (node, x) => {
      setText($('.dur', node), x.defaultDuration ? str(x.defaultDuration) : '');
      setText($('.about', node), str(x.about));
    });
    placeholder(list, xs, 'No experiments listed.');
    const runs = $('#runs');
    const rs = arr(s.runs).map(obj).filter((r) => r.name !== undefined || r.dir !== undefined);
    reconcile(runs, rs.slice().reverse(), (r) => str(r.dir, str(r.name)), () => el('div', { class: 'run' },
      el('b', { class: 'name' }), el('span', { class: 'state' }), el('a', { class: 'report', target: '_blank', rel: 'noopener', text: 'report' }), el('div', { class: 'dir muted' })), (node, r) => {
      setData(node, 'run', str(r.name));
      setData(node, 'state', str(r.state));
      setText($('.name', node), str(r.name));
      const st = $('.state', node);
      setText(st, str(r.state));
      setData(st, 'state', str(r.state));
      const a = $('.report', node);
      setAttr(a, 'href', r.report ? str(r.report) : null);
      toggle(a, 'hidden', !r.report);
      setText($('.dir', node), str(r.dir));
    });
    placeholder(runs, rs, 'None yet.');
  }

  // ---------- test yourself ----------
  // predictAnswers are the answers sent with "run it", by prediction.
  const predictAnswers = {};
  function checkedAnswer(form) {
    const r = $('input[name=answer]:checked', form);
    return r ? r.value : '';
  }
  // The group of eight on six partitions, from the group's real state.
  function renderPredict(s) {
    const box = $('#predict-consumers-result');
    const g = arr(s.groups).map(obj).find((x) => str(x.group) === 'predict-six');
    if (!g) {
      setText(box, predictAnswers.consumers !== undefined ? 'waiting for group predict-six …' : '');
      return;
    }
    const members = arr(g.members).map(obj).sort((a, b) => byName(a.clientId, b.clientId));
    const active = members.filter((m) => arr(m.partitions).length > 0);
    const idle = members.length - active.length;
    setData(box, 'members', String(members.length));
    setData(box, 'active', String(active.length));
    setData(box, 'idle', String(idle));
    setData(box, 'state', str(g.state));
    let verdict = '';
    const settled = str(g.state) === 'Stable' && members.length === 8;
    if (settled && predictAnswers.consumers !== undefined) {
      const right = Number(predictAnswers.consumers) === active.length;
      verdict = (right ? 'Right: ' : 'You said ' + predictAnswers.consumers + '. ') +
        'a partition goes to one member of the group, so six partitions keep at most six members busy; the other ' + idle + ' wait, idle, until one leaves.';
    }
    box.replaceChildren(
      el('p', { class: 'summary', text: 'group predict-six (' + str(g.state) + ', generation ' + str(g.generation) + '): ' + members.length + ' members, ' + active.length + ' active, ' + idle + ' idle' }),
      el('ul', { class: 'members' }, ...members.map((m) => el('li', { class: arr(m.partitions).length ? 'active' : 'idle',
        text: str(m.clientId) + ': ' + (arr(m.partitions).length ? 'partitions ' + arr(m.partitions).join(', ') : 'idle') }))),
      el('p', { class: 'verdict', text: verdict }));
    if (!settled) setData(box, 'settled', null);
    else setData(box, 'settled', '1');
  }
  async function runOrderPrediction(b) {
    const answer = checkedAnswer($('#predict-order-form'));
    if (!answer) return toast('error', 'predict-order: pick an answer first');
    const box = $('#predict-order-result');
    setText(box, 'writing A1, then B1, five times …');
    const r = await act({ action: 'predict-order', answer, runs: 5 }, b);
    if (!r.ok) {
      setText(box, 'refused: ' + r.error);
      return;
    }
    const m = /\((run .*)\)\./.exec(r.message);
    const runs = m ? m[1].split('; ') : [];
    box.replaceChildren(el('p', { class: 'summary', text: r.message }), el('ol', { class: 'runs' }, ...runs.map((t) => el('li', { text: t }))));
    setData(box, 'runs', String(runs.length));
  }

  // ---------- header and selects ----------
  function renderHeader(s) {
    setText($('#cluster-dir'), s.dir ? str(s.dir) : '');
    setText($('#updated'), s.at ? 'state of ' + timeOf(s.at) : '');
    const topics = arr(s.topics).map(obj).map((t) => str(t.name)).filter((n) => n && !n.startsWith('__')).sort(byName);
    if (topics.length) $$('.topic-select').forEach((sel) => fillSelect(sel, topics));
    const groups = new Set();
    for (const g of arr(s.groups).map(obj)) if (g.group) groups.add(str(g.group));
    for (const c of arr(s.consumers).map(obj)) if (c.group) groups.add(str(c.group));
    const gs = Array.from(groups).sort(byName);
    fillSelect($('#reset-group'), gs.length ? gs : [''], gs.length ? gs : ['(no group yet)']);
  }

  function render() {
    renderQueued = false;
    lastRenderAt = Date.now();
    const s = snap;
    const parts = [renderHeader, renderBrokers, renderTapes, renderProducers, renderConsumers, renderPredict, renderApplication, renderDescribe, renderLinks, renderExperiments];
    for (const f of parts) {
      try {
        f(s);
      } catch (e) {
        noteError(f.name, e);
      }
    }
    if (Array.isArray(s.timeline)) addTimeline(s.timeline);
    document.body.dataset.rendered = String(lastRenderAt);
  }
  function applyState(s) {
    snap = obj(s);
    if (!renderQueued) {
      renderQueued = true;
      setTimeout(render, 16); // coalesce bursts of events into one render
    }
  }

  // ---------- live updates ----------
  let es = null;
  let retry = 0;
  let reconnectTimer = null;
  let pollTimer = null;
  function setConn(state, text) {
    const c = $('#conn');
    setData(c, 'state', state);
    setText(c, text || { open: 'live', connecting: 'reconnecting…', closed: 'disconnected' }[state] || state);
  }
  async function fetchState() {
    try {
      const r = await fetch('/api/state', { cache: 'no-store' });
      if (r.ok) applyState(await r.json());
    } catch (e) {
      /* the server is away: the poller or EventSource tries again */
    }
  }
  function startPolling() {
    if (!pollTimer) pollTimer = setInterval(fetchState, 2000);
  }
  function stopPolling() {
    clearInterval(pollTimer);
    pollTimer = null;
  }
  function connect() {
    clearTimeout(reconnectTimer);
    if (es) es.close();
    setConn('connecting', retry ? 'reconnecting…' : 'connecting…');
    try {
      es = new EventSource('/api/events');
    } catch (e) {
      scheduleReconnect();
      return;
    }
    es.addEventListener('open', () => {
      retry = 0;
      setConn('open');
      stopPolling();
    });
    es.addEventListener('state', (ev) => {
      try {
        applyState(JSON.parse(ev.data));
      } catch (e) {
        noteError('state event', e);
      }
    });
    es.addEventListener('timeline', (ev) => {
      try {
        const d = JSON.parse(ev.data);
        addTimeline(Array.isArray(d) ? d : [d]);
      } catch (e) {
        noteError('timeline event', e);
      }
    });
    es.addEventListener('error', () => {
      startPolling();
      if (es.readyState === EventSource.CLOSED) scheduleReconnect();
      else setConn('connecting', 'reconnecting…');
    });
  }
  function scheduleReconnect() {
    setConn('closed', 'disconnected; retrying…');
    clearTimeout(reconnectTimer);
    reconnectTimer = setTimeout(connect, Math.min(5000, 500 * 2 ** retry++));
  }

  // ---------- actions ----------
  function toast(kind, text) {
    const t = el('div', { class: 'toast ' + kind, role: kind === 'error' ? 'alert' : 'status' }, el('span', { class: 'msg', text }), el('button', { type: 'button', class: 'close', title: 'dismiss', text: '×' }));
    $('#toasts').append(t);
    t.lastChild.addEventListener('click', () => t.remove());
    setTimeout(() => t.remove(), kind === 'error' ? 12000 : 5000);
    while ($('#toasts').children.length > 6) $('#toasts').firstChild.remove();
    return t;
  }
  async function act(payload, button) {
    const what = payload.action + (payload.name ? ' ' + payload.name : '');
    if (button) button.classList.add('busy');
    try {
      const r = await fetch('/api/action', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(payload) });
      let body = {};
      const text = await r.text();
      try {
        body = obj(JSON.parse(text));
      } catch (e) {
        body = { error: text.trim() };
      }
      if (!r.ok || body.ok === false) {
        let err = str(body.error || body.message, r.status + ' ' + r.statusText);
        if (err.startsWith(payload.action + ': ')) err = err.slice(payload.action.length + 2); // the server named it already
        toast('error', what + ': ' + err);
        return { ok: false, error: err };
      }
      toast('ok', body.message ? str(body.message) : what + ': done');
      fetchState(); // do not wait for the event stream to show the effect
      return { ok: true, message: str(body.message) };
    } catch (e) {
      toast('error', what + ': ' + (e && e.message ? e.message : String(e)));
      return { ok: false, error: String(e) };
    } finally {
      if (button) button.classList.remove('busy');
    }
  }
  function formValues(form) {
    const v = {};
    for (const input of $$('input, select', form)) {
      if (!input.name) continue;
      if (input.type === 'checkbox') v[input.name] = input.checked;
      else if (input.type === 'number' || input.type === 'range') v[input.name] = input.value === '' ? undefined : Number(input.value);
      else v[input.name] = input.value.trim();
    }
    return v;
  }
  function dropEmpty(p) {
    for (const k of Object.keys(p)) if (p[k] === '' || p[k] === undefined || (typeof p[k] === 'number' && isNaN(p[k]))) delete p[k];
    return p;
  }

  function producerPayload() {
    const v = formValues($('#producer-form'));
    return dropEmpty({
      action: 'producer-start', name: v.name, topic: v.topic, rate: v.rate, keys: v.keys,
      hotKeyShare: (v.hotKeyShare || 0) / 100, acks: v.acks, idempotent: v.idempotent,
    });
  }
  function consumerPayload(like) {
    const v = formValues($('#consumer-form'));
    const p = {
      action: 'consumer-start', name: v.name, group: v.group, topic: v.topic, recordsPerPoll: v.recordsPerPoll,
      commit: v.commit, idempotentSink: v.idempotentSink, assignor: v.assignor, processTime: v.processTime || 0, // ms
    };
    if (like) {
      // "start another like it": the card's settings, a fresh name.
      const c = arr(snap.consumers).map(obj).find((x) => str(x.name) === like);
      if (c) {
        delete p.name;
        if (c.group) p.group = str(c.group);
        if (c.topic) p.topic = str(c.topic);
        if (isNum(c.recordsPerPoll)) p.recordsPerPoll = Number(c.recordsPerPoll);
        if (c.commit) p.commit = str(c.commit);
        if (typeof c.idempotentSink === 'boolean') p.idempotentSink = c.idempotentSink;
        if (c.assignor) p.assignor = str(c.assignor);
      }
    }
    return dropEmpty(p);
  }

  async function resetTo(cell) {
    const group = $('#reset-group').value;
    const topic = cell.dataset.topic, partition = Number(cell.dataset.partition), offset = Number(cell.dataset.offset);
    const status = $('#reset-status');
    if (!group) {
      const msg = 'no consumer group yet: start a consumer first';
      toast('error', 'reset-offsets: ' + msg);
      setText(status, msg);
      return;
    }
    setText(status, 'resetting ' + group + ' on ' + topic + '-' + partition + ' to ' + offset + ' …');
    const r = await act({ action: 'reset-offsets', group, topic, partition, offset }, null);
    setText(status, r.ok ? 'group ' + group + ' restarts ' + topic + '-' + partition + ' from offset ' + offset + (r.message ? ': ' + r.message : '')
      : 'refused: ' + r.error);
    toggle(status, 'bad', !r.ok);
  }

  document.addEventListener('click', (ev) => {
    const target = ev.target instanceof Element ? ev.target : null;
    if (!target) return;
    const about = target.closest('.experiment .about');
    if (about) {
      about.classList.toggle('open');
      return;
    }
    const cell = target.closest('.tape .cell.record');
    if (cell) {
      resetTo(cell);
      return;
    }
    const b = target.closest('button[data-action]');
    if (!b) return;
    const a = b.dataset.action;
    let payload;
    switch (a) {
      case 'producer-start':
        payload = producerPayload();
        break;
      case 'producer-rate': {
        const input = $('.rate-input', b.closest('.producer-card') || document);
        payload = { action: a, name: b.dataset.name, rate: Number(input && input.value) };
        if (!(payload.rate >= 0) || (input && input.value === '')) return toast('error', 'producer-rate: enter a rate (records/s; 0: as fast as it can)');
        if (input) delete input.dataset.edited;
        break;
      }
      case 'consumer-start':
        payload = consumerPayload(b.dataset.like);
        break;
      case 'cut': {
        const v = formValues($('#cut-form'));
        if (!v.from || !v.to || v.from === v.to) return toast('error', 'cut: pick two different processes');
        payload = { action: a, from: v.from, to: v.to, oneWay: !!v.oneWay };
        break;
      }
      case 'delay': {
        const v = formValues($('#delay-form'));
        if (!v.name) return toast('error', 'delay: pick a process');
        payload = { action: a, name: v.name, ms: v.ms || 0, jitter: v.jitter || 0 };
        break;
      }
      case 'heal':
        payload = { action: a };
        break;
      case 'predict-consumers': {
        const answer = checkedAnswer($('#predict-consumers-form'));
        if (!answer) return toast('error', 'predict-consumers: pick an answer first');
        predictAnswers.consumers = answer;
        payload = { action: a, answer };
        break;
      }
      case 'predict-order':
        runOrderPrediction(b);
        return;
      default:
        payload = { action: a };
        if (b.dataset.name) payload.name = b.dataset.name;
    }
    act(payload, b);
  });

  // ---------- start ----------
  function init() {
    const hot = $('#producer-form input[name=hotKeyShare]');
    const out = $('#producer-form output[name=hotKeyShareOut]');
    const showHot = () => setText(out, hot.value + '%');
    hot.addEventListener('input', showHot);
    showHot();
    $('#timeline-filter').addEventListener('change', renderTimeline);
    // The producer's rules, as producerd's: idempotence needs acks=all, a hot key needs keys.
    const pf = $('#producer-form');
    pf.elements.acks.addEventListener('change', () => {
      if (pf.elements.acks.value !== 'all') pf.elements.idempotent.checked = false;
    });
    pf.elements.idempotent.addEventListener('change', () => {
      if (pf.elements.idempotent.checked) pf.elements.acks.value = 'all';
    });
    pf.elements.keys.addEventListener('change', () => {
      if (!pf.elements.keys.checked) {
        hot.value = '0';
        showHot();
      }
    });
    document.addEventListener('input', (ev) => {
      if (ev.target instanceof Element && ev.target.matches('.rate-input')) ev.target.dataset.edited = '1';
    });
    hot.addEventListener('input', () => {
      if (Number(hot.value) > 0) pf.elements.keys.checked = true;
    });
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => applyState(snap), 100);
    });
    render();
    renderTimeline();
    fetchState();
    connect();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
