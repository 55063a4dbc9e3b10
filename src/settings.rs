//! The gate's configuration: its secrets and switches, read from the
//! Worker's environment (`wrangler.toml` vars and secrets). Pure: the shell
//! hands in a getter, so every rule is tested natively. A gate whose
//! settings are refused serves no API request (500 `misconfigured`), which
//! is how a secret that is too short is refused at start-up: the Workers
//! runtime has no start-up hook of its own.

use flashgate_wire::jwks::Jwks;
use flashgate_wire::keys::{check_secret, KeySet};
use flashgate_wire::token::{ConfigError, Provider, Verifier, SUBJECT_CLAIM_DEFAULT};

use crate::ids::{buyer_ids_key, IdCodecs, PowKey, ShardKey, TicketKey};

use crate::limits::{LIVE_SOCKETS_MAX_DEFAULT, LIVE_SOCKETS_MAX_MAX};

/// The audience buyer tokens must name unless `BUYER_TOKEN_AUDIENCE` says
/// otherwise.
pub const DEFAULT_AUDIENCE: &str = "flashgate";

/// Who may do what at the gate, and with which keys it proves it.
pub struct Settings {
    /// Verifies buyer tokens: `BUYER_TOKEN_KEYS`, the HS256 keys (which
    /// also sign the dev sessions' tokens), and `BUYER_TOKEN_AUDIENCE`, the
    /// `aud` every buyer token must name; and, when `BUYER_TOKEN_JWKS` is
    /// set, the shop's identity provider (`provider`), whose RS256 and
    /// ES256 tokens are checked up to the signature
    /// (`flashgate_wire::token::Decision::Verify`), which the shell
    /// verifies with the runtime's WebCrypto.
    pub buyer_tokens: Verifier,
    /// `PAYMENT_KEYS`: verifies the shop's signed confirmations.
    pub payment_keys: KeySet,
    /// `ADMIN_TOKENS`: the admin's bearer tokens, with ids for rotation.
    pub admin_tokens: KeySet,
    /// `ID_SECRET`: keys the permutation that makes reservation ids opaque,
    /// and (derived) the waiting-room tickets' signatures.
    pub id_secret: Vec<u8>,
    /// The products' reservation-id codecs, derived from `id_secret`.
    pub reservation_ids: IdCodecs,
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

fn buyer_tokens(
    get: &impl Fn(&str) -> Option<String>,
    id_secret: &[u8],
) -> Result<Verifier, SettingsError> {
    let audience = get("BUYER_TOKEN_AUDIENCE")
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_AUDIENCE.into());
    let hs256 = key_set(get, "BUYER_TOKEN_KEYS")?;
    Verifier::new(hs256, &audience, provider(get, id_secret)?).map_err(config_error)
}

/// A provider's configuration refused by `flashgate_wire::token`, named by
/// its variable. A kid in both sets is named as the JWKS's: the JWKS is
/// what a shop copies in from elsewhere.
fn config_error(e: ConfigError) -> SettingsError {
    SettingsError {
        var: match e {
            ConfigError::KidInBoth(_) => "BUYER_TOKEN_JWKS",
            ConfigError::Issuer => "BUYER_TOKEN_ISSUER",
            ConfigError::SubjectClaim => "BUYER_TOKEN_SUBJECT_CLAIM",
        },
        why: e.to_string(),
    }
}

/// A setting's value if it is set and not blank.
fn set_var(get: &impl Fn(&str) -> Option<String>, var: &str) -> Option<String> {
    get(var).filter(|v| !v.trim().is_empty())
}

/// A value compared byte for byte with a token's claim: spaces around it,
/// a newline left by `echo | wrangler secret put` say, would refuse every
/// token with a detail that hides why.
fn exact(var: &'static str, value: String, what: &str) -> Result<String, SettingsError> {
    if value.trim() != value || value.chars().any(char::is_control) {
        return Err(SettingsError {
            var,
            why: format!("{what}, exactly, without spaces or line breaks around it"),
        });
    }
    Ok(value)
}

