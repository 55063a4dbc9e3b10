// A small closed-loop HTTP load generator: `connections` clients, each with
// one keep-alive connection, send requests back to back for `durationMs`.
// Latency is measured per request, from write to the end of the response.
// With `pid`, the CPU time that process (workerd) used in the measured
// part, per measured request: the cost per request, which the machine's
// other work disturbs less than throughput.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import http from "node:http";

const CLOCK_TICKS_PER_S = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

/** The CPU time (user and system, every thread) process `pid` has used, in
 * microseconds. */
export function cpuUs(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS_PER_S;
}

export async function load({ url, connections = 64, durationMs = 5000, warmupMs = 500, request, pid }) {
  const target = new URL(url);
  const latencies = [];
  const statuses = {};
  let errors = 0;
  const errorKinds = {};
  let stopAt = 0;
  let measuring = false;
  let seq = 0;
  const client = async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    while (Date.now() < stopAt) {
      const { method = "GET", path, headers = {}, body } = request(seq++);
      const started = process.hrtime.bigint();
      try {
        const status = await new Promise((ok, fail) => {
          const req = http.request(
            { host: target.hostname, port: target.port, method, path, headers: body ? { ...headers, "content-length": Buffer.byteLength(body) } : headers, agent },
            (res) => {
              res.on("data", () => {});
              res.on("end", () => ok(res.statusCode));
              res.on("error", fail);
            },
          );
          req.on("error", fail);
          req.end(body);
        });
        if (measuring) {
          latencies.push(Number(process.hrtime.bigint() - started) / 1e6);
          statuses[status] = (statuses[status] ?? 0) + 1;
        }
      } catch (e) {
        if (measuring) {
          errors++;
          errorKinds[e.code ?? e.message] = (errorKinds[e.code ?? e.message] ?? 0) + 1;
        }
      }
    }
    agent.destroy();
  };
  const start = Date.now();
  stopAt = start + warmupMs + durationMs;
  let cpuAtStart = 0;
  const startMeasuring = () => {
    if (pid) cpuAtStart = cpuUs(pid);
    measuring = true;
  };
  if (warmupMs > 0) setTimeout(startMeasuring, warmupMs);
  else startMeasuring();
  const measureStart = start + warmupMs;
  await Promise.all(Array.from({ length: connections }, client));
  const seconds = (Date.now() - measureStart) / 1000;
  const cpuPerRequestUs = pid ? (cpuUs(pid) - cpuAtStart) / latencies.length : undefined;
  latencies.sort((a, b) => a - b);
  const q = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
  return { rps: latencies.length / seconds, p50: q(0.5), p99: q(0.99), count: latencies.length, errors, errorKinds, statuses, cpuPerRequestUs };
}

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
