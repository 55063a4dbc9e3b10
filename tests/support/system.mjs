// What an end-to-end test runs against, started one way: the gate on bare
// workerd and, when the test asks, the origin binary it delivers to. The
// processes are always stopped, whatever the test did; a failure prints what
// reproduces it: the seed, the file, the ports and the tail of each log.
import { after, before, test } from "node:test";
import { relative } from "node:path";
import { client } from "./client.mjs";
import { startOrigin } from "./origin.mjs";
import { freePort, gateVars, ROOT, startGate } from "./runtime.mjs";
import { SEED } from "./seed.mjs";
// Every test run through here fails if its clients retried a request while
// its gate was up.
import "./retries.mjs";

/** Lines of each process's log shown with a failure. */
const LOG_TAIL_LINES = 20;

/**
 * A running system. `gate`, `api` (a client of the gate) and `origin` are
 * replaced when a test restarts them, so a test that restarts reads them
 * from here again afterwards.
 *
 * Options (all optional):
 * - `origin`: start the origin first, and let the gate deliver to it;
 *   `true`, or the options of `startOrigin` (`forwardKeys`, `env`, ...).
 * - `between(origin)`: starts a server between the gate and the origin (a
 *   fault proxy) and resolves to `{ url, stop }`; the gate delivers to its
 *   url, and it is stopped with the rest.
 * - `originUrl`: where the gate delivers when no origin is started here
 *   (say, a port nothing listens on yet).
 * - `demoPayments`: the origin's demo payments confirm at the gate, and the
 *   gate's page pays through them, so each is told the other's URL.
 * - `vars`: the gate's settings that differ from the tests' (`gateVars`).
 */
class System {
  constructor(options) {
    this.options = options;
    this.gate = null;
    this.api = null;
    this.origin = null;
    this.between = null;
    this.gatePort = undefined;
    this.stateDir = undefined;
    this.originOptions = {};
    this.deferred = [];
  }

  get url() {
    return this.gate.url;
  }

  async start() {
    const o = this.options;
    if (o.demoPayments) this.gatePort = await freePort();
    if (o.origin) await this.startOrigin(o.origin === true ? {} : o.origin);
    if (this.origin && o.between) this.between = await o.between(this.origin);
    await this.startGate();
  }

  /** Starts the gate: again on the storage (and, with demo payments, the
   * port) of the one before it. */
  async startGate() {
    if (this.gate) throw new Error("the gate is already running");
    const o = this.options;
    const originUrl = this.between?.url ?? this.origin?.url ?? o.originUrl ?? "";
    const vars = gateVars({ originUrl, demoPaymentUrl: o.demoPayments ? this.origin.url : "", overrides: o.vars ?? {} });
    this.gate = await startGate({ stateDir: this.stateDir, port: this.gatePort, vars });
    this.stateDir = this.gate.stateDir;
    this.api = client(this.gate.url);
    return this.gate;
  }

  /** Stops the gate, gracefully, or with `kill` hard as a crash would. */
  async stopGate({ kill = false } = {}) {
    const gate = this.gate;
    this.gate = null;
    await (kill ? gate.kill() : gate.stop());
  }

  /** Kills or stops the gate and starts it again on the same storage. */
  async restartGate({ kill = false } = {}) {
    await this.stopGate({ kill });
    return this.startGate();
  }

  /** Starts the origin: `options` over those of the one before it, and on
   * its port and data dir, so that a restart keeps what it stored. */
  async startOrigin(options = {}) {
    if (this.origin) throw new Error("the origin is already running");
    const gateUrl = this.gatePort !== undefined ? `http://127.0.0.1:${this.gatePort}` : undefined;
    this.originOptions = { gateUrl, ...this.originOptions, ...options };
    this.origin = await startOrigin(this.originOptions);
    this.originOptions.port = this.origin.port;
    this.originOptions.dataDir = this.origin.dataDir;
    return this.origin;
  }

  async stopOrigin() {
    const origin = this.origin;
    this.origin = null;
    await origin.stop();
  }

  /** Runs `fn` when the system stops, before its processes stop (the
   * last deferred first). */
  defer(fn) {
    this.deferred.push(fn);
  }

  /** Stops everything that runs, each even if another fails to stop. */
  async stop() {
    const steps = [...this.deferred.reverse(), () => this.gate && this.stopGate(), () => this.between?.stop(), () => this.origin && this.stopOrigin()];
    this.deferred = [];
    const errors = [];
    for (const step of steps) {
      try {
        await step();
      } catch (e) {
        errors.push(e);
      }
    }
    if (errors.length) throw new AggregateError(errors, "the system did not stop cleanly");
  }

  /** What reproduces a failure: the seed and file, the ports, the logs. */
  report() {
    const file = process.argv[1] ? relative(ROOT, process.argv[1]) : "the test file";
    const tail = (text) => {
      const lines = text.trimEnd().split("\n").filter((l) => l !== "");
      return lines.length ? lines.slice(-LOG_TAIL_LINES).map((l) => `    ${l}`).join("\n") : "    (empty)";
    };
    const lines = [`reproduce: E2E_SEED=${SEED} node --test ${file}`];
    if (this.gate) lines.push(`gate: ${this.gate.url}, state ${this.gate.stateDir}; workerd's log ends:`, tail(this.gate.stderr()));
    if (this.between) lines.push(`between the gate and the origin: ${this.between.url}`);
    if (this.origin) lines.push(`origin: ${this.origin.url}, data ${this.origin.dataDir}; its log ends:`, tail(this.origin.stderr()));
    return lines.join("\n");
  }
}

async function within(system, fn) {
  try {
    return await fn(system);
  } catch (e) {
    console.error(`failed: ${e?.message ?? e}\n${system.report()}`);
    throw e;
  }
}

/**
 * Starts the system `options` describe (see `System`), runs `fn(system)`,
 * and stops it, whatever happened. A failure is reported with what
 * reproduces it, and thrown again.
 */
export async function withGate(options, fn) {
  if (typeof options === "function") [options, fn] = [{}, options];
  const system = new System(options);
  try {
    await within(system, () => system.start());
    return await within(system, fn);
  } finally {
    await system.stop();
  }
}

/**
 * One system for a whole file, whose tests share it: started before the
 * first, stopped after the last. Its `test` is node's, with the test's body
 * given the system and its failures reported as `withGate`'s are.
 */
export function useGate(options = {}) {
  const system = new System(options);
  before(() => within(system, () => system.start()));
  after(() => system.stop());
  system.test = (name, ...rest) => {
    const fn = rest.pop();
    return test(name, ...rest, () => within(system, fn));
  };
  return system;
}
