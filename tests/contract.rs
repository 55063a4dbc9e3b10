//! The written contract against the code: `openapi.yaml` (served as
//! `/openapi.json`) must name exactly the routes and problem codes the gate
//! has. The codes' one source is `ProblemCode` (in the wire crate); the
//! core's refusals are mapped onto it at compile time (`flashgate::http::codes`).
//! A route or code in one place and not the other fails here.

use std::collections::BTreeSet;

use flashgate::edge::routes::ROUTES;
use flashgate::http::codes::ProblemCode;
use serde_json::Value;

fn spec() -> Value {
    serde_json::from_str(flashgate::OPENAPI_JSON).expect("the spec is JSON")
}

/// `(METHOD, path)` of every operation tagged `tag`.
fn operations(spec: &Value, tag: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            let tagged = op["tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == tag));
            if tagged {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

/// The `code` enum of a problem schema (`allOf` of the base and its codes).
fn problem_codes(spec: &Value, schema: &str) -> BTreeSet<String> {
    let all_of = spec["components"]["schemas"][schema]["allOf"]
        .as_array()
        .expect("allOf");
    all_of
        .iter()
        .find_map(|part| part["properties"]["code"]["enum"].as_array())
        .expect("a code enum")
        .iter()
        .map(|c| c.as_str().expect("a string").to_string())
        .collect()
}

#[test]
fn the_spec_names_every_gate_route_and_no_other() {
    let in_code: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(operations(&spec(), "gate"), in_code);
}

#[test]
fn the_spec_names_every_gate_problem_code_and_no_other() {
    let in_code: BTreeSet<String> = ProblemCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(problem_codes(&spec(), "GateProblem"), in_code);
}

/// wrangler.toml configures the rate limiting bindings, and tells the
/// Worker the same policies in `RATE_LIMITS` (the binding does not say its
/// own). The two must agree, binding by binding.
#[test]
fn wrangler_toml_rate_limits_agree_with_the_policies_the_worker_is_told() {
    use flashgate::edge::rate_limit::{Limiter, Policies, Policy};
    let toml = include_str!("../wrangler.toml");
    let mut bindings = std::collections::BTreeMap::new();
    let mut name = None;
    for line in toml.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("name = ") {
            name = Some(v.trim_matches('"').to_string());
        }
        if let Some(v) = line.strip_prefix("simple = ") {
            let field = |key: &str| -> u32 {
                let at = v.find(key).unwrap_or_else(|| panic!("{key} in {v}")) + key.len();
                v[at..]
                    .trim_start_matches([' ', '='])
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("a number after {key} in {v}"))
            };
            let policy = Policy {
                limit: field("limit"),
                period_s: field("period"),
            };
            bindings.insert(name.take().expect("a name before simple"), policy);
        }
    }
    let var = toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("RATE_LIMITS = "))
        .expect("RATE_LIMITS in [vars]")
        .trim_matches('"');
    let told = Policies::parse(var).expect("RATE_LIMITS parses");
    for limiter in Limiter::ALL {
        assert_eq!(
            bindings.get(limiter.binding()),
            Some(&told.of(limiter)),
            "{} in [[ratelimits]] and RATE_LIMITS",
            limiter.binding()
        );
    }
    assert_eq!(
        bindings.len(),
        Limiter::ALL.len(),
        "a binding no limiter uses"
    );
}