/// The identity provider whose RS256 and ES256 tokens the gate accepts:
/// `BUYER_TOKEN_JWKS` (its public keys, the JWKS JSON itself),
/// `BUYER_TOKEN_ISSUER` (the `iss` its tokens carry, required with a JWKS)
/// and `BUYER_TOKEN_SUBJECT_CLAIM` (the claim naming the user, `sub` unless
/// set). None without a JWKS; an issuer or a claim given without one is
/// refused, since it would be a provider configured by half. The keys are
/// a variable, not a URL the gate fetches: docs/security.md says why.
fn provider(
    get: &impl Fn(&str) -> Option<String>,
    id_secret: &[u8],
) -> Result<Option<Provider>, SettingsError> {
    let issuer = set_var(get, "BUYER_TOKEN_ISSUER");
    let claim = set_var(get, "BUYER_TOKEN_SUBJECT_CLAIM");
    let Some(text) = set_var(get, "BUYER_TOKEN_JWKS") else {
        let stray = [
            ("BUYER_TOKEN_ISSUER", issuer.is_some()),
            ("BUYER_TOKEN_SUBJECT_CLAIM", claim.is_some()),
        ];
        return match stray.into_iter().find(|(_, set)| *set) {
            Some((var, _)) => Err(SettingsError {
                var,
                why: "is set but BUYER_TOKEN_JWKS, the provider's keys, is not".into(),
            }),
            None => Ok(None),
        };
    };
    let jwks = Jwks::parse(text.trim()).map_err(|e| SettingsError {
        var: "BUYER_TOKEN_JWKS",
        why: e.to_string(),
    })?;
    let issuer = issuer.ok_or(SettingsError {
        var: "BUYER_TOKEN_ISSUER",
        why: "is required with BUYER_TOKEN_JWKS: the iss the provider's tokens carry \
              (some providers sign every tenant's tokens with the same keys)"
            .into(),
    })?;
    let issuer = exact(
        "BUYER_TOKEN_ISSUER",
        issuer,
        "must be the iss of the provider's tokens",
    )?;
    let claim = match claim {
        Some(c) => exact(
            "BUYER_TOKEN_SUBJECT_CLAIM",
            c,
            "must be the name of the claim that names the user",
        )?,
        None => SUBJECT_CLAIM_DEFAULT.into(),
    };
    Provider::new(jwks, &issuer, &claim, buyer_ids_key(id_secret))
        .map(Some)
        .map_err(config_error)
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
            reservation_ids: IdCodecs::new(&id_secret),
            ticket_key: TicketKey::new(&id_secret),
            pow_key: PowKey::new(&id_secret),
            shard_key: ShardKey::new(&id_secret),
            rate_limits,
            buyer_tokens: buyer_tokens(&get, &id_secret)?,
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
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use flashgate_wire::token::{self, Decision};
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

    /// A JWKS of one RSA key and one P-256 key; the pure checks read the
    /// keys' forms only, so the numbers need not be a real key.
    fn jwks(kids: [&str; 2]) -> String {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let mut n = vec![0x5a; 256];
        n[0] = 0xc3;
        serde_json::json!({"keys": [
            {"kty": "RSA", "kid": kids[0], "n": b64(&n), "e": "AQAB", "x5c": ["MIIC..."]},
            {"kty": "EC", "kid": kids[1], "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[2; 32])},
        ]})
        .to_string()
    }

    const ISSUER: &str = "https://login.example.com/";

    /// An ES256 token of key `kid` with `claims`, its signature left to a
    /// verify call.
    fn es256(kid: &str, claims: serde_json::Value) -> String {
        let part = |v: serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.{}",
            part(serde_json::json!({"alg": "ES256", "kid": kid})),
            part(claims),
            URL_SAFE_NO_PAD.encode([7; 64])
        )
    }

    /// The buyer id a provider's token of subject claim `claim` would
    /// prove, once verified; `None` if the settings take no such token.
    fn provider_buyer(s: &Settings, claim: &str, value: &str) -> Option<String> {
        let now_s = 1_800_000_000;
        let mut claims = serde_json::json!({"aud": "flashgate", "iss": ISSUER,
            "iat": now_s, "exp": now_s + 600});
        claims[claim] = value.into();
        match s.buyer_tokens.decide(&es256("ec-1", claims), now_s * 1000) {
            Ok(Decision::Verify(u)) => Some(u.conclude(true).unwrap().id),
            _ => None,
        }
    }

    #[test]
    fn an_identity_provider_is_configured_whole_or_refused_by_name() {
        let keys = jwks(["rsa-1", "ec-1"]);
        let with = |pairs: &[(&str, &str)]| Settings::from_env(env(pairs));
        // Without a JWKS no provider's token is taken: its kid is unknown.
        assert_eq!(provider_buyer(&settings(), "sub", "alice"), None);
        let s = with(&[("BUYER_TOKEN_JWKS", &keys), ("BUYER_TOKEN_ISSUER", ISSUER)]).unwrap();
        assert_eq!(provider_buyer(&s, "sub", "alice").as_deref(), Some("alice"));
        // A subject that is not a buyer id is named by a keyed hash under
        // a key derived from ID_SECRET.
        let derived = token::buyer_id(
            &buyer_ids_key(ID_SECRET.as_bytes()),
            ISSUER,
            "auth0|5f7c8ec7c33c6c004bbafe82",
        );
        assert_eq!(
            provider_buyer(&s, "sub", "auth0|5f7c8ec7c33c6c004bbafe82"),
            Some(derived)
        );
        // The subject claim is configurable, and only it names the buyer.
        let s = with(&[
            ("BUYER_TOKEN_JWKS", &keys),
            ("BUYER_TOKEN_ISSUER", ISSUER),
            ("BUYER_TOKEN_SUBJECT_CLAIM", "uid"),
        ])
        .unwrap();
        assert_eq!(provider_buyer(&s, "uid", "carol").as_deref(), Some("carol"));
        assert_eq!(provider_buyer(&s, "sub", "carol"), None);
        // HS256 tokens work beside a provider, as before.
        let hs = token::mint(
            s.buyer_tokens.hs256(),
            &token::Claims {
                sub: "bob".into(),
                aud: "flashgate".into(),
                iat: 1_800_000_000,
                exp: 1_800_000_600,
                nbf: None,
            },
            1_800_000_000_000,
        );
        assert!(matches!(
            s.buyer_tokens.decide(&hs, 1_800_000_000_000),
            Ok(Decision::Proven(b)) if b.id == "bob"
        ));

        let private = keys.replacen(r#""e":"AQAB""#, r#""e":"AQAB","d":"c2VjcmV0""#, 1);
        assert_ne!(private, keys, "the private member was added");
        let oversized = format!(
            r#"{{"keys":[],"pad":"{}"}}"#,
            "x".repeat(flashgate_wire::bounds::JWKS_BYTES_MAX)
        );
        let clash = jwks(["b1", "ec-1"]);
        // A case's name, its settings, and the variable and reason refused.
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);
        let refused: Vec<Case> = vec![
            (
                "a JWKS without its issuer",
                vec![("BUYER_TOKEN_JWKS", &keys)],
                "BUYER_TOKEN_ISSUER",
                "is required with BUYER_TOKEN_JWKS",
            ),
            (
                "an issuer without a JWKS",
                vec![("BUYER_TOKEN_ISSUER", ISSUER)],
                "BUYER_TOKEN_ISSUER",
                "BUYER_TOKEN_JWKS, the provider's keys, is not",
            ),
            (
                "a subject claim without a JWKS",
                vec![("BUYER_TOKEN_SUBJECT_CLAIM", "uid")],
                "BUYER_TOKEN_SUBJECT_CLAIM",
                "is not",
            ),
            (
                "an issuer with a line break",
                vec![
                    ("BUYER_TOKEN_JWKS", &keys),
                    ("BUYER_TOKEN_ISSUER", "https://login.example.com/\n"),
                ],
                "BUYER_TOKEN_ISSUER",
                "without spaces",
            ),
            (
                "a subject claim with a space",
                vec![
                    ("BUYER_TOKEN_JWKS", &keys),
                    ("BUYER_TOKEN_ISSUER", ISSUER),
                    ("BUYER_TOKEN_SUBJECT_CLAIM", " uid"),
                ],
                "BUYER_TOKEN_SUBJECT_CLAIM",
                "without spaces",
            ),
            (
                "not a JWKS",
                vec![
                    (
                        "BUYER_TOKEN_JWKS",
                        "https://login.example.com/.well-known/jwks.json",
                    ),
                    ("BUYER_TOKEN_ISSUER", ISSUER),
                ],
                "BUYER_TOKEN_JWKS",
                "not a JSON object with a keys array",
            ),
            (
                "an oversized JWKS",
                vec![
                    ("BUYER_TOKEN_JWKS", &oversized),
                    ("BUYER_TOKEN_ISSUER", ISSUER),
                ],
                "BUYER_TOKEN_JWKS",
                "longer than 16384 bytes",
            ),
            (
                "a private key",
                vec![
                    ("BUYER_TOKEN_JWKS", &private),
                    ("BUYER_TOKEN_ISSUER", ISSUER),
                ],
                "BUYER_TOKEN_JWKS",
                "key rsa-1 holds private key material",
            ),
            (
                "a kid of BUYER_TOKEN_KEYS in the JWKS",
                vec![("BUYER_TOKEN_JWKS", &clash), ("BUYER_TOKEN_ISSUER", ISSUER)],
                "BUYER_TOKEN_JWKS",
                "key id b1 is both an HS256 key and a JWKS key",
            ),
        ];
        for (name, pairs, var, why) in refused {
            let e = with(&pairs)
                .err()
                .unwrap_or_else(|| panic!("{name}: accepted {pairs:?}"));
            assert_eq!(e.var, var, "{name}: {e}");
            assert!(e.why.contains(why), "{name}: {e}, want {why:?}");
            assert!(!e.why.contains("c2VjcmV0"), "{name} names a secret: {e}");
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
