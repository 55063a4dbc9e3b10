//! The gate's configuration: its secrets and switches, read from the
//! Worker's environment (`wrangler.toml` vars and secrets). Pure: the shell
//! hands in a getter, so every rule is tested natively. A gate whose
//! settings are refused serves no API request (500 `misconfigured`), which
//! is how a secret that is too short is refused at start-up: the Workers
//! runtime has no start-up hook of its own.

use flashgate_wire::keys::{check_secret, KeySet};
use flashgate_wire::token::Verifier;

use crate::ids::{PowKey, ShardKey, TicketKey};

use crate::limits::{LIVE_SOCKETS_MAX_DEFAULT, LIVE_SOCKETS_MAX_MAX};

/// The audience buyer tokens must name unless `BUYER_TOKEN_AUDIENCE` says
/// otherwise.
pub const DEFAULT_AUDIENCE: &str = "flashgate";

/// Who may do what at the gate, and with which keys it proves it.
pub struct Settings {
    /// Verifies buyer tokens: `BUYER_TOKEN_KEYS`, the HS256 keys (which
    /// also sign the dev sessions' tokens), and `BUYER_TOKEN_AUDIENCE`, the
    /// `aud` every buyer token must name. It trusts no identity provider
    /// yet: a provider's RS256 and ES256 tokens are checked up to the
    /// signature (`flashgate_wire::token::Decision::Verify`), and the
    /// verify call that would prove them is the shell's, still to come.
    pub buyer_tokens: Verifier,
    /// `PAYMENT_KEYS`: verifies the shop's signed confirmations.
    pub payment_keys: KeySet,
    /// `ADMIN_TOKENS`: the admin's bearer tokens, with ids for rotation.
    pub admin_tokens: KeySet,
    /// `ID_SECRET`: keys the permutation that makes reservation ids opaque,
    /// and (derived) the waiting-room tickets' signatures.
    pub id_secret: Vec<u8>,
    pub ticket_key: TicketKey,
    /// Signs the waiting room's proof-of-work challenges (`edge::pow`).
    pub pow_key: PowKey,
    /// Draws each buyer's stock shard (`crate::edge::shards`).
    pub shard_key: ShardKey,
    /// `RATE_LIMITS`: the policies the rate limiting bindings were given,
    /// for the `RateLimit-Policy` field.
    pub rate_limits: Policies,
    /// `DEV_SESSIONS=on`: `POST /api/session` mints anonymous buyer tokens.
    /// Off unless set; `scripts/dev` and the tests set it.
    pub dev_sessions: bool,
    /// `ORIGIN_URL` and `FORWARD_KEYS`: where the outbox is delivered and
    /// the keys its batches are signed with. `None` keeps the outbox
    /// waiting, with backoff, until an origin is configured.
    pub forwarding: Option<Forwarding>,
    /// `LIVE_SOCKETS_MAX`: the most live-update sockets one product's
    /// object keeps (`crate::limits::LIVE_SOCKETS_MAX_DEFAULT` unless set).
    pub live_sockets_max: u32,
}

pub struct Forwarding {
    pub origin_url: String,
    pub keys: KeySet,
    /// `ORIGIN_READ_TOKEN`: the shop's read token at the origin, with which
    /// the admin console's drift check reads the origin's totals. Optional:
    /// without it the console shows the drift as unknown.
    pub read_token: Option<String>,
}

/// A setting the gate refuses, named, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    pub var: &'static str,
    pub why: String,
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.var, self.why)
    }
}

