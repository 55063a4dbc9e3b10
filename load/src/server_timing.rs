//! The `Server-Timing` response header (W3C Server Timing, RFC 9110's
//! list, token and quoted-string syntax), read for the one metric the gate
//! reports: a reserve that had to wait for its shard's call home carries
//! `escrow;dur=<ms waited>;desc="trips=<round trips>"`.

/// One metric of the header: its name and its parameters, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    pub name: String,
    pub params: Vec<(String, String)>,
}

impl Metric {
    /// A parameter's value: the first of that name, as the specification
    /// says (names are case-insensitive).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The metric name of a reserve's wait for its shard's call home.
pub const ESCROW_METRIC: &str = "escrow";

/// What a reserve that waited for its shard's call home says of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EscrowWait {
    /// How long it waited, in ms.
    pub dur_ms: f64,
    /// The round trips to home it waited for, if the gate said.
    pub trips: Option<u64>,
}

fn tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// The metrics of the header's values (a header may be sent several
/// times; its values read as one list). A metric that does not parse is
/// skipped, up to the next comma outside a quoted string.
pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Metric> {
    let mut out = Vec::new();
    for value in values {
        let mut s = Scanner {
            chars: value.chars().collect(),
            at: 0,
        };
        loop {
            s.skip_ows();
            if s.done() {
                break;
            }
            if s.eat(',') {
                continue;
            }
            match metric(&mut s) {
                Some(m) => out.push(m),
                None => s.skip_past_comma(),
            }
        }
    }
    out
}

/// One metric, up to the comma after it (not read) or the end.
fn metric(s: &mut Scanner) -> Option<Metric> {
    let mut metric = Metric {
        name: s.token()?,
        params: Vec::new(),
    };
    loop {
        s.skip_ows();
        if s.done() || s.peek() == Some(',') {
            return Some(metric);
        }
        if !s.eat(';') {
            return None;
        }
        s.skip_ows();
        let param = s.token()?;
        s.skip_ows();
        // A parameter without a value is read as browsers read it: its
        // value is empty.
        let value = if s.eat('=') {
            s.skip_ows();
            s.quoted().or_else(|| s.token())?
        } else {
            String::new()
        };
        metric.params.push((param, value));
    }
}

struct Scanner {
    chars: Vec<char>,
    at: usize,
}

impl Scanner {
    fn done(&self) -> bool {
        self.at >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.at += 1;
        }
        hit
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.at += 1;
        }
    }

    /// Past the next comma outside a quoted string, or to the end.
    fn skip_past_comma(&mut self) {
        let mut quoted = false;
        while let Some(c) = self.peek() {
            self.at += 1;
            match c {
                '\\' if quoted => self.at += 1,
                '"' => quoted = !quoted,
                ',' if !quoted => return,
                _ => {}
            }
        }
    }

    fn token(&mut self) -> Option<String> {
        let from = self.at;
        while self.peek().is_some_and(tchar) {
            self.at += 1;
        }
        (self.at > from).then(|| self.chars[from..self.at].iter().collect())
    }

    /// A quoted-string, its escapes undone; `None` (and nothing read) if
    /// there is none here or it is not closed.
    fn quoted(&mut self) -> Option<String> {
        let from = self.at;
        if !self.eat('"') {
            return None;
        }
        let mut text = String::new();
        while let Some(c) = self.peek() {
            self.at += 1;
            match c {
                '"' => return Some(text),
                '\\' => {
                    let escaped = self.peek()?;
                    self.at += 1;
                    text.push(escaped);
                }
                c => text.push(c),
            }
        }
        self.at = from;
        None
    }
}

