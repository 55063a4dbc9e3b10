//! `GET /admin/products/{id}/history`: the product's sale over time, read
//! from its home object and each of its stock shards and merged here
//! (`flashgate_core::history::merge`), with a summary a shop asks for
//! afterwards. The shell fetches; this decides the form (JSON, or CSV
//! with `Accept: text/csv`) and what the answers come to.

use flashgate_core::{merge_histories, History, Period, Timeline};
use serde_json::{json, Value};

use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
use crate::protocol::HistoryAnswer;

/// The forms the history is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv; charset=utf-8",
        }
    }
}

/// The form `accept` (the request's `Accept`, whole) asks for: the one of
/// highest weight it allows, JSON on a tie or without the field; a
/// `not_acceptable` problem if it allows neither. Checked before any
/// object is asked.
pub fn format(accept: Option<&str>) -> Result<Format, Problem> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Format::Json);
    };
    let (mut json, mut csv) = (0u16, 0u16);
    for range in accept.split(',').take(crate::limits::ACCEPT_RANGES_MAX) {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .next()
            .map_or(Some(1000), weight);
        let Some(q) = q else { continue };
        match media.as_str() {
            "application/json" | "application/*" => json = json.max(q),
            "text/csv" | "text/*" => csv = csv.max(q),
            "*/*" => {
                json = json.max(q);
                csv = csv.max(q);
            }
            _ => {}
        }
    }
    match (json, csv) {
        (0, 0) => Err(Problem::new(
            ProblemCode::NotAcceptable,
            "the history is served as application/json or text/csv",
        )),
        (j, c) if c > j => Ok(Format::Csv),
        _ => Ok(Format::Json),
    }
}

