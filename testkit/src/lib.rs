//! The harness the simulators share: the core's (`core/tests/sim.rs`), the
//! Durable Object's (`tests/object_sim.rs`) and the SQL round trip's
//! (`tests/sql_storage.rs`).
//!
//! A simulation is a seeded run of random steps, with its invariants checked
//! after every step ([`Simulation`]). A [`Plan`] says which seeds to run and
//! for how many steps, read from the environment under the simulator's
//! prefix (`SIM_SEED`, `SIM_SEEDS`, `SIM_STEPS` for the core). [`run_plan`]
//! runs every seed, and when one fails, panics with the seed, the step, the
//! broken invariant and the environment line that replays exactly that run.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// A tiny deterministic generator: splitmix64, the same sequence as
/// `flashgate_core::splitmix64` (`core/tests/sim.rs` checks that the two
/// agree), so that a seed replays the same run whichever crate draws it.
/// The simulators need no more than this, and this crate depends on std
/// alone.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`. `below(0)` is 0 and draws nothing, so that a
    /// step over an empty list leaves the rest of the run as it was.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A number in `lo..=hi_inclusive`.
    pub fn range(&mut self, lo: u64, hi_inclusive: u64) -> u64 {
        assert!(lo <= hi_inclusive, "empty range {lo}..={hi_inclusive}");
        lo + self.below(hi_inclusive - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, each as likely. There is nothing to pick from an
    /// empty slice, and a simulator that asks has a bug.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        assert!(!items.is_empty(), "pick from an empty slice");
        &items[self.below(items.len() as u64) as usize]
    }
}

/// One seeded run: random steps, each followed by the invariants.
pub trait Simulation {
    /// What a run that passed reports, for the totals its test prints and
    /// checks (how often a fault was injected, which outcomes were seen).
    type Summary;

    /// Takes one random step and says what it did; the description is
    /// printed with a failure.
    fn step(&mut self) -> String;

    /// Checks every invariant after `step` (the description of the step just
    /// taken), panicking on a broken one.
    fn check(&mut self, step: &str);

    /// Ends a run whose every step passed: the checks that only hold at the
    /// end (a drained outbox), and the summary.
    fn finish(self) -> Self::Summary;
}

/// The names a plan reads under its prefix: `{prefix}_SEED=n` runs seed n
/// alone, `{prefix}_SEEDS=n` runs seeds 0..n, `{prefix}_STEPS=n` sets the
/// steps of each.
const NAMES: [&str; 4] = ["SEED", "SEEDS", "STEPS", "TRACE"];

/// Whether `{prefix}_TRACE` asks a simulator to print every event of its
/// run (to replay a failing seed by eye).
pub fn trace(prefix: &str) -> bool {
    std::env::var_os(format!("{prefix}_TRACE")).is_some()
}

/// Which seeds to run, and for how many steps each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The prefix of the environment variables, for the rerun line.
    pub prefix: &'static str,
    pub seeds: Vec<u64>,
    pub steps: u64,
}

impl Plan {
    /// Seeds `0..seeds`, `steps` each, whatever the environment says: for
    /// a test with a fixed plan, whose failures still print the line that
    /// replays them through the plan read from the environment. A plan of
    /// no seed or no step would pass without running anything, so it is
    /// refused.
    pub fn new(prefix: &'static str, seeds: u64, steps: u64) -> Plan {
        assert!(
            seeds > 0 && steps > 0,
            "a plan of {seeds} seeds x {steps} steps runs nothing and would pass untested"
        );
        Plan {
            prefix,
            seeds: (0..seeds).collect(),
            steps,
        }
    }

    /// Seeds `0..seeds` of `steps` steps, unless the environment names
    /// others under `prefix` (see [`NAMES`]). A variable under the prefix
    /// that is not one of those names, misspelt or renamed, is refused
    /// rather than ignored, so that a run never silently tests less than
    /// its caller asked for.
    pub fn from_env(prefix: &'static str, seeds: u64, steps: u64) -> Plan {
        Plan::from_vars(prefix, seeds, steps, std::env::vars())
    }