fn key_set(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<KeySet, SettingsError> {
    let text = get(var)
        .filter(|t| !t.trim().is_empty())
        .ok_or(SettingsError {
            var,
            why: "is not set".into(),
        })?;
    let keys = KeySet::parse(&text).map_err(|e| SettingsError {
        var,
        why: e.to_string(),
    })?;
    // A published example or a plainly non-random secret would let anyone
    // who reads the repository act as admin, buyer or payment backend.
    match keys.refused_secret() {
        Some((kid, why)) => Err(SettingsError {
            var,
            why: format!("key {kid}: {why}"),
        }),
        None => Ok(keys),
    }
}

/// Whether `url` may carry the gate's batches and read token: https, or
/// plain http to a loopback host (a local origin).
fn origin_url_ok(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn buyer_tokens(get: &impl Fn(&str) -> Option<String>) -> Result<Verifier, SettingsError> {
    let audience = get("BUYER_TOKEN_AUDIENCE")
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_AUDIENCE.into());
    // With no provider there is no JWKS whose key ids could clash.
    Verifier::new(key_set(get, "BUYER_TOKEN_KEYS")?, &audience, None).map_err(|e| SettingsError {
        var: "BUYER_TOKEN_KEYS",
        why: e.to_string(),
    })
}

impl Settings {
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let id_secret = get("ID_SECRET").unwrap_or_default();
        if let Err(why) = check_secret(&id_secret) {
            return Err(SettingsError {
                var: "ID_SECRET",
                why: why.to_string(),
            });
        }
        let id_secret = id_secret.into_bytes();
        let origin_url = get("ORIGIN_URL").filter(|u| !u.trim().is_empty());
        let forwarding = match origin_url {
            None => None,
            Some(url) if !origin_url_ok(url.trim()) => {
                return Err(SettingsError {
                    var: "ORIGIN_URL",
                    why: "must be https (plain http only to a loopback host): the gate sends \
                          its signed batches and the read token there"
                        .into(),
                })
            }
            Some(origin_url) => Some(Forwarding {
                origin_url: origin_url.trim_end_matches('/').to_string(),
                keys: key_set(&get, "FORWARD_KEYS")?,
                read_token: get("ORIGIN_READ_TOKEN").filter(|t| !t.trim().is_empty()),
            }),
        };
        let rate_limits = get("RATE_LIMITS")
            .ok_or_else(|| "is not set".to_string())
            .and_then(|text| Policies::parse(&text))
            .map_err(|why| SettingsError {
                var: "RATE_LIMITS",
                why,
            })?;
        let live_sockets_max = match get("LIVE_SOCKETS_MAX").filter(|v| !v.trim().is_empty()) {
            None => LIVE_SOCKETS_MAX_DEFAULT,
            Some(text) => text
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=LIVE_SOCKETS_MAX_MAX).contains(n))
                .ok_or(SettingsError {
                    var: "LIVE_SOCKETS_MAX",
                    why: format!("must be a whole number from 1 to {LIVE_SOCKETS_MAX_MAX}"),
                })?,
        };
        Ok(Settings {
            live_sockets_max,
            ticket_key: TicketKey::new(&id_secret),
            pow_key: PowKey::new(&id_secret),
            shard_key: ShardKey::new(&id_secret),
            rate_limits,
            buyer_tokens: buyer_tokens(&get)?,
            payment_keys: key_set(&get, "PAYMENT_KEYS")?,
            admin_tokens: key_set(&get, "ADMIN_TOKENS")?,
            id_secret,
            dev_sessions: get("DEV_SESSIONS").is_some_and(|v| v == "on"),
            forwarding,
        })
    }
}

/// The limiters, each a rate limiting binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// Every API request, by client IP (`CF-Connecting-IP`).
    Ip,
    /// Every request a verified buyer makes, by buyer id.
    Buyer,
    /// Every admin request, by client IP.
    Admin,
}

impl Limiter {
    pub const ALL: [Limiter; 3] = [Limiter::Ip, Limiter::Buyer, Limiter::Admin];

    /// The binding's name.
    pub fn binding(self) -> &'static str {
        match self {
            Limiter::Ip => "RATE_LIMIT_IP",
            Limiter::Buyer => "RATE_LIMIT_BUYER",
            Limiter::Admin => "RATE_LIMIT_ADMIN",
        }
    }

    /// The policy's name in `RATE_LIMITS` and in the response fields.
    pub fn name(self) -> &'static str {
        match self {
            Limiter::Ip => "ip",
            Limiter::Buyer => "buyer",
            Limiter::Admin => "admin",
        }
    }
}

/// One limiter's quota: `limit` requests per `period_s` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub limit: u32,
    pub period_s: u32,
}

/// Every limiter's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policies {
    pub ip: Policy,
    pub buyer: Policy,
    pub admin: Policy,
}

impl Policies {
    pub fn of(&self, l: Limiter) -> Policy {
        match l {
            Limiter::Ip => self.ip,
            Limiter::Buyer => self.buyer,
            Limiter::Admin => self.admin,
        }
    }