/// A q-value in thousandths (RFC 9110 section 12.4.2), `None` if it is
/// not one.
fn weight(q: &str) -> Option<u16> {
    let q = q.trim();
    let (int, frac) = q.split_once('.').unwrap_or((q, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = format!("{frac:0<3}").parse::<u16>().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The histories of a product's objects, home's first, as they answered;
/// `Err` says which answer cannot be one (the shell then answers 503: a
/// sum with a part missing would be a wrong figure, not a smaller one).
pub fn histories(answers: &[HistoryAnswer]) -> Result<Vec<History>, String> {
    answers
        .iter()
        .enumerate()
        .map(|(i, a)| {
            History::restore(a.history.step_ms, a.history.buckets.clone())
                .map_err(|e| format!("object {i} of the product served a misshapen history: {e:?}"))
        })
        .collect()
}

/// The product's history in `format`: its timeline and its summary, and in
/// JSON beside them `drift`, as `GET /admin/products/{id}/drift` answers
/// (`null` when it could not be read).
pub fn body(
    product_id: &str,
    objects: &[History],
    drift: Value,
    format: Format,
    now_ms: u64,
) -> Vec<u8> {
    let t = merge_histories(objects);
    match format {
        Format::Json => json_body(product_id, &t, objects.len(), drift, now_ms)
            .to_string()
            .into_bytes(),
        Format::Csv => csv_body(&t).into_bytes(),
    }
}

fn json_body(product_id: &str, t: &Timeline, objects: usize, drift: Value, now_ms: u64) -> Value {
    json!({
        "product_id": product_id,
        "at_ms": now_ms,
        "objects": objects,
        "step_ms": t.step_ms,
        "summary": t.summary(),
        "drift": drift,
        "buckets": t.periods,
    })
}

/// The columns of the CSV form, in order: a bucket's start and each
/// figure of `Period`, then one column per count that any bucket has.
const CSV_FIXED: [&str; 10] = [
    "start_ms",
    "available",
    "held",
    "sold",
    "queue",
    "joined",
    "admitted",
    "outbox_backlog",
    "delivered",
    "step_ms",
];

fn csv_body(t: &Timeline) -> String {
    let mut names: Vec<String> = Vec::new();
    for p in &t.periods {
        for (name, _) in p.counts.named() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.sort();
    let mut out = CSV_FIXED.join(",");
    for n in &names {
        out.push(',');
        out.push_str(n);
    }
    out.push_str("\r\n");
    for p in &t.periods {
        let Period {
            start_ms,
            available,
            held,
            sold,
            queue,
            joined,
            admitted,
            outbox_backlog,
            delivered,
            ..
        } = p;
        let fixed = [
            start_ms,
            available,
            held,
            sold,
            queue,
            joined,
            admitted,
            outbox_backlog,
            delivered,
            &t.step_ms,
        ];
        let row: Vec<String> = fixed.iter().map(|n| n.to_string()).collect();
        out.push_str(&row.join(","));
        let counts = p.counts.named();
        for n in &names {
            let v = counts.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
            out.push(',');
            out.push_str(&v.to_string());
        }
        out.push_str("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashgate_core::{Counters, Mark};

    #[test]
    fn the_form_follows_accept_and_refuses_what_it_cannot_serve() {
        assert_eq!(format(None), Ok(Format::Json));
        assert_eq!(format(Some("")), Ok(Format::Json));
        assert_eq!(format(Some("*/*")), Ok(Format::Json));
        assert_eq!(format(Some("text/csv")), Ok(Format::Csv));
        assert_eq!(format(Some("TEXT/CSV; charset=utf-8")), Ok(Format::Csv));
        assert_eq!(
            format(Some("application/json;q=0.5, text/csv")),
            Ok(Format::Csv)
        );
        assert_eq!(
            format(Some("text/csv;q=0.4, application/json;q=0.9")),
            Ok(Format::Json)
        );
        assert_eq!(format(Some("text/html, */*;q=0.1")), Ok(Format::Json));
        for bad in [
            "image/png",
            "text/html",
            "text/csv;q=0",
            "text/csv;q=2",
            "text/csv;q=0.0001",
            "application/json;q=abc",
        ] {
            let p = format(Some(bad)).expect_err(bad);
            assert_eq!(p.code, ProblemCode::NotAcceptable, "{bad}");
        }
        // A header of a thousand ranges is read only so far.
        let long = format!("{}text/csv", "x/y, ".repeat(1_000));
        assert!(format(Some(&long)).is_err());
    }

    fn answer(step_ms: u64, buckets: Value) -> HistoryAnswer {
        serde_json::from_value(json!({
            "shards": 2,
            "history": {"step_ms": step_ms, "buckets": buckets},
        }))
        .expect("an answer")
    }

    #[test]
    fn a_misshapen_answer_is_refused_and_a_good_one_merged() {
        let bucket = |start: u64, reserved: u64, available: u64| {
            json!({
                "start_ms": start,
                "counts": {"reserve.reserved": reserved},
                "mark": Mark { available, ..Mark::default() },
            })
        };
        let home = answer(1_000, json!([bucket(1_000, 2, 7), bucket(2_000, 1, 6)]));
        let shard = answer(1_000, json!([bucket(1_000, 3, 2)]));
        let objects = histories(&[home, shard]).expect("well formed");
        let csv = String::from_utf8(body("p1", &objects, Value::Null, Format::Csv, 9)).unwrap();
        assert_eq!(
            csv,
            "start_ms,available,held,sold,queue,joined,admitted,outbox_backlog,delivered,step_ms,reserve.reserved\r\n\
             1000,7,0,0,0,0,0,0,0,1000,5\r\n\
             2000,6,0,0,0,0,0,0,0,1000,1\r\n"
        );
        let v: Value = serde_json::from_slice(&body(
            "p1",
            &objects,
            json!({"drift_units": 0}),
            Format::Json,
            9,
        ))
        .unwrap();
        assert_eq!(v["summary"]["reserved"], 6);
        assert_eq!(v["drift"]["drift_units"], 0);
        assert_eq!(v["buckets"][0]["counts"]["reserve.reserved"], 5);
        let out_of_order = answer(1_000, json!([bucket(2_000, 1, 6), bucket(2_000, 1, 6)]));
        assert!(histories(&[out_of_order]).is_err());
        let unaligned = answer(1_000, json!([bucket(1_500, 1, 6)]));
        assert!(histories(&[unaligned]).is_err());
        assert!(serde_json::from_value::<Counters>(json!({"nope": 1})).is_err());
    }
}
