//! The worked sequence of `docs/sharding.md`, run: a product of 10 units
//! over K = 3 (home and shards 1 and 2), with one refill, one endgame
//! drain, one lost reply and the last unit, message by message. The
//! transcript is compared with the one below (`expect_test`); run with
//! `UPDATE_EXPECT=1` to rewrite it after a deliberate change, and read the
//! diff.

use std::fmt::Write as _;

use expect_test::expect;
use flashgate_core::escrow::{Elsewhere, ShardReply, ShardReport};
use flashgate_core::{ConfigPatch, Escrow, Gate, HomeStep, NoArchive, ReserveOutcome};

struct Run {
    home: Gate,
    shards: Vec<Gate>,
    out: String,
}

impl Run {
    fn line(&mut self, t: u64, what: String) {
        let _ = writeln!(self.out, "[{t:>4} ms] {what}");
    }

    fn shard(&mut self, i: u16) -> &mut Gate {
        &mut self.shards[usize::from(i) - 1]
    }

    fn unallocated(&self) -> u64 {
        match self.home.escrow() {
            Escrow::Home(pool) => pool.unallocated(),
            _ => unreachable!(),
        }
    }

    /// Shard `i` reports (an ask for `need`, or in the background).
    fn report(&mut self, t: u64, i: u16, need: u64) -> ShardReport {
        let r = self.shard(i).poll_report(t, need).expect("a report is due");
        let ask = match (r.need, r.refill) {
            (0, 0) => String::new(),
            (n, 0) => format!(", asks {n}"),
            (0, f) => format!(", asks a refill of {f}"),
            (n, f) => format!(", asks {n} and a refill of {f}"),
        };
        self.line(
            t,
            format!(
                "shard {i} -> home   report #{}: available {}, held {}{ask}",
                r.seq, r.levels.available, r.levels.held
            ),
        );
        r
    }

    /// Home takes a report, draining other shards until it can answer.
    fn home_answers(&mut self, t: u64, r: &ShardReport) -> ShardReply {
        let mut t = t;
        let mut drains = 0;
        loop {
            match self.home.handle_shard_report(t, r, false).expect("a shard") {
                HomeStep::Reply(mut reply) => {
                    reply.drains = drains;
                    let beyond = match reply.elsewhere {
                        Elsewhere::Unallocated { units } => format!("U {units}"),
                        Elsewhere::None { age_ms } => {
                            format!("none left elsewhere (proven {age_ms} ms ago)")
                        }
                        Elsewhere::Unknown => "unknown beyond".into(),
                    };
                    self.line(
                        t,
                        format!(
                            "home -> shard {}   reply #{}: granted {} in all, {beyond}",
                            r.index, reply.seq, reply.granted
                        ),
                    );
                    return *reply;
                }
                HomeStep::Drain(list) => {
                    drains += 1;
                    for j in list {
                        self.drain(t, j);
                    }
                    t += 2;
                }
                HomeStep::Wait => t += 1,
            }
        }
    }

    /// Home drains shard `j`, which answers at once.
    fn drain(&mut self, t: u64, j: u16) {
        let push = self.home.push_for(j, true).expect("a shard");
        self.line(
            t,
            format!("home -> shard {j}   drain (granted {})", push.granted),
        );
        let answer = self.shard(j).handle_push(t + 1, &push).expect("a shard");
        self.line(
            t + 1,
            format!(
                "shard {j} -> home   answer #{}: gave back {} in all, available {}",
                answer.seq, answer.returns_sent, answer.levels.available
            ),
        );
        self.home
            .handle_push_answer(t + 2, j, t, true, Some(&answer))
            .expect("applied");
    }

    fn reply(&mut self, i: u16, reply: &ShardReply) {
        self.shard(i).handle_shard_reply(reply);
    }

    fn reserve(&mut self, t: u64, i: u16, buyer: &str, q: u32) -> ReserveOutcome {
        let g = if i == 0 {
            &mut self.home
        } else {
            self.shard(i)
        };
        let o = g.handle_reserve(&NoArchive, t, buyer, &format!("k-{buyer}"), q, None);
        let said = match o {
            ReserveOutcome::Reserved { quantity, .. } => format!("reserved {quantity}"),
            ReserveOutcome::Replayed { .. } => "replayed".into(),
            other => other.code().to_string(),
        };
        let at = if i == 0 {
            "home".to_string()
        } else {
            format!("shard {i}")
        };
        self.line(t, format!("{at}: {buyer} x{q}: {said}"));
        o
    }
}

