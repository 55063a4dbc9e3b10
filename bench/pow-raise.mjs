// What a raise of the proof of work's level costs an honest buyer caught
// mid-solve (edge/pow.rs): its payload, solved at the old level, is
// refused with a fresh challenge at the new one, solved once more.
//
//   node bench/pow-raise.mjs       BENCH_RUNS runs per raise (default 5), medians
//   BENCH_POW_RAISES=3 node bench/pow-raise.mjs     only the raise from 3 to 4
//
// In headless Chromium, by the product page's own join (its `join`: the
// challenge, the ALTCHA widget's solve, the join, and one solve more when
// the join is refused with a fresh challenge). For each raise from L to
// L + 1, the page's join with the payload it solved at L is held while the
// admin raises the level and until the edge asks L + 1, then let go: the
// raise came while the page solved. Measured in the page (the hold taken
// out): what the raise cost (the solve at L, and the refused join's trip),
// the solve at L + 1, and the whole join from the click to the ticket;
// beside it the same join at L + 1 from the start, in the same run.
//
// Never fails on speed; exits non-zero only when a run could not be made.
import { cpus } from "node:os";
import { median } from "./load.mjs";
import { client, sleep } from "../tests/support/client.mjs";
import { launch } from "../tests/support/browser.mjs";
import { startGate } from "../tests/support/runtime.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const RAISES = (process.env.BENCH_POW_RAISES ?? "1,2,3").split(",").map(Number);

const gate = await startGate({});
const api = client(gate.url);
console.log(`machine: ${cpus().length} cores, ${cpus()[0]?.model ?? "?"}; workerd pid ${gate.proc.pid}; ${new Date().toISOString()}`);

/** Waits until the edge asks `level` of `product`'s joins. */
async function untilAsking(product, level) {
  for (const until = Date.now() + 10_000; Date.now() < until; await sleep(50)) {
    const c = await api.challenge(product, "watcher");
    if (c.body?.parameters?.data?.level === level) return;
  }
  throw new Error(`${product}: the edge does not ask level ${level}`);
}

/** The page's join of `product`, in a fresh context (a new buyer): its
 * requests' times in the page, and the time from the call to the ticket.
 * `hold(route)`, if given, runs on the first join carrying a payload and
 * returns how long it held it. */
async function pageJoin(browser, product, hold) {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  page.on("console", (m) => console.error(`  page: ${m.text()}`));
  let held = 0;
  if (hold) {
    await page.route("**/api/products/*/queue", async (route) => {
      const r = route.request();
      if (r.method() === "POST" && r.headers()["flashgate-pow"] && held === 0) {
        held = await hold();
      }
      await route.continue();
    });
  }
  await page.goto(`${gate.url}/p/${product}`);
  await page.waitForFunction(() => typeof info === "object" && info !== null);
  const run = await page.evaluate(async () => {
    const marks = [];
    const plain = window.fetch;
    window.fetch = async (url, init) => {
      const t0 = performance.now();
      const r = await plain(url, init);
      marks.push({ url: String(url), method: init?.method ?? "GET", status: r.status, t0, t1: performance.now() });
      return r;
    };
    await ensureSession();
    const start = performance.now();
    const r = await join();
    const end = performance.now();
    window.fetch = plain;
    return { status: r.status, start, end, marks: marks.filter((m) => m.url.includes("/queue")) };
  });
  await ctx.close();
  if (run.status !== 201) throw new Error(`${product}: join ${run.status}`);
  return { ...run, held };
}

const browser = await launch();
const rows = [];
try {
  for (const from of RAISES) {
    const to = from + 1;
    const lost = [], newSolve = [], total = [], control = [];
    for (let r = 0; r < RUNS; r++) {
      const raised = `bench-raise-${from}-${r}`;
      const steady = `bench-steady-${to}-${r}`;
      await api.put(raised, { stock_total: 10, admit_per_s: 100_000, pow: { mode: "fixed", level: from } });
      await api.put(steady, { stock_total: 10, admit_per_s: 100_000, pow: { mode: "fixed", level: to } });
      const run = await pageJoin(browser, raised, async () => {
        const t = Date.now();
        await api.put(raised, { pow: { mode: "fixed", level: to } });
        await untilAsking(raised, to);
        return Date.now() - t;
      });
      const [challenge, refused, joined] = run.marks;
      if (run.marks.length !== 3 || refused.status !== 403 || joined.status !== 201) {
        throw new Error(`${raised}: ${JSON.stringify(run.marks)}`);
      }
      lost.push(refused.t0 - challenge.t1 + (refused.t1 - refused.t0 - run.held));
      newSolve.push(joined.t0 - refused.t1);
      total.push(run.end - run.start - run.held);
      const base = await pageJoin(browser, steady);
      control.push(base.end - base.start);
      console.error(`${from} -> ${to}, run ${r + 1}: lost ${lost.at(-1).toFixed(0)} ms, solve at ${to} ${newSolve.at(-1).toFixed(0)} ms, join ${total.at(-1).toFixed(0)} ms; at ${to} from the start ${control.at(-1).toFixed(0)} ms`);
    }
    rows.push({ from, to, lost: median(lost), newSolve: median(newSolve), total: median(total), control: median(control) });
  }
} finally {
  await browser.close();
  await gate.stop();
}
console.log(`\nAn honest buyer caught by a raise (headless Chromium, the page's own join, ${RUNS} runs per raise, medians, ms):`);
console.log("| raise | lost: the solve at the old level and the refused join | the solve at the new level | join, click to ticket | join at the new level from the start |");
console.log("|---|---|---|---|---|");
for (const r of rows) {
  console.log(`| ${r.from} → ${r.to} | ${r.lost.toFixed(0)} | ${r.newSolve.toFixed(0)} | ${r.total.toFixed(0)} | ${r.control.toFixed(0)} |`);
}
