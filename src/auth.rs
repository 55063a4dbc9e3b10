//! Who may do what at the gate, and how each is proven (ARCHITECTURE.md,
//! "Who may do what, proven how"):
//! - a buyer is whoever a valid buyer token names (`Authorization: Bearer`
//!   or the `fg_buyer` cookie), checked at the edge with no round trip;
//! - only the shop's payment backend confirms: a request signed with a
//!   payment key (`flashgate_wire::signing`, purpose `payment`);
//! - only the admin configures, restocks and voids: an admin bearer token.
//!
//! Pure, like the rest of the edge's decisions.

use flashgate_wire::signing::{self, Presented, Purpose};
use flashgate_wire::token::{self, Claims, TokenError};

use crate::codes::ProblemCode;
use crate::problem::Problem;
use crate::settings::Settings;

/// The cookie a browser carries its buyer token in (HttpOnly).
pub const BUYER_COOKIE: &str = "fg_buyer";
/// How long a dev session's token lasts.
pub const SESSION_TTL_S: u64 = 60 * 60;

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

/// The buyer a request proves, from its bearer token or its cookie.
pub fn buyer(
    settings: &Settings,
    authorization: Option<&str>,
    cookie_header: Option<&str>,
    now_ms: u64,
) -> Result<String, Problem> {
    let Some(token) = bearer(authorization).or_else(|| cookie(cookie_header, BUYER_COOKIE)) else {
        return Err(Problem::new(
            ProblemCode::TokenMissing,
            "send a buyer token: Authorization: Bearer, or the fg_buyer cookie",
        )
        .header("www-authenticate", r#"Bearer realm="flashgate""#));
    };
    token::verify(
        &settings.buyer_keys,
        token,
        &settings.audience,
        now_ms / 1000,
    )
    .map(|claims| claims.sub)
    .map_err(token_problem)
}

/// The viewer of a live socket: anyone may watch, so no credential is
/// `None`; a credential that is sent must be valid (a forged or expired
/// one is refused, never read as anonymous), and names the buyer.
pub fn viewer(
    settings: &Settings,
    authorization: Option<&str>,
    cookie_header: Option<&str>,
    now_ms: u64,
) -> Result<Option<String>, Problem> {
    let presented = authorization.is_some() || cookie(cookie_header, BUYER_COOKIE).is_some();
    if !presented {
        return Ok(None);
    }
    buyer(settings, authorization, cookie_header, now_ms).map(Some)
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
        aud: settings.audience.clone(),
        iat: now_s,
        exp: now_s + SESSION_TTL_S,
        nbf: None,
    };
    Ok(Session {
        token: token::mint(&settings.buyer_keys, &claims, now_ms),
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

    #[test]
    fn a_session_token_proves_its_buyer() {
        let s = settings();
        let now = 1_800_000_000_000;
        let session = session(&s, now, 7).unwrap();
        let auth = format!("Bearer {}", session.token);
        assert_eq!(buyer(&s, Some(&auth), None, now).unwrap(), session.buyer_id);
        let jar = format!("{BUYER_COOKIE}={}", session.token);
        assert_eq!(buyer(&s, None, Some(&jar), now).unwrap(), session.buyer_id);
        let code = |r: Result<String, Problem>| r.unwrap_err().code;
        assert_eq!(code(buyer(&s, None, None, now)), ProblemCode::TokenMissing);
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

    #[test]
    fn a_viewer_is_anonymous_or_proven() {
        let s = settings();
        let now = 1_800_000_000_000;
        let session = session(&s, now, 7).unwrap();
        assert_eq!(viewer(&s, None, None, now), Ok(None));
        assert_eq!(viewer(&s, None, Some("other=1"), now), Ok(None));
        let jar = format!("{BUYER_COOKIE}={}", session.token);
        assert_eq!(
            viewer(&s, None, Some(&jar), now),
            Ok(Some(session.buyer_id.clone()))
        );
        let forged = format!("{BUYER_COOKIE}={}x", session.token);
        assert_eq!(
            viewer(&s, None, Some(&forged), now).unwrap_err().code,
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