/// The escrow wait a reserve's answer reports, if it carries one: the
/// first `escrow` metric with a `dur` that is a finite, non-negative
/// number. Other metrics are ignored; a `desc` without `trips=N` leaves the
/// trips unknown.
pub fn escrow_wait<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<EscrowWait> {
    parse(values).into_iter().find_map(|m| {
        if m.name != ESCROW_METRIC {
            return None;
        }
        let dur_ms = m
            .param("dur")?
            .parse::<f64>()
            .ok()
            .filter(|d| d.is_finite() && *d >= 0.0)?;
        let trips = m.param("desc").and_then(|desc| {
            desc.split(|c: char| c.is_whitespace() || c == ',' || c == ';')
                .find_map(|part| part.strip_prefix("trips=")?.parse().ok())
        });
        Some(EscrowWait { dur_ms, trips })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(values: &[&str]) -> Option<EscrowWait> {
        escrow_wait(values.iter().copied())
    }

    #[test]
    fn the_gates_metric_is_read() {
        assert_eq!(
            wait(&[r#"escrow;dur=12.5;desc="trips=2""#]),
            Some(EscrowWait {
                dur_ms: 12.5,
                trips: Some(2)
            })
        );
        // Whitespace where the grammar allows it, a token value, another
        // order, a name in capitals.
        assert_eq!(
            wait(&[r#"escrow ; DESC = "trips=3" ; Dur = 7"#]),
            Some(EscrowWait {
                dur_ms: 7.0,
                trips: Some(3)
            })
        );
        assert_eq!(
            wait(&["escrow;dur=0"]),
            Some(EscrowWait {
                dur_ms: 0.0,
                trips: None
            })
        );
    }

    #[test]
    fn other_metrics_and_headers_are_tolerated() {
        let expected = Some(EscrowWait {
            dur_ms: 40.0,
            trips: Some(1),
        });
        // Among other metrics, with commas and semicolons inside quotes.
        assert_eq!(
            wait(&[r#"cache;desc="hit, then; miss", db;dur=53, escrow;dur=40;desc="trips=1""#]),
            expected
        );
        // In a second header of the same name.
        assert_eq!(
            wait(&["total;dur=123.4", r#"escrow;dur=40;desc="trips=1""#]),
            expected
        );
        // An escaped quote in another metric's description.
        assert_eq!(
            wait(&[r#"x;desc="a \"quoted\" word", escrow;dur=40;desc="trips=1""#]),
            expected
        );
        // The first escrow metric counts, and the first of a parameter.
        assert_eq!(
            wait(&[r#"escrow;dur=40;dur=99;desc="trips=1", escrow;dur=1"#]),
            expected
        );
        // A parameter without a value.
        assert_eq!(wait(&[r#"escrow;flag;dur=40;desc="trips=1""#]), expected);
        // A malformed metric before it is skipped.
        assert_eq!(
            wait(&[r#"@@@;desc="a, b", escrow;dur=40;desc="trips=1""#]),
            expected
        );
        assert_eq!(
            wait(&[r#"db;dur=1 junk, escrow;dur=40;desc="trips=1""#]),
            expected
        );
    }

    #[test]
    fn absent_or_malformed_says_no_wait() {
        for values in [
            &[][..],
            &[""],
            &["total;dur=12"],
            &["escrowed;dur=12"],
            &["escrow"],
            &["escrow;dur=abc"],
            &["escrow;dur=-1"],
            &["escrow;dur=NaN"],
            &["escrow;dur=inf"],
            &[r#"x;desc="never closed, escrow;dur=1"#],
            &["escrow;dur=40 junk"],
        ] {
            assert_eq!(wait(values), None, "{values:?}");
        }
        // A description without trips leaves them unknown.
        assert_eq!(
            wait(&[r#"escrow;dur=3;desc="slow""#]).map(|w| w.trips),
            Some(None)
        );
        assert_eq!(
            wait(&[r#"escrow;dur=3;desc="trips=x""#]).map(|w| w.trips),
            Some(None)
        );
    }

    #[test]
    fn the_list_parses_whole() {
        assert_eq!(
            parse([r#"a, b;dur=1;desc="x,y" ,c;k=v"#]),
            vec![
                Metric {
                    name: "a".into(),
                    params: vec![]
                },
                Metric {
                    name: "b".into(),
                    params: vec![("dur".into(), "1".into()), ("desc".into(), "x,y".into())]
                },
                Metric {
                    name: "c".into(),
                    params: vec![("k".into(), "v".into())]
                },
            ]
        );
    }
}