    /// Parses `ip=100/10;buyer=20/10;admin=300/60`: every limiter once, a
    /// limit of at least 1, and a period the binding supports (10 or 60).
    pub fn parse(text: &str) -> Result<Policies, String> {
        let mut found: [Option<Policy>; 3] = [None; 3];
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, quota) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not name=limit/period"))?;
            let i = Limiter::ALL
                .iter()
                .position(|l| l.name() == name.trim())
                .ok_or_else(|| format!("no limiter is called {name:?}"))?;
            let (limit, period) = quota
                .split_once('/')
                .ok_or_else(|| format!("{quota:?} is not limit/period"))?;
            let limit: u32 = limit
                .trim()
                .parse()
                .map_err(|_| format!("{limit:?} is not a limit"))?;
            let period_s: u32 = period
                .trim()
                .parse()
                .map_err(|_| format!("{period:?} is not a period"))?;
            if limit == 0 || !matches!(period_s, 10 | 60) {
                return Err(format!(
                    "{part:?}: the limit must be at least 1 and the period 10 or 60 seconds"
                ));
            }
            if found[i].replace(Policy { limit, period_s }).is_some() {
                return Err(format!("{name:?} is named twice"));
            }
        }
        match found {
            [Some(ip), Some(buyer), Some(admin)] => Ok(Policies { ip, buyer, admin }),
            _ => Err("every limiter needs a policy: ip, buyer and admin".into()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    pub const BUYER_KEYS: &str =
        "b1:972bee24d4a2a1a73757889a8f6bd2d3018613c5e209bfc43b97c626586f0f0e";
    pub const PAYMENT_KEYS: &str =
        "p1:ad3990da06eda5290a12ef54cfa5b19e140f30300293e2954a4d30b48d84ba77";
    pub const ADMIN_TOKENS: &str =
        "a1:125c06b7b144dfdc56fa87abd4e0a67f65a79f0f5a6bee6470072f8c4b562853";
    pub const ADMIN_TOKEN: &str =
        "125c06b7b144dfdc56fa87abd4e0a67f65a79f0f5a6bee6470072f8c4b562853";
    pub const ID_SECRET: &str = "aa99e1cb2f7603391769e2555e6c32e9037d0f3ed1c9e7cc4b7eabac244f4e7d";

    pub fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let mut map: HashMap<String, String> = [
            ("BUYER_TOKEN_KEYS", BUYER_KEYS),
            ("PAYMENT_KEYS", PAYMENT_KEYS),
            ("ADMIN_TOKENS", ADMIN_TOKENS),
            ("ID_SECRET", ID_SECRET),
            ("RATE_LIMITS", "ip=100/10;buyer=20/10;admin=300/60"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in pairs {
            map.insert(k.to_string(), v.to_string());
        }
        move |k: &str| map.get(k).cloned()
    }

    pub fn settings() -> Settings {
        Settings::from_env(env(&[("DEV_SESSIONS", "on")])).unwrap()
    }

    #[test]
    fn every_secret_is_required_and_long_enough() {
        assert!(settings().dev_sessions);
        assert!(settings().forwarding.is_none());
        assert!(!Settings::from_env(env(&[])).unwrap().dev_sessions);
        let refused = [
            ("BUYER_TOKEN_KEYS", "", "is not set"),
            ("PAYMENT_KEYS", "p1:short", "shorter than 32 bytes"),
            ("ADMIN_TOKENS", "no-colon", "is not kid:secret"),
            ("ID_SECRET", "short", "shorter than 32 bytes"),
        ];
        for (var, value, why) in refused {
            let err = Settings::from_env(env(&[(var, value)])).err().unwrap();
            assert_eq!(err.var, var);
            assert!(err.why.contains(why), "{err}");
        }
        // An origin needs its forwarding keys.
        let err = Settings::from_env(env(&[("ORIGIN_URL", "http://127.0.0.1:8788")]))
            .err()
            .unwrap();
        assert_eq!(err.var, "FORWARD_KEYS");
        let forward = (
            "FORWARD_KEYS",
            "f1:2c1d9befc4dc4bc649c063185b8c422931c1ce69cd7dbd39ea76cfa8a6419998",
        );
        let s = Settings::from_env(env(&[("ORIGIN_URL", "https://o.example/"), forward])).unwrap();
        assert_eq!(s.forwarding.unwrap().origin_url, "https://o.example");
        // Plain http only to a loopback host: the batches' signatures and
        // the read token would otherwise cross the network in the clear.
        for ok in [
            "http://127.0.0.1:8788",
            "http://localhost:1",
            "http://[::1]:8788/x",
        ] {
            assert!(
                Settings::from_env(env(&[("ORIGIN_URL", ok), forward])).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "http://origin.example",
            "http://127.0.0.1.evil.example",
            "http://localhost.evil.example:80",
            "http://127.0.0.1@evil.example",
            "ftp://127.0.0.1",
            "origin.example",
        ] {
            let e = Settings::from_env(env(&[("ORIGIN_URL", bad), forward]))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.var, "ORIGIN_URL", "{bad}");
        }
    }

    #[test]
    fn published_and_non_random_secrets_are_refused_for_every_key() {
        // The values `.dev.vars.example` once held, a word run and a count:
        // each passes the length check, none is a secret.
        let weak = [
            "replace-with-32-or-more-random-bytes-000000",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "01234567890123456789012345678901234567890",
        ];
        for (var, kid) in [
            ("BUYER_TOKEN_KEYS", "b1:"),
            ("PAYMENT_KEYS", "p1:"),
            ("ADMIN_TOKENS", "a1:"),
            ("FORWARD_KEYS", "f1:"),
            ("ID_SECRET", ""),
        ] {
            for w in weak {
                let value = format!("{kid}{w}");
                let mut pairs = vec![(var, value.as_str())];
                if var == "FORWARD_KEYS" {
                    pairs.push(("ORIGIN_URL", "https://o.example"));
                }
                let e = Settings::from_env(env(&pairs))
                    .err()
                    .unwrap_or_else(|| panic!("{var}={value} accepted"));
                assert_eq!(e.var, var, "{value}");
                assert!(!e.why.contains(w), "the refusal names no secret: {e}");
            }
        }
    }

    #[test]
    fn the_live_socket_cap_defaults_and_is_bounded() {
        assert_eq!(settings().live_sockets_max, LIVE_SOCKETS_MAX_DEFAULT);
        let set = Settings::from_env(env(&[("LIVE_SOCKETS_MAX", "10")])).unwrap();
        assert_eq!(set.live_sockets_max, 10);
        for bad in ["0", "-1", "many", "32001"] {
            let e = Settings::from_env(env(&[("LIVE_SOCKETS_MAX", bad)]))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.var, "LIVE_SOCKETS_MAX", "{bad}");
        }
    }
}
