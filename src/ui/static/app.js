// The tidemark dashboard. Plain browser JavaScript, no build step.
// Every value from state, data or an error message reaches the page through text nodes (h() below); nothing here
// assigns innerHTML, so a value holding markup shows as that markup's text.
'use strict';

(() => {
  const TOKEN = document.querySelector('meta[name="tidemark-token"]').content;
  const ACTIONS = document.querySelector('meta[name="tidemark-actions"]').content === 'on';
  const REFRESH_MS = 5000;

  /** Builds an element; string and number children become text nodes. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = String(v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  // ---- formatting -------------------------------------------------------------------------------------------

  const count = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));

  function duration(ms) {
    if (ms === null || ms === undefined) return '—';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
    // The largest unit and the one below it, if not zero: "3d 4h", "3d" (never "3d 37m", which reads as 3d 0h 37m).
    const units = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
    const rest = Math.floor(s);
    const first = units.findIndex(([, size]) => rest >= size);
    const [unit, size] = units[first];
    const parts = [`${Math.floor(rest / size)}${unit}`];
    const next = units[first + 1];
    if (next !== undefined && Math.floor((rest % size) / next[1]) > 0) parts.push(`${Math.floor((rest % size) / next[1])}${next[0]}`);
    return parts.join(' ');
  }

  function ago(iso) {
    if (!iso) return '—';
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return iso;
    const d = Date.now() - t;
    return d < 5000 ? 'just now' : `${duration(d)} ago`;
  }

  function watermarkText(w) {
    if (!w) return 'none';
    return [w.cursor.value, ...w.pk.map((p) => p.value)].join(' / ');
  }

  const OUTCOME_TITLE = {
    committed: 'finished; all it read is committed',
    failed: 'failed; what it had committed is kept',
    running: 'still running, or ended without a word (the next run says which)',
    stopped: 'stopped on purpose (SIGTERM or Ctrl-C); what it had committed is kept, the rest rolled back',
  };

  function outcomeBadge(outcome) {
    const name = String(outcome).replace(/[^a-z]/g, '');
    return h('span', { class: `badge outcome-${name}`, title: OUTCOME_TITLE[name] ?? '' }, outcome);
  }

  // ---- data -------------------------------------------------------------------------------------------------

  async function getJson(url) {
    const res = await fetch(url, { headers: { Accept: 'application/json' } });
    const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
    if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
    return body;
  }

  async function postJson(url, body) {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Tidemark-Token': TOKEN },
      body: JSON.stringify(body),
    });
    const out = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
    if (!res.ok) throw new Error(out.error || `HTTP ${res.status}`);
    return out;
  }

  const api = (name) => `/api/pipelines/${encodeURIComponent(name)}`;

  // ---- chrome -----------------------------------------------------------------------------------------------

  const main = document.getElementById('main');
  const notice = document.getElementById('notice');

  function setNotice(kind, text) {
    notice.hidden = !text;
    notice.className = `notice ${kind}`;
    notice.textContent = text || '';
  }

  function setCrumbs(parts) {
    const nav = document.getElementById('crumbs');
    nav.replaceChildren(...parts.flatMap((p, i) => [...(i ? [h('span', { class: 'sep' }, '›')] : []), p.href ? h('a', { href: p.href }, p.text) : h('span', {}, p.text)]));
  }

  document.getElementById('mode').replaceChildren(
    ACTIONS ? h('span', { class: 'badge warn', title: 'started with --allow-actions' }, 'actions enabled') : h('span', { class: 'badge', title: 'start with --allow-actions to enable actions' }, 'read-only'),
  );

  const dialog = document.getElementById('confirm');
  let dialogOpen = false;

  /** Resolves true only when the user confirms. */
  function confirmAction(title, text, okLabel) {
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-text').textContent = text;
    document.getElementById('confirm-ok').textContent = okLabel;
    dialogOpen = true;
    dialog.showModal();
    return new Promise((resolve) => {
      const done = (value) => {
        ok.removeEventListener('click', onOk);
        cancel.removeEventListener('click', onCancel);
        dialog.removeEventListener('cancel', onCancel);
        dialog.close();
        dialogOpen = false;
        resolve(value);
      };
      const ok = document.getElementById('confirm-ok');
      const cancel = document.getElementById('confirm-cancel');
      const onOk = () => done(true);
      const onCancel = () => done(false);
      ok.addEventListener('click', onOk);
      cancel.addEventListener('click', onCancel);
      dialog.addEventListener('cancel', onCancel);
    });
  }

  async function act(button, { title, text, okLabel, url, body, describe }) {
    if (!(await confirmAction(title, text, okLabel))) return;
    button.disabled = true;
    setNotice('info', `${okLabel}…`);
    try {
      const out = await postJson(url, body);
      setNotice('ok', describe(out));
    } catch (error) {
      setNotice('error', `${okLabel} failed: ${error.message}`);
    } finally {
      button.disabled = false;
      refresh(true);
    }
  }

  function staleNote(p) {
    const notes = [];
    if (p.stale) {
      notes.push(h('div', { class: 'note warn', dataset: { role: 'stale' } }, `Showing the last known data${p.stale.dataFrom ? ` (read ${ago(p.stale.dataFrom)})` : ' (none read yet)'}: ${p.stale.reason}.`));
    }
    if (p.error) notes.push(h('div', { class: 'note error', dataset: { role: 'error' } }, p.error));
    for (const w of p.warnings || []) notes.push(h('div', { class: 'note warn', dataset: { role: 'source-warning' } }, w));
    return notes;
  }

  function lockText(lock) {
    if (!lock || !lock.live) return null;
    return `running — lease ${lock.token}, pid ${lock.pid} on ${lock.host}, since ${ago(lock.acquiredAt)}`;
  }

  // ---- overview ---------------------------------------------------------------------------------------------

  function renderOverview(data) {
    setCrumbs([{ text: 'Overview' }]);
    if (data.pipelines.length === 0) return [h('p', { class: 'muted' }, 'No pipeline files found.')];
    return [
      h('h1', {}, 'Pipelines'),
      ...data.pipelines.map((p) =>
        h('section', { class: 'card pipeline', dataset: { pipeline: p.name } },
          h('div', { class: 'card-head' },
            h('h2', {}, p.streams.length ? h('a', { href: `#/p/${encodeURIComponent(p.name)}` }, p.name) : p.name),
            h('span', { class: 'muted' }, p.file),
            p.stateVersion !== null ? h('span', { class: 'muted' }, `state v${p.stateVersion}`) : null,
            h('span', { class: 'spacer' }),
            lockText(p.lock) ? h('span', { class: 'badge running', dataset: { role: 'lock' } }, lockText(p.lock)) : null,
            p.lock && !p.lock.live ? h('span', { class: 'muted', dataset: { role: 'checked' }, title: 'the newest run, also one that found nothing to load' }, `last checked ${ago(p.lock.acquiredAt)}`) : null,
            nextRunText(p) ? h('span', { class: 'muted', dataset: { role: 'next-run' }, title: 'from the schedule: key, as tidemark schedule reads it' }, nextRunText(p)) : null,
          ),
          staleNote(p),
          p.streams.length ? streamsTable(p) : null,
        ),
      ),
    ];
  }

  /** Nothing was ever read (the file is busy or locked, or the read failed): what the state says is unknown, not empty. */
  function unknownState(p) {
    return p.readAt === null && (p.stale !== null || p.error !== null);
  }

  const UNKNOWN = () => h('span', { class: 'muted', dataset: { role: 'unknown' } }, 'unknown');

  /** Where a stream stands: its watermark, or for a partitioned stream the partitions it holds. */
  function positionText(s) {
    if (!s.partitioned) return watermarkText(s.watermark);
    const n = s.partitions.loaded;
    return n === 0 ? 'no partitions loaded' : `${count(n)} partition${n === 1 ? '' : 's'} loaded · latest ${s.partitions.latest}`;
  }

  function lagText(s) {
    if (s.partitioned) return s.partitions.latestLoadedAt ? `loaded ${ago(s.partitions.latestLoadedAt)}` : '—';
    return s.lagMs === null ? '—' : duration(s.lagMs);
  }

  /**
   * Freshness as two figures that cannot mislead: when a run last asked the source (one that found nothing counts),
   * and how old the newest loaded row is. A table fully up to date whose newest row is old reads "checked just now".
   */
  function freshness(s) {
    if (s.partitioned) return lagText(s);
    return [
      h('span', { dataset: { role: 'checked-at' }, title: 'the newest run of this stream, also one that found nothing new' }, s.checkedAt ? `checked ${ago(s.checkedAt)}` : 'never checked'),
      s.lagMs === null ? null : h('span', { class: 'muted', dataset: { role: 'newest-row' }, title: 'now minus the newest cursor value loaded' }, ` · newest row ${duration(s.lagMs)} old`),
    ];
  }

  /** A running stream's figures, from the run's journal on this machine. */
  function liveText(live) {
    const parts = [`${count(live.rowsRead)}${live.rowsTotal ? ` of ~${count(live.rowsTotal)}` : ''} rows read`, `${count(live.rowsPerSecond)} rows/s`];
    if (live.partitionsTotal) parts.push(`${count(live.partitionsDone)} of ${count(live.partitionsTotal)} partitions done`);
    if (live.rangesTotal) parts.push(`${count(live.rangesDone)} of ${count(live.rangesTotal)} ranges done`);
    return `running: ${parts.join(' · ')}`;
  }

  function nextRunText(p) {
    if (!p.nextRun) return null;
    const ms = Date.parse(p.nextRun) - Date.now();
    return `next run ${ms < 5000 ? 'now' : `in ${duration(ms)}`} (${p.nextRun.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')})`;
  }

  /** The stream's last verify: equal, or drift with its counts (title: when, and the figures). */
  function verifyBadge(v) {
    if (!v) return null;
    const figures = `${count(v.missing)} missing, ${count(v.extra)} extra, ${count(v.changed)} changed`;
    const title = `last verify ${v.at}: source ${count(v.sourceRows)} rows, destination ${count(v.destinationRows)}; ${figures}${v.sample ? `; sample ${v.sample}` : ''}`;
    return h('span', { class: `badge ${v.status === 'equal' ? 'ok' : 'warn'}`, dataset: { role: 'verify', status: v.status }, title }, v.status === 'equal' ? 'verified' : 'drift');
  }

  function streamsTable(p) {
    const unknown = unknownState(p);
    return h('table', { class: 'grid' },
      h('thead', {}, h('tr', {},
        ['Stream', 'Strategy', 'Write', 'Watermark (high)', 'Safe mark', 'Freshness', 'Last run', 'Rows', 'Duration', 'When'].map((t) => h('th', {}, t)),
      )),
      h('tbody', {}, p.streams.map((s) => {
        const r = s.lastRun;
        return h('tr', { dataset: { stream: s.name } },
          h('td', { class: 'name' }, h('a', { href: `#/p/${encodeURIComponent(p.name)}/s/${encodeURIComponent(s.name)}` }, s.name), verifyBadge(s.lastVerify)),
          h('td', { class: 'strategy' }, s.strategy, s.partitioned && s.strategy !== 'partitioned' ? h('span', { class: 'muted' }, ' · ledger') : null),
          h('td', { class: 'write' }, s.write),
          h('td', { class: 'watermark mono', title: s.cursor ? `(${[s.cursor, ...s.primaryKey].join(', ')})` : '' }, unknown ? UNKNOWN() : positionText(s)),
          h('td', { class: 'safemark mono' }, unknown ? UNKNOWN() : s.safeMark ? s.safeMark.value : '—'),
          h('td', { class: 'lag' }, unknown ? UNKNOWN() : freshness(s)),
          h('td', { class: 'outcome' }, s.live ? h('span', { class: 'badge running', dataset: { role: 'live' } }, liveText(s.live)) : unknown ? UNKNOWN() : r ? outcomeBadge(r.outcome) : h('span', { class: 'muted' }, 'never')),
          h('td', { class: 'rows num', title: r ? `read ${count(r.rowsRead)}, rejected ${count(r.rowsRejected)}` : '' }, r ? count(r.rowsLoaded) : '—'),
          h('td', { class: 'duration num' }, r ? duration(r.durationMs) : '—'),
          h('td', { class: 'when', title: r ? r.finishedAt : '' }, r ? ago(r.finishedAt) : '—'),
        );
      })),
    );
  }

  // ---- pipeline page ----------------------------------------------------------------------------------------

  function renderPipeline(p) {
    setCrumbs([{ text: 'Overview', href: '#/' }, { text: p.name }]);
    return [
      h('h1', {}, p.name, ' ', h('span', { class: 'muted small' }, p.file)),
      staleNote(p),
      lockText(p.lock) ? h('p', {}, h('span', { class: 'badge running' }, lockText(p.lock))) : null,
      p.actions.includes('run') ? h('p', {}, runButton(p, undefined)) : null,
      h('section', { class: 'card' }, streamsTable(p)),
      historySection(p, undefined),
      runLog(p.runs, 'Run log (all streams)', true, p.runLogs),
    ];
  }

  function runButton(p, stream) {
    const button = h('button', { class: 'primary', dataset: { action: 'run' } }, stream ? 'Run this stream now' : 'Run pipeline now');
    button.addEventListener('click', () =>
      act(button, {
        title: 'Run now?',
        text: `Runs ${stream ? `stream ${stream} of ` : ''}pipeline ${p.name} now, exactly like "tidemark run${stream ? ` --stream ${stream}` : ''}": it takes the pipeline's lease and commits data and state together.`,
        okLabel: 'Run now',
        url: `${api(p.name)}/run`,
        body: stream ? { stream } : {},
        describe: (out) => `Run ${out.result.runId}: ${out.result.streams.map((s) => `${s.stream} ${s.outcome}, ${count(s.rowsLoaded)} rows loaded${s.error ? ` (${s.error})` : ''}`).join('; ')}`,
      }),
    );
    return button;
  }

  // ---- stream page ------------------------------------------------------------------------------------------

  const view = { diff: {}, plans: {}, verify: {}, menu: null };

  function renderStream(p, streamName) {
    setCrumbs([{ text: 'Overview', href: '#/' }, { text: p.name, href: `#/p/${encodeURIComponent(p.name)}` }, { text: streamName }]);
    const s = p.streams.find((x) => x.name === streamName);
    if (!s) return [h('p', { class: 'note error' }, `Pipeline ${p.name} has no stream ${streamName}.`)];
    const runs = p.runs.filter((r) => r.stream === streamName).slice(0, p.runsPerStream);
    const ledger = p.ledger.filter((x) => x.stream === streamName);
    const stateNow = p.state && p.state.streams[streamName];
    const unknown = unknownState(p);
    const orUnknown = (text) => (unknown ? 'unknown' : text);
    return [
      h('h1', {}, `${p.name}.${streamName}`),
      staleNote(p),
      lockText(p.lock) ? h('p', {}, h('span', { class: 'badge running' }, lockText(p.lock))) : null,
      h('section', { class: 'facts card' },
        fact('Strategy', s.strategy), fact('Write', s.write),
        fact('Cursor', s.cursor ? `(${[s.cursor, ...s.primaryKey].join(', ')})` : '—'),
        s.partitioned
          ? fact('Partitions loaded', orUnknown(count(s.partitions.loaded)), 'partitions')
          : fact('Watermark (high)', orUnknown(watermarkText(s.watermark)), 'watermark'),
        s.partitioned
          ? fact('Latest partition', orUnknown(s.partitions.latest ? `${s.partitions.latest}${s.partitions.latestLoadedAt ? ` (loaded ${ago(s.partitions.latestLoadedAt)})` : ''}` : '—'), 'latest-partition')
          : fact('Safe mark', orUnknown(s.safeMark ? s.safeMark.value : '—'), 'safemark'),
        s.partitioned ? null : fact('Checked', orUnknown(s.checkedAt ? ago(s.checkedAt) : 'never'), 'checked-at'),
        s.partitioned ? null : fact('Newest row', orUnknown(s.lagMs === null ? '—' : `${duration(s.lagMs)} old`), 'lag'),
        s.live ? fact('Now', liveText(s.live), 'live') : null,
        nextRunText(p) ? fact('Next run', nextRunText(p), 'next-run') : null,
        s.schema ? fact('Schema', `${s.schema.columns.length} columns${s.schema.dropped && s.schema.dropped.length ? `, ${s.schema.dropped.length} dropped in the source` : ''}`, 'schema') : null,
        fact('Generation', s.generation === null ? '—' : String(s.generation)),
        s.building ? fact('Building', `generation ${s.building.generation}, ${count(s.building.rows)} rows so far`) : null,
        fact('State updated', orUnknown(stateNow && stateNow.updatedAt ? ago(stateNow.updatedAt) : '—')),
      ),
      p.actions.length ? h('section', { class: 'actions' }, runButton(p, streamName), resetButton(p, streamName)) : null,
      h('section', { class: 'card' }, h('h2', {}, `Rows loaded and duration — last ${runs.length} run${runs.length === 1 ? '' : 's'}`), chart(runs)),
      s.partitioned ? ledgerSection(p, streamName, ledger) : null,
      planSection(p, streamName),
      schemaSection(p, streamName),
      historySection(p, streamName),
      runLog(runs, 'Run log', false, p.runLogs),
      rejectsSection(p.rejects.filter((r) => r.stream === streamName)),
    ];
  }

  function fact(label, value, role) {
    return h('div', { class: 'fact' }, h('div', { class: 'label' }, label), h('div', { class: 'value mono', dataset: role ? { role } : {} }, value));
  }

  function resetButton(p, stream) {
    const button = h('button', { class: 'danger', dataset: { action: 'reset' } }, 'Reset state');
    button.addEventListener('click', () =>
      act(button, {
        title: `Reset the state of ${stream}?`,
        text: `Removes the watermark of ${p.name}.${stream}, exactly like "tidemark state reset ${stream}". The next run reads the stream from the beginning. The current state stays in the history and can be rolled back.`,
        okLabel: 'Reset state',
        url: `${api(p.name)}/reset`,
        body: { stream },
        describe: (out) => `State of ${stream} reset (state version ${out.version}).`,
      }),
    );
    return button;
  }

  /**
   * A y axis as wide as its widest tick label plus the tick and gap (uPlot's fixed 50 px let "20,000" run into the
   * axis label beside it).
   */
  function fitTicks(u, values, axisIdx) {
    const axis = u.axes[axisIdx];
    if (!values || values.length === 0) return 50;
    u.ctx.font = axis.font[0];
    const widest = Math.max(...values.map((v) => u.ctx.measureText(String(v)).width)) / devicePixelRatio;
    return Math.ceil(axis.ticks.size + axis.gap + widest + 4);
  }

  function chart(runs) {
    const points = runs.filter((r) => r.outcome !== 'running').slice().reverse();
    const box = h('div', { class: 'chart', dataset: { points: String(points.length) } });
    if (points.length === 0) {
      box.append(h('p', { class: 'muted' }, 'No runs yet.'));
      return box;
    }
    const xs = points.map((r) => Date.parse(r.finishedAt) / 1000);
    const rows = points.map((r) => r.rowsLoaded);
    const secs = points.map((r) => (r.durationMs === null ? null : r.durationMs / 1000));
    const draw = () => {
      if (!window.uPlot || !box.isConnected) return;
      const width = Math.max(320, box.clientWidth || 800);
      const u = new window.uPlot({
        width,
        height: 240,
        // One run alone would stretch the time axis over years; give it an hour either side.
        scales: { x: { time: true, range: (u, min, max) => (xs.length === 1 ? [xs[0] - 3600, xs[0] + 3600] : [min, max]) }, rows: { auto: true }, secs: { auto: true } },
        series: [
          { label: 'finished' },
          { label: 'rows loaded', scale: 'rows', stroke: '#1f6feb', width: 2, fill: 'rgba(31,111,235,0.08)', points: { show: true, size: 7 } },
          { label: 'duration (s)', scale: 'secs', stroke: '#d97706', width: 2, dash: [6, 4], points: { show: true, size: 7 } },
        ],
        axes: [{}, { scale: 'rows', label: 'rows', size: fitTicks }, { scale: 'secs', side: 1, label: 'seconds', grid: { show: false }, size: fitTicks }],
      }, [xs, rows, secs], box);
      box.uplot = u;
    };
    requestAnimationFrame(draw);
    return box;
  }

  /** The schema versions a stream committed (from the state history), newest first, with what changed. */
  function schemaSection(p, streamName) {
    const versions = (p.schemaVersions || []).filter((v) => v.stream === streamName).reverse();
    if (versions.length === 0) return null;
    return h('section', { class: 'card', dataset: { role: 'schema-versions' } }, h('h2', {}, `Schema versions (${versions.length})`),
      h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['State version', 'What changed'].map((c) => h('th', {}, c)))),
        h('tbody', {}, versions.map((v) => h('tr', { dataset: { version: String(v.version) } },
          h('td', { class: 'num' }, `v${v.version}`),
          h('td', {}, v.changes.map((c) => h('div', { class: 'mono small' }, c))),
        ))),
      ));
  }

  /** A run's warnings and log lines, kept on the machine that ran it (a stream's page shows that stream's and the run's own). */
  function runLines(lines, stream) {
    const mine = (lines || []).filter((l) => stream === undefined || l.stream === undefined || l.stream === stream);
    if (mine.length === 0) return null;
    const warnings = mine.filter((l) => l.level === 'warn' || l.level === 'error').length;
    return h('details', { class: 'run-lines', dataset: { role: 'run-lines' } },
      h('summary', {}, `${mine.length} log line${mine.length === 1 ? '' : 's'}${warnings ? `, ${warnings} warning${warnings === 1 ? '' : 's'} or error${warnings === 1 ? '' : 's'}` : ''}`),
      h('pre', { class: 'small' }, mine.map((l) => `${l.time} ${l.level}: ${l.message}`).join('\n')),
    );
  }

  function runLog(runs, title, withStream, logs) {
    const section = h('section', { class: 'card' }, h('h2', {}, title));
    if (runs.length === 0) {
      section.append(h('p', { class: 'muted' }, 'No runs recorded.'));
      return section;
    }
    const cols = ['Run', ...(withStream ? ['Stream'] : []), 'Outcome', 'Started', 'Duration', 'Read', 'Loaded', 'Rejected', 'Commits', 'Cursor range', 'Worker'];
    const body = h('tbody');
    // A run of several streams has one log: shown once, under its first row.
    const shownRuns = new Set();
    for (const r of runs) {
      body.append(h('tr', { dataset: { run: r.runId } },
        h('td', { class: 'mono' }, r.runId, r.full ? h('span', { class: 'badge' }, 'full') : null),
        withStream ? h('td', {}, r.stream) : null,
        h('td', {}, outcomeBadge(r.outcome)),
        h('td', { title: r.startedAt }, ago(r.startedAt)),
        h('td', { class: 'num' }, duration(r.durationMs)),
        h('td', { class: 'num' }, count(r.rowsRead)),
        h('td', { class: 'num' }, count(r.rowsLoaded)),
        h('td', { class: 'num' }, count(r.rowsRejected)),
        h('td', { class: 'num' }, count(r.commits)),
        h('td', { class: 'mono small' }, r.cursorMin === null ? '—' : `${r.cursorMin} … ${r.cursorMax}`),
        h('td', { class: 'small' }, r.worker),
      ));
      // A stopped run's message says why it stopped, which is not an error.
      const textClass = r.outcome === 'stopped' ? 'error-text stop-text' : 'error-text';
      if (r.error) body.append(h('tr', { class: 'error-row' }, h('td', { colspan: String(cols.length) }, h('pre', { class: textClass, dataset: { role: 'run-error' } }, r.error))));
      const lines = logs && runLines(logs[r.runId], withStream ? undefined : r.stream);
      if (lines && !shownRuns.has(r.runId)) {
        shownRuns.add(r.runId);
        body.append(h('tr', { class: 'lines-row' }, h('td', { colspan: String(cols.length) }, lines)));
      }
    }
    section.append(h('div', { class: 'scroll' }, h('table', { class: 'grid' }, h('thead', {}, h('tr', {}, cols.map((c) => h('th', {}, c)))), body)));
    return section;
  }

  function rejectsSection(rejects) {
    if (rejects.length === 0) return null;
    return h('section', { class: 'card' }, h('h2', {}, `Rejected rows (${rejects.length})`),
      h('div', { class: 'scroll' }, h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['Run', 'Column', 'Reason', 'Row'].map((c) => h('th', {}, c)))),
        h('tbody', {}, rejects.map((r) => h('tr', {},
          h('td', { class: 'mono small' }, r.runId), h('td', {}, r.column || '—'), h('td', {}, r.reason), h('td', {}, h('code', { class: 'record' }, r.row)),
        ))),
      )));
  }

  // ---- state history and diff -------------------------------------------------------------------------------

  /** Leaf paths of a JSON value: `streams.orders.watermark.cursor.value` → its JSON text. */
  function flatten(value, prefix, out) {
    if (value !== null && typeof value === 'object' && !(Array.isArray(value) && value.length === 0) && Object.keys(value).length > 0) {
      for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
    } else {
      out.set(prefix, JSON.stringify(value));
    }
    return out;
  }

  function diff(before, after) {
    const a = before === undefined ? new Map() : flatten(before, '', new Map());
    const b = after === undefined ? new Map() : flatten(after, '', new Map());
    const rows = [];
    for (const key of [...new Set([...a.keys(), ...b.keys()])].sort()) {
      const x = a.get(key);
      const y = b.get(key);
      if (x === y) continue;
      rows.push({ path: key || '(whole)', before: x, after: y, kind: x === undefined ? 'added' : y === undefined ? 'removed' : 'changed' });
    }
    return rows;
  }

  function changedSummary(prev, cur) {
    const names = [...new Set([...Object.keys(prev ? prev.streams : {}), ...Object.keys(cur.streams)])];
    const out = [];
    for (const n of names) {
      const x = prev ? prev.streams[n] : undefined;
      const y = cur.streams[n];
      if (JSON.stringify(x) === JSON.stringify(y)) continue;
      if (!x) out.push(`${n}: added`);
      else if (!y) out.push(`${n}: removed`);
      else out.push(`${n}: ${[...new Set(diff(x, y).map((d) => d.path.split('.')[0]))].join(', ')}`);
    }
    return out.join('; ') || 'no stream changed';
  }

  function historySection(p, stream) {
    const section = h('section', { class: 'card history' }, h('h2', {}, 'State history'));
    const versions = p.history;
    if (versions.length === 0) {
      section.append(h('p', { class: 'muted' }, 'No state saved yet.'));
      return section;
    }
    const workers = new Map(p.runs.map((r) => [r.runId, r.worker]));
    const key = `${p.name}/${stream || ''}`;
    // On a stream's page, start with the latest version that changed this stream against the one before it.
    const touched = stream ? versions.findIndex((v, i) => JSON.stringify(v.state.streams[stream]) !== JSON.stringify(versions[i + 1] ? versions[i + 1].state.streams[stream] : undefined)) : 0;
    const at = Math.max(0, touched);
    const pick = view.diff[key] || (view.diff[key] = { a: (versions[at + 1] || versions[at]).version, b: versions[at].version, whole: !stream });
    const body = h('tbody');
    versions.forEach((v, i) => {
      const prev = versions[i + 1];
      const radioA = h('input', { type: 'radio', name: `a-${key}`, title: 'diff from', checked: pick.a === v.version });
      const radioB = h('input', { type: 'radio', name: `b-${key}`, title: 'diff to', checked: pick.b === v.version });
      radioA.addEventListener('change', () => { pick.a = v.version; rerender(); });
      radioB.addEventListener('change', () => { pick.b = v.version; rerender(); });
      body.append(h('tr', { dataset: { version: String(v.version) } },
        h('td', {}, radioA), h('td', {}, radioB),
        h('td', { class: 'num' }, `v${v.version}`),
        h('td', { title: v.savedAt }, ago(v.savedAt)),
        h('td', {}, v.runId ? `run ${v.runId}${workers.has(v.runId) ? ` (${workers.get(v.runId)})` : ''}` : 'state command'),
        h('td', {}, v.reason),
        h('td', { class: 'small' }, prev || v.version === 1 ? changedSummary(prev ? prev.state : null, v.state) : '(older versions not shown)'),
      ));
    });
    const a = versions.find((v) => v.version === pick.a);
    const b = versions.find((v) => v.version === pick.b);
    const scope = (v) => (v ? (pick.whole || !stream ? v.state : v.state.streams[stream]) : undefined);
    // With a single version there is nothing to compare with: show it against the empty state.
    const rows = a && b ? diff(versions.length === 1 ? undefined : scope(a), scope(b)) : [];
    const whole = h('input', { type: 'checkbox', checked: pick.whole });
    whole.addEventListener('change', () => { pick.whole = whole.checked; rerender(); });
    section.append(
      h('div', { class: 'scroll short' }, h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['From', 'To', 'Version', 'Saved', 'Who', 'Reason', 'What changed'].map((c) => h('th', {}, c)))),
        body,
      )),
      h('h3', {}, `Diff ${versions.length === 1 ? '(empty)' : `v${pick.a}`} → v${pick.b}`, stream ? h('label', { class: 'small inline' }, whole, ' whole document') : null),
      rows.length === 0
        ? h('p', { class: 'muted' }, 'No differences.')
        : h('table', { class: 'grid diff', dataset: { role: 'diff' } },
          h('thead', {}, h('tr', {}, ['Path', `v${pick.a}`, `v${pick.b}`].map((c) => h('th', {}, c)))),
          h('tbody', {}, rows.map((d) => h('tr', { class: `diff-${d.kind}` },
            h('td', { class: 'mono small' }, d.path),
            h('td', { class: 'mono small before' }, d.before === undefined ? '' : d.before),
            h('td', { class: 'mono small after' }, d.after === undefined ? '' : d.after),
          ))),
        ),
    );
    return section;
  }

  // ---- plan -------------------------------------------------------------------------------------------------

  function planSection(p, stream) {
    const key = `${p.name}/${stream}`;
    const section = h('section', { class: 'card', dataset: { role: 'plan' } }, h('h2', {}, 'Next run (tidemark plan)'));
    const refreshPlan = h('button', {}, 'Recompute');
    refreshPlan.addEventListener('click', () => { delete view.plans[key]; loadPlan(); });
    section.append(refreshPlan);
    const out = h('div', { class: 'plan' });
    section.append(out);
    const show = (plan) => {
      if (plan.error) return out.replaceChildren(h('p', { class: 'note error' }, plan.error));
      if (!plan.available) return out.replaceChildren(h('p', { class: 'muted' }, plan.reason));
      out.replaceChildren(...plan.reports.map((r) => r.mode === 'partitions' ? partitionPlan(r) : h('dl', { class: 'kv' },
        h('dt', {}, 'mode'), h('dd', {}, r.mode === 'build' ? `builds a new generation${r.resumesBuild ? ' (resuming)' : ''}` : 'incremental'),
        h('dt', {}, 'after watermark'), h('dd', { class: 'mono' }, watermarkText(r.watermark)),
        r.from ? [h('dt', {}, 'lookback from'), h('dd', { class: 'mono' }, r.from.value)] : null,
        h('dt', {}, 'until'), h('dd', { class: 'mono' }, r.until ? r.until.value : '(none: nothing to read)'),
        h('dt', {}, 'predicate'), h('dd', {}, h('code', {}, r.predicate)),
        h('dt', {}, 'bindings'), h('dd', { class: 'mono' }, JSON.stringify(r.bindings)),
        r.nullCursorRows > 0 ? [h('dt', {}, 'NULL cursor rows'), h('dd', {}, count(r.nullCursorRows))] : null,
        r.safeMark ? [h('dt', {}, 'safe mark'), h('dd', { class: 'mono' }, r.safeMark.value)] : null,
        Array.isArray(r.warnings) && r.warnings.length ? [h('dt', {}, 'warnings'), h('dd', {}, r.warnings.map((w) => h('div', { class: 'note warn' }, typeof w === 'string' ? w : JSON.stringify(w))))] : null,
      )));
    };
    // A partitioned stream: what the next run loads, reloads or stops at; unchanged partitions only counted.
    const partitionPlan = (r) => {
      const acted = r.partitions.filter((p) => p.action !== 'skip' || p.status !== 'unchanged' || p.failure);
      const loads = r.partitions.filter((p) => p.action === 'load' || p.action === 'reload').length;
      return h('div', { dataset: { role: 'partition-plan' } },
        h('p', {}, `${count(loads)} partition${loads === 1 ? '' : 's'} to load, ${count(r.partitions.length - acted.length)} unchanged`),
        acted.length ? h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'action'), h('th', {}, 'partition'), h('th', {}, 'status'), h('th', {}, 'files'), h('th', {}, 'bytes'))),
          h('tbody', {}, acted.map((p) => h('tr', {}, h('td', {}, p.action), h('td', { class: 'mono' }, p.partition),
            h('td', {}, p.change ? `${p.status}: ${p.change}` : p.status), h('td', {}, count(p.files)), h('td', {}, count(p.bytes)))))) : null,
        r.warnings.map((w) => h('div', { class: 'note warn' }, w)));
    };
    const loadPlan = () => {
      out.replaceChildren(h('p', { class: 'muted' }, 'Computing…'));
      getJson(`${api(p.name)}/plan?stream=${encodeURIComponent(stream)}`)
        .then((plan) => { view.plans[key] = plan; if (out.isConnected) show(plan); })
        .catch((error) => { if (out.isConnected) show({ error: error.message }); });
    };
    if (view.plans[key]) show(view.plans[key]);
    else loadPlan();
    return section;
  }

  // ---- ledger -----------------------------------------------------------------------------------------------

  // Words that say what each status means; the keys are the statuses the server sends (PARTITION_STATUSES).
  const STATUS_LABEL = {
    loaded: 'loaded',
    changed: 'changed since load',
    'not loaded yet': 'not loaded yet',
    failed: 'failed',
    'source missing': 'source missing',
  };

  function ledgerSection(p, stream, partitions) {
    const section = h('section', { class: 'card', dataset: { role: 'ledger' } }, h('h2', {}, `Ledger — ${partitions.length} partition${partitions.length === 1 ? '' : 's'}`));
    const counts = {};
    for (const x of partitions) counts[x.status] = (counts[x.status] || 0) + 1;
    const statuses = [...new Set([...p.partitionStatuses, ...Object.keys(counts)])];
    section.append(h('div', { class: 'legend' }, statuses.map((st) =>
      h('span', { class: `legend-item status-${known(p, st)}` }, h('span', { class: 'swatch' }), `${STATUS_LABEL[st] || st}: ${counts[st] || 0}`),
    )));
    const grid = h('div', { class: 'ledger-grid' });
    const menu = h('div', { class: 'partition-menu', dataset: { role: 'partition-menu' } });
    for (const x of partitions) {
      const tip = [
        `${x.partition} — ${STATUS_LABEL[x.status] || x.status}`,
        `rows: ${count(x.rows)}`,
        x.bytes !== null ? `bytes: ${count(x.bytes)}` : null,
        x.deleted ? `rows deleted at: ${x.loadedAt}` : `loaded_at: ${x.loadedAt || '—'}`,
        x.runId ? `run: ${x.runId}` : null,
        x.change ? x.change : null,
        x.failure ? `last load failed at ${x.failure.failedAt} (run ${x.failure.runId}): ${x.failure.error}` : null,
      ].filter(Boolean).join('\n');
      const cell = h('button', { type: 'button', class: `cell status-${known(p, x.status)}`, title: tip, dataset: { partition: x.partition, status: x.status } },
        h('span', { class: 'cell-name' }, x.partition), h('span', { class: 'cell-rows' }, count(x.rows)));
      const ledgerActs = p.actions.filter((a) => a.startsWith('ledger-'));
      if (ledgerActs.length) cell.addEventListener('click', () => partitionMenu(p, stream, x, ledgerActs, cell, menu));
      grid.append(cell);
      // The page is rebuilt on every refresh: an open menu stays open across it.
      const open = view.menu;
      if (ledgerActs.length && open && open.pipeline === p.name && open.stream === stream && open.partition === x.partition) partitionMenu(p, stream, x, ledgerActs, cell, menu);
    }
    section.append(partitions.length ? grid : h('p', { class: 'muted' }, 'No partitions in the ledger.'), menu);
    section.append(verifySection(p));
    return section;
  }

  // A CSS class per status ("source missing" → status-source-missing).
  const known = (p, status) => (p.partitionStatuses.includes(status) ? status.replace(/ /g, '-') : 'other');

  /**
   * A tile's actions as a small menu beside the grid: the user picks one, then confirms it. Cancel closes the
   * confirmation and nothing else happens (it used to move on to the next action's confirmation).
   */
  function partitionMenu(p, stream, x, acts, cell, menu) {
    const button = (a) => {
      const reload = a === 'ledger-reload';
      const b = h('button', { type: 'button', class: reload ? 'primary' : 'danger', dataset: { action: a } }, reload ? 'Reload…' : 'Forget…');
      b.addEventListener('click', () => partitionAction(p, stream, x, reload, cell, menu));
      return b;
    };
    const close = h('button', { type: 'button', dataset: { action: 'close' } }, 'Close');
    close.addEventListener('click', () => closeMenu(menu));
    view.menu = { pipeline: p.name, stream, partition: x.partition };
    menu.replaceChildren(h('span', { class: 'mono' }, `partition ${x.partition}`), ...acts.map(button), close);
  }

  function closeMenu(menu) {
    view.menu = null;
    menu.replaceChildren();
  }

  async function partitionAction(p, stream, x, reload, cell, menu) {
    const ok = await confirmAction(
      `${reload ? 'Reload' : 'Forget'} partition ${x.partition}?`,
      reload
        ? `Deletes and loads partition ${x.partition} of ${p.name}.${stream} again in one commit, like "tidemark ledger reload ${x.partition}".`
        : `Removes partition ${x.partition} from the ledger of ${p.name}.${stream}, like "tidemark ledger forget ${x.partition}"; the next run loads it again.`,
      reload ? 'Reload' : 'Forget',
    );
    if (!ok) return;
    closeMenu(menu);
    cell.disabled = true;
    try {
      await postJson(`${api(p.name)}/ledger/${reload ? 'reload' : 'forget'}`, { stream, partition: x.partition });
      setNotice('ok', `Partition ${x.partition}: ${reload ? 'reloaded' : 'forgotten'}.`);
    } catch (error) {
      setNotice('error', `${reload ? 'Reload' : 'Forget'} of ${x.partition} failed: ${error.message}`);
    } finally {
      cell.disabled = false;
      refresh(true);
    }
  }

  function verifySection(p) {
    const box = h('div', { class: 'verify', dataset: { role: 'verify' } }, h('h3', {}, 'ledger verify'));
    if (!p.canVerifyLedger) {
      box.append(h('p', { class: 'muted' }, 'Not available in this build yet.'));
      return box;
    }
    const out = h('div', {}, h('p', { class: 'muted' }, 'Checking…'));
    box.append(out);
    const show = (v) => {
      if (v.error) return out.replaceChildren(h('p', { class: 'note error' }, v.error));
      if (!v.available) return out.replaceChildren(h('p', { class: 'muted' }, v.reason));
      const r = v.report;
      out.replaceChildren(r.ok
        ? h('p', { class: 'note ok' }, `All partitions agree with the destination (checked ${ago(r.checkedAt)}).`)
        : h('div', {}, h('p', { class: 'note error' }, `${r.mismatches.length} partition(s) disagree with the destination:`),
          h('ul', {}, r.mismatches.map((m) => h('li', {}, `${m.stream} ${m.partition}: ledger ${count(m.ledgerRows)} rows, destination ${count(m.destinationRows)}`)))));
    };
    if (view.verify[p.name]) show(view.verify[p.name]);
    else getJson(`${api(p.name)}/ledger/verify`).then((v) => { view.verify[p.name] = v; show(v); }).catch((e) => show({ error: e.message }));
    return box;
  }

  // ---- routing and refresh ----------------------------------------------------------------------------------

  function route() {
    const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
    if (parts[0] === 'p' && parts[1]) return { pipeline: parts[1], stream: parts[2] === 's' ? parts[3] : undefined };
    return {};
  }

  let last = null;
  let loading = false;

  function rerender() {
    if (!last) return;
    const r = route();
    const y = window.scrollY;
    const nodes = r.pipeline ? (r.stream ? renderStream(last, r.stream) : renderPipeline(last)) : renderOverview(last);
    main.replaceChildren(...nodes.flat(Infinity).filter(Boolean));
    window.scrollTo(0, y);
    document.getElementById('refreshed').textContent = `updated ${new Date().toLocaleTimeString()}`;
    main.dataset.ready = 'true';
  }

  async function refresh(force) {
    if (loading || (!force && (dialogOpen || document.hidden))) return;
    loading = true;
    const r = route();
    try {
      const data = r.pipeline ? await getJson(api(r.pipeline)) : await getJson('/api/overview');
      // The user may have navigated while this was loading; that page loads its own data.
      if (JSON.stringify(route()) !== JSON.stringify(r)) return;
      last = data;
      rerender();
    } catch (error) {
      main.replaceChildren(h('p', { class: 'note error' }, `Cannot load: ${error.message}`));
    } finally {
      loading = false;
    }
  }

  window.addEventListener('hashchange', () => {
    // A notice is about the page it was given on.
    setNotice('info', '');
    view.menu = null;
    last = null;
    main.dataset.ready = 'false';
    view.verify = {};
    refresh(true);
    window.scrollTo(0, 0);
  });
  setInterval(() => refresh(false), REFRESH_MS);
  refresh(true);
})();
