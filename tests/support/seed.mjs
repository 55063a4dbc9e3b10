// The seed of an end-to-end run. Every random input of a test file is drawn
// from it, and every assertion message that depends on those inputs carries
// it, so that `E2E_SEED=n` replays a failure.
import { randomInt } from "node:crypto";

function seedOf(value) {
  if (value === undefined || value === "") return randomInt(1_000_000);
  const seed = Number(value);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`E2E_SEED must be a whole number, got ${JSON.stringify(value)}`);
  return seed;
}

/** This run's seed: E2E_SEED, or a fresh one. */
export const SEED = seedOf(process.env.E2E_SEED);
console.log(`e2e seed: ${SEED} (E2E_SEED=${SEED} replays it)`);

/** An assertion message that names the seed. */
export const why = (msg) => `${msg} (E2E_SEED=${SEED})`;

/**
 * A generator of numbers in [0, 1) drawn from this run's seed (mulberry32).
 * `stream` gives a test its own sequence, so that one test's draws do not
 * shift another's.
 */
export function rng(stream = 0) {
  let a = (SEED + stream) >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