    /// [`Plan::from_env`] over the given variables. `{prefix}_SEEDS=0` and
    /// `{prefix}_STEPS=0` are refused: either would make the simulator pass
    /// without running.
    pub fn from_vars(
        prefix: &'static str,
        seeds: u64,
        steps: u64,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Plan {
        let mut plan = Plan::new(prefix, seeds, steps);
        let mut seed = None;
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('_')) else {
                continue;
            };
            let number = || -> u64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("{name} must be a number, got {value:?}"))
            };
            // At least one seed and one step: zero of either runs nothing,
            // and the simulator's test would pass without testing.
            let at_least_one = || -> u64 {
                let n = number();
                assert!(
                    n > 0,
                    "{name}=0 would run nothing, and the simulator would pass untested; ask for at least 1"
                );
                n
            };
            match rest {
                "SEED" => seed = Some(number()),
                "SEEDS" => plan.seeds = (0..at_least_one()).collect(),
                "STEPS" => plan.steps = at_least_one(),
                // Read by a simulator that prints its events (`trace`).
                "TRACE" => {}
                _ => panic!(
                    "{name} is not a setting of this simulator; it reads {}",
                    NAMES.map(|n| format!("{prefix}_{n}")).join(", ")
                ),
            }
        }
        // One seed wins over a count of seeds: it is how a failure is rerun.
        if let Some(seed) = seed {
            plan.seeds = vec![seed];
        }
        plan
    }

    /// The environment line that replays `seed` as this plan ran it.
    pub fn rerun(&self, seed: u64) -> String {
        format!(
            "{p}_SEED={seed} {p}_STEPS={steps}",
            p = self.prefix,
            steps = self.steps
        )
    }
}

/// A seed that failed: where, and how.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    /// The step that broke an invariant: `step 412` when the step itself
    /// panicked, `step 412: reserve ...` when the checks after it did, or
    /// `start` or `finish`.
    pub at: String,
    pub message: String,
    /// The environment line that replays it.
    pub rerun: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} failed at {}: {}\nrerun with {}",
            self.seed, self.at, self.message, self.rerun
        )
    }
}

/// Runs one seed of `plan`: `plan.steps` steps of the simulation `new`
/// makes, each checked, then its end.
pub fn run_seed<S: Simulation>(
    plan: &Plan,
    seed: u64,
    new: impl FnOnce(u64) -> S,
) -> Result<S::Summary, Failure> {
    let mut at = String::from("start");
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut sim = new(seed);
        for step in 0..plan.steps {
            // A step that panics is named by its number alone; a check
            // that fails, with what the step did.
            at.clear();
            at.push_str(&format!("step {step}"));
            let did = sim.step();
            at.push_str(&format!(": {did}"));
            sim.check(&at);
        }
        at = "finish".into();
        sim.finish()
    }));
    result.map_err(|e| Failure {
        seed,
        at,
        message: e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
        rerun: plan.rerun(seed),
    })
}

