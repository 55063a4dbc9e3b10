//! `openapi.yaml` against the origin's code: every route and every problem
//! code in one is in the other. The codes' one source is `OriginCode`.

use std::collections::BTreeSet;

use flashgate_origin::app::routes;
use flashgate_origin::problem::OriginCode;
use serde_json::Value;

fn spec() -> Value {
    serde_norway::from_str(include_str!("../../openapi.yaml")).expect("openapi.yaml parses")
}

#[test]
fn the_spec_names_every_origin_route_and_no_other() {
    let spec = spec();
    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            if op["tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "origin"))
            {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let in_code: BTreeSet<(String, String)> = routes()
        .into_iter()
        .map(|(m, p, _, _)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, in_code);
}

#[test]
fn the_spec_names_every_origin_code_and_no_other() {
    let spec = spec();
    let documented: BTreeSet<String> = spec["components"]["schemas"]["OriginProblem"]["allOf"]
        .as_array()
        .expect("allOf")
        .iter()
        .find_map(|p| p["properties"]["code"]["enum"].as_array())
        .expect("a code enum")
        .iter()
        .map(|c| c.as_str().expect("a string").to_string())
        .collect();
    let in_code: BTreeSet<String> = OriginCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(documented, in_code);
}

/// The gate's admin console reads the origin's product as `OriginTotals`
/// (for the drift): the origin's product must parse as one, with the same
/// numbers.
#[test]
fn the_origin_product_reads_as_the_gate_expects() {
    let product = flashgate_origin::db::Product {
        id: "p1".into(),
        stock_total: 100,
        sold: 42,
        orders_accepted: 40,
        orders_rejected: 0,
        orders_voided: 1,
        stock_seq: 3,
    };
    let json = serde_json::to_value(&product).unwrap();
    let totals: flashgate_wire::OriginTotals = serde_json::from_value(json).unwrap();
    assert_eq!((totals.stock_total, totals.sold), (100, 42));
}
