//! Integration tests of the origin against real databases: an SQLite file in
//! a temporary directory, and the PostgreSQL server on this machine
//! (`FLASHGATE_TEST_PG`, default postgres://root@127.0.0.1:5432/test). Each
//! Postgres test runs in a database of its own, created and dropped here.
//! These tests are not optional: an unreachable Postgres fails them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flashgate_origin::app;
use flashgate_origin::db::Db;
use flashgate_origin::limits;
use flashgate_origin::state::{self, AppState, Settings};
use flashgate_wire::keys::KeySet;
use flashgate_wire::signing::{self, Purpose};
use flashgate_wire::{token, Batch, Event};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

#[macro_use]
mod support;
use support::{pg_admin_url, random_secret, TestDb};

// Made afresh by each test process, as an operator makes them, so that no
// usable secret is written down; each passes the origin's secret check.
static FORWARD_KEYS: LazyLock<String> = LazyLock::new(|| format!("f1:{}", random_secret()));
static READ_TOKEN: LazyLock<String> = LazyLock::new(random_secret);
static SHOP_TOKEN: LazyLock<String> = LazyLock::new(random_secret);
static BUYER_KEYS: LazyLock<String> = LazyLock::new(|| format!("b1:{}", random_secret()));
static PAYMENT_KEYS: LazyLock<String> = LazyLock::new(|| format!("p1:{}", random_secret()));

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A key set, checked as the origin checks its own at the start.
fn keys(text: &str) -> KeySet {
    state::key_set("a test key set", text).unwrap()
}

fn settings(demo: Option<state::DemoSettings>) -> Settings {
    Settings {
        forward_keys: keys(&FORWARD_KEYS),
        read_tokens: keys(&format!("r1:{}", *READ_TOKEN)),
        shop_tokens: keys(&format!("s1:{}", *SHOP_TOKEN)),
        buyer_keys: keys(&BUYER_KEYS),
        buyer_audience: "flashgate".into(),
        demo,
        batch_timeout: Duration::from_secs(30),
        body_deadline: limits::BODY_READ_TIMEOUT,
    }
}

fn state(db: &Db) -> Arc<AppState> {
    AppState::new(db.clone(), settings(None)).expect("the read thread starts")
}

/// The public id of reservation `n`: any 16 hex digits will do here.
fn rid(n: u32) -> String {
    format!("{:016x}", u64::from(n) + 1)
}

fn order(product: &str, n: u32, quantity: u32) -> Event {
    Event::Order {
        seq: u64::from(n) + 100,
        reservation_id: format!("{product}:{}", rid(n)),
        buyer_id: format!("buyer-{n}"),
        quantity,
        payment_ref: format!("pay-{n}"),
        confirmed_at_ms: 1_700_000_000_000 + u64::from(n),
    }
}

fn stock(seq: u64, stock_total: u64) -> Event {
    Event::Stock {
        seq,
        stock_total,
        at_ms: 1,
    }
}

fn void(product: &str, seq: u64, n: u32, quantity: u32) -> Event {
    Event::Void {
        seq,
        reservation_id: format!("{product}:{}", rid(n)),
        quantity,
        voided_at_ms: 2,
    }
}

fn batch(product: &str, mut events: Vec<Event>) -> Vec<u8> {
    events.sort_by_key(Event::seq);
    serde_json::to_vec(&Batch {
        product_id: product.into(),
        events,
    })
    .unwrap()
}

/// A batch request signed as the gate signs it.
fn signed_with(keys_text: &str, purpose: Purpose, path: &str, body: Vec<u8>) -> Request<Body> {
    let s = signing::sign(
        &keys(keys_text),
        &signing::Request {
            purpose,
            method: "POST",
            path,
            body: &body,
        },
        now_ms(),
    );
    let mut req = Request::post("/v1/batches").header("content-type", "application/json");
    for (k, v) in s.headers() {
        req = req.header(k, v);
    }
    req.body(Body::from(body)).unwrap()
}

fn signed(body: Vec<u8>) -> Request<Body> {
    signed_with(&FORWARD_KEYS, Purpose::Forward, "/v1/batches", body)
}

async fn send(state: &Arc<AppState>, req: Request<Body>) -> (StatusCode, Value, String) {
    let resp = app::router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, body, ct)
}