/// Runs every seed of `plan`, and returns the summaries of the runs. Every
/// seed runs even after one fails, so that the report names them all; then
/// it panics with each failure and the line that reruns the first.
pub fn run_plan<S: Simulation>(plan: &Plan, mut new: impl FnMut(u64) -> S) -> Vec<S::Summary> {
    // `Plan::new` refuses these; a plan built field by field is checked here.
    assert!(
        !plan.seeds.is_empty() && plan.steps > 0,
        "a plan of {} seeds x {} steps runs nothing and would pass untested",
        plan.seeds.len(),
        plan.steps
    );
    let mut summaries = Vec::with_capacity(plan.seeds.len());
    let mut failures = Vec::new();
    for &seed in &plan.seeds {
        match run_seed(plan, seed, &mut new) {
            Ok(summary) => summaries.push(summary),
            Err(failure) => {
                eprintln!("{failure}");
                failures.push(failure);
            }
        }
    }
    if let Some(first) = failures.first() {
        let seeds: Vec<u64> = failures.iter().map(|f| f.seed).collect();
        panic!(
            "{} of {} seeds failed ({} steps each): {seeds:?}\nthe first: {first}",
            failures.len(),
            plan.seeds.len(),
            plan.steps
        );
    }
    summaries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_splitmix64() {
        // The first outputs for seed 0, from the reference implementation
        // (the same pins as the core's `mix.rs`).
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn draws_stay_in_their_bounds() {
        let mut rng = Rng::new(7);
        let mut again = rng.clone();
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.next_u64(), again.next_u64(), "below(0) drew nothing");
        let items = ["a", "b", "c"];
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1_000 {
            assert!(rng.below(5) < 5);
            assert!((3..=4).contains(&rng.range(3, 4)));
            assert!(!rng.chance(0));
            assert!(rng.chance(100));
            seen.insert(*rng.pick(&items));
        }
        assert_eq!(seen.len(), 3, "every item is picked");
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_plan_reads_its_prefix_only() {
        let plan = Plan::from_vars(
            "SIM",
            3,
            10,
            vars(&[("OBJECT_SIM_SEED", "9"), ("SIMX", "1")]),
        );
        assert_eq!(plan, Plan::new("SIM", 3, 10));
        let plan = Plan::from_vars(
            "SIM",
            3,
            10,
            vars(&[("SIM_SEEDS", "5"), ("SIM_STEPS", "7")]),
        );
        assert_eq!((plan.seeds, plan.steps), ((0..5).collect(), 7));
        let plan = Plan::from_vars(
            "SIM",
            3,
            10,
            vars(&[("SIM_SEED", "42"), ("SIM_SEEDS", "5")]),
        );
        assert_eq!(plan.seeds, vec![42], "one seed wins over a count");
        assert_eq!(plan.rerun(42), "SIM_SEED=42 SIM_STEPS=10");
    }

    #[test]
    fn a_plan_refuses_what_it_does_not_read() {
        for bad in [("SIM_OPS", "100"), ("SIM_SEED", "seven")] {
            let refused = catch_unwind(|| Plan::from_vars("SIM", 1, 1, vars(&[bad])));
            let message = *refused.expect_err("refused").downcast::<String>().unwrap();
            assert!(message.contains(bad.0), "{message}");
        }
    }

    #[test]
    fn a_plan_that_runs_nothing_is_refused() {
        for bad in [("SIM_SEEDS", "0"), ("SIM_STEPS", "0")] {
            let refused = catch_unwind(|| Plan::from_vars("SIM", 3, 10, vars(&[bad])));
            let message = *refused.expect_err("refused").downcast::<String>().unwrap();
            assert!(
                message.contains(&format!("{}=0 would run nothing", bad.0)),
                "{message}"
            );
        }
        // Seed 0 is a seed like any other.
        let plan = Plan::from_vars("SIM", 3, 10, vars(&[("SIM_SEED", "0")]));
        assert_eq!(plan.seeds, vec![0]);
        for (seeds, steps) in [(0, 10), (3, 0)] {
            let refused = catch_unwind(|| Plan::new("SIM", seeds, steps));
            let message = *refused.expect_err("refused").downcast::<String>().unwrap();
            assert!(message.contains("runs nothing"), "{message}");
        }
    }

    /// Counts up; its invariant breaks at 5 in seed 3, and its step itself
    /// panics at 2 in seed 4.
    struct Counter {
        seed: u64,
        n: u64,
    }

    impl Simulation for Counter {
        type Summary = u64;
        fn step(&mut self) -> String {
            self.n += 1;
            assert!(!(self.seed == 4 && self.n == 2), "step broke at 2");
            format!("to {}", self.n)
        }
        fn check(&mut self, step: &str) {
            assert!(!(self.seed == 3 && self.n == 5), "{step}: broken at 5");
        }
        fn finish(self) -> u64 {
            self.n
        }
    }

    #[test]
    fn a_failure_names_its_seed_step_and_rerun_line() {
        let plan = Plan::new("TOY", 6, 8);
        let failure = run_seed(&plan, 3, |seed| Counter { seed, n: 0 }).unwrap_err();
        assert_eq!((failure.seed, failure.at.as_str()), (3, "step 4: to 5"));
        assert_eq!(failure.rerun, "TOY_SEED=3 TOY_STEPS=8");
        assert!(failure.message.contains("broken at 5"), "{failure}");
        let failure = run_seed(&plan, 4, |seed| Counter { seed, n: 0 }).unwrap_err();
        assert_eq!(failure.at, "step 1", "a step that panics is named alone");

        let all = catch_unwind(|| run_plan(&plan, |seed| Counter { seed, n: 0 }));
        let message = *all
            .expect_err("a seed failed")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("2 of 6 seeds failed"), "{message}");
        assert!(message.contains("[3, 4]"), "{message}");
        assert!(
            message.contains("rerun with TOY_SEED=3 TOY_STEPS=8"),
            "{message}"
        );

        let passing = Plan::new("TOY", 3, 8);
        assert_eq!(
            run_plan(&passing, |seed| Counter { seed, n: 0 }),
            vec![8; 3]
        );

        // A plan built field by field with no seed is refused too.
        let empty = Plan {
            seeds: Vec::new(),
            ..passing
        };
        let refused = catch_unwind(|| run_plan(&empty, |seed| Counter { seed, n: 0 }));
        let message = *refused.expect_err("refused").downcast::<String>().unwrap();
        assert!(message.contains("runs nothing"), "{message}");
    }
}
