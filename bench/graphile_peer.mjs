// graphile-worker's side of bench/bench_graphile.sh: queues JOBS jobs (task
// "noop", payload {i}) with graphile-worker's own addJobs, untimed, then
// times one worker pool from its start until every job ran and its
// completion is committed (the pool stopped: a batched completion is
// flushed by then), and checks that no job is left in the queue.
// Usage: node graphile_peer.mjs batched|defaults JOBS   (PGHOST, PGUSER,
// PGDATABASE name the database; GRAPHILE_DIR the npm prefix holding
// graphile-worker).  Prints "RESULT <jobs> <seconds> <jobs/s>" or exits 1.
//   batched:  the options of graphile-worker's published figure (its docs,
//             "Performance"): concurrentJobs 24, maxPoolSize 25,
//             localQueue.size 500, completeJobBatchDelay 0,
//             failJobBatchDelay 0;
//   defaults: the same concurrentJobs and maxPoolSize, nothing else set (no
//             local queue, a fetch and a completion a job).
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";

const require = createRequire(`${process.env.GRAPHILE_DIR}/package.json`);
const { run, runMigrations, makeWorkerUtils, Logger } = require("graphile-worker");

const mode = process.argv[2];
const jobs = Number(process.argv[3]);
if (!["batched", "defaults"].includes(mode) || !(jobs > 0)) {
	console.error("usage: graphile_peer.mjs batched|defaults JOBS");
	process.exit(2);
}
const logger = new Logger(() => (level, message) => {
	if (level === "error") console.error(`graphile-worker: ${message}`);
});
const worker = { concurrentJobs: 24, maxPoolSize: 25, logger };
if (mode === "batched")
	Object.assign(worker, { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 });
const preset = { worker };

await runMigrations({ preset });
const utils = await makeWorkerUtils({ preset });
for (let i = 0; i < jobs; i += 10000) {
	const specs = [];
	for (let k = i; k < Math.min(jobs, i + 10000); k++) specs.push({ identifier: "noop", payload: { i: k } });
	await utils.addJobs(specs);
}

let ran = 0;
let allRan;
const done = new Promise((resolve) => (allRan = resolve));
const t0 = performance.now();
const runner = await run({
	preset,
	noHandleSignals: true,
	taskList: {
		noop: async () => {
			if (++ran === jobs) allRan();
		},
	},
});
await done;
await runner.stop();
const s = (performance.now() - t0) / 1000;

const left = await utils.withPgClient((c) => c.query("SELECT count(*)::int AS n FROM graphile_worker.jobs"));
await utils.release();
if (left.rows[0].n !== 0 || ran !== jobs) {
	console.error(`graphile-worker: ${ran} of ${jobs} jobs ran, ${left.rows[0].n} left in the queue`);
	process.exit(1);
}
console.log(`RESULT ${jobs} ${s.toFixed(3)} ${(jobs / s).toFixed(0)}`);
process.exit(0);