/// A read with the shop's read token.
async fn get(state: &Arc<AppState>, uri: &str) -> (StatusCode, Value) {
    let req = Request::get(uri)
        .header("authorization", format!("Bearer {}", *READ_TOKEN))
        .body(Body::empty())
        .unwrap();
    let (s, b, _) = send(state, req).await;
    (s, b)
}

async fn get_text(state: &Arc<AppState>, uri: &str) -> String {
    let req = Request::get(uri)
        .header("authorization", format!("Bearer {}", *READ_TOKEN))
        .body(Body::empty())
        .unwrap();
    let resp = app::router(state.clone()).oneshot(req).await.unwrap();
    String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap()
}

fn statuses(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {body}"))
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

on_both!(idempotent_reingest, |db: Db| async move {
    let st = state(&db);
    let first = vec![stock(1, 100), order("p1", 1, 2), order("p1", 2, 1)];
    let (s, body, _) = send(&st, signed(batch("p1", first.clone()))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(statuses(&body), ["applied", "applied", "applied"]);
    // The same batch again, and a batch mixing old and new: nothing doubles.
    let (_, body, _) = send(&st, signed(batch("p1", first))).await;
    assert_eq!(statuses(&body), ["duplicate", "duplicate", "duplicate"]);
    let mixed = vec![order("p1", 2, 1), order("p1", 4, 3)];
    let (_, body, _) = send(&st, signed(batch("p1", mixed))).await;
    assert_eq!(statuses(&body), ["duplicate", "applied"]);
    let (_, p1) = get(&st, "/v1/products/p1").await;
    assert_eq!(
        (p1["sold"].as_i64(), p1["orders_accepted"].as_i64()),
        (Some(6), Some(3))
    );
    let (_, all) = get(&st, "/v1/orders?limit=1000").await;
    assert_eq!(all["orders"].as_array().unwrap().len(), 3);
    let metrics = get_text(&st, "/metrics").await;
    assert!(
        metrics.contains("flashgate_origin_events_applied_total 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("flashgate_origin_events_duplicate_total 4"),
        "{metrics}"
    );
});

// A run of orders is stored in one statement (`Db::apply_orders`): an
// order named twice in one batch is applied once, a stock total between two
// runs binds the run after it, and a run that would oversell is applied one
// order at a time, so the order that oversold is the one refused.
on_both!(
    a_run_of_orders_applies_each_once_in_order,
    |db: Db| async move {
        let st = state(&db);
        // The seqs rise through the batch as the gate sends them; the
        // reservation named twice comes with two of them.
        let at = |seq: u64, mut e: Event| {
            match &mut e {
                Event::Order { seq: s, .. }
                | Event::Stock { seq: s, .. }
                | Event::Void { seq: s, .. } => *s = seq,
            }
            e
        };
        let events = vec![
            at(1, stock(0, 3)),
            at(2, order("r", 1, 1)),
            at(3, order("r", 2, 1)),
            at(4, order("r", 1, 1)),
            at(5, order("r", 3, 1)),
            at(6, order("r", 4, 1)),
            at(7, stock(0, 5)),
            at(8, order("r", 5, 1)),
            at(9, order("r", 6, 1)),
        ];
        let (s, body, _) = send(&st, signed(batch("r", events))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(
            statuses(&body),
            [
                "applied",
                "applied",
                "applied",
                "duplicate",
                "applied",
                "rejected_oversell",
                "applied",
                "applied",
                "applied"
            ]
        );
        let (_, p) = get(&st, "/v1/products/r").await;
        assert_eq!(
            (
                p["sold"].as_i64(),
                p["orders_accepted"].as_i64(),
                p["orders_rejected"].as_i64()
            ),
            (Some(5), Some(5), Some(1)),
            "{p}"
        );
        let (_, all) = get(&st, "/v1/orders?product_id=r&limit=1000").await;
        assert_eq!(all["orders"].as_array().unwrap().len(), 6, "{all}");
    }
);

on_both!(
    stock_totals_move_forward_and_voids_apply_once,
    |db: Db| async move {
        let st = state(&db);
        let events = vec![stock(1, 5), order("v", 1, 2), order("v", 2, 2)];
        let (s, body, _) = send(&st, signed(batch("v", events))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        // A restock at the gate reaches the origin in order, so the orders
        // it made room for are accepted.
        let (_, body, _) = send(
            &st,
            signed(batch("v", vec![stock(200, 7), order("v", 150, 3)])),
        )
        .await;
        assert_eq!(statuses(&body), ["applied", "applied"]);
        // An older total arriving late changes nothing.
        let (_, body, _) = send(&st, signed(batch("v", vec![stock(1, 5)]))).await;
        assert_eq!(statuses(&body), ["duplicate"]);
        // A void gives the units back, once.
        let (_, body, _) = send(&st, signed(batch("v", vec![void("v", 300, 1, 2)]))).await;
        assert_eq!(statuses(&body), ["applied"]);
        let (_, body, _) = send(&st, signed(batch("v", vec![void("v", 300, 1, 2)]))).await;
        assert_eq!(statuses(&body), ["duplicate"]);
        let (_, p) = get(&st, "/v1/products/v").await;
        assert_eq!(
            (
                p["stock_total"].as_i64(),
                p["sold"].as_i64(),
                p["orders_accepted"].as_i64(),
                p["orders_voided"].as_i64()
            ),
            (Some(7), Some(5), Some(2), Some(1)),
            "{p}"
        );
        // A void of an order the origin never had, and a total below what
        // is sold, are refused (bug signals), and change nothing.
        let (_, body, _) = send(
            &st,
            signed(batch("v", vec![void("v", 400, 77, 1), stock(401, 1)])),
        )
        .await;
        assert_eq!(statuses(&body), ["refused", "refused"]);
        let (_, after) = get(&st, "/v1/products/v").await;
        assert_eq!(after, p);
        let (_, orders) = get(&st, "/v1/orders?product_id=v").await;
        let voided: Vec<_> = orders["orders"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["status"] == "voided")
            .collect();
        assert_eq!(voided.len(), 1);
        assert_eq!(voided[0]["voided_at_ms"].as_i64(), Some(2));
    }
);

on_both!(
    concurrent_batches_never_oversell_or_duplicate,
    |db: Db| async move {
        let st = state(&db);
        let (s, body, _) = send(&st, signed(batch("hot", vec![stock(1, 100)]))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        // 120 distinct orders of one unit, each sent by two of the 8 tasks, in
        // batches of 10, all at once: 100 fit, 20 must be refused, none twice.
        let mut tasks = Vec::new();
        for t in 0..8u32 {
            let st = st.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine: Vec<u32> = (0..120).filter(|n| n % 4 == t % 4).collect();
                if t >= 4 {
                    mine.reverse();
                }
                for chunk in mine.chunks(10) {
                    let events = chunk.iter().map(|&n| order("hot", n, 1)).collect();
                    let (s, body, _) = send(&st, signed(batch("hot", events))).await;
                    assert_eq!(s, StatusCode::OK, "{body}");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let (_, p) = get(&st, "/v1/products/hot").await;
        assert_eq!(p["sold"].as_i64(), Some(100), "{p}");
        assert_eq!(p["orders_accepted"].as_i64(), Some(100), "{p}");
        assert_eq!(p["orders_rejected"].as_i64(), Some(20), "{p}");
        let (_, all) = get(&st, "/v1/orders?product_id=hot&limit=1000").await;
        let ids: std::collections::BTreeSet<&str> = all["orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["reservation_id"].as_str().unwrap())
            .collect();
        assert_eq!(all["orders"].as_array().unwrap().len(), 120);
        assert_eq!(ids.len(), 120, "no reservation is stored twice");
    }
);

on_both!(
    every_credential_failure_is_refused_and_stores_nothing,
    |db: Db| async move {
        let st = state(&db);
        let body = batch("p1", vec![stock(1, 10), order("p1", 1, 1)]);
        let good = signing::sign(
            &keys(&FORWARD_KEYS),
            &signing::Request {
                purpose: Purpose::Forward,
                method: "POST",
                path: "/v1/batches",
                body: &body,
            },
            now_ms(),
        );
        let stale_at = now_ms() - flashgate_wire::bounds::SIGNATURE_SKEW_MS_MAX - 1_000;
        let stale = signing::sign(
            &keys(&FORWARD_KEYS),
            &signing::Request {
                purpose: Purpose::Forward,
                method: "POST",
                path: "/v1/batches",
                body: &body,
            },
            stale_at,
        );
        let with = |kid: Option<&str>, ts: Option<String>, sig: Option<&str>, b: Vec<u8>| {
            let mut req = Request::post("/v1/batches").header("content-type", "application/json");
            if let Some(kid) = kid {
                req = req.header(signing::KEY_ID_HEADER, kid);
            }
            if let Some(ts) = ts {
                req = req.header(signing::TIMESTAMP_HEADER, ts);
            }
            if let Some(sig) = sig {
                req = req.header(signing::SIGNATURE_HEADER, sig);
            }
            req.body(Body::from(b)).unwrap()
        };
        let ts = Some(good.timestamp_ms.to_string());
        let cases: Vec<(&str, Request<Body>)> = vec![
            ("no headers", with(None, None, None, body.clone())),
            (
                "no signature",
                with(Some("f1"), ts.clone(), None, body.clone()),
            ),
            (
                "no key id",
                with(None, ts.clone(), Some(&good.signature), body.clone()),
            ),
            (
                "unknown key id",
                with(Some("f9"), ts.clone(), Some(&good.signature), body.clone()),
            ),
            (
                "stale",
                with(
                    Some("f1"),
                    Some(stale.timestamp_ms.to_string()),
                    Some(&stale.signature),
                    body.clone(),
                ),
            ),
            (
                "malformed",
                with(Some("f1"), ts.clone(), Some("v2=nothex"), body.clone()),
            ),
            (
                "old scheme",
                with(
                    Some("f1"),
                    ts.clone(),
                    Some(&good.signature.replace("v2=", "v1=")),
                    body.clone(),
                ),
            ),
            (
                "tampered body",
                with(
                    Some("f1"),
                    ts.clone(),
                    Some(&good.signature),
                    batch("p1", vec![stock(1, 99)]),
                ),
            ),
            (
                "another timestamp",
                with(
                    Some("f1"),
                    Some((good.timestamp_ms + 1).to_string()),
                    Some(&good.signature),
                    body.clone(),
                ),
            ),
            (
                "signed for another path",
                signed_with(&FORWARD_KEYS, Purpose::Forward, "/v1/other", body.clone()),
            ),
            (
                "re-signed with the payment key",
                signed_with(&PAYMENT_KEYS, Purpose::Payment, "/v1/batches", body.clone()),
            ),
            (
                "the forwarding secret under the payment purpose",
                signed_with(&FORWARD_KEYS, Purpose::Payment, "/v1/batches", body.clone()),
            ),
        ];
        let n = cases.len();
        for (name, req) in cases {
            let (s, body, ct) = send(&st, req).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{name}: {body}");
            assert_eq!(ct, "application/problem+json", "{name}");
            assert_eq!(body["code"], "bad_signature", "{name}");
        }
        // Reads need the read token; a forwarding key or the shop token is
        // not one.
        for (name, auth) in [
            ("none", None),
            ("shop token", Some(format!("Bearer {}", *SHOP_TOKEN))),
            ("wrong", Some("Bearer nope".to_string())),
        ] {
            for uri in ["/v1/orders", "/v1/products/p1", "/metrics"] {
                let mut req = Request::get(uri);
                if let Some(a) = &auth {
                    req = req.header("authorization", a);
                }
                let (s, body, _) = send(&st, req.body(Body::empty()).unwrap()).await;
                assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri} with {name}: {body}");
                assert_eq!(body["code"], "unauthorized");
            }
        }
        let (_, all) = get(&st, "/v1/orders").await;
        assert_eq!(all["orders"].as_array().unwrap().len(), 0, "nothing stored");
        assert_eq!(get(&st, "/v1/products/p1").await.0, StatusCode::NOT_FOUND);
        let metrics = get_text(&st, "/metrics").await;
        assert!(
            metrics.contains(&format!("flashgate_origin_unauthorized_total {}", n + 9)),
            "{metrics}"
        );
        assert_eq!(
            send(&st, Request::get("/healthz").body(Body::empty()).unwrap())
                .await
                .0,
            StatusCode::OK
        );
    }
);

on_both!(the_shop_mints_buyer_tokens, |db: Db| async move {
    let st = state(&db);
    let mint = |auth: Option<String>, body: &str| {
        let mut req = Request::post("/v1/buyer-tokens").header("content-type", "application/json");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        req.body(Body::from(body.to_string())).unwrap()
    };
    let shop = Some(format!("Bearer {}", *SHOP_TOKEN));
    let before_s = now_ms() / 1000;
    let (s, body, _) = send(
        &st,
        mint(shop.clone(), r#"{"buyer_id":"alice","ttl_s":60}"#),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let after_s = now_ms() / 1000;
    let buyer = token::verify(
        &keys(&BUYER_KEYS),
        body["token"].as_str().unwrap(),
        "flashgate",
        now_ms() / 1000,
    )
    .unwrap();
    assert_eq!(buyer.id, "alice");
    assert!((before_s + 60..=after_s + 60).contains(&buyer.exp_s));
    for (auth, b, want) in [
        (None, r#"{"buyer_id":"alice"}"#, StatusCode::UNAUTHORIZED),
        (
            Some(format!("Bearer {}", *READ_TOKEN)),
            r#"{"buyer_id":"alice"}"#,
            StatusCode::UNAUTHORIZED,
        ),
        (
            shop.clone(),
            r#"{"buyer_id":"a b"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            shop.clone(),
            r#"{"buyer_id":"a","ttl_s":999999}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            shop.clone(),
            r#"{"buyer_id":"a","admin":true}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        assert_eq!(send(&st, mint(auth, b)).await.0, want, "{b}");
    }
    // Demo payments are off unless configured.
    let (s, _, _) = send(
        &st,
        Request::post("/v1/demo/payments")
            .body(Body::from("{}"))
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
});

on_both!(orders_paginate_by_cursor, |db: Db| async move {
    let st = state(&db);
    for p in ["even", "odd"] {
        let (s, _, _) = send(&st, signed(batch(p, vec![stock(1, 1000)]))).await;
        assert_eq!(s, StatusCode::OK);
    }
    for start in [0u32, 100, 200] {
        for p in ["even", "odd"] {
            let events = (start..start + 100)
                .filter(|n| *n < 250 && (n % 2 == 0) == (p == "even"))
                .map(|n| order(p, n, 1))
                .collect();
            let (s, body, _) = send(&st, signed(batch(p, events))).await;
            assert_eq!(s, StatusCode::OK, "{body}");
        }
    }
    let mut seen = Vec::new();
    let mut after: Option<i64> = None;
    let mut pages = 0;
    loop {
        let uri = match after {
            Some(a) => format!("/v1/orders?limit=100&after={a}"),
            None => "/v1/orders?limit=100".to_string(),
        };
        let (s, page) = get(&st, &uri).await;
        assert_eq!(s, StatusCode::OK);
        pages += 1;
        seen.extend(
            page["orders"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["reservation_id"].as_str().unwrap().to_string()),
        );
        match page["next_after"].as_i64() {
            Some(a) => after = Some(a),
            None => break,
        }
    }
    assert_eq!(seen.len(), 250);
    assert_eq!(
        seen.iter().collect::<std::collections::BTreeSet<_>>().len(),
        250,
        "no order twice"
    );
    assert!(pages >= 3);
    let (_, even) = get(&st, "/v1/orders?product_id=even&limit=1000").await;
    assert_eq!(even["orders"].as_array().unwrap().len(), 125);
    assert!(even["orders"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["product_id"] == "even"));
    for bad in [
        "/v1/orders?limit=0",
        "/v1/orders?limit=1001",
        "/v1/orders?after=abc",
        "/v1/orders?bogus=1",
    ] {
        assert_eq!(get(&st, bad).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
});

on_both!(
    oversized_and_malformed_batches_are_refused,
    |db: Db| async move {
        let st = state(&db);
        let too_many = batch("p1", (0..501).map(|n| order("p1", n, 1)).collect());
        let (s, body, _) = send(&st, signed(too_many)).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("batch_too_large"))
        );
        let huge = format!(
            r#"{{"product_id":"p1","events":[],"pad":"{}"}}"#,
            "x".repeat(limits::BODY_BYTES_MAX)
        );
        // Unsigned, the same body is refused for its headers before it is
        // read: a flood without a signature costs no body read.
        let unsigned = Request::post("/v1/batches")
            .header("content-type", "application/json")
            .body(Body::from(huge.clone().into_bytes()))
            .unwrap();
        let (s, body, _) = send(&st, unsigned).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("bad_signature"))
        );
        let (s, body, _) = send(&st, signed(huge.into_bytes())).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large"))
        );
        let (s, body, _) = send(&st, signed(batch("p1", vec![]))).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"))
        );
        let (s, body, _) = send(&st, signed(b"{".to_vec())).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("malformed_json"))
        );
        let zero = batch("p1", vec![order("p1", 1, 0)]);
        let (s, _, _) = send(&st, signed(zero)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        let other_product = batch("p1", vec![order("p2", 1, 1)]);
        let (s, _, _) = send(&st, signed(other_product)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        let (_, all) = get(&st, "/v1/orders").await;
        assert_eq!(all["orders"].as_array().unwrap().len(), 0, "nothing stored");
        // The largest allowed batch goes through.
        let mut full: Vec<Event> = vec![stock(1, 1000)];
        full.extend((0..499).map(|n| order("p1", n, 1)));
        let (s, _, _) = send(&st, signed(batch("p1", full))).await;
        assert_eq!(s, StatusCode::OK);
    }
);

on_both!(
    batches_in_flight_are_bounded_before_their_bodies_are_read,
    |db: Db| async move {
        let st = state(&db);
        let real = batch("slots", vec![stock(1, 10), order("slots", 1, 1)]);
        // Anyone may send the gate's key id, a fresh time, the body's
        // digest and a made-up signature, then trickle the body: each is
        // refused from its headers at once, and takes no slot.
        for _ in 0..limits::BATCHES_IN_FLIGHT_MAX * 2 {
            let (mut tx, body) =
                http_body_util::channel::Channel::<axum::body::Bytes, std::io::Error>::new(1);
            tx.send_data(axum::body::Bytes::from_static(b"{"))
                .await
                .unwrap();
            let (mut parts, _) = signed(real.clone()).into_parts();
            parts.headers.insert(
                signing::SIGNATURE_HEADER,
                format!("v2={}", "ab".repeat(32)).parse().unwrap(),
            );
            let req = Request::from_parts(parts, Body::new(body));
            let resp = app::router(st.clone()).oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(
                st.batch_slots.available_permits(),
                limits::BATCHES_IN_FLIGHT_MAX
            );
            drop(tx);
        }
        // A holder of the key (the gate) can still hold a slot with a body
        // it never finishes, for at most the body's deadline, so the slots
        // bound the memory that batches in flight hold.
        let mut held = Vec::new();
        for _ in 0..limits::BATCHES_IN_FLIGHT_MAX {
            let (mut tx, body) =
                http_body_util::channel::Channel::<axum::body::Bytes, std::io::Error>::new(1);
            tx.send_data(axum::body::Bytes::from_static(b"{\"product_id\""))
                .await
                .unwrap();
            let (parts, _) = signed(real.clone()).into_parts();
            let req = Request::from_parts(parts, Body::new(body));
            let router = app::router(st.clone());
            held.push((tx, tokio::spawn(router.oneshot(req))));
        }
        let wait_for = |free: usize| {
            let st = st.clone();
            async move {
                for _ in 0..2_000 {
                    if st.batch_slots.available_permits() == free {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                panic!(
                    "{} batch slots free, waited for {free}",
                    st.batch_slots.available_permits()
                );
            }
        };
        wait_for(0).await;

        // A real batch is shed, before its body is read, with a time to
        // retry; nothing of it is stored.
        let resp = app::router(st.clone())
            .oneshot(signed(real.clone()))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()["retry-after"], "1");
        let body: Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(body["code"], "overloaded", "{body}");
        let (_, all) = get(&st, "/v1/orders").await;
        assert_eq!(all["orders"].as_array().unwrap().len(), 0, "nothing stored");
        // Unsigned requests are still refused for their headers.
        let unsigned = Request::post("/v1/batches")
            .header("content-type", "application/json")
            .body(Body::from(real.clone()))
            .unwrap();
        assert_eq!(send(&st, unsigned).await.0, StatusCode::UNAUTHORIZED);

        // The held bodies end short of what was signed: each is refused,
        // and its slot comes back.
        for (tx, task) in held {
            drop(tx);
            let resp = task.await.unwrap().unwrap();
            assert!(resp.status().is_client_error(), "{}", resp.status());
        }
        wait_for(limits::BATCHES_IN_FLIGHT_MAX).await;
        let (s, body, _) = send(&st, signed(real)).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(statuses(&body), ["applied", "applied"]);
        let metrics = get_text(&st, "/metrics").await;
        assert!(
            metrics.contains("flashgate_origin_batches_shed_total 1"),
            "{metrics}"
        );
    }
);

/// Loses the answer of the first `n` requests after the router handled
/// them, as a dropped connection would: a layer only this test adds.
fn losing_answers(router: axum::Router, n: u32) -> axum::Router {
    let left = Arc::new(AtomicU32::new(n));
    router.layer(axum::middleware::from_fn(
        move |req: Request<Body>, next: axum::middleware::Next| {
            let left = left.clone();
            async move {
                let resp = next.run(req).await;
                let lose = left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if lose {
                    return axum::response::IntoResponse::into_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                    );
                }
                resp
            }
        },
    ))
}

on_both!(
    a_lost_answer_after_commit_is_retried_without_duplicates,
    |db: Db| async move {
        let st = state(&db);
        let app = losing_answers(app::router(st.clone()), 1);
        let events = vec![stock(1, 10), order("p1", 1, 1), order("p1", 2, 1)];
        let first = app
            .clone()
            .oneshot(signed(batch("p1", events.clone())))
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let (s, body, _) = send(&st, signed(batch("p1", events))).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(statuses(&body), ["duplicate", "duplicate", "duplicate"]);
        let (_, p) = get(&st, "/v1/products/p1").await;
        assert_eq!(p["sold"].as_i64(), Some(2));
    }
);

/// `sslmode` in DATABASE_URL is honoured: `require` encrypts, `disable`
/// does not, and `verify-full` refuses a server certificate no trusted CA
/// signed (this machine's PostgreSQL has a self-signed one).
#[tokio::test]
async fn postgres_honours_sslmode() {
    let admin = pg_admin_url();
    let with = |mode: &str| {
        let sep = if admin.contains('?') { '&' } else { '?' };
        format!("{admin}{sep}sslmode={mode}")
    };
    let unused = std::path::Path::new("unused");
    let require = Db::connect(Some(&with("require")), unused)
        .await
        .expect("sslmode=require connects");
    assert_eq!(
        require.tls().await.unwrap(),
        Some(true),
        "sslmode=require is encrypted"
    );
    require.close().await;
    let disable = Db::connect(Some(&with("disable")), unused)
        .await
        .expect("sslmode=disable connects");
    assert_eq!(disable.tls().await.unwrap(), Some(false));
    disable.close().await;
    let verify = Db::connect(Some(&with("verify-full")), unused).await;
    assert!(
        verify.is_err(),
        "verify-full must refuse an untrusted certificate"
    );
}

/// The buyer page calls the demo payment endpoint from the gate's origin:
/// a browser's preflight is answered with the CORS headers for that origin
/// only, and no other origin is allowed.
#[tokio::test]
async fn the_demo_payment_preflight_allows_the_gate_page_only() {
    let dir = std::env::temp_dir().join(format!("flashgate-cors-{}", std::process::id()));
    let db = Db::connect(None, &dir).await.expect("sqlite connects");
    let page = "http://127.0.0.1:8787";
    let st = AppState::new(
        db,
        settings(Some(state::DemoSettings {
            payment_keys: keys(&FORWARD_KEYS),
            gate_url: page.into(),
            allow_origin: Some(page.into()),
            client: reqwest::Client::new(),
        })),
    )
    .unwrap();
    for (origin, allowed) in [(page, true), ("http://evil.example", false)] {
        let req = Request::builder()
            .method("OPTIONS")
            .uri("/v1/demo/payments")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .body(Body::empty())
            .unwrap();
        let resp = app::router(st.clone()).oneshot(req).await.unwrap();
        let allow = resp
            .headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap().to_string());
        assert!(resp.status().is_success(), "{origin}: {}", resp.status());
        assert_eq!(
            allow.as_deref() == Some(origin),
            allowed,
            "{origin}: {allow:?}"
        );
    }
}
