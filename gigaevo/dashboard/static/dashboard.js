// gigaevo dashboard: polls the read-only JSON API and extends the plots in place.
// Every text that comes from a run (code, model notes, ids) is set with textContent.
'use strict';

(function () {
  const POLL_MS = 1000;
  const SWEEP_MS = 3000;
  const CARDS_MS = 10000;
  const RUNS_MS = 5000;
  const PLOT_CONFIG = { displaylogo: false, responsive: true };
  const $ = (id) => document.getElementById(id);

  const S = { rid: null, token: 0, program: null, sweep: false };

  // -- helpers ----------------------------------------------------------------
  async function getJSON(url) {
    const response = await fetch(url, { cache: 'no-store' });
    if (!response.ok) {
      const error = new Error(`${url}: HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  function fmt(v) {
    if (v === null || v === undefined) return '—';
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (typeof v !== 'number') return String(v);
    if (Number.isInteger(v)) return v.toLocaleString('en');
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
    return String(Number(v.toPrecision(6)));
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  function link(text, onclick) {
    const a = el('a', text);
    a.href = '#';
    a.addEventListener('click', (ev) => { ev.preventDefault(); onclick(); });
    return a;
  }

  function fillTable(table, headers, rows) {
    table.replaceChildren();
    const head = table.createTHead().insertRow();
    for (const h of headers) head.appendChild(el('th', h));
    const body = table.createTBody();
    for (const row of rows) {
      const tr = body.insertRow();
      for (const cell of row.cells || row) {
        const td = tr.insertCell();
        if (cell instanceof Node) td.appendChild(cell); else td.textContent = fmt(cell);
      }
      if (row.rid !== undefined) tr.dataset.rid = row.rid;
      if (row.current) tr.className = 'current';
    }
  }

  function keyChanged(holder, name, value) {
    const key = JSON.stringify(value);
    if (holder[name] === key) return false;
    holder[name] = key;
    return true;
  }

  // -- one run's state ----------------------------------------------------------
  const COLS = ['id', 'mutant', 'fitness', 'valid', 'status', 'island', 'reason', 'tactic'];

  function freshRun() {
    const run = { gen: null, n: 0, msince: 0, best: null, higher: true, cats: { status: [], reason: [], tactic: [] } };
    run.cols = Object.fromEntries(COLS.map((c) => [c, []]));
    run.statusCounts = []; run.reasonCounts = []; run.cum = [0, 0, 0]; run.keys = {};
    run.metric = 'fitness'; run.bestId = null; run.lastCards = 0;
    run.nValid = 0; run.nOther = 0; run.thinnedAt = 0; run.drawn = false;
    run.disp = { x: [], y: [], c: [], t: [] }; run.other = { x: [], y: [], c: [], t: [] };
    run.steps = { x: [], y: [] };
    return run;
  }

  // Past DISPLAY_MAX valid points the plot thins the older ones (SVG markers cost a redraw
  // each): all points of the latest RECENT mutants, and in each of BINS bins of the older
  // ones its best and its worst program. Rebuilt at most every REBUILD_MS.
  const DISPLAY_MAX = 4000;
  const RECENT = 1000;
  const BINS = 1200;
  const REBUILD_MS = 5000;
  const OTHER_MAX = 2000; // invalid and duplicate mutants: the latest ones are drawn

  function label(run, row) {
    const c = run.cols;
    const status = run.cats.status[c.status[row]] || '?';
    const tactic = c.tactic[row] >= 0 ? run.cats.tactic[c.tactic[row]] : 'initial';
    return `${c.id[row]} · ${status} · island ${c.island[row]} · ${tactic}`;
  }

  function thin(run) {
    const c = run.cols;
    const last = c.mutant[c.mutant.length - 1] || 0;
    const cut = last - RECENT;
    const width = Math.max(1, Math.ceil(Math.max(cut, 1) / BINS));
    const bins = new Map();
    const keep = [];
    for (let row = 0; row < c.id.length; row++) {
      const f = c.fitness[row];
      if (!c.valid[row] || f === null) continue;
      if (c.mutant[row] > cut) { keep.push(row); continue; }
      const b = Math.floor(c.mutant[row] / width);
      const span = bins.get(b);
      if (!span) { bins.set(b, [row, row]); continue; }
      if (f < c.fitness[span[0]]) span[0] = row;
      if (f > c.fitness[span[1]]) span[1] = row;
    }
    const rows = [...new Set([...bins.values()].flat())].sort((a, b) => a - b).concat(keep);
    run.disp = { x: [], y: [], c: [], t: [] };
    for (const row of rows) pushPoint(run.disp, run, row);
    run.thinnedAt = Date.now();
  }

  function pushPoint(target, run, row) {
    target.x.push(run.cols.mutant[row]); target.y.push(run.cols.fitness[row]);
    target.c.push(row); target.t.push(label(run, row));
  }

  function drawFitness(run) {
    const direction = run.higher ? 'higher' : 'lower';
    const thinned = run.nValid > DISPLAY_MAX;
    const lastX = run.cols.mutant.length ? run.cols.mutant[run.cols.mutant.length - 1] : 0;
    const stepsX = run.steps.x.concat(run.steps.x.length ? [lastX] : []);
    const stepsY = run.steps.y.concat(run.steps.y.length ? [run.best] : []);
    const traces = [
      { type: 'scatter', mode: 'markers', x: run.disp.x, y: run.disp.y, customdata: run.disp.c, text: run.disp.t,
        name: thinned ? `valid program (${run.disp.x.length} of ${run.nValid} shown: older ones thinned)` : 'valid program',
        marker: { size: 5, opacity: 0.55, color: '#1f77b4' },
        hovertemplate: 'mutant %{x}<br>fitness %{y}<br>%{text}<extra></extra>' },
      { type: 'scatter', mode: 'lines', name: 'best so far', x: stepsX, y: stepsY, hoverinfo: 'skip',
        line: { shape: 'hv', color: '#d62728', width: 2 } },
      { type: 'scatter', mode: 'markers', x: run.other.x,
        name: run.nOther > run.other.x.length ? `invalid or duplicate (latest ${run.other.x.length} of ${run.nOther})` : 'invalid or duplicate', y: run.other.y, yaxis: 'y2',
        customdata: run.other.c, text: run.other.t, marker: { symbol: 'line-ns-open', size: 9, color: '#999' },
        hovertemplate: 'mutant %{x}<br>%{text}<extra></extra>' },
    ];
    const layout = {
      margin: { l: 64, r: 12, t: 8, b: 40 }, uirevision: 'keep', datarevision: run.n, showlegend: true,
      legend: { orientation: 'h', y: 1.06 },
      xaxis: { title: { text: 'mutant' } },
      yaxis: { title: { text: `${run.metric} (${direction} is better)` }, domain: [0.12, 1] },
      yaxis2: { domain: [0, 0.07], showticklabels: false, showgrid: false, zeroline: false, fixedrange: true, range: [-1, 1] },
    };
    const gd = $('fitness-plot');
    Plotly.react(gd, traces, layout, PLOT_CONFIG);
    if (!gd.dataset.clicks) {
      gd.dataset.clicks = '1';
      gd.on('plotly_click', (ev) => {
        const row = ev.points[0].customdata;
        if (row !== undefined && S.run && S.run.cols.id[row]) showProgram(S.run.cols.id[row]);
      });
    }
  }

  function appendPrograms(run, p) {
    for (let i = 0; i < p.id.length; i++) {
      const row = p.start + i;
      for (const c of COLS) run.cols[c].push(p[c][i]);
      run.statusCounts[p.status[i]] = (run.statusCounts[p.status[i]] || 0) + 1;
      if (p.reason[i] >= 0) run.reasonCounts[p.reason[i]] = (run.reasonCounts[p.reason[i]] || 0) + 1;
      const f = p.fitness[i];
      if (p.valid[i] && f !== null) {
        run.nValid += 1;
        pushPoint(run.disp, run, row);
        if (run.best === null || (run.higher ? f > run.best : f < run.best)) {
          run.best = f;
          run.steps.x.push(p.mutant[i]); run.steps.y.push(f);
        }
      } else {
        const status = run.cats.status[p.status[i]] || '?';
        const reason = p.reason[i] >= 0 ? run.cats.reason[p.reason[i]] : status;
        run.other.x.push(p.mutant[i]); run.other.y.push(0); run.other.c.push(row);
        run.other.t.push(`${p.id[i]} · ${reason}`);
        run.nOther += 1;
      }
    }
    if (run.other.x.length > 1.5 * OTHER_MAX) {
      for (const k of ['x', 'y', 'c', 't']) run.other[k].splice(0, run.other[k].length - OTHER_MAX);
    }
    run.n = p.start + p.id.length;
    if (run.nValid > DISPLAY_MAX && Date.now() - run.thinnedAt > REBUILD_MS) thin(run);
    if (p.id.length || !run.drawn) { drawFitness(run); run.drawn = true; }
  }

  function drawCounters(d) {
    const c = d.counters || {};
    const items = [
      ['mutants', c.n_mutants], ['valid', c.n_valid], ['invalid', c.n_invalid],
      ['duplicates', c.n_duplicate], ['accepted', c.n_accepted],
      ['best', c.best_fitness], ['initial', c.initial_fitness],
      ['model calls', c.llm_calls], ['prompt tokens', c.prompt_tokens],
      ['completion tokens', c.completion_tokens], ['cost $', c.llm_cost_usd],
    ];
    const box = $('counters');
    box.replaceChildren();
    for (const [name, value] of items) {
      const span = el('span', `${name} `);
      span.appendChild(el('b', fmt(value)));
      box.appendChild(span);
    }
  }

  function drawStatus(d) {
    const s = d.status;
    const badge = $('status');
    badge.textContent = s.state;
    badge.className = `badge ${s.state}`;
    const bits = [];
    if (s.stop_reason) bits.push(`stop: ${s.stop_reason}`);
    if (s.state === 'interrupted') bits.push('no process has it open and it did not stop: killed? resume=true continues it');
    if (s.resumes) bits.push(`resumed ${s.resumes}×`);
    if (s.idle_s !== null && s.idle_s !== undefined) bits.push(`last write ${fmt(Math.round(s.idle_s))} s ago`);
    $('status-detail').textContent = bits.join(' · ');
    const warn = [];
    if (d.error) warn.push(d.error);
    if (s.bad_lines) warn.push(`${s.bad_lines} unreadable line(s) in events.jsonl skipped`);
    $('warnings').hidden = !warn.length;
    $('warnings').textContent = warn.join(' · ');
  }

  function drawArchive(run, a) {
    if (!keyChanged(run.keys, 'archive', [a, run.higher])) return;
    const gd = $('archive-plot');
    const islands = a.islands || [];
    const elites = islands.flatMap((isl) => isl.elites);
    if (!elites.length) { Plotly.react(gd, [], { annotations: [{ text: 'no archive yet', showarrow: false }], xaxis: { visible: false }, yaxis: { visible: false } }, PLOT_CONFIG); return; }
    const rows = Math.max(a.bins[0] || 1, ...elites.map((e) => (e[0][0] || 0) + 1));
    const cols = Math.max(a.bins[1] || 1, ...elites.map((e) => (e[0][1] || 0) + 1));
    const total = (a.bins.length ? a.bins : [rows, cols]).reduce((x, y) => x * y, 1);
    const values = elites.map((e) => e[1]).filter((v) => v !== null);
    let lo = Math.min(...values); let hi = Math.max(...values);
    if (lo === hi) { const pad = Math.abs(lo) * 1e-3 || 1e-3; lo -= pad; hi += pad; }
    const traces = []; const layout = {
      margin: { l: 48, r: 8, t: 8, b: 48 }, grid: { rows: 1, columns: islands.length, pattern: 'independent' },
      coloraxis: { colorscale: 'Viridis', reversescale: !run.higher, cmin: lo, cmax: hi, colorbar: { title: { text: run.metric, side: 'right' }, thickness: 12 } },
    };
    islands.forEach((isl, i) => {
      const z = Array.from({ length: rows }, () => new Array(cols).fill(null));
      const ids = Array.from({ length: rows }, () => new Array(cols).fill(''));
      for (const [cell, f, id] of isl.elites) {
        const r = cell[0] || 0; const c = cell[1] || 0; const old = z[r][c];
        if (old === null || (run.higher ? f > old : f < old)) { z[r][c] = f; ids[r][c] = id; }
      }
      const axis = i ? String(i + 1) : '';
      traces.push({ type: 'heatmap', z, customdata: ids, coloraxis: 'coloraxis', xaxis: `x${axis}`, yaxis: `y${axis}`, xgap: 1, ygap: 1,
        hovertemplate: `island ${i}<br>${a.dims[0] || 'bin 0'} %{y}, ${a.dims[1] || 'bin 1'} %{x}<br>fitness %{z}<br>%{customdata}<extra></extra>` });
      const share = (100 * isl.elites.length / total).toFixed(1);
      const dim = a.dims[1] ? `${a.dims[1]} · ` : '';
      layout[`xaxis${axis}`] = { title: { text: `${dim}island ${i}: ${isl.elites.length} of ${total} cells (${share}%)`, font: { size: 11 } } };
      layout[`yaxis${axis}`] = { title: { text: i ? '' : (a.dims[0] || '') } };
    });
    Plotly.react(gd, traces, layout, PLOT_CONFIG);
    if (!gd.dataset.clicks) {
      gd.dataset.clicks = '1';
      gd.on('plotly_click', (ev) => { const id = ev.points[0].customdata; if (id) showProgram(id); });
    }
  }

  function drawInvalid(run) {
    const status = run.cats.status.map((name, i) => [name, run.statusCounts[i] || 0]).filter((x) => x[0] !== 'initial' && x[1]);
    const reasons = run.cats.reason.map((name, i) => [name, run.reasonCounts[i] || 0]).filter((x) => x[1]);
    reasons.sort((a, b) => a[1] - b[1]);
    if (!keyChanged(run.keys, 'invalid', [status, reasons])) return;
    const traces = [
      { type: 'bar', orientation: 'h', name: 'mutants', y: status.map((x) => x[0]), x: status.map((x) => x[1]), marker: { color: '#1f77b4' } },
      { type: 'bar', orientation: 'h', name: 'invalid reasons', y: reasons.slice(-15).map((x) => x[0]), x: reasons.slice(-15).map((x) => x[1]), xaxis: 'x2', yaxis: 'y2', marker: { color: '#d62728' } },
    ];
    const layout = { margin: { l: 80, r: 8, t: 8, b: 40 }, showlegend: false,
      xaxis: { domain: [0, 0.36], title: { text: 'by status' } }, yaxis: { anchor: 'x' },
      xaxis2: { domain: [0.64, 1], anchor: 'y2', title: { text: reasons.length ? 'invalid, by reason' : 'no invalid mutant' } },
      yaxis2: { anchor: 'x2' } };
    Plotly.react($('invalid-plot'), traces, layout, PLOT_CONFIG);
  }

  function drawLlm(d) {
    const c = d.counters || {};
    const rows = (d.llm || []).map((r) => [r.role, r.model, r.calls, r.failed, r.retries, r.prompt_tokens, r.completion_tokens, r.cost_usd, r.mean_latency_s]);
    rows.push(['all (engine counters)', '', c.llm_calls, c.n_failed_mutations, null, c.prompt_tokens, c.completion_tokens, c.llm_cost_usd, null]);
    fillTable($('llm-table'), ['role', 'model', 'calls', 'failed', 'retries', 'prompt tokens', 'completion tokens', 'cost $', 'mean latency s'], rows);
  }

  function drawEvents(d) {
    const rows = (d.events || []).slice().reverse().map((e) => {
      const when = e.time ? new Date(e.time * 1000).toLocaleTimeString('en-GB') : '';
      const pid = e.program_id ? link(e.program_id, () => showProgram(e.program_id)) : '';
      const detail = ['status', 'reason', 'island', 'n_mutants', 'from_island', 'to_island', 'tactic']
        .filter((k) => e[k] !== undefined && e[k] !== null).map((k) => `${k} ${e[k]}`).join(', ');
      return [when, e.event, pid, e.fitness, detail];
    });
    fillTable($('events-table'), ['time', 'event', 'program', 'fitness', 'detail'], rows);
  }

  // -- memory ---------------------------------------------------------------------
  const ACTIONS = ['abstain', 'offer', 'withhold'];

  function drawMemory(run, m) {
    $('memory').hidden = !m;
    if (!m) return;
    const total = ACTIONS.reduce((s, a) => s + (m.actions[a] || 0), 0) || 1;
    const rows = ACTIONS.map((a) => [`decisions: ${a}`, m.actions[a] || 0, `${(100 * (m.actions[a] || 0) / total).toFixed(1)}%`]);
    for (const [k, v] of Object.entries(m.outcomes)) rows.push([`outcomes: ${k}`, v, '']);
    rows.push(['outcomes citing a card', m.cited, ''], ['cards in the bank', m.n_cards, ''], ['cards retired', m.n_retired, m.retired.join(' ')]);
    if (m.ope && m.ope.dr !== undefined) rows.push(['ITT effect of offering (DR)', m.ope.dr, `[${fmt(m.ope.ci_low)}, ${fmt(m.ope.ci_high)}], n ${fmt(m.ope.n)}`]);
    fillTable($('memory-table'), ['', 'count', 'share / detail'], rows);
    fillTable($('writes-table'), ['write: item', 'outcome', 'rows'], m.writes);
    const dec = m.decisions; const xs = [[], [], []]; const ys = [[], [], []];
    for (let i = 0; i < dec.attempt.length; i++) {
      const a = dec.action[i]; run.cum[a] += 1;
      xs[a].push(dec.attempt[i]); ys[a].push(run.cum[a]);
    }
    run.msince = dec.start + dec.attempt.length;
    const gd = $('memory-plot');
    if (!gd.data) {
      const colors = ['#999', '#1f77b4', '#ff7f0e'];
      const traces = ACTIONS.map((a, i) => ({ type: 'scatter', mode: 'lines', name: a, x: [], y: [], line: { shape: 'hv', color: colors[i] } }));
      Plotly.newPlot(gd, traces, { margin: { l: 50, r: 8, t: 8, b: 40 }, xaxis: { title: { text: 'attempt' } }, yaxis: { title: { text: 'decisions so far' } }, legend: { orientation: 'h', y: 1.1 } }, PLOT_CONFIG);
    }
    if (dec.attempt.length) Plotly.extendTraces(gd, { x: xs, y: ys }, [0, 1, 2]);
    if (Date.now() - run.lastCards > CARDS_MS) { run.lastCards = Date.now(); loadCards(S.rid); }
  }

  async function loadCards(rid) {
    try {
      const d = await getJSON(`/api/run/${rid}/cards`);
      if (rid !== S.rid) return;
      const rows = d.cards.map((c) => [c.card_id, c.kind, c.n_offered, c.n_withheld, c.n_cited, c.mean_effect,
        `[${fmt(c.ci_low)}, ${fmt(c.ci_high)}]`, c.p_positive, c.in_bank, c.description]);
      fillTable($('cards-table'), ['card', 'kind', 'offered', 'withheld (control)', 'cited', 'effect', '~95% interval', 'P(effect > 0)', 'in bank', 'description'], rows);
    } catch (e) { /* the next poll tries again */ }
  }

  // -- polling ------------------------------------------------------------------------
  function setConnection(ok) { $('connection').hidden = ok; }

  function resetRun(d) {
    const run = freshRun();
    run.gen = d.gen; run.higher = d.higher_is_better; run.metric = d.metric || 'fitness';
    S.run = run;
    for (const id of ['fitness-plot', 'archive-plot', 'invalid-plot', 'memory-plot']) {
      Plotly.purge($(id));
      delete $(id).dataset.clicks;
    }
    return run;
  }

  function apply(d) {
    let run = S.run;
    if (!run || d.reset || run.gen !== d.gen || run.higher !== d.higher_is_better) run = resetRun(d);
    run.cats = d.categories; run.bestId = d.best_id;
    appendPrograms(run, d.programs);
    drawStatus(d); drawCounters(d); drawArchive(run, d.archive); drawInvalid(run);
    drawLlm(d); drawEvents(d); drawMemory(run, d.memory);
    if (S.program === null && run.n) {
      const wanted = new URLSearchParams(location.hash.slice(1)).get('program');
      openProgram(wanted || run.bestId || run.cols.id[0]);
    }
    document.body.dataset.programs = String(run.n);
  }

  async function poll(token) {
    if (token !== S.token) return;
    const run = S.run;
    const q = run ? `since=${run.n}&gen=${run.gen}&msince=${run.msince}` : 'since=0';
    let d = null;
    try {
      d = await getJSON(`/api/run/${S.rid}/state?${q}`);
    } catch (e) {
      if (token === S.token) setConnection(false);
    }
    try {
      if (d !== null && token === S.token) { setConnection(true); apply(d); }
    } finally {
      if (token === S.token) setTimeout(() => poll(token), POLL_MS);
    }
  }

  function selectRun(rid) {
    S.rid = rid; S.token += 1; S.run = null; S.program = null;
    $('run-select').value = String(rid);
    $('program-body').hidden = true;
    for (const tr of $('sweep-table').querySelectorAll('tr[data-rid]')) tr.classList.toggle('current', tr.dataset.rid === String(rid));
    const params = new URLSearchParams(location.hash.slice(1));
    if (params.get('run') !== String(rid)) history.replaceState(null, '', `#run=${rid}`);
    poll(S.token);
  }

  // -- one program --------------------------------------------------------------------
  function renderDiff(pre, diff) {
    pre.replaceChildren();
    if (diff === null || diff === undefined) { pre.textContent = '(an initial program: it has no parent)'; return; }
    if (!diff) { pre.textContent = '(same code as its parent)'; return; }
    for (const line of diff.split('\n')) {
      let cls = '';
      if (line.startsWith('+') && !line.startsWith('+++')) cls = 'diff-add';
      else if (line.startsWith('-') && !line.startsWith('---')) cls = 'diff-del';
      else if (line.startsWith('@@')) cls = 'diff-hunk';
      pre.appendChild(el('span', `${line}\n`, cls));
    }
  }

  function drawLineage(p) {
    const gd = $('lineage-plot');
    const lin = p.lineage;
    if (!lin) { Plotly.purge(gd); return; }
    const rows = new Map(lin.tree.map((n) => [n.row, n]));
    const chain = new Set(lin.chain.map((n) => n.row));
    const ex = []; const ey = [];
    for (const n of lin.tree) {
      const parent = rows.get(n.parent);
      if (parent && n.fitness !== null && parent.fitness !== null) { ex.push(parent.generation, n.generation, null); ey.push(parent.fitness, n.fitness, null); }
    }
    const side = lin.tree.filter((n) => !chain.has(n.row) && n.fitness !== null);
    const main = lin.chain.filter((n) => n.fitness !== null).slice().reverse();
    const label = (n) => `${n.id} · ${n.status} · mutant ${n.mutant}`;
    const traces = [
      { type: 'scatter', mode: 'lines', x: ex, y: ey, line: { color: '#ccc', width: 1 }, hoverinfo: 'skip', name: 'parent → child' },
      { type: 'scatter', mode: 'markers', x: side.map((n) => n.generation), y: side.map((n) => n.fitness), customdata: side.map((n) => n.id), text: side.map(label), marker: { color: '#aaa', size: 6 }, name: 'other children', hovertemplate: '%{text}<br>fitness %{y}<extra></extra>' },
      { type: 'scatter', mode: 'lines+markers', x: main.map((n) => n.generation), y: main.map((n) => n.fitness), customdata: main.map((n) => n.id), text: main.map(label), marker: { color: '#d62728', size: 8 }, line: { color: '#d62728' }, name: 'ancestors', hovertemplate: '%{text}<br>fitness %{y}<extra></extra>' },
    ];
    const layout = { margin: { l: 56, r: 8, t: 8, b: 40 }, xaxis: { title: { text: 'generation' } }, yaxis: { title: { text: S.run ? S.run.metric : 'fitness' } }, legend: { orientation: 'h', y: 1.12 } };
    Plotly.react(gd, traces, layout, PLOT_CONFIG);
    if (!gd.dataset.clicks) {
      gd.dataset.clicks = '1';
      gd.on('plotly_click', (ev) => { const id = ev.points[0].customdata; if (id) showProgram(id); });
    }
    const list = $('lineage-list');
    list.replaceChildren();
    const item = (n, prefix) => {
      const div = el('div');
      div.appendChild(document.createTextNode(`${prefix} `));
      div.appendChild(link(n.id, () => openProgram(n.id)));
      div.appendChild(document.createTextNode(`  gen ${n.generation} · ${n.status} · fitness ${fmt(n.fitness)}`));
      list.appendChild(div);
    };
    lin.chain.forEach((n, i) => item(n, i ? `ancestor ${i}` : 'this program'));
    lin.children.forEach((n) => item(n, 'child'));
  }

  function showProgram(id) {
    openProgram(id).then(() => $('program').scrollIntoView({ behavior: 'smooth', block: 'start' }));
  }

  async function openProgram(id) {
    const rid = S.rid;
    S.program = id;
    let p;
    try {
      p = await getJSON(`/api/run/${rid}/program/${encodeURIComponent(id)}`);
    } catch (e) {
      $('program-title').textContent = e.status === 404 ? `${id}: no such program in this run` : `${id}: could not be read`;
      return;
    }
    if (rid !== S.rid || S.program !== id) return;
    $('program-title').textContent = `${p.id} (mutant ${fmt(p.mutant)})`;
    $('program-input').value = p.id;
    const m = p.mutation || {};
    const parent = (p.parent_ids || [])[0];
    const facts = [
      ['status', p.status], ['valid', p.valid], ['fitness', p.fitness], ['island', p.island],
      ['cell', p.cell ? p.cell.join(', ') : null], ['generation', p.generation],
      ['parent', parent ? link(parent, () => openProgram(parent)) : 'none (an initial program)'],
      ['duplicate of', p.duplicate_of], ['model', m.model], ['tactic', m.tactic],
      ['cards cited', (m.card_ids_used || []).join(' ') || null], ['mutation failure', m.failure],
      ['evaluation seconds', p.eval_seconds],
    ];
    fillTable($('program-facts'), ['', ''], facts.filter((f) => f[1] !== null && f[1] !== undefined));
    $('program-reason').hidden = !p.invalid_reason;
    $('program-reason').textContent = p.invalid_reason ? `invalid: ${p.invalid_reason}` : '';
    renderDiff($('program-diff'), p.diff);
    $('program-report').textContent = m.change_report || '(none)';
    $('program-explanation').textContent = m.explanation || '(none)';
    fillTable($('program-metrics'), ['metric', 'value'], Object.entries(p.metrics || {}));
    $('program-code').textContent = p.code;
    $('program-body').hidden = false;
    drawLineage(p);
    history.replaceState(null, '', `#run=${rid}&program=${encodeURIComponent(p.id)}`);
  }

  // -- runs and sweeps ------------------------------------------------------------------
  async function loadRuns() {
    try {
      const d = await getJSON('/api/runs');
      const select = $('run-select');
      if (select.options.length !== d.runs.length) {
        select.replaceChildren(...d.runs.map((r) => { const o = el('option', r.name); o.value = String(r.rid); return o; }));
        if (S.rid !== null) select.value = String(S.rid);
      }
      if (d.runs.length > 1 && !S.sweep) { S.sweep = true; $('sweep').hidden = false; pollSweep(); }
      if (S.rid === null && d.runs.length) {
        const wanted = Number(new URLSearchParams(location.hash.slice(1)).get('run'));
        selectRun(d.runs.some((r) => r.rid === wanted) ? wanted : d.runs[0].rid);
      }
      if (!d.runs.length) $('status').textContent = 'waiting for a run';
      setConnection(true);
    } catch (e) { setConnection(false); }
    setTimeout(loadRuns, RUNS_MS);
  }

  async function pollSweep() {
    try {
      const d = await getJSON('/api/sweep');
      const arms = [...new Set(d.runs.map((r) => r.arm))];
      const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
      const shown = new Set();
      const traces = d.runs.map((r) => {
        const curve = d.curves[r.rid] || [];
        const arm = arms.indexOf(r.arm);
        const first = !shown.has(r.arm); shown.add(r.arm);
        return { type: 'scatter', mode: 'lines', x: curve.map((s) => s[0]).concat(curve.length ? [r.n_mutants] : []),
          y: curve.map((s) => s[1]).concat(curve.length ? [curve[curve.length - 1][1]] : []),
          line: { shape: 'hv', color: palette[arm % palette.length] }, name: r.arm, legendgroup: r.arm, showlegend: first,
          customdata: curve.map(() => r.rid), hovertemplate: `${r.job}<br>mutant %{x}<br>best %{y}<extra></extra>` };
      });
      if (keyChanged(S, 'sweepKey', traces)) {
        const layout = { margin: { l: 60, r: 8, t: 8, b: 40 }, xaxis: { title: { text: 'mutant' } }, yaxis: { title: { text: 'best so far' } }, legend: { orientation: 'h', y: 1.12 } };
        Plotly.react($('sweep-plot'), traces, layout, PLOT_CONFIG);
      }
      const cols = d.columns.map((c) => c.replace(/^override\./, ''));
      const rows = d.runs.map((r) => ({ rid: r.rid, current: r.rid === S.rid,
        cells: [r.job, ...d.columns.map((c) => r[c]), r.state, r.n_mutants, r.best_fitness, r.initial_fitness, r.resumes] }));
      fillTable($('sweep-table'), ['run', ...cols, 'state', 'mutants', 'best', 'initial', 'resumes'], rows);
      fillTable($('compare-table'), ['arm', 'runs', 'mean best', 'sd', 'ci low', 'ci high'], d.compare.map((a) => [a.arm, a.n, a.mean, a.std, a.ci_low, a.ci_high]));
    } catch (e) { /* next time */ }
    setTimeout(pollSweep, SWEEP_MS);
  }

  function start() {
    $('run-select').addEventListener('change', (ev) => selectRun(Number(ev.target.value)));
    $('sweep-table').addEventListener('click', (ev) => {
      const tr = ev.target.closest('tr[data-rid]');
      if (tr) selectRun(Number(tr.dataset.rid));
    });
    $('best-button').addEventListener('click', () => { if (S.run && S.run.bestId) openProgram(S.run.bestId); });
    const go = () => { const id = $('program-input').value.trim(); if (id) openProgram(id); };
    $('program-go').addEventListener('click', go);
    $('program-input').addEventListener('keydown', (ev) => { if (ev.key === 'Enter') go(); });
    loadRuns();
  }

  document.addEventListener('DOMContentLoaded', start);
})();
