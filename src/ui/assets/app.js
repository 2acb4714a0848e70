/* mesh ui: the page `mesh ui` serves (docs/ui.md).  Plain JS, no build
 * step.  What it knows comes from three places on the same origin:
 *   /api/ps, /api/jobs, /api/jobs/<id>   meshd's GET /v1/... (the state now)
 *   /api/events                          meshd's event stream (what happens)
 *   /api/programs/<name>/logs            a log tail (only while shown)
 * The stream is followed from the oldest event meshd keeps
 * (?last_event_id=0), which gives the plots their history; /api/ps and
 * /api/jobs are read again when an event says something changed, never on
 * a fast timer. */
'use strict';

(function () {
	const WARM = new Set(['RUNNING', 'IDLE', 'STARTING', 'LAUNCHING', 'HALTING']);
	const MAX_POINTS = 4000;	/* per series kept in memory */
	const MAX_CRASHES = 50;

	/* ---- state -------------------------------------------------------- */
	const S = {
		ps: null,		/* the last /api/ps */
		psError: null,
		jobs: new Map(),	/* id -> job object (from /api/jobs, moved by events) */
		jobsOlder: 0,
		jobDetail: new Map(),	/* id -> /api/jobs/<id> (with failures) */
		chunkMap: new Map(),	/* id -> /api/jobs/<id>/chunks (the strip) */
		progress: new Map(),	/* id -> [[t_s, done], ...] from job events */
		workers: new Map(),	/* program -> Map(worker -> [[t_s, state], ...]) */
		savings: new Map(),	/* program -> [[t_s, warm_s, always_on_s, saved], ...] */
		crashes: [],		/* {at, program, report}, newest last */
		requests: [],		/* {t, program, model, status, ms, cold} */
		since: Date.now() / 1000,	/* the oldest time the page has history for */
		boot: null,
		lastId: null,
		lastSeq: 0,
		live: false,
		meshdDown: null,	/* the 502 message while meshd cannot be reached */
	};

	/* ---- helpers ------------------------------------------------------ */
	const $ = (sel, root) => (root || document).querySelector(sel);
	function esc(s) {
		return String(s == null ? '' : s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
	}
	function bytes(n) {
		if (n == null || n < 0) return '-';
		const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
		let i = 0;
		while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
		return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
	}
	function dur(s) {
		if (s == null || !isFinite(s) || s < 0) return '-';
		if (s < 1) return s.toFixed(2) + ' s';
		if (s < 60) return s.toFixed(1) + ' s';
		if (s < 3600) return Math.floor(s / 60) + ' m ' + Math.round(s % 60) + ' s';
		if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.round((s % 3600) / 60) + ' m';
		return Math.floor(s / 86400) + ' d ' + Math.round((s % 86400) / 3600) + ' h';
	}
	/* a short time: milliseconds below a second */
	function brief(s) {
		if (s == null || !isFinite(s) || s < 0) return '-';
		return s < 1 ? (1000 * s).toFixed(s < 0.01 ? 1 : 0) + ' ms' : dur(s);
	}
	/* el's inner HTML, only when it changed (a redraw that changes nothing
	 * keeps the focus and the text selection where they are). */
	function setHTML(el, html) {
		if (el.__html === html) return;
		el.__html = html;
		el.innerHTML = html;
	}
	function num(x, d) { return x == null || !isFinite(x) ? '-' : Number(x).toFixed(d == null ? 0 : d); }
	function pct(x) { return x == null || !isFinite(x) ? '-' : (100 * x).toFixed(1) + ' %'; }
	function clock(t_s) { return new Date(t_s * 1000).toLocaleTimeString(); }
	function push(arr, item, max) {
		arr.push(item);
		if (arr.length > (max || MAX_POINTS)) arr.splice(0, arr.length - (max || MAX_POINTS));
	}
	function now() { return Date.now() / 1000; }

	/* One fetch of /api/<path> as JSON; a 502 (meshd down) sets the banner.
	 * Resolves to the object, or null when it could not be had. */
	async function api(path) {
		let r;
		try {
			r = await fetch('/api/' + path, {cache: 'no-store', credentials: 'same-origin'});
		} catch (e) {
			setDown('mesh ui is not answering (' + e.message + '): is `mesh ui` still running?');
			return null;
		}
		let body = null;
		try { body = await r.json(); } catch (e) { body = null; }
		if (r.status === 502) {
			setDown(body && body.error ? body.error : 'meshd is not answering');
			return null;
		}
		if (r.status === 403) {
			setDown('this page\'s token is not accepted: open the URL `mesh ui` printed');
			return null;
		}
		setDown(null);
		if (!r.ok) return body && typeof body === 'object' ? {__error: body.error || body.message || ('HTTP ' + r.status), __status: r.status} : null;
		return body;
	}

	function setDown(msg) {
		if (msg === S.meshdDown) return;
		S.meshdDown = msg;
		const b = $('#banner');
		if (msg) {
			b.hidden = false;
			const m = /^cannot reach meshd at (.+?): (.*)$/.exec(msg);
			b.textContent = m
				? 'meshd is not running at ' + m[1] + ' (' + m[2] + '): start it with `meshd --catalog DIR --logs DIR --state DIR --socket ' + m[1] +
				  '` (docs/meshd.md). This page keeps trying and goes on by itself when meshd is back.'
				: msg + ' (this page keeps trying)';
		} else {
			b.hidden = true;
			b.textContent = '';
		}
	}

	/* ---- reading state ------------------------------------------------ */
	let psTimer = 0, psBusy = false, psAgain = false;
	async function loadPs() {
		if (psBusy) { psAgain = true; return; }
		psBusy = true;
		const ps = await api('ps');
		if (ps && !ps.__error) S.ps = ps;
		psBusy = false;
		schedule();
		if (psAgain) { psAgain = false; soonPs(); }
	}
	/* ps again within 300 ms (many events in a row make one read). */
	function soonPs() {
		if (psTimer) return;
		psTimer = setTimeout(() => { psTimer = 0; loadPs(); }, 300);
	}

	let jobsTimer = 0;
	async function loadJobs() {
		const j = await api('jobs');
		if (j && Array.isArray(j.jobs)) {
			const seen = new Set();
			for (const job of j.jobs) {
				const id = String(job.id);
				seen.add(id);
				const old = S.jobs.get(id);
				/* an event may have moved it past what this read saw */
				if (old && old.state === 'running' && job.state === 'running' && old.done > job.done) job.done = old.done;
				S.jobs.set(id, job);
			}
			for (const id of [...S.jobs.keys()])
				if (!seen.has(id) && S.jobs.get(id).state !== 'running') S.jobs.delete(id);
			S.jobsOlder = j.older || 0;
		}
		schedule();
	}
	function soonJobs() {
		if (jobsTimer) return;
		jobsTimer = setTimeout(() => { jobsTimer = 0; loadJobs(); }, 300);
	}
	async function loadJob(id) {
		const j = await api('jobs/' + encodeURIComponent(id));
		if (j && !j.__error) {
			S.jobDetail.set(String(id), j);
			S.jobs.set(String(id), Object.assign(S.jobs.get(String(id)) || {}, j));
		} else if (j && j.__error) {
			S.jobDetail.set(String(id), j);
		}
		schedule();
	}

	/* The chunk strip of the job shown: read at its view's start and again
	 * at most once a second while its job events come. */
	const STRIP_BUCKETS = 200;
	let chunksTimer = 0, chunksAt = 0;
	async function loadChunks(id) {
		chunksAt = Date.now();
		const m = await api('jobs/' + encodeURIComponent(id) + '/chunks?buckets=' + STRIP_BUCKETS);
		if (m) S.chunkMap.set(String(id), m);
		schedule();
	}
	function soonChunks(id) {
		if (chunksTimer) return;
		const wait = Math.max(0, 1000 - (Date.now() - chunksAt));
		chunksTimer = setTimeout(() => { chunksTimer = 0; loadChunks(id); }, wait);
	}

	/* The gateway's evictions and memory budget: only /metrics has them
	 * (mesh_gateway_evictions_total, mesh_gateway_memory_bytes). */
	async function loadMetrics() {
		let r;
		try { r = await fetch('/api/metrics', {cache: 'no-store', credentials: 'same-origin'}); } catch (e) { return; }
		if (!r.ok) return;
		const text = await r.text(), ev = new Map(), mem = {};
		for (const line of text.split('\n')) {
			let m = /^mesh_gateway_evictions_total\{program="([^"]*)",reason="([^"]*)"\} (\S+)/.exec(line);
			if (m) {
				if (!ev.has(m[1])) ev.set(m[1], {});
				ev.get(m[1])[m[2]] = Number(m[3]);
			} else if ((m = /^mesh_gateway_memory_bytes\{kind="([^"]*)"\} (\S+)/.exec(line))) {
				mem[m[1]] = Number(m[2]);
			}
		}
		S.evictions = ev;
		S.gwMemory = mem;
		schedule();
	}

	/* ---- the event stream --------------------------------------------- */
	let es = null, esRetry = 0;
	function connect() {
		if (es) es.close();
		const from = S.lastId || '0';
		es = new EventSource('/api/events?last_event_id=' + encodeURIComponent(from));
		es.onopen = () => { setLive(true); };
		es.onerror = () => {
			setLive(false);
			/* EventSource retries by itself after a dropped stream; after a
			 * refused one (502: meshd down) it gives up: then we retry. */
			if (es.readyState === EventSource.CLOSED && !esRetry) {
				loadPs();
				esRetry = setTimeout(() => { esRetry = 0; connect(); }, 2000);
			}
		};
		es.addEventListener('hello', e => {
			const d = JSON.parse(e.data);
			if (S.boot && d.boot !== S.boot) { S.lastSeq = 0; }
			S.boot = d.boot;
			setDown(null);
			loadPs();
			loadJobs();
		});
		es.addEventListener('reset', () => {
			/* what came before is not all we have: read the state again */
			S.lastSeq = 0;
			loadPs();
			loadJobs();
		});
		es.addEventListener('bye', () => { setLive(false); });
		for (const kind of ['worker', 'crash', 'job', 'savings', 'request'])
			es.addEventListener(kind, e => onEvent(kind, e));
	}

	function setLive(on) {
		S.live = on;
		const l = $('#live');
		l.textContent = on ? 'live' : 'reconnecting';
		l.className = 'live ' + (on ? 'on' : 'off');
	}

	function onEvent(kind, e) {
		/* ids are <boot>-<seq>: nothing twice within a life */
		const id = e.lastEventId || '';
		const dash = id.lastIndexOf('-');
		if (dash > 0) {
			const boot = id.slice(0, dash), seq = Number(id.slice(dash + 1));
			if (boot === S.boot && seq <= S.lastSeq) return;
			if (boot !== S.boot) S.boot = boot;
			S.lastSeq = seq;
			S.lastId = id;
		}
		let d;
		try { d = JSON.parse(e.data); } catch (err) { return; }
		const t = (d.at || Date.now()) / 1000;
		if (t < S.since) S.since = t;
		switch (kind) {
		case 'worker': {
			let m = S.workers.get(d.program);
			if (!m) S.workers.set(d.program, m = new Map());
			let h = m.get(d.worker);
			if (!h) m.set(d.worker, h = []);
			push(h, [t, d.state]);
			soonPs();
			break;
		}
		case 'crash':
			push(S.crashes, {at: t, program: d.program, report: d.report || ''}, MAX_CRASHES);
			soonPs();
			break;
		case 'job': {
			const jid = String(d.id);
			let p = S.progress.get(jid);
			if (!p) S.progress.set(jid, p = []);
			push(p, [t, d.done]);
			let job = S.jobs.get(jid);
			if (!job) {
				job = {id: jid, program: d.program, state: d.state, chunks: d.chunks, done: 0, buried: 0};
				S.jobs.set(jid, job);
				soonJobs();
			}
			job.done = d.done;
			job.buried = d.buried;
			job.chunks = d.chunks;
			if (d.state !== 'progress') job.state = d.state;
			if (route().view === 'job' && route().arg === jid) soonChunks(jid);
			if (d.state !== 'progress' && d.state !== 'running') {
				soonJobs();
				if (route().view === 'job' && route().arg === jid) loadJob(jid);
			}
			break;
		}
		case 'savings': {
			let s = S.savings.get(d.program);
			if (!s) S.savings.set(d.program, s = []);
			push(s, [t, d.warm_s, d.always_on_s, d.saved]);
			break;
		}
		case 'request':
			push(S.requests, {t, program: d.program, model: d.model, status: d.status, ms: d.ms, cold: d.cold});
			break;
		}
		schedule();
	}

	/* ---- derived figures ---------------------------------------------- */
	/* chunks/s over the last few seconds of progress events, else the job's
	 * own rate (since its driver started). */
	function jobRate(job) {
		const p = S.progress.get(String(job.id));
		if (job.state === 'running' && p && p.length >= 2) {
			const last = p[p.length - 1];
			let i = p.length - 2;
			while (i > 0 && last[0] - p[i][0] < 5) i--;
			const dt = last[0] - p[i][0];
			if (dt > 0.2) {
				/* no event for a while: the rate has dropped */
				const idle = now() - last[0];
				return (last[1] - p[i][1]) / (dt + (idle > 2 ? idle : 0));
			}
		}
		return job.rate;
	}
	function jobEta(job) {
		if (job.state !== 'running') return null;
		const r = jobRate(job), left = (job.chunks || 0) - (job.done || 0) - (job.buried || 0);
		if (r > 0) return left / r;
		return job.eta_s >= 0 ? job.eta_s : null;
	}
	function jobPct(job) {
		if (!job.chunks) return 0;
		return Math.floor(100 * (job.done || 0) / job.chunks);
	}
	function bar(job, big) {
		const p = job.chunks ? 100 * (job.done || 0) / job.chunks : 0;
		const b = job.chunks ? 100 * (job.buried || 0) / job.chunks : 0;
		return '<div class="bar' + (big ? ' big' : '') + '" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="' + jobPct(job) + '">' +
			'<span style="width:' + p.toFixed(2) + '%"></span>' +
			'<span class="buried" style="left:' + p.toFixed(2) + '%;width:' + b.toFixed(2) + '%"></span>' +
			'<b>' + jobPct(job) + '%</b></div>';
	}
	/* The chunk range in buckets, a cell each: the darker, the more of it
	 * DONE; red when a chunk of it is buried, a mark under it when one had
	 * a failed attempt.  Each cell says its range and counts (title). */
	function strip(m) {
		if (!m) return '<div class="empty">loading</div>';
		if (m.__error) return '<div class="empty">' + esc(m.__error) + '</div>';
		if (!m.buckets) return '<div class="empty">no chunks</div>';
		let cells = '';
		for (let i = 0; i < m.buckets; i++) {
			const lo = m.first[i], hi = (i + 1 < m.buckets ? m.first[i + 1] : m.n) - 1, len = hi - lo + 1;
			const f = len ? m.done[i] / len : 0;
			const cls = m.buried[i] ? 'buried' : m.retried[i] ? 'retried' : '';
			cells += '<i' + (cls ? ' class="' + cls + '"' : '') + ' style="--f:' + f.toFixed(3) + '" title="chunks ' + lo +
				(hi > lo ? '-' + hi : '') + ': ' + m.done[i] + ' done' + (m.retried[i] ? ', ' + m.retried[i] + ' had a failed attempt' : '') +
				(m.buried[i] ? ', ' + m.buried[i] + ' buried' : '') + '"></i>';
		}
		const sum = a => a.reduce((x, y) => x + y, 0);
		return '<div class="strip" role="img" aria-label="chunk map: ' + sum(m.done) + ' of ' + m.n + ' done, ' + sum(m.buried) +
			' buried">' + cells + '</div><div class="muted strip-axis"><span>0</span><span>' + (m.n - 1) + '</span></div>';
	}
	function stateTag(s) { return '<span class="state state-' + esc(String(s).toLowerCase()) + '">' + esc(s) + '</span>'; }

	/* A program's warm/cold spans from its workers' events, [t, warm?] at
	 * each change; before its first event: what ps says now if it has none. */
	/* A program's warm/cold changes [[t_s, warm], ...]: meshd's own record
	 * (ps's warm_history, since the program was loaded), then what the
	 * worker events said since; without it, the events alone. */
	function warmSpans(name) {
		const p = S.ps && (S.ps.programs || []).find(x => x.name === name);
		const ev = eventSpans(name);
		if (!p || !p.warm_history || !p.warm_history.length) return ev;
		const ch = p.warm_history.map(([ms, w]) => [ms / 1000, !!w]);
		for (const c of ev)
			if (c[0] > ch[ch.length - 1][0] && c[1] !== ch[ch.length - 1][1]) ch.push(c);
		return ch;
	}
	function eventSpans(name) {
		const m = S.workers.get(name);
		const changes = [];
		if (m) {
			const all = [];
			for (const [w, h] of m) for (const [t, st] of h) all.push([t, w, st]);
			all.sort((a, b) => a[0] - b[0]);
			const cur = new Map();
			let prev = null;
			for (const [t, w, st] of all) {
				cur.set(w, WARM.has(st));
				let warm = false;
				for (const v of cur.values()) warm = warm || v;
				if (warm !== prev) { changes.push([t, warm]); prev = warm; }
			}
		}
		return changes;
	}
	function programWarmNow(p) {
		return (p.workers || []).some(w => WARM.has(w.state) || (w.state !== 'DOWN' && w.pid > 0));
	}

	/* ---- plots (uPlot) ------------------------------------------------- */
	const plots = new Map();	/* key -> {u, el} on the current view */
	function plot(key, el, title, series, data, yLabel) {
		let p = plots.get(key);
		const width = Math.max(260, el.clientWidth || 300);
		if (!p || p.el !== el || !document.body.contains(p.u.root)) {
			if (p) p.u.destroy();
			el.innerHTML = '';
			const colors = ['#2f6fde', '#e8833a', '#2e9b57', '#c8342c', '#8e44ad', '#16a085', '#7f8c8d'];
			const opts = {
				title, width, height: 200,
				scales: {x: {time: true}},
				axes: [{}, {label: yLabel, size: 60}],
				series: [{}].concat(series.map((s, i) => Object.assign({stroke: colors[i % colors.length], width: 1.5, spanGaps: true}, s))),
				legend: {live: true},
			};
			p = {u: new uPlot(opts, data, el), el, n: series.length};
			plots.set(key, p);
		} else if (p.n !== series.length) {
			plots.delete(key);
			p.u.destroy();
			return plot(key, el, title, series, data, yLabel);
		} else {
			p.u.setData(data);
			const t = p.u.root.querySelector('.u-title');
			if (t && t.textContent !== title) t.textContent = title;
			if (Math.abs(p.u.width - width) > 4) p.u.setSize({width, height: 200});
		}
		return p;
	}
	function dropPlots() {
		for (const p of plots.values()) p.u.destroy();
		plots.clear();
	}
	window.addEventListener('resize', () => schedule());

	/* ---- views -------------------------------------------------------- */
	function route() {
		const h = (location.hash || '#/jobs').replace(/^#\/?/, '');
		const parts = h.split('/');
		switch (parts[0]) {
		case 'jobs': return parts[1] ? {view: 'job', arg: decodeURIComponent(parts[1])} : {view: 'jobs'};
		case 'programs': return {view: 'programs'};
		case 'gateway': return {view: 'gateway'};
		case 'logs': return {view: 'logs', arg: decodeURIComponent(parts.slice(1).join('/'))};
		default: return {view: 'jobs'};
		}
	}

	let current = null;	/* the view drawn now: its key */
	let renderQueued = false;
	function schedule() {
		if (renderQueued) return;
		renderQueued = true;
		setTimeout(() => { renderQueued = false; render(); }, 100);
	}

	function render() {
		const r = route();
		const key = r.view + ':' + (r.arg || '');
		const main = $('#view');
		if (key !== current) {
			dropPlots();
			stopLogs();
			current = key;
			main.innerHTML = '';
			for (const a of document.querySelectorAll('.top nav a'))
				a.setAttribute('aria-current', a.dataset.view === (r.view === 'job' ? 'jobs' : r.view === 'logs' ? 'programs' : r.view) ? 'page' : 'false');
			VIEWS[r.view].init(main, r.arg);
		}
		VIEWS[r.view].draw(main, r.arg);
	}

	const VIEWS = {};
	let tlRange = 3600;	/* the programs view's timelines: seconds up to now */

	VIEWS.jobs = {
		init(main) {
			document.title = 'jobs - mesh';
			main.innerHTML = '<h1>Jobs</h1><div class="scroll"><table id="jobs"><thead><tr>' +
				'<th>id</th><th>program</th><th>state</th><th>progress</th><th class="num">done</th><th class="num">chunks</th>' +
				'<th class="num">rate</th><th class="num">ETA</th><th class="num">buried</th><th class="num">workers</th>' +
				'</tr></thead><tbody></tbody></table></div><p class="muted" id="older"></p>';
		},
		draw(main) {
			const jobs = [...S.jobs.values()].sort((a, b) => Number(b.id) - Number(a.id));
			const rows = jobs.map(j =>
				'<tr data-job="' + esc(j.id) + '"><td><a href="#/jobs/' + encodeURIComponent(j.id) + '">' + esc(j.id) + '</a>' +
				(j.name ? ' <span class="muted">' + esc(j.name) + '</span>' : '') + '</td>' +
				'<td>' + esc(j.program) + '</td><td>' + stateTag(j.state) + '</td><td>' + bar(j) + '</td>' +
				'<td class="num">' + num(j.done) + '</td><td class="num">' + num(j.chunks) + '</td>' +
				'<td class="num">' + (j.state === 'running' || j.rate ? num(jobRate(j), 1) + '/s' : '-') + '</td>' +
				'<td class="num">' + dur(jobEta(j)) + '</td><td class="num">' + num(j.buried) + '</td>' +
				'<td class="num">' + (j.workers == null ? '-' : num(j.workers)) + '</td></tr>');
			setHTML($('#jobs tbody', main), rows.length ? rows.join('')
				: '<tr><td colspan="10" class="empty">no jobs yet: <code>mesh submit PROGRAM --chunks N</code></td></tr>');
			$('#older', main).textContent = S.jobsOlder ? S.jobsOlder + ' older jobs are kept (mesh jobs --all)' : '';
		},
	};

	VIEWS.job = {
		init(main, id) {
			document.title = 'job ' + id + ' - mesh';
			main.innerHTML = '<p><a href="#/jobs">&larr; jobs</a></p><h1>Job ' + esc(id) + ' <span id="jstate"></span></h1>' +
				'<div id="jbar"></div><div class="grid" id="counts" style="margin-top:10px"></div>' +
				'<h2>Chunks <span class="legend"><i class="done"></i>done<i class="retried"></i>had a failed attempt<i class="buried"></i>buried<i class="pending"></i>pending or leased</span></h2>' +
				'<div class="card" id="strip"></div>' +
				'<h2>Rate</h2><div class="card plot" id="rateplot"></div>' +
				'<h2>Results</h2><p><a id="results" href="/results/' + encodeURIComponent(id) + '" download="job-' + esc(id) + '-results">download the results</a> ' +
				'<span class="muted">(every settled chunk\'s, in chunk order, as <code>mesh results ' + esc(id) + '</code> prints them)</span></p>' +
				'<h2>Failures</h2><div id="failures"></div>';
			loadJob(id);
			loadChunks(id);
		},
		draw(main, id) {
			const d = S.jobDetail.get(String(id));
			const j = S.jobs.get(String(id)) || d;
			if (d && d.__error) {
				setHTML($('#jstate', main), stateTag('error'));
				$('#jbar', main).textContent = d.__error;
				return;
			}
			if (!j) { $('#jbar', main).textContent = 'loading'; return; }
			setHTML($('#jstate', main), stateTag(j.state) + ' <span class="muted">' + esc(j.program) + (j.name ? ' · ' + esc(j.name) : '') + '</span>');
			setHTML($('#jbar', main), bar(j, true));
			const kv = [
				['done', num(j.done)], ['chunks', num(j.chunks)], ['pending', num(j.pending)], ['leased', num(j.leased)],
				['buried', num(j.buried)], ['rate', num(jobRate(j), 1) + '/s'], ['ETA', dur(jobEta(j))],
				['elapsed', dur(j.elapsed_s)], ['first result', j.first_result_s >= 0 ? dur(j.first_result_s) : '-'],
				['workers', num(j.workers)], ['max workers', num(j.max_workers)], ['failed attempts', num(j.failed_attempts)],
				['retries', num(j.retries)], ['worker deaths', num(j.worker_deaths)], ['requeued', num(j.requeued)],
				['duplicates', num(j.duplicates)],
			];
			setHTML($('#counts', main), kv.map(([k, v]) => '<div class="kv"><div class="k">' + esc(k) + '</div><div class="v num">' + esc(v) + '</div></div>').join(''));
			/* rate over time: done's slope between events, in ~1 s steps */
			const p = S.progress.get(String(id)) || [];
			const xs = [], ys = [];
			let a = p[0];
			for (let i = 1; i < p.length; i++) {
				const b = p[i];
				if (b[0] - a[0] >= 0.5 || i === p.length - 1) {
					if (b[0] > a[0]) { xs.push(b[0]); ys.push((b[1] - a[1]) / (b[0] - a[0])); }
					a = b;
				}
			}
			const el = $('#rateplot', main);
			if (xs.length < 2) {
				if (!plots.has('rate')) el.innerHTML = '<div class="empty">' + (p.length ? 'too few progress events yet' : 'no progress events for this job in what meshd keeps') + (j.rate ? ' (its rate: ' + num(j.rate, 1) + ' chunks/s)' : '') + '</div>';
			} else {
				plot('rate', el, 'chunks/s', [{label: 'chunks/s'}], [xs, ys], 'chunks/s');
			}
			setHTML($('#strip', main), strip(S.chunkMap.get(String(id))));
			const f = (d && d.failures) || [];
			setHTML($('#failures', main), f.length ? f.map(x =>
				'<div class="card report"><h3>chunk ' + esc(x.chunk) + ' · ' + esc(x.attempts) + ' attempt' + (x.attempts === 1 ? '' : 's') +
				' · status ' + esc(x.status) + (x.buried ? ' · <span class="state state-failed">buried</span>' : '') + '</h3>' +
				'<pre>' + esc(x.report) + '</pre></div>').join('') : '<div class="empty">none</div>');
		},
	};

	VIEWS.programs = {
		init(main) {
			document.title = 'programs - mesh';
			main.innerHTML = '<h1>Programs</h1><div class="scroll"><table id="programs"><thead><tr>' +
				'<th>program</th><th>state</th><th>workers (pid · state · CPU · RSS · VRAM)</th><th class="num">spawns</th>' +
				'<th class="num">cold start (last · mean)</th><th class="num">crashes</th><th class="num">saved</th><th>log</th></tr></thead><tbody></tbody></table></div>' +
				'<h2>Warm and cold <span class="legend"><i style="background:var(--warm)"></i>warm<i style="background:var(--cold)"></i>cold<i style="background:var(--unknown)"></i>not loaded</span>' +
				' <span class="range" role="group" aria-label="the timelines\' span">' +
				[[600, '10 min'], [3600, 'hour'], [86400, 'day']].map(([s, l]) => '<button type="button" data-range="' + s + '" aria-pressed="' + (s === tlRange) + '">' + l + '</button>').join('') +
				'</span></h2>' +
				'<div class="card" id="timelines"></div>' +
				'<h2>Savings</h2><p class="muted">worker-seconds held (warm) against what always-on workers would hold, over each program\'s window</p><div class="plots" id="savings"></div>' +
				'<h2>Crashes</h2><div id="crashes"></div>';
			loadPs();
		},
		draw(main) {
			const ps = S.ps;
			const progs = ps && ps.programs ? ps.programs : [];
			const names = new Set(progs.map(p => p.name));
			const rows = progs.map(p => {
				const warm = programWarmNow(p);
				const st = p.failed ? stateTag('FAILED') : warm ? stateTag('warm') : stateTag('cold');
				const ws = (p.workers || []).map(w =>
					'<div class="mono">' + (w.pid ? esc(w.pid) : '-') + ' · ' + esc(String(w.state).toLowerCase()) + (w.busy ? ' (busy)' : '') +
					' · ' + num(w.cpu_pct, 1) + '% · ' + (w.rss ? bytes(w.rss) : '-') +
					(w.gpu ? ' · ' + bytes(w.gpu.vram || 0) + ' VRAM' + (w.gpu.gpus && w.gpu.gpus.length ? ' on GPU ' + w.gpu.gpus.join(',') : '') : '') + '</div>').join('');
				const cold = p.cold_starts ? brief(p.cold_start_last_s) + ' · ' + brief(p.cold_start_mean_s) + ' <span class="muted">(' + num(p.cold_starts) + ')</span>' : '-';
				return '<tr data-program="' + esc(p.name) + '" data-crashes="' + esc(p.crashes || 0) + '"><td>' + esc(p.name) + ' <span class="muted">' + esc(p.device || '') + '</span></td>' +
					'<td class="pstate">' + st + (p.failed ? '<div class="muted">' + esc(p.failed) + '</div>' : '') + '</td>' +
					'<td>' + (ws || '<span class="muted">none</span>') + '</td><td class="num">' + num(p.spawns) + '</td><td class="num cold">' + cold + '</td>' +
					'<td class="num">' + num(p.crashes) + '</td><td class="num">' + pct(p.savings) + '</td>' +
					'<td><a href="#/logs/' + encodeURIComponent(p.name) + '">log</a></td></tr>';
			});
			for (const n of S.workers.keys())
				if (!names.has(n) && !(ps && ps.http || []).some(h => h.name === n))
					rows.push('<tr data-program="' + esc(n) + '"><td>' + esc(n) + '</td><td class="pstate">' + stateTag('cold') +
						' <span class="muted">not loaded</span></td><td></td><td></td><td></td><td></td><td></td><td><a href="#/logs/' + encodeURIComponent(n) + '">log</a></td></tr>');
			setHTML($('#programs tbody', main), rows.length ? rows.join('')
				: '<tr><td colspan="8" class="empty">' + (ps ? 'no program is loaded: a call, a job or <code>mesh load</code> loads one' : 'loading') + '</td></tr>');

			/* timelines over the chosen span up to now, or from the first
			 * change known when that came later (at least a minute) */
			const all = new Set([...names, ...S.workers.keys()]);
			const spans = new Map([...all].map(n => [n, warmSpans(n)]));
			let first = Infinity;
			for (const ch of spans.values()) if (ch.length) first = Math.min(first, ch[0][0]);
			const t1 = now(), t0 = Math.min(t1 - 60, Math.max(t1 - tlRange, first)), span = t1 - t0;
			const tl = [];
			for (const n of all) {
				const ch = spans.get(n);
				let segs = '';
				if (!ch.length) {
					const p = progs.find(x => x.name === n);
					if (p) segs = '<i class="' + (programWarmNow(p) ? 'warm' : 'cold') + '" style="left:' + (100 * (S.pageStart - t0) / span).toFixed(2) + '%;right:0"></i>';
				}
				for (let i = 0; i < ch.length; i++) {
					const a = Math.max(ch[i][0], t0), b = i + 1 < ch.length ? ch[i + 1][0] : t1;
					if (b <= t0) continue; /* before the span */
					segs += '<i class="' + (ch[i][1] ? 'warm' : 'cold') + '" style="left:' + (100 * (a - t0) / span).toFixed(2) + '%;width:' + Math.max(0.2, 100 * (b - a) / span).toFixed(2) + '%" title="' + (ch[i][1] ? 'warm' : 'cold') + ' from ' + esc(clock(a)) + '"></i>';
				}
				const warmNow = ch.length ? ch[ch.length - 1][1] : null;
				tl.push('<div class="tlrow" data-timeline="' + esc(n) + '"><span class="name">' + esc(n) + '</span><div class="timeline">' + segs +
					'</div><span class="muted">' + (warmNow == null ? '' : warmNow ? 'warm' : 'cold') + '</span></div>');
			}
			setHTML($('#timelines', main), tl.length ? tl.join('') + '<div class="legend" style="display:flex;justify-content:space-between;margin-left:148px"><span>' + esc(clock(t0)) + '</span><span>now</span></div>'
				: '<div class="empty">no worker has started or stopped in what meshd keeps</div>');

			/* savings plots, one a program */
			const sv = $('#savings', main);
			const have = [...S.savings.keys()].sort();
			if (!have.length) {
				sv.innerHTML = '<div class="empty">no savings ticks yet (meshd sends them every 10 s while someone follows)</div>';
			} else {
				for (const n of have) {
					let el = sv.querySelector('[data-savings="' + CSS.escape(n) + '"]');
					if (!el) {
						if (!sv.querySelector('[data-savings]')) sv.innerHTML = '';
						el = document.createElement('div');
						el.className = 'card plot';
						el.dataset.savings = n;
						el.innerHTML = '<div class="p"></div>';
						sv.appendChild(el);
					}
					const h = S.savings.get(n);
					const last = h[h.length - 1];
					plot('sav:' + n, el.querySelector('.p'), n + ': saved ' + pct(last[3]) + ' at ' + clock(last[0]),
						[{label: 'warm s', stroke: '#e8833a', fill: 'rgba(232,131,58,.15)'}, {label: 'always-on s', stroke: '#2f6fde', dash: [6, 4]}],
						[h.map(x => x[0]), h.map(x => x[1]), h.map(x => x[2])], 'worker-s');
				}
			}

			/* crash reports: the events' (newest first), else ps's exits */
			const cr = S.crashes.slice().reverse();
			let html = cr.map(c => '<div class="card report" data-crash="' + esc(c.program) + '"><h3>' + esc(c.program) + ' · ' + esc(clock(c.at)) + '</h3><pre>' + esc(c.report) + '</pre></div>').join('');
			if (!html) {
				const exits = [];
				for (const p of progs) for (const w of p.workers || []) if (w.crashes) exits.push(esc(p.name) + ': worker ' + esc(w.pid || '') + ' crashed ' + w.crashes + ' time(s), last exit ' + esc(w.last_exit));
				html = exits.length ? '<div class="card">' + exits.join('<br>') + ' <span class="muted">(its report is in meshd\'s log)</span></div>' : '<div class="empty">none in what meshd keeps</div>';
			}
			setHTML($('#crashes', main), html);
		},
	};
	S.pageStart = now();

	function evictions(name) {
		const e = S.evictions && S.evictions.get(name);
		return e ? num(e.idle) + ' · ' + num(e.budget) + ' · ' + num(e.swap) : '-';
	}
	VIEWS.gateway = {
		init(main) {
			document.title = 'gateway - mesh';
			main.innerHTML = '<h1>Model gateway</h1><div id="gwnote"></div><div class="scroll"><table id="gateway"><thead><tr>' +
				'<th>program</th><th>state</th><th>models</th><th class="num">pid</th><th class="num">port</th><th class="num">in flight</th>' +
				'<th class="num">queued</th><th class="num">cold starts</th><th class="num">crashes</th><th class="num">hung restarts</th>' +
				'<th class="num">memory counted</th><th class="num">stopped idle · budget · swap</th><th>log</th></tr></thead><tbody></tbody></table></div>' +
				'<p class="muted" id="gwbudget"></p><div id="gwerrors"></div>' +
				'<h2>Requests</h2><div class="plots"><div class="card plot" id="rps"></div><div class="card plot" id="lat"></div></div>';
			loadPs();
			loadMetrics();
		},
		draw(main) {
			const ps = S.ps;
			const http = ps && Array.isArray(ps.http) ? ps.http : null;
			setHTML($('#gwnote', main), ps && !http ? '<p class="card">meshd runs without <code>--http</code>: no gateway (docs/gateway.md)</p>' : '');
			setHTML($('#gateway tbody', main), http && http.length ? http.map(h =>
				'<tr data-gwprogram="' + esc(h.name) + '"><td>' + esc(h.name) + '</td><td>' + stateTag(h.state) + '</td><td>' + esc((h.models || []).join(', ')) + '</td>' +
				'<td class="num">' + (h.pid == null ? '-' : esc(h.pid)) + '</td><td class="num">' + (h.port == null ? '-' : esc(h.port)) + '</td>' +
				'<td class="num">' + num(h.in_flight) + '</td><td class="num">' + num(h.queued) + '</td><td class="num">' + num(h.cold_starts) + '</td>' +
				'<td class="num">' + num(h.crashes) + '</td><td class="num">' + num(h.hung_restarts) + '</td>' +
				'<td class="num">' + (h.memory ? bytes(h.memory.counted) : '-') + '</td>' +
				'<td class="num">' + evictions(h.name) + '</td>' +
				'<td><a href="#/logs/' + encodeURIComponent(h.name) + '">log</a></td></tr>').join('')
				: '<tr><td colspan="13" class="empty">' + (ps ? 'no HTTP programs' : 'loading') + '</td></tr>');
			$('#gateway', main).dataset.metrics = S.evictions ? 'read' : '';
			const mem = S.gwMemory || {};
			setHTML($('#gwbudget', main), http && mem.counted != null
				? esc('memory counted ' + bytes(mem.counted) + (mem.budget ? ' of the budget ' + bytes(mem.budget) + ' (--http-memory)' : ' (no --http-memory budget)'))
				: '');
			setHTML($('#gwerrors', main), (http || []).filter(h => h.last_error).map(h =>
				'<div class="card report"><h3>' + esc(h.name) + ': last failure</h3><pre>' + esc(h.last_error) + '</pre></div>').join(''));
			/* requests/s and mean latency per model, 5 s buckets */
			const B = 5, models = [...new Set(S.requests.map(r => r.model))].sort();
			const rps = $('#rps', main), lat = $('#lat', main);
			if (!S.requests.length) {
				if (!plots.has('rps')) {
					rps.innerHTML = '<div class="empty">no gateway requests in what meshd keeps: requests/s per model</div>';
					lat.innerHTML = '<div class="empty">latency per model</div>';
				}
				return;
			}
			const t0 = Math.floor(S.requests[0].t / B) * B, t1 = Math.floor(now() / B) * B;
			const xs = [];
			for (let t = t0; t <= t1; t += B) xs.push(t);
			const cnt = models.map(() => new Array(xs.length).fill(0));
			const sum = models.map(() => new Array(xs.length).fill(0));
			for (const r of S.requests) {
				const i = Math.floor((r.t - t0) / B), m = models.indexOf(r.model);
				if (i >= 0 && i < xs.length) { cnt[m][i]++; sum[m][i] += r.ms || 0; }
			}
			plot('rps', rps, 'requests/s', models.map(m => ({label: m})), [xs].concat(cnt.map(c => c.map(n => n / B))), 'req/s');
			plot('lat', lat, 'mean latency (ms)', models.map(m => ({label: m, points: {show: true}})),
				[xs].concat(sum.map((s, k) => s.map((v, i) => cnt[k][i] ? v / cnt[k][i] : null))), 'ms');
		},
	};

	let logTimer = 0, logName = null, logBusy = false;
	function stopLogs() { clearTimeout(logTimer); logTimer = 0; logName = null; }
	async function pollLogs() {
		if (!logName || logBusy) return;
		const name = logName;
		logBusy = true;
		let text = null, status = 0;
		try {
			const r = await fetch('/api/programs/' + encodeURIComponent(name) + '/logs?tail=65536', {cache: 'no-store', credentials: 'same-origin'});
			status = r.status;
			text = await r.text();
		} catch (e) { text = null; }
		logBusy = false;
		if (name !== logName) return;
		const pre = $('#log');
		if (pre) {
			if (status === 502) {
				try { setDown(JSON.parse(text).error); } catch (e) { setDown('meshd is not answering'); }
			} else if (text != null) {
				if (status >= 400) {
					try { text = JSON.parse(text).error || text; } catch (e) { /* as it came */ }
					text = 'cannot read the log: ' + text;
				}
				const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
				if (pre.textContent !== text) {
					pre.textContent = text || '(empty)';
					if (atEnd) pre.scrollTop = pre.scrollHeight;
				}
				$('#logat').textContent = 'read ' + new Date().toLocaleTimeString();
			}
		}
		/* only while this view is shown and the tab is visible */
		logTimer = setTimeout(pollLogs, 2000);
	}
	VIEWS.logs = {
		init(main, name) {
			document.title = 'log ' + name + ' - mesh';
			main.innerHTML = '<p><a href="#/programs">&larr; programs</a></p><h1>Log of ' + esc(name) + ' <span class="muted" id="logat"></span></h1>' +
				'<pre class="log" id="log" tabindex="0">loading</pre><p class="muted">the last 64 KiB, read every 2 s while shown</p>';
			logName = name;
			pollLogs();
			const pre = $('#log');
			pre.scrollTop = pre.scrollHeight;
		},
		draw() {},
	};
	document.addEventListener('visibilitychange', () => {
		if (document.hidden) { clearTimeout(logTimer); logTimer = 0; }
		else if (logName && !logTimer) pollLogs();
	});

	/* ---- keyboard: g j / g p / g g ------------------------------------ */
	let gAt = 0;
	/* The programs view's span buttons (10 min, hour, day). */
	document.addEventListener('click', e => {
		const b = e.target && e.target.closest && e.target.closest('button[data-range]');
		if (!b) return;
		tlRange = Number(b.dataset.range);
		for (const x of document.querySelectorAll('button[data-range]')) x.setAttribute('aria-pressed', String(x === b));
		schedule();
	});
	document.addEventListener('keydown', e => {
		if (e.ctrlKey || e.metaKey || e.altKey) return;
		const tag = (e.target && e.target.tagName) || '';
		if (tag === 'INPUT' || tag === 'TEXTAREA') return;
		if (e.key === 'g' && !gAt) { gAt = Date.now(); return; }
		if (gAt && Date.now() - gAt < 1500) {
			const to = {j: '#/jobs', p: '#/programs', g: '#/gateway'}[e.key];
			if (to) { location.hash = to; e.preventDefault(); }
		}
		gAt = 0;
	});

	window.addEventListener('hashchange', () => { render(); $('#view').focus({preventScroll: true}); });
	/* the live figures (rates, ETA, timelines) age without events */
	setInterval(() => { if (!document.hidden) schedule(); }, 1000);
	/* ps's CPU and RSS are samples: read again every 5 s while a view that
	 * shows them is open (one small answer; nothing when hidden) */
	setInterval(() => {
		const v = route().view;
		if (!document.hidden && (v === 'programs' || v === 'gateway')) loadPs();
		if (!document.hidden && v === 'gateway') loadMetrics();
	}, 5000);

	render();
	loadPs();
	loadJobs();
	connect();
})();
