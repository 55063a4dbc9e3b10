//! Who may do what at the gate, and how each is proven (docs/security.md,
//! "Who may do what"):
//! - a buyer is whoever a valid buyer token names (`Authorization: Bearer`
//!   or the session cookie, `__Host-fg_buyer` over https), checked at the edge with no round trip;
//! - only the shop's payment backend confirms: a request signed with a
//!   payment key (`flashgate_wire::signing`, purpose `payment`);
//! - only the admin configures, restocks and voids: an admin bearer token.
//!
//! Pure, like the rest of the edge's decisions.

use flashgate_wire::signing::{self, Presented, Purpose};
use flashgate_wire::token::{self, Claims, Decision, TokenError, Unverified};

use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
use crate::limits::SESSION_TTL_S;
use crate::settings::Settings;

/// The cookie a browser carries its buyer token in (HttpOnly) over plain
/// http, which only a local run serves.
pub const BUYER_COOKIE: &str = "fg_buyer";
/// The same over https: a `__Host-` cookie is Secure, has no Domain and
/// Path=/, so a sibling subdomain cannot plant one for this host.
pub const BUYER_COOKIE_SECURE: &str = "__Host-fg_buyer";

/// The buyer cookie's name for a request over https (`secure`) or not.
pub fn buyer_cookie_name(secure: bool) -> &'static str {
    if secure {
        BUYER_COOKIE_SECURE
    } else {
        BUYER_COOKIE
    }
}

/// The buyer token a `Cookie` header carries: over https only the
/// `__Host-` cookie counts, so one planted without the prefix is ignored.
pub fn buyer_cookie(header: Option<&str>, secure: bool) -> Option<&str> {
    cookie(header, buyer_cookie_name(secure))
}

/// The credentials of an `Authorization: Bearer` header.
pub fn bearer(authorization: Option<&str>) -> Option<&str> {
    let (scheme, credentials) = authorization?.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: Option<&'a str>, name: &str) -> Option<&'a str> {
    header?
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

fn token_problem(e: TokenError) -> Problem {
    let code = match e {
        TokenError::Expired => ProblemCode::TokenExpired,
        _ => ProblemCode::TokenInvalid,
    };
    Problem::new(code, e.describe()).header(
        "www-authenticate",
        r#"Bearer realm="flashgate", error="invalid_token""#,
    )
}

/// `prove_buyer` to the end, for the tests of HS256 tokens, with a
/// provider's signature taken as not verified (only the runtime's
/// WebCrypto verifies one). The edge runs the same checks in its steps
/// (`edge::pipeline`), with the shell's verify.
#[cfg(test)]
pub fn buyer(
    settings: &Settings,
    authorization: Option<&str>,
    cookie_token: Option<&str>,
    now_ms: u64,
) -> Result<String, Problem> {
    match prove_buyer(settings, authorization, cookie_token, now_ms)? {
        Proof::Proven(buyer) => Ok(buyer),
        Proof::Verify(unverified) => concluded(unverified, false),
    }
}

/// How far a buyer's credential is proven without the runtime: proven (a
/// token signed with a shared key), or a provider's token with its
/// signature left to verify (`concluded` takes the runtime's answer).
pub enum Proof<'a> {
    Proven(String),
    Verify(Unverified<'a>),
}

/// The buyer a request proves, from its bearer token or, when it sends no
/// `Authorization` at all, its cookie's token (`buyer_cookie`), as far as
/// the edge proves it without the runtime's WebCrypto. An `Authorization`
/// that is present but not a bearer token with credentials (`Basic`, an
/// empty `Bearer`) is refused, never passed over for the cookie: a request
/// proves one identity, the one it names.
pub fn prove_buyer<'a>(
    settings: &'a Settings,
    authorization: Option<&'a str>,
    cookie_token: Option<&'a str>,
    now_ms: u64,
) -> Result<Proof<'a>, Problem> {
    let token = match authorization {
        Some(header) => match bearer(Some(header)).filter(|t| !t.is_empty()) {
            Some(t) => t,
            None => {
                return Err(Problem::new(
                    ProblemCode::TokenInvalid,
                    "the Authorization header is not a bearer token",
                )
                .header(
                    "www-authenticate",
                    r#"Bearer realm="flashgate", error="invalid_request""#,
                ))
            }
        },
        None => match cookie_token {
            Some(t) => t,
            None => {
                return Err(Problem::new(
                    ProblemCode::TokenMissing,
                    "send a buyer token: Authorization: Bearer, or the session cookie",
                )
                .header("www-authenticate", r#"Bearer realm="flashgate""#))
            }
        },
    };
    match settings.buyer_tokens.decide(token, now_ms) {
        Ok(Decision::Proven(buyer)) => Ok(Proof::Proven(buyer.id)),
        Ok(Decision::Verify(unverified)) => Ok(Proof::Verify(unverified)),
        Err(e) => Err(token_problem(e)),
    }
}

/// The buyer of a provider's token, given whether the runtime's verify of
/// its signature held.
pub fn concluded(unverified: Unverified<'_>, verified: bool) -> Result<String, Problem> {
    unverified
        .conclude(verified)
        .map(|buyer| buyer.id)
        .map_err(token_problem)
}

/// The viewer of a live socket: anyone may watch, so no credential is
/// `None`; a credential that is sent must be valid (a forged or expired
/// one is refused, never read as anonymous), and names the buyer.
/// `prove_buyer` for a viewer.
pub fn prove_viewer<'a>(
    settings: &'a Settings,
    authorization: Option<&'a str>,
    cookie_token: Option<&'a str>,
    now_ms: u64,
) -> Result<Option<Proof<'a>>, Problem> {
    if authorization.is_none() && cookie_token.is_none() {
        return Ok(None);
    }
    prove_buyer(settings, authorization, cookie_token, now_ms).map(Some)
}