#[test]
fn one_refill_one_endgame_drain_one_lost_reply_and_the_last_unit() {
    let patch = ConfigPatch {
        stock_total: Some(10),
        shards: Some(3),
        per_buyer_max: Some(2),
        quantity_max: Some(2),
        hold_ttl_ms: Some(600_000),
        ..ConfigPatch::default()
    };
    let mut run = Run {
        home: Gate::create(0, &patch).expect("a product"),
        shards: vec![Gate::shard(1, 3), Gate::shard(2, 3)],
        out: String::new(),
    };
    let u = run.unallocated();
    run.line(0, format!("home: 10 units over 3 shards, U {u}"));

    // A shard's first buyer: it knows no rules yet, and asks.
    assert!(run.shard(1).must_call_home(10, 2));
    let r = run.report(10, 1, 2);
    let reply = run.home_answers(12, &r);
    run.reply(1, &reply);
    run.reserve(14, 1, "b1", 2);

    // Its levels moved, and its demand says it will run short: one
    // background report with a refill, a fair share of U.
    assert_eq!(run.shard(1).poll_report_at(300), Some(260));
    let r = run.report(300, 1, 0);
    let reply = run.home_answers(302, &r);
    run.reply(1, &reply);

    // Shard 2's first buyers, in one batch.
    let r = run.report(320, 2, 4);
    let reply = run.home_answers(322, &r);
    run.reply(2, &reply);
    run.reserve(324, 2, "b2", 2);
    run.reserve(324, 2, "b3", 2);
    // Home sells from U in the reserve's own turn.
    run.reserve(400, 0, "b4", 1);
    let u = run.unallocated();
    run.line(400, format!("home: U {u}"));

    // The endgame: shard 2 is empty, U is empty, shard 1 keeps its refill.
    // Home drains shard 1 before it answers.
    let r = run.report(500, 2, 2);
    let reply = run.home_answers(502, &r);
    run.reply(2, &reply);
    run.reserve(510, 2, "b5", 2);

    // A lost reply: shard 1's buyer asks, home grants the last unit, the
    // reply never arrives. The buyer hears unavailable, not sold_out.
    let r = run.report(600, 1, 2);
    let _lost = run.home_answers(602, &r);
    run.shard(1).handle_call_failed(2_600);
    run.line(2_600, "shard 1: no reply in time".into());
    run.reserve(2_600, 1, "b6", 2);
    // The buyer asks again; the grant on its way counts as the shard's,
    // and home proves shard 2 empty before it says none is left.
    let r = run.report(2_700, 1, 2);
    let reply = run.home_answers(2_702, &r);
    run.reply(1, &reply);
    run.reserve(2_704, 1, "b6", 2);
    run.reserve(2_705, 1, "b7", 1);
    // Shard 2's next buyer: nothing is left anywhere, and home says so
    // only after draining shard 1 again (it was granted a unit since).
    let r = run.report(2_800, 2, 1);
    let reply = run.home_answers(2_802, &r);
    run.reply(2, &reply);
    run.reserve(2_804, 2, "b8", 1);
    let age = run.home.sold_out_age(2_900);
    run.line(2_900, format!("home: sold out, proven {age:?} ms ago"));

    expect![[r#"
        [   0 ms] home: 10 units over 3 shards, U 10
        [  10 ms] shard 1 -> home   report #1: available 0, held 0, asks 2
        [  12 ms] home -> shard 1   reply #1: granted 2 in all, U 8
        [  14 ms] shard 1: b1 x2: reserved 2
        [ 300 ms] shard 1 -> home   report #2: available 0, held 2, asks a refill of 6
        [ 302 ms] home -> shard 1   reply #2: granted 5 in all, U 5
        [ 320 ms] shard 2 -> home   report #1: available 0, held 0, asks 4
        [ 322 ms] home -> shard 2   reply #1: granted 4 in all, U 1
        [ 324 ms] shard 2: b2 x2: reserved 2
        [ 324 ms] shard 2: b3 x2: reserved 2
        [ 400 ms] home: b4 x1: reserved 1
        [ 400 ms] home: U 0
        [ 500 ms] shard 2 -> home   report #2: available 0, held 4, asks 2 and a refill of 12
        [ 502 ms] home -> shard 1   drain (granted 5)
        [ 503 ms] shard 1 -> home   answer #3: gave back 3 in all, available 0
        [ 504 ms] home -> shard 2   reply #2: granted 7 in all, U 0
        [ 510 ms] shard 2: b5 x2: reserved 2
        [ 600 ms] shard 1 -> home   report #4: available 0, held 2, asks 2 and a refill of 6
        [ 602 ms] home -> shard 2   drain (granted 7)
        [ 603 ms] shard 2 -> home   answer #3: gave back 1 in all, available 0
        [ 604 ms] home -> shard 1   reply #4: granted 6 in all, none left elsewhere (proven 2 ms ago)
        [2600 ms] shard 1: no reply in time
        [2600 ms] shard 1: b6 x2: unavailable
        [2700 ms] shard 1 -> home   report #5: available 0, held 2, asks 2 and a refill of 6
        [2702 ms] home -> shard 2   drain (granted 7)
        [2703 ms] shard 2 -> home   answer #4: gave back 1 in all, available 0
        [2704 ms] home -> shard 1   reply #5: granted 6 in all, none left elsewhere (proven 2 ms ago)
        [2704 ms] shard 1: b6 x2: insufficient_stock
        [2705 ms] shard 1: b7 x1: reserved 1
        [2800 ms] shard 2 -> home   report #5: available 0, held 6, asks 1
        [2802 ms] home -> shard 1   drain (granted 6)
        [2803 ms] shard 1 -> home   answer #6: gave back 3 in all, available 0
        [2804 ms] home -> shard 2   reply #5: granted 7 in all, none left elsewhere (proven 2 ms ago)
        [2804 ms] shard 2: b8 x1: sold_out
        [2900 ms] home: sold out, proven Some(198) ms ago
    "#]]
    .assert_eq(&run.out);
}
