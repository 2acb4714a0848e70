// The browser test of `mesh ui` (docs/ui.md): Debian's chromium, headless,
// driven by playwright-core, against a real `mesh ui` in front of a real
// meshd.  The C test that runs it (tests/integration/) starts meshd and
// `mesh ui`, submits a job, makes a crash and lets a program's idle TTL
// pass; this script watches the page show it.
//
//   node tests/ui/browser.mjs URL OUTDIR
//
// URL: the one `mesh ui` printed (with its token).  OUTDIR: where the
// screenshots go (jobs.png, job.png, programs.png, gateway.png, logs.png at
// 1280x800; jobs-phone.png, programs-phone.png at 375x800).  Prints an `ok`
// line for each check (with the seconds since it started); exits 1 with
// `FAIL: ...` on the first failed check and on any console error or page
// error.  playwright-core comes from $MESH_BUILD/node (default
// ./build/node); chromium from $CHROMIUM (default /usr/bin/chromium).
// Environment, all optional:
//   MESH_UI_READY_FILE  written once the page follows the stream (chromium
//                       takes seconds to start): submit the job after it
//   MESH_UI_MOVING      the job must be seen below 100% before it reaches it
//   MESH_UI_COLD        the program expected to go cold (default: any)
//   MESH_UI_WAIT_MS     how long each wait for what the caller does (30000)
//   MESH_UI_RESTART_FILE  at the end: written to ask the caller to stop
//                       meshd; FILE.down written once the page showed it
//                       down, for the caller to start it again
import {createRequire} from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const [url, outdir] = process.argv.slice(2);
if (!url || !outdir) {
	console.error('usage: node tests/ui/browser.mjs URL OUTDIR');
	process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const build = process.env.MESH_BUILD || path.resolve(here, '../../build');
let chromium;
try {
	chromium = createRequire(path.join(build, 'node', 'package.json'))('playwright-core').chromium;
} catch (e) {
	console.error(`FAIL: cannot load playwright-core from ${build}/node: ${e.message}`);
	process.exit(1);
}
const exe = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT = Number(process.env.MESH_UI_WAIT_MS || 30000);
fs.mkdirSync(outdir, {recursive: true});

const problems = [];
let browser;

async function fail(msg) {
	console.log(`FAIL: ${msg}`);
	for (const p of problems) console.log(`  ${p}`);
	if (browser) await browser.close().catch(() => {});
	process.exit(1);
}
const t0 = Date.now();
function ok(msg) { console.log(`ok ${msg} [${((Date.now() - t0) / 1000).toFixed(1)} s]`); }
function clean(what) {
	if (problems.length) return fail(`console or page errors ${what}`);
}

async function shot(page, name) {
	const f = path.join(outdir, name);
	await page.screenshot({path: f});
	ok(`screenshot ${name} (${fs.statSync(f).size} bytes)`);
}

/* Waits for fn (run in the page) to be true, or fails with what. */
async function until(page, fn, arg, what, ms) {
	try {
		await page.waitForFunction(fn, arg, {timeout: ms || WAIT, polling: 200});
	} catch (e) {
		const text = await page.evaluate(() => {
			const b = document.querySelector('#banner'), l = document.querySelector('#live');
			return `[${location.hash}; stream: ${l && l.textContent}; banner: ${b && !b.hidden ? b.textContent : 'none'}]\n` +
				(document.querySelector('main') ? document.querySelector('main').innerText : '');
		}).catch(() => '');
		await page.screenshot({path: path.join(outdir, 'failed.png')}).catch(() => {});
		return fail(`${what} (waited ${ms || WAIT} ms); the page said:\n${String(text).slice(0, 2000)}`);
	}
}

/* Clicks the nav link to view and waits for its heading. */
async function nav(page, view, heading) {
	await page.click(`.top nav a[data-view="${view}"]`);
	await until(page, h => { const e = document.querySelector('main h1'); return e && e.textContent.includes(h); }, heading, `the ${view} view did not open`, 5000);
}

try {
	browser = await chromium.launch({executablePath: exe, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
} catch (e) {
	console.log(`FAIL: cannot start ${exe}: ${e.message.split('\n')[0]}`);
	process.exit(1);
}
const ctx = await browser.newContext({viewport: {width: 1280, height: 800}, deviceScaleFactor: 1});
const page = await ctx.newPage();
page.on('console', m => { if (m.type() === 'error') problems.push(`console error: ${m.text()} (${(m.location() || {}).url || ''})`); });
page.on('pageerror', e => problems.push(`page error: ${e.message}`));
page.on('requestfailed', r => { if (!/\/api\/events/.test(r.url())) problems.push(`request failed: ${r.url()} ${r.failure() && r.failure().errorText}`); });

// Without the token: 403, before the page has a cookie.
{
	const u = new URL(url);
	if (u.search) {
		const r = await fetch(u.origin + '/api/ps');
		if (r.status !== 403) await fail(`GET ${u.origin}/api/ps without the token answered ${r.status}, not 403`);
		const r2 = await fetch(u.origin + '/');
		if (r2.status !== 403) await fail(`GET ${u.origin}/ without the token answered ${r2.status}, not 403`);
		ok('no token: 403');
	}
}

const resp = await page.goto(url, {waitUntil: 'load'});
if (!resp || resp.status() !== 200) await fail(`GET ${url} answered ${resp && resp.status()}`);
await until(page, () => typeof uPlot === 'function' && document.querySelector('#jobs tbody'), null, 'the jobs view did not render', 10000);
await until(page, () => document.querySelector('#live').textContent === 'live', null, 'the event stream did not connect', 10000);
ok('jobs view, event stream live');
// Chromium takes seconds to start on a loaded machine: the caller submits
// its job once this file exists (the page follows the stream by then).
if (process.env.MESH_UI_READY_FILE) fs.writeFileSync(process.env.MESH_UI_READY_FILE, 'live\n');

// A job's bar reaches 100% (with $MESH_UI_MOVING: a job seen below it
// first, the page having been open before it ended).
const moving = !!process.env.MESH_UI_MOVING;
const seen = new Map();	/* job id -> the percents its bar showed */
let jobId = null;
for (const end = Date.now() + WAIT; !jobId;) {
	const rows = await page.evaluate(() => [...document.querySelectorAll('#jobs tr[data-job]')].map(r => [r.dataset.job, r.querySelector('.bar b').textContent]));
	for (const [id, p] of rows) {
		if (!seen.has(id)) seen.set(id, []);
		const l = seen.get(id);
		if (l[l.length - 1] !== p) l.push(p);
		if (p === '100%' && (!moving || l.length > 1)) jobId = id;
	}
	if (jobId) break;
	if (Date.now() > end)
		await fail(`no job's bar reached 100%${moving ? ' after it was seen below it' : ''} in ${WAIT} ms (the bars said: ${[...seen].map(([id, l]) => id + ': ' + l.join(' ')).join('; ') || 'no job'})`);
	await page.waitForTimeout(100);
}
ok(`job ${jobId} reached 100% (its bar said ${seen.get(jobId).join(', ')})`);
await shot(page, 'jobs.png');
await clean('on the jobs view');

// Its page: counts, the rate plot or its note, the results link.
await page.click(`#jobs tr[data-job="${jobId}"] a`);
await until(page, id => {
	const h = document.querySelector('main h1');
	return h && h.textContent.includes('Job ' + id) && /complete|failed/.test(h.textContent) && document.querySelector('#counts .kv');
}, jobId, `job ${jobId}'s page did not show it ended`, 10000);
const results = await page.getAttribute('#results', 'href');
const rr = await page.request.get(new URL(results, url).href);
if (rr.status() !== 200) await fail(`the results link ${results} answered ${rr.status()}`);
ok(`job page: counts, results link (${(await rr.body()).length} bytes)`);
await until(page, () => document.querySelector('#rateplot .uplot, #rateplot .empty'), null, 'the rate plot did not render', 5000);
ok(`job page: rate ${await page.evaluate(() => document.querySelector('#rateplot .uplot') ? 'plot' : 'note: ' + document.querySelector('#rateplot').innerText)}`);
// The chunk strip: every chunk of the ended job DONE.
await until(page, () => {
	const st = document.querySelector('#strip .strip');
	const m = st && /^chunk map: (\d+) of (\d+) done/.exec(st.getAttribute('aria-label'));
	return m && m[1] === m[2] && st.children.length > 1;
}, null, 'the chunk strip did not show every chunk done', 10000);
ok(`job page: chunk strip (${await page.evaluate(() => { const st = document.querySelector('#strip .strip'); return st.children.length + ' cells, ' + st.getAttribute('aria-label'); })})`);
await shot(page, 'job.png');
await clean('on the job page');

// Programs: a crash report with its last lines, a program gone cold.
await nav(page, 'programs', 'Programs');
await until(page, () => [...document.querySelectorAll('#crashes pre')].some(p => p.textContent.includes('about to crash')),
	null, "no crash report with 'about to crash' on the programs view");
ok("programs: crash report with 'about to crash'");
// A program gone cold after its idle TTL: warm then cold on its timeline,
// cold in the table, and no crash (a crash makes one cold too);
// $MESH_UI_COLD names it, else any.
const wantCold = process.env.MESH_UI_COLD || '';
/* the programs that show it in the page, or null */
const coldList = want => {
	const l = [...document.querySelectorAll('[data-timeline]')].filter(r => {
		const n = r.dataset.timeline, row = document.querySelector(`tr[data-program="${CSS.escape(n)}"]`);
		return (!want || n === want) && r.querySelector('.timeline i.warm') && r.querySelector('span.muted').textContent === 'cold' &&
			row && row.dataset.crashes === '0' && row.querySelector('.pstate').textContent.includes('cold');
	}).map(r => r.dataset.timeline);
	return l.length ? l : null;
};
await until(page, coldList, wantCold, `no program${wantCold ? ' ' + wantCold : ''} went from warm to cold (without a crash) on the programs view`);
const cold = (await page.evaluate(coldList, wantCold)).join(', ');
ok(`programs: warm then cold: ${cold}`);
await until(page, () => document.querySelector('#savings .uplot'), null, 'no savings plot on the programs view', 15000);
ok('programs: savings plot');
const coldOne = cold.split(', ')[0];
await until(page, n => { const c = document.querySelector(`tr[data-program="${CSS.escape(n)}"] td.cold`); return c && /(ms|s) · .*(ms|s) \(\d+\)/.test(c.textContent); },
	coldOne, `no cold-start time (last · mean (count)) for ${coldOne} on the programs view`, 10000);
ok(`programs: ${coldOne}'s cold starts: ${await page.evaluate(n => document.querySelector(`tr[data-program="${CSS.escape(n)}"] td.cold`).textContent, coldOne)}`);
// The timelines' span: meshd's own warm/cold record over the last hour
// (the default), a day, or 10 minutes.
for (const r of ['86400', '600']) {
	await page.click(`button[data-range="${r}"]`);
	await until(page, r => document.querySelector(`button[data-range="${r}"]`).getAttribute('aria-pressed') === 'true' &&
		document.querySelector('[data-timeline] .timeline i.warm'), r, `the timelines' span ${r} s did not apply`, 5000);
}
ok('programs: timelines over a day, then 10 minutes');
await page.evaluate(() => window.scrollTo(0, 0));
await shot(page, 'programs.png');
await clean('on the programs view');

// Logs of the program that went cold.
const logOf = cold.split(', ')[0];
await page.click(`tr[data-program="${logOf}"] a[href^="#/logs/"]`);
await until(page, () => { const p = document.querySelector('#log'); return p && p.textContent !== 'loading'; }, null, `the log of ${logOf} did not load`, 10000);
ok(`logs: ${logOf} (${await page.evaluate(() => document.querySelector('#log').textContent.length)} chars)`);
await shot(page, 'logs.png');
await clean('on the logs view');

// Keyboard: g g opens the gateway, g j the jobs.
await page.locator('main').focus();
await page.keyboard.press('g');
await page.keyboard.press('g');
await until(page, () => location.hash === '#/gateway' && document.querySelector('#gateway tbody'), null, "'g g' did not open the gateway view", 5000);
await until(page, () => !/loading/.test(document.querySelector('#gateway tbody').textContent) && document.querySelector('#gateway').dataset.metrics === 'read',
	null, 'the gateway view did not render (with /api/metrics read)', 10000);
ok(`gateway view (${await page.evaluate(() => document.querySelector('#gateway tbody tr').innerText.replace(/\s+/g, ' ').slice(0, 80))})`);
await shot(page, 'gateway.png');
await clean('on the gateway view');

// A phone's width: the page itself does not scroll sideways.
await page.setViewportSize({width: 375, height: 800});
await page.keyboard.press('g');
await page.keyboard.press('j');
await until(page, () => location.hash === '#/jobs' && document.querySelector('#jobs tr[data-job]'), null, "'g j' did not open the jobs view", 5000);
for (const [view, name] of [['jobs', 'jobs-phone.png'], ['programs', 'programs-phone.png']]) {
	if (view !== 'jobs') await nav(page, view, 'Programs');
	await page.waitForTimeout(300);
	const w = await page.evaluate(() => document.documentElement.scrollWidth);
	if (w > 376) await fail(`at 375 px the ${view} view is ${w} px wide (it should scroll its tables, not the page)`);
	ok(`${view} at 375 px: page width ${w}`);
	await shot(page, name);
}
await clean('at a phone\'s width');

// meshd restarted under the open page ($MESH_UI_RESTART_FILE: the caller
// stops meshd once that file is there, and starts it again once the file
// named by its contents plus ".down" is): the page says meshd is down,
// then goes on by itself -- live again, the job listed again.
if (process.env.MESH_UI_RESTART_FILE) {
	const asked = process.env.MESH_UI_RESTART_FILE;
	await page.setViewportSize({width: 1280, height: 800});
	await nav(page, 'jobs', 'Jobs');
	const before = problems.length;
	fs.writeFileSync(asked, 'restart\n');
	await until(page, () => { const b = document.querySelector('#banner'); return b && !b.hidden && /meshd is not running/.test(b.textContent); },
		null, 'the page did not say meshd was down once it stopped');
	ok(`meshd stopped: the page says '${(await page.evaluate(() => document.querySelector('#banner').textContent)).slice(0, 60)}...' and '${await page.evaluate(() => document.querySelector('#live').textContent)}'`);
	fs.writeFileSync(asked + '.down', 'seen\n');
	await until(page, id => document.querySelector('#live').textContent === 'live' && document.querySelector('#banner').hidden &&
		document.querySelector(`#jobs tr[data-job="${id}"]`), jobId, 'the page did not go on by itself after meshd came back');
	ok(`meshd back: the page is live again and lists job ${jobId}`);
	// While meshd was down, the browser logs the 502s of its reads and the
	// stream's: expected then, and only those.
	const down = problems.splice(before).filter(p => !/status of 502|EventSource/.test(p));
	problems.push(...down);
	await clean('across a restart of meshd');
}

await browser.close();
ok('browser');