/// Admits the admin: the bearer token equals one of `ADMIN_TOKENS`,
/// compared in constant time against each.
pub fn admin(settings: &Settings, authorization: Option<&str>) -> Result<(), Problem> {
    let given = bearer(authorization).unwrap_or("").as_bytes();
    if settings.admin_tokens.holds_secret(given) {
        Ok(())
    } else {
        Err(Problem::unauthorized().header("www-authenticate", r#"Bearer realm="flashgate-admin""#))
    }
}

/// Admits a confirmation signed by the shop's payment backend.
pub fn payment(
    settings: &Settings,
    presented: &Presented,
    method: &str,
    path: &str,
    body: &[u8],
    now_ms: u64,
) -> Result<(), Problem> {
    let req = signing::Request {
        purpose: Purpose::Payment,
        method,
        path,
        body,
    };
    signing::verify(&settings.payment_keys, presented, &req, now_ms)
        .map(drop)
        .map_err(|e| Problem::new(ProblemCode::BadSignature, e.describe()))
}

/// A dev session: an anonymous buyer and its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub buyer_id: String,
    pub token: String,
    pub expires_at_ms: u64,
}

/// Mints an anonymous buyer's token, if dev sessions are on. `random`
/// names the buyer; it need not be secret, since the token's signature is
/// what proves the buyer.
pub fn session(settings: &Settings, now_ms: u64, random: u64) -> Result<Session, Problem> {
    if !settings.dev_sessions {
        return Err(Problem::not_found(
            "dev sessions are off; get a buyer token from the shop",
        ));
    }
    let now_s = now_ms / 1000;
    let claims = Claims {
        sub: format!("anon-{random:016x}"),
        aud: settings.buyer_tokens.audience().into(),
        iat: now_s,
        exp: now_s + SESSION_TTL_S,
        nbf: None,
    };
    Ok(Session {
        token: token::mint(settings.buyer_tokens.hs256(), &claims, now_ms),
        buyer_id: claims.sub,
        expires_at_ms: claims.exp * 1000,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::{settings, ADMIN_TOKEN};

    #[test]
    fn credentials_are_read_from_headers() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(None), None);
        let h = Some("a=1; fg_buyer=tok; b=2");
        assert_eq!(cookie(h, BUYER_COOKIE), Some("tok"));
        assert_eq!(cookie(Some("xfg_buyer=1"), BUYER_COOKIE), None);
    }

    /// A token checked once is checked as strictly the next time: it still
    /// expires, still names its audience, stops with its key, and no
    /// forgery of it passes.
    #[test]
    fn a_token_is_checked_as_strictly_at_every_use() {
        let s = settings();
        let now = 1_800_000_000_000;
        let session = session(&s, now, 11).unwrap();
        let auth = format!("Bearer {}", session.token);
        let code = |r: Result<String, Problem>| r.unwrap_err().code;
        for _ in 0..2 {
            assert_eq!(buyer(&s, Some(&auth), None, now).unwrap(), session.buyer_id);
        }

        // The clock is read at each use.
        let late = now + (SESSION_TTL_S + 60) * 1000;
        assert_eq!(
            code(buyer(&s, Some(&auth), None, late)),
            ProblemCode::TokenExpired
        );
        assert_eq!(buyer(&s, Some(&auth), None, now).unwrap(), session.buyer_id);

        // Another audience refuses it.
        let mut other_audience = settings();
        other_audience.buyer_tokens =
            token::Verifier::new(s.buyer_tokens.hs256().clone(), "another-shop", None).unwrap();
        assert_eq!(
            code(buyer(&other_audience, Some(&auth), None, now)),
            ProblemCode::TokenInvalid
        );

        // A set where its key id holds another secret, or that lacks it.
        let kid = s.buyer_tokens.hs256().kids().next().unwrap().to_string();
        for keys in [
            format!("{kid}:another-secret-of-at-least-thirty-two-bytes"),
            "k-other:another-secret-of-at-least-thirty-two-bytes".to_string(),
        ] {
            let mut rotated = settings();
            let hs256 = flashgate_wire::keys::KeySet::parse(&keys).unwrap();
            rotated.buyer_tokens = token::Verifier::new(hs256, "flashgate", None).unwrap();
            assert_eq!(
                code(buyer(&rotated, Some(&auth), None, now)),
                ProblemCode::TokenInvalid,
                "{keys}"
            );
        }

        // Every forgery of the token is refused: one changed character in
        // each part, and the parts of another buyer's token spliced in.
        let other = super::session(&s, now, 12).unwrap();
        let mut forged: Vec<String> = (0..session.token.len())
            .step_by(7)
            .map(|i| {
                let mut bytes = session.token.clone().into_bytes();
                bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
                String::from_utf8(bytes).unwrap()
            })
            .filter(|t| *t != session.token)
            .collect();
        let (mine, theirs) = (
            session.token.split('.').collect::<Vec<_>>(),
            other.token.split('.').collect::<Vec<_>>(),
        );
        forged.push(format!("{}.{}.{}", mine[0], theirs[1], mine[2]));
        forged.push(format!("{}.{}.{}", theirs[0], mine[1], theirs[2]));
        for f in &forged {
            let got = buyer(&s, Some(&format!("Bearer {f}")), None, now);
            assert!(got.is_err(), "a forgery passed: {f}");
        }
    }

    /// A token as a JWT library makes it (PyJWT, jose): `aud` as an array,
    /// no `iat`. And each refusal is a `token_invalid` problem whose detail
    /// says which check failed (an expired token keeps `token_expired`).
    #[test]
    fn a_library_token_passes_and_each_refusal_says_why() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        use hmac::Mac;
        let s = settings();
        let now_s = 1_800_000_000u64;
        let secret = crate::settings::tests::BUYER_KEYS
            .split_once(':')
            .unwrap()
            .1;
        let sign = |header: &str, claims: String| {
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header),
                URL_SAFE_NO_PAD.encode(claims)
            );
            let mut mac = flashgate_wire::mac::hmac_sha256(secret.as_bytes());
            mac.update(input.as_bytes());
            let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
            format!("Bearer {input}.{sig}")
        };
        let header = r#"{"alg":"HS256","typ":"JWT","kid":"b1"}"#;
        let claims = |aud: &str, exp: u64| {
            format!(r#"{{"sub":"alice","aud":{aud},"exp":{exp},"nbf":{now_s}}}"#)
        };
        let at = now_s * 1000;
        let ok = sign(header, claims(r#"["shop","flashgate"]"#, now_s + 600));
        assert_eq!(buyer(&s, Some(&ok), None, at), Ok("alice".to_string()));
        let refused = |auth: &str| buyer(&s, Some(auth), None, at).unwrap_err();
        let cases = [
            (
                sign(header, claims(r#"["shop"]"#, now_s + 600)),
                ProblemCode::TokenInvalid,
                "the token's aud does not name this gate",
            ),
            (
                sign(header, claims(r#""flashgate""#, now_s - 3600)),
                ProblemCode::TokenExpired,
                "the token has expired",
            ),
            (
                sign(
                    r#"{"alg":"RS256","kid":"b1"}"#,
                    claims(r#""flashgate""#, now_s + 600),
                ),
                ProblemCode::TokenInvalid,
                "the token's alg is not the algorithm its key is pinned to",
            ),
            (
                sign(
                    r#"{"alg":"RS256","kid":"idp-1"}"#,
                    claims(r#""flashgate""#, now_s + 600),
                ),
                ProblemCode::TokenInvalid,
                "the token's key id is not one the gate accepts",
            ),
            (
                format!("Bearer {}", "a".repeat(9000)),
                ProblemCode::TokenInvalid,
                "the token is longer than 8192 bytes",
            ),
        ];
        for (auth, code, detail) in cases {
            let p = refused(&auth);
            assert_eq!((p.code, p.detail.as_str()), (code, detail));
        }
    }

    #[test]
    fn a_session_token_proves_its_buyer() {
        let s = settings();
        let now = 1_800_000_000_000;
        let session = session(&s, now, 7).unwrap();
        let auth = format!("Bearer {}", session.token);
        assert_eq!(buyer(&s, Some(&auth), None, now).unwrap(), session.buyer_id);
        let jar = format!("{BUYER_COOKIE}={}", session.token);
        let from_jar = buyer_cookie(Some(&jar), false);
        assert_eq!(buyer(&s, None, from_jar, now).unwrap(), session.buyer_id);
        let code = |r: Result<String, Problem>| r.unwrap_err().code;
        assert_eq!(code(buyer(&s, None, None, now)), ProblemCode::TokenMissing);
        // An Authorization that is not a bearer token is refused, not
        // passed over for the cookie beside it.
        for header in ["Basic YWxpY2U6cHc=", "Bearer ", "Bearer", "Token abc", ""] {
            assert_eq!(
                code(buyer(&s, Some(header), from_jar, now)),
                ProblemCode::TokenInvalid,
                "{header:?}"
            );
        }
        // Over https only the __Host- cookie counts: a plain one a sibling
        // subdomain planted is not read.
        assert_eq!(buyer_cookie(Some(&jar), true), None);
        let host = format!("{BUYER_COOKIE_SECURE}={}", session.token);
        assert_eq!(
            buyer_cookie(Some(&host), true),
            Some(session.token.as_str())
        );
        assert_eq!(buyer_cookie(Some(&host), false), None);
        assert_eq!(
            code(buyer(&s, Some("Bearer nope"), None, now)),
            ProblemCode::TokenInvalid
        );
        let late = now + (SESSION_TTL_S + 60) * 1000;
        assert_eq!(
            code(buyer(&s, Some(&auth), None, late)),
            ProblemCode::TokenExpired
        );
        let mut off = settings();
        off.dev_sessions = false;
        assert_eq!(
            super::session(&off, now, 1).unwrap_err().code,
            ProblemCode::NotFound
        );
    }

    #[test]
    fn only_an_admin_token_admits_the_admin() {
        let s = settings();
        assert!(admin(&s, Some(&format!("Bearer {ADMIN_TOKEN}"))).is_ok());
        for bad in [
            None,
            Some("Bearer "),
            Some("Bearer admin-token"),
            Some(ADMIN_TOKEN),
        ] {
            assert_eq!(admin(&s, bad).unwrap_err().code, ProblemCode::Unauthorized);
        }
        let token = super::session(&s, 0, 1).unwrap().token;
        let as_buyer = format!("Bearer {token}");
        assert!(admin(&s, Some(&as_buyer)).is_err());
    }

    fn viewer(
        settings: &Settings,
        authorization: Option<&str>,
        cookie_token: Option<&str>,
        now_ms: u64,
    ) -> Result<Option<String>, Problem> {
        match prove_viewer(settings, authorization, cookie_token, now_ms)? {
            None => Ok(None),
            Some(Proof::Proven(buyer)) => Ok(Some(buyer)),
            Some(Proof::Verify(_)) => panic!("no provider is trusted here"),
        }
    }

    #[test]
    fn a_viewer_is_anonymous_or_proven() {
        let s = settings();
        let now = 1_800_000_000_000;
        let session = session(&s, now, 7).unwrap();
        assert_eq!(viewer(&s, None, None, now), Ok(None));
        assert_eq!(
            viewer(&s, None, buyer_cookie(Some("other=1"), false), now),
            Ok(None)
        );
        let jar = format!("{BUYER_COOKIE}={}", session.token);
        assert_eq!(
            viewer(&s, None, buyer_cookie(Some(&jar), false), now),
            Ok(Some(session.buyer_id.clone()))
        );
        let forged = format!("{BUYER_COOKIE}={}x", session.token);
        assert_eq!(
            viewer(&s, None, buyer_cookie(Some(&forged), false), now)
                .unwrap_err()
                .code,
            ProblemCode::TokenInvalid
        );
        assert_eq!(
            viewer(&s, Some("Bearer nonsense"), None, now)
                .unwrap_err()
                .code,
            ProblemCode::TokenInvalid
        );
    }
}
