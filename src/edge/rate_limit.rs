//! Rate limits at the edge, by the platform's rate limiting binding: which
//! limiter a request meets, under which key, and the 429 it gets.
//!
//! The counting is the platform's (`[[ratelimits]]` in wrangler.toml; on
//! bare workerd, the same binding as a wrapped module); nothing here counts.
//! The binding answers only "allowed or not", so the policy each limiter was
//! configured with is also given to the Worker as the `RATE_LIMITS` var,
//! for the `RateLimit-Policy` field, and a test checks the two agree.
//!
//! Fields follow draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy:
//! "ip";q=100;w=10` names the policy, and `RateLimit: "ip";r=0;t=10` says
//! nothing is left and when the window resets at the latest. `Retry-After`
//! says the same in seconds, for clients that know only that.

use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
pub use crate::settings::{Limiter, Policies, Policy};

/// The key a limiter counts a request under: the client's address, which
/// Cloudflare sets and a client cannot (locally, whatever was sent, or one
/// shared key). An IPv6 client is counted by its /64: a single subscriber
/// is routed a whole /64 (often more), so counting each address would give
/// one client 2^64 fresh limits.
pub fn ip_key(connecting_ip: Option<&str>) -> String {
    match connecting_ip.map(str::trim).filter(|ip| !ip.is_empty()) {
        Some(ip) if ip.len() <= 64 => match ip.parse::<std::net::Ipv6Addr>() {
            // An IPv4 address mapped into IPv6 is the IPv4 client.
            Ok(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => format!("ip:{v4}"),
                None => {
                    let s = v6.segments();
                    format!("ip6:{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
                }
            },
            Err(_) => format!("ip:{ip}"),
        },
        _ => UNKNOWN_IP_KEY.into(),
    }
}

/// `ip_key` of a request without a usable address: in production
/// Cloudflare always sets one, so only local runs share this key.
pub const UNKNOWN_IP_KEY: &str = "ip:unknown";

/// The answer to a request a limiter refused.
pub fn limited(limiter: Limiter, policy: Policy) -> Problem {
    let name = limiter.name();
    let Policy { limit, period_s } = policy;
    Problem::new(
        ProblemCode::RateLimited,
        format!("more than {limit} requests in {period_s} s ({name}); wait before trying again"),
    )
    .with("policy", name)
    .header("retry-after", period_s.to_string())
    .header(
        "ratelimit-policy",
        format!("\"{name}\";q={limit};w={period_s}"),
    )
    .header("ratelimit", format!("\"{name}\";r=0;t={period_s}"))
}

/// The hibernation tag of a client's sockets, by which the object counts
/// them (`getWebSockets(tag)`); none for a client without a known address
/// (only local runs: Cloudflare always sets one), which only the product's
/// cap bounds.
pub fn client_tag(ip_key: &str) -> Option<String> {
    (ip_key != UNKNOWN_IP_KEY).then(|| format!("client:{ip_key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_refuse() {
        let p = Policies::parse("ip=100/10; buyer=20/10;admin=300/60").unwrap();
        assert_eq!(
            p.of(Limiter::Admin),
            Policy {
                limit: 300,
                period_s: 60
            }
        );
        for bad in [
            "",
            "ip=100/10;buyer=20/10",
            "ip=100/10;buyer=20/10;admin=300/30",
            "ip=0/10;buyer=20/10;admin=300/60",
            "ip=100/10;ip=1/10;buyer=20/10;admin=300/60",
            "ip=100;buyer=20/10;admin=300/60",
            "who=1/10;ip=100/10;buyer=20/10;admin=300/60",
        ] {
            assert!(Policies::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_limited_request_says_how_long_and_under_which_policy() {
        let p = limited(
            Limiter::Buyer,
            Policy {
                limit: 20,
                period_s: 10,
            },
        );
        assert_eq!(p.status(), 429);
        assert_eq!(p.header_value("retry-after"), Some("10"));
        assert_eq!(
            p.header_value("ratelimit-policy"),
            Some("\"buyer\";q=20;w=10")
        );
        assert_eq!(p.header_value("ratelimit"), Some("\"buyer\";r=0;t=10"));
        assert_eq!(ip_key(Some(" 203.0.113.9 ")), "ip:203.0.113.9");
        assert_eq!(ip_key(None), "ip:unknown");
        assert_eq!(ip_key(Some(&"9".repeat(100))), "ip:unknown");
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_slash_64() {
        let key = ip_key(Some("2001:db8:a:b:1:2:3:4"));
        assert_eq!(key, "ip6:2001:db8:a:b::/64");
        // Another address in the same /64, however it is written.
        assert_eq!(ip_key(Some("2001:0DB8:000a:000b:ffff::9")), key);
        assert_ne!(ip_key(Some("2001:db8:a:c::1")), key, "the next /64");
        assert_eq!(ip_key(Some("::ffff:203.0.113.9")), "ip:203.0.113.9");
        assert_eq!(ip_key(Some("203.0.113.9")), "ip:203.0.113.9");
    }

    #[test]
    fn a_client_tag_names_the_clients_64_and_no_unknown_client() {
        let tag = client_tag(&ip_key(Some("2001:db8::1"))).unwrap();
        assert_eq!(
            Some(tag.clone()),
            client_tag(&ip_key(Some("2001:db8::2"))),
            "one /64 is one client"
        );
        assert!(tag.len() <= 256, "the runtime's limit on a tag");
        assert_eq!(client_tag(&ip_key(None)), None);
    }
}
